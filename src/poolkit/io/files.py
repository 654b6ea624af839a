"""Writing files and folders without ever losing data: atomic files (temp, fsync, rename, fsync the parent), folders
built under a temporary name and renamed into place, a file path that refuses to overwrite, digests."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import PoolkitError


#: the temporary files of :func:`atomic_write` are ``.<name>.poolkit-<random>.tmp`` beside the file they become
TEMP_FILE_MARK = ".poolkit-"


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Write through ``write(tmp_path)`` to a temp file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TEMP_FILE_MARK}", suffix=".tmp")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; give it a normal file's mode
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Remove what a killed :func:`atomic_write` of ``path`` left beside it (``.<name>.poolkit-*.tmp``); only a run
    that holds ``path``'s lock may call this (no other run of it can be writing). -> the files removed."""
    path = Path(path)
    stale = [p for p in path.parent.glob(f".{glob.escape(path.name)}{TEMP_FILE_MARK}*.tmp") if p.is_file()
             and not p.is_symlink()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a folder's entries (a rename into it) durable; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike) -> None:
    """Flush every file and folder under ``folder`` to disk (before it is renamed into place)."""
    for parent, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(parent, name), "rb") as handle:
                os.fsync(handle.fileno())
        fsync_dir(parent)


def atomic_write_content(path: str | os.PathLike, content: str | bytes) -> None:
    """Text (UTF-8) or bytes to ``path``, atomically."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_content(path, json.dumps(obj, indent=2, default=_jsonable) + "\n")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def refuse_overwrite(path: str | os.PathLike, force: bool, flag: str = "`out`") -> Path:
    """A file path that may be written: refuse an existing file unless ``force``, and a folder (or anything else
    that is not a file) always: ``force`` replaces files only."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise PoolkitError(f"{flag} {path} is {'a folder' if path.is_dir() else 'not a regular file'}: poolkit writes "
                           "a file there and never replaces a folder; choose a file name")
    if path.exists() and not force:
        raise PoolkitError(f"{path} already exists: pass `force=True` to overwrite it, or choose another {flag}")
    if not path.parent.exists():
        raise PoolkitError(f"the folder of {flag} {path} does not exist: create {path.parent} first")
    return path


# -- folders: build under a temporary name, then rename into place ---------------------------------
TMP_SUFFIX = ".tmp"
OLD_SUFFIX = ".old"


#: the file in every folder :func:`temp_dir` makes (removed when the folder is moved into place) and in every folder
#: :func:`replace_dir` parks as ``<dest>.old``: a later run removes a stale folder that holds it, and refuses to touch
#: one of the same name that does not
TMP_MARK = ".poolkit-tmp"


def made_by_poolkit(folder: Path) -> bool:
    """Whether ``folder`` is a staging (``.tmp``) or parked (``.old``) folder that poolkit made: a real folder (not a
    link) holding :data:`TMP_MARK`."""
    return folder.is_dir() and not folder.is_symlink() and (folder / TMP_MARK).is_file()


def _refuse_foreign(path: Path, dest: Path) -> None:
    if (path.exists() or path.is_symlink()) and not made_by_poolkit(path):
        raise PoolkitError(f"{path} exists and poolkit did not make it: move it away (poolkit uses that name while "
                           f"it replaces {dest.name})")


def temp_dir(dest: Path, create: bool = True) -> Path:
    """The folder next to ``dest`` to build its new version in (the same name on every process); ``create`` (on one
    process) makes it empty, removing a stale one that poolkit made, and refusing anything else of that name."""
    tmp = dest.with_name(dest.name + TMP_SUFFIX)
    if create:
        _refuse_foreign(tmp, dest)
        _refuse_foreign(dest.with_name(dest.name + OLD_SUFFIX), dest)  # before the work, not at the rename after it
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / TMP_MARK).touch()
    return tmp


def replace_dir(tmp: Path, dest: Path) -> None:
    """Flush the finished folder ``tmp`` to disk and move it to ``dest``; an existing ``dest`` is parked as
    ``<dest>.old`` (marked as poolkit's), then removed. A ``<dest>.old`` that poolkit did not make is refused."""
    old = dest.with_name(dest.name + OLD_SUFFIX)
    _refuse_foreign(old, dest)
    (tmp / TMP_MARK).unlink(missing_ok=True)
    fsync_tree(tmp)
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        (dest / TMP_MARK).touch()
        os.rename(dest, old)
    os.rename(tmp, dest)
    fsync_dir(dest.parent)
    shutil.rmtree(old, ignore_errors=True)


def existing_dir(dest: Path) -> Path | None:
    """``dest``, or its parked ``.old`` version when a crash hit between the two renames of :func:`replace_dir`."""
    if dest.is_dir():
        return dest
    old = dest.with_name(dest.name + OLD_SUFFIX)
    return old if made_by_poolkit(old) else None


def build_dir(dest: Path, build: Callable[[Path], Any]) -> Any:
    """``build(tmp)`` fills a fresh :func:`temp_dir` of ``dest``, which then replaces ``dest``; when ``build`` fails
    the temporary folder is removed (nothing half-built is left behind). -> what ``build`` returns."""
    tmp = temp_dir(dest)
    try:
        result = build(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, dest)
    return result


def is_cache_name(name: str) -> bool:
    """Whether ``name`` is a cache key (a digest cut to 32 hexadecimal digits: the feature caches' and the ONNX
    graphs'), the first test before poolkit lists or removes a folder of a cache."""
    return len(name) == 32 and all(c in "0123456789abcdef" for c in name)


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
