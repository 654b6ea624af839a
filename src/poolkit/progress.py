"""Progress that suits where it goes: a live tqdm bar on a terminal (or in a notebook), one plain line per tenth of
the work when the output is a file or a pipe (``make demo > demo.log``): what, how far, elapsed, ETA, and no
carriage returns."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

#: A log line at each of these shares of the total (and at the end).
STEPS = 10
#: Without a total: a line at most this often (seconds).
EVERY_S = 30.0


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             disable: bool = False, leave: bool = True, stream: TextIO | None = None) -> Any:
    """A progress bar over ``iterable`` (or counted with ``update(n)``): tqdm where ``stream`` (default stderr) is a
    terminal or a notebook runs, else :class:`LogProgress`."""
    stream = sys.stderr if stream is None else stream
    if disable or _interactive(stream):
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, leave=leave, file=stream)
    return LogProgress(iterable, total=total, desc=desc, unit=unit, leave=leave, stream=stream)


def _interactive(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) or "ipykernel" in sys.modules


class LogProgress:
    """Progress as lines for a log: ``desc: 300/1000 texts (30%), 12.0 s, ETA 28.0 s`` at each tenth of ``total``
    (when it is unknown: at most every :data:`EVERY_S` seconds), and a last line when it closes. ``leave=False`` (an
    inner loop: one epoch's batches) writes only if it runs longer than :data:`EVERY_S`, at most that often."""

    def __init__(self, iterable: Iterable | None = None, total: int | None = None, desc: str = "",
                 unit: str = "it", leave: bool = True, stream: TextIO | None = None) -> None:
        self.leave, self.lines = leave, 0
        self.iterable = iterable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self.desc, self.unit, self.stream = desc, unit, sys.stderr if stream is None else stream
        self.n, self.postfix, self.closed = 0, "", False
        self.started = self.last = time.perf_counter()
        self.next_step = 1

    def __iter__(self) -> Iterator:
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if self.total and self.leave:
            if self.n * STEPS >= self.next_step * self.total and self.n < self.total:
                self.next_step = self.n * STEPS // self.total + 1
                self._line(now)
        elif now - self.last >= EVERY_S:
            self._line(now)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.leave or self.lines:
                self._line(time.perf_counter(), done=True)

    def _line(self, now: float, done: bool = False) -> None:
        self.last, self.lines = now, self.lines + 1
        elapsed = now - self.started
        count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        eta = (f", ETA {_seconds(elapsed * (self.total - self.n) / self.n)}"
               if self.total and 0 < self.n < self.total and not done else "")
        tail = f", {self.postfix}" if self.postfix else ""
        what = f"{self.desc}: " if self.desc else ""
        state = "done in " if done else ""
        self.stream.write(f"{what}{count} {self.unit}{'' if self.n == 1 else 's'}{share}, {state}"
                          f"{_seconds(elapsed)}{eta}{tail}\n")
        self.stream.flush()


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"
