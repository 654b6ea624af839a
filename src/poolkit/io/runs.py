"""The one model of a folder that a poolkit run writes: train and merge folders, compare's and the paper benchmarks'
result folders, explain's pictures, embed's resumable partial folder.

- A path that is a file is refused; a missing folder is made.
- A folder holding what this run writes (its ``outputs``; for an ``exclusive`` run, anything at all) is refused
  unless the run is forced (start over) or resumed (continue it).
- Forced, a run removes what earlier poolkit runs wrote there, by the names their manifest lists (and their
  temporary files), and nothing else: a file poolkit did not write is never deleted.
- One run per folder: the folder is locked for the run (POSIX ``flock`` on an open descriptor of it, so the kernel
  drops the lock when the process ends, crash included: no stale lock files; no lock where ``fcntl`` is missing).
- The manifest (``.poolkit_outputs.json``) lists the names this run writes and the settings a resume must match.
- :func:`publish` moves the entries of a folder built under a temporary name into place, each atomically.
- :func:`fold_models` lists the fold models of a ``poolkit train`` folder.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import PoolkitError
from .files import OLD_SUFFIX, TMP_MARK, atomic_write_json, fsync_dir, replace_dir

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

MANIFEST = ".poolkit_outputs.json"
#: what a ``poolkit train`` fold folder holds beside its weights, and a finished run's metrics
TRAIN_META = "poolkit_train.json"
TRAIN_METRICS = "metrics.json"
FOLD_DIR = re.compile(r"fold_(\d+)")


@contextmanager
def locked_dir(folder: str | os.PathLike, flag: str = "`out`") -> Iterator[Path]:
    """Hold an exclusive lock on the existing ``folder`` for the ``with`` block; refuse when another run holds it.
    Take it on one process per run (the main one under torchrun / accelerate)."""
    folder = Path(folder)
    if fcntl is None:
        yield folder
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PoolkitError(f"another poolkit run is writing to {folder}: wait for it to end, or choose "
                               f"another {flag}") from None
        yield folder
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class RunFolder:
    """The folder ``path`` of one run, which writes the entries named by ``outputs`` (glob patterns of names in
    it). ``exclusive``: the run wants the folder to itself (refused when it holds anything). ``resumable``: the run
    can be continued, and forced it starts over in place (its earlier entries go first); a run that is not
    resumable keeps them until it has written its own, so a failed run loses nothing. ``owns``: which entries a run
    of this kind writes, read from their content (a train run's fold folders hold poolkit_train.json); a file whose
    name matches ``outputs`` is this kind's too. ``flag``: the option the folder was given by, named in errors.

    Forced, a run removes an entry only when it is of this kind and an earlier run's manifest lists it (a folder
    without a manifest, from a poolkit that kept none: every entry of this kind). A folder in the way that is not
    of this kind is refused, even forced: nothing poolkit did not write is deleted."""

    path: Path
    outputs: tuple[str, ...]
    exclusive: bool = False
    resumable: bool = False
    owns: Callable[[Path], bool] | None = None
    flag: str = "`out`"

    def check(self, *, force: bool = False, resume: bool = False) -> None:
        """Refuse, before any work, what :meth:`claim` would refuse (nothing is written)."""
        if resume and force:
            raise PoolkitError("pass either `resume=True` (continue the run) or `force=True` (start over), not both")
        check_writable(self.path, self.flag)
        in_the_way = self.in_the_way()
        if in_the_way and not (force or resume):
            shown = ", ".join(in_the_way[:4]) + (f" and {len(in_the_way) - 4} more" if len(in_the_way) > 4 else "")
            again = ", `resume=True` to continue the run in it" if self.resumable else ""
            raise PoolkitError(f"{self.flag} {self.path} already holds {shown}: pass `force=True` to start over{again}, "
                               f"or choose another {self.flag}")
        if force:
            written = set(self.written())
            foreign = [e.name for e in self._entries() if e.is_dir() and self._matches(e.name, self.outputs)
                       and e not in written]
            if foreign:
                raise PoolkitError(f"{self.flag} {self.path} holds {', '.join(sorted(foreign))}, which poolkit did not "
                                   f"write there: move it away, or choose another {self.flag}")

    def in_the_way(self) -> list[str]:
        """The names in the folder this run would overwrite: its outputs (an exclusive run: every entry)."""
        names = sorted(e.name for e in self._entries())
        return names if self.exclusive else [n for n in names if self._matches(n, self.outputs)]

    def manifest(self) -> dict[str, Any] | None:
        """The manifest an earlier run left here, None when there is none (or it is not whole, or lists no
        outputs)."""
        try:
            found = json.loads((self.path / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) and isinstance(found.get("outputs"), list) else None

    def written(self) -> list[Path]:
        """What earlier runs of this kind wrote here (see the class): entries and their temporary files. A damaged
        or planted manifest reaches nothing outside the folder and nothing of another kind."""
        found = self.manifest()
        listed = self._listed(found)
        entries = self._entries()
        owned = [e for e in entries if self._of_kind(e) and (found is None or self._matches(e.name, listed))]
        names = {e.name for e in owned} | {MANIFEST}
        return owned + [e for e in entries if e not in owned and any(
            fnmatch.fnmatchcase(e.name, f".{glob.escape(n)}.*.tmp") for n in names)]

    @contextmanager
    def claim(self, *, force: bool = False, resume: bool = False,
              settings: dict[str, Any] | None = None) -> Iterator[Path]:
        """The folder, made and locked for the ``with`` block: refused as :meth:`check` says; ``resume`` refuses
        ``settings`` other than the manifest's; forced, what earlier runs wrote is removed (see the class). The
        manifest names every entry of this kind still there and this run's outputs, and ``settings``."""
        self.check(force=force, resume=resume)
        made = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise PoolkitError(f"could not make {self.flag} {self.path}: {error}") from None
        try:
            with locked_dir(self.path, self.flag):
                self.check(force=force, resume=resume)  # again under the lock: another run may have written meanwhile
                settings = None if settings is None else json.loads(json.dumps(settings))  # as read back
                found = self.manifest()
                before = (found or {}).get("settings")
                if resume and settings is not None and self.in_the_way() and before != settings:
                    changed = sorted(k for k in settings if (before or {}).get(k) != settings[k]) if isinstance(
                        before, dict) else ["unrecorded"]
                    raise PoolkitError(f"{self.path} holds a run with other settings "
                                       f"({', '.join(changed) or 'some'} differ): rerun with the same settings to "
                                       "resume it, or pass `force=True` to start over")
                stale = self.written() if force else []
                if force and self.resumable:
                    _remove(stale)
                    found, stale = None, []
                listed = [] if found is None else self._listed(found)
                self._record([*listed, *(p for p in self.outputs if p not in listed)],
                             settings if settings is not None else before)
                yield self.path
                if stale:  # this run is done: what the earlier one wrote and this one did not write again goes now
                    _remove([e for e in stale if not self._matches(e.name, self.outputs)])
                    left = [n for n in self._listed(self.manifest()) if n not in self.outputs and any(
                        fnmatch.fnmatchcase(e.name, n) for e in self._entries())]
                    self._record([*left, *self.outputs], settings)
        except BaseException:
            if made:  # a run that failed before writing anything leaves no folder behind
                self._unmake()
            raise

    def _unmake(self) -> None:
        """Remove the folder :meth:`claim` made when nothing but its manifest is in it (if the run has not)."""
        if self.path.is_dir() and [entry.name for entry in self.path.iterdir()] in ([], [MANIFEST]):
            (self.path / MANIFEST).unlink(missing_ok=True)
            self.path.rmdir()

    def clear(self) -> None:
        """Remove what runs of this kind wrote here (:meth:`written`) and the manifest, then the folder when nothing
        else is left."""
        _remove([*self.written(), self.path / MANIFEST])
        try:
            self.path.rmdir()
        except OSError:  # not empty (files poolkit did not write stay) or already gone
            pass

    def _record(self, outputs: list[str], settings: Any) -> None:
        record = {"outputs": outputs, **({"settings": settings} if settings is not None else {})}
        if self.manifest() != record:
            atomic_write_json(self.path / MANIFEST, record)

    def _entries(self) -> list[Path]:
        return [e for e in self.path.iterdir() if e.name != MANIFEST] if self.path.is_dir() else []

    def _of_kind(self, entry: Path) -> bool:
        return (self.owns is not None and self.owns(entry)) or (
            entry.is_file() and not entry.is_symlink() and self._matches(entry.name, self.outputs))

    @staticmethod
    def _listed(found: dict[str, Any] | None) -> list[str]:
        return [p for p in (found or {}).get("outputs", []) if isinstance(p, str) and _inside(p)]

    @staticmethod
    def _matches(name: str, patterns) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def check_writable(folder: Path, flag: str = "`out`") -> None:
    """Refuse a folder that cannot be made or written (a file there or above it, no write permission), before any
    work."""
    folder = Path(folder).absolute()
    base = next(p for p in (folder, *folder.parents) if p.exists())
    if base == folder and not folder.is_dir():
        raise PoolkitError(f"{flag} {folder} is a file: pass a folder path")
    if not base.is_dir():
        raise PoolkitError(f"{flag} {folder} cannot be created: {base} is a file; choose another {flag}")
    if not os.access(base, os.W_OK | os.X_OK):
        raise PoolkitError(f"{flag} {folder} cannot be written: no write permission in {base}; choose another {flag}")


