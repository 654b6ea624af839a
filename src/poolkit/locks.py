"""One run per output folder: an exclusive, non-blocking lock on the folder itself (POSIX ``flock``).

The lock is tied to an open descriptor of the folder, so the kernel drops it when the process ends, crash
included: no stale lock files. Take it on one process per run (the main one under torchrun / accelerate).
Without ``fcntl`` (Windows) no lock is taken.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import PoolkitError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


@contextmanager
def locked_dir(folder: str | os.PathLike, flag: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on the existing ``folder`` for the ``with`` block; refuse when another run holds it."""
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