def _remove(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)


def _inside(pattern: str) -> bool:
    return "/" not in pattern and os.sep not in pattern and pattern not in ("", ".", "..")


def publish(tmp: Path, folder: Path) -> None:
    """Move each entry of the finished folder ``tmp`` into ``folder``, each replacing its namesake atomically
    (folders through :func:`~poolkit.io.files.replace_dir`), folders first and files last (a run's record marks it
    whole), then remove ``tmp``; other entries of ``folder`` stay."""
    (tmp / TMP_MARK).unlink(missing_ok=True)
    entries = sorted(tmp.iterdir(), key=lambda e: (not e.is_dir(), e.name))
    parked = [f"{e.name}{OLD_SUFFIX}" for e in entries if e.is_dir() and (folder / f"{e.name}{OLD_SUFFIX}").exists()]
    if parked:
        raise PoolkitError(f"{folder} holds {', '.join(parked)}: move it away (poolkit parks an old folder there "
                           "while it replaces it)")
    for entry in entries:
        if entry.is_dir():
            replace_dir(entry, folder / entry.name)
        else:
            os.replace(entry, folder / entry.name)
    fsync_dir(folder)
    tmp.rmdir()


def fold_models(run: str | Path, allow_incomplete: bool = False) -> list[Path]:
    """The fold models of a ``poolkit train`` folder (``RUN`` -> its fold_K folders in order; ``RUN/fold_K`` ->
    itself). An unfinished run (a fold_K.partial folder, or no metrics.json) is refused unless ``allow_incomplete``."""
    run = Path(run)
    if (run / TRAIN_META).is_file():
        return [run]
    folds = sorted((p for p in run.glob("fold_*") if FOLD_DIR.fullmatch(p.name) and (p / TRAIN_META).is_file()),
                   key=lambda p: int(FOLD_DIR.fullmatch(p.name).group(1)))
    if not folds:
        raise PoolkitError(f"no trained model in {run}: expected fold_*/ folders written by poolkit train "
                           "(pass its `out` folder or one fold_K folder)")
    planned = [json.loads((fold / TRAIN_META).read_text()).get("n_folds") for fold in folds]
    if len(set(planned)) > 1:  # folds of two runs (one with more folds left behind): averaging them is wrong
        raise PoolkitError(f"{run} holds the folds of more than one run (their n_folds: "
                           f"{', '.join(f'{f.name} {n}' for f, n in zip(folds, planned))}): train into a new folder, "
                           "or again with `force=True`")
    planned = planned[0] if planned[0] is not None else "?"
    partial = sorted(p.name for p in run.glob("fold_*.partial"))
    if not allow_incomplete and (partial or not (run / TRAIN_METRICS).is_file()):
        why = f"{partial[0]} unfinished" if partial else f"no {TRAIN_METRICS}"
        raise PoolkitError(f"{run} is an unfinished run ({len(folds)} of {planned} folds trained, {why}): "
                           "finish it with poolkit train `resume=True`, pass one fold_K folder, or `allow_incomplete=True` "
                           "to use the finished folds")
    return folds
