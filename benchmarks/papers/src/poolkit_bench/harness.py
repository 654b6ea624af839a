"""What every paper benchmark runs its tasks with: torch threads (set and restored), and one runner that takes the
tasks in this process or in spawned worker processes, with progress that suits a terminal or a log, results in task
order. In a run's --out folder the runner writes each finished task's result as it comes (:class:`Journal`), so a
stopped run keeps what it finished and the same command run again continues from it. Where the tasks run (the
device, workers and threads a config sets) is :mod:`.execution`."""

from __future__ import annotations

import glob
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import torch

from poolkit.errors import PoolkitError
from poolkit.io import RunFolder
from poolkit.progress import progress as progress_bar
from poolkit.provenance import git_commit

#: In a run's --out folder: one JSON line per finished task, while the run goes (removed when its results are written)
JOURNAL = "finished-tasks.jsonl"
_JOURNAL: ContextVar[Journal | None] = ContextVar("journal", default=None)


@contextmanager
def results_folder(out_dir: str | os.PathLike | None, result_files: tuple[str, ...], *, force: bool = False,
                   extend: bool = False, settings: Any = None) -> Iterator[Path | None]:
    """The --out folder of a run (:class:`poolkit.io.RunFolder`): refused while it holds results unless ``force``
    (``extend``: a run adding to the results there), locked for the ``with`` block; None without ``out_dir``.

    Given the run's ``settings`` (its config), :func:`run_tasks` inside the block keeps each finished task in the
    folder's :class:`Journal` and skips the tasks a stopped run of the same settings finished there; the journal is
    removed when the block ends without an error (the results are written by then), and ``force`` starts over."""
    if out_dir is None:
        yield None
        return
    if extend and not Path(out_dir).is_dir():
        raise PoolkitError(f"--extend {out_dir}: no such folder; give the folder of an earlier run")
    with RunFolder(Path(out_dir), tuple(glob.escape(name) for name in result_files)).claim(
            force=force, resume=extend) as out:
        journal = None if settings is None else Journal(out / JOURNAL, settings)
        if journal is not None:
            journal.start(force=force)
        token = _JOURNAL.set(journal)
        try:
            yield out
        finally:
            _JOURNAL.reset(token)
        if journal is not None:
            journal.path.unlink(missing_ok=True)


class Journal:
    """The finished tasks of one run, a JSON line each (``{"key": ..., "result": ...}``) after a header naming the
    run's settings and commit, appended and synced as each task ends. A run of other settings or code refuses a
    journal it did not write (pass --force to start over); a line cut short by a kill is dropped."""

    def __init__(self, path: Path, settings: Any) -> None:
        self.path = path
        self.header = {"poolkit_bench_journal": 1, "commit": git_commit(),
                       "settings": hashlib.sha256(repr(settings).encode()).hexdigest()}
        self.resumed = 0  # tasks this run took from a stopped one

    def start(self, *, force: bool) -> None:
        """Check an existing journal (removed with ``force``), or begin one."""
        if self.path.exists():
            header = next(iter(self._lines()), None)
            if not (isinstance(header, dict) and header.get("poolkit_bench_journal") == 1):
                raise PoolkitError(f"{self.path} is not a benchmark journal poolkit wrote: move it away")
            if force:
                self.path.unlink()
            elif header != self.header:
                what = "commit" if header.get("commit") != self.header["commit"] else "settings"
                raise PoolkitError(f"{self.path.parent} holds the finished tasks of a stopped run with another {what}: "
                                   "run it again as it was to continue, or pass --force to start over")
        if not self.path.exists():
            self._append(self.header)

    def finished(self) -> dict[str, Any]:
        """{task key: result} of the tasks finished so far."""
        return {line["key"]: line["result"] for line in self._lines()[1:] if isinstance(line, dict) and "key" in line}

    def add(self, key: str, result: Any) -> Any:
        """Keep ``result``; returns it as a later run reads it back (JSON's lists and floats), so that a run that
        continues and one that ran through hand on the same values."""
        line = {"key": key, "result": result}
        self._append(line)
        return json.loads(json.dumps(line, default=_jsonable))["result"]

    def _append(self, line: dict) -> None:
        text = json.dumps(line, default=_jsonable) + "\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    def _lines(self) -> list[Any]:
        lines = []
        for text in self.path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:  # the last line of a killed run, half written
                continue
        return lines


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy and torch scalars and arrays
        return value.tolist()
    raise TypeError(f"a task's result holds a {type(value).__name__}, which a journal line cannot keep")


class Stopwatch:
    """Wall seconds, CPU seconds (this process and its finished worker processes, user + system) and the 1/5/15-minute
    load average, from when it was made."""

    def __init__(self) -> None:
        self.started, self.cpu, self.load = time.perf_counter(), _cpu_seconds(), os.getloadavg()

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def record(self) -> dict:
        """runtime_seconds, cpu_seconds and load_average_start_end (the averages then and now); in a run that
        continued a stopped one, also tasks_from_a_stopped_run (the seconds then count this run's part only)."""
        record = {"runtime_seconds": round(self.seconds(), 1), "cpu_seconds": round(_cpu_seconds() - self.cpu, 1),
                  "load_average_start_end": [list(self.load), list(os.getloadavg())]}
        journal = _JOURNAL.get()
        if journal is not None and journal.resumed:
            record["tasks_from_a_stopped_run"] = journal.resumed
        return record


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@contextmanager
def restored_threads(threads: int | None = None) -> Iterator[None]:
    """torch's threads set to ``threads`` inside the block (None: left as they are), and the count of before
    restored after it, whatever the block set."""
    previous = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        yield
    finally:
        torch.set_num_threads(previous)


_WORKER_RUN: Callable[[Any], Any] | None = None


def _start_worker(run: Callable[[Any], Any] | None, build: Callable[[], Callable[[Any], Any]] | None,
                  threads: int | None) -> None:
    global _WORKER_RUN
    if threads is not None:
        torch.set_num_threads(threads)
    _WORKER_RUN = build() if build is not None else run


def _run_in_worker(task: Any) -> Any:
    return _WORKER_RUN(task)


def run_tasks(run: Callable[[Any], Any], tasks: Sequence[Any], *, workers: int = 1, threads: int | None = None,
              progress: bool = True, desc: str = "bench", unit: str = "task",
              build_in_worker: Callable[[], Callable[[Any], Any]] | None = None) -> list[Any]:
    """``run(task)`` for every task, in task order: in this process, or in ``workers`` spawned processes.

    Each task must seed itself, so that results do not depend on ``workers``. In the workers ``run`` is pickled,
    or, given ``build_in_worker`` (picklable: a module-level function or a partial of one), each worker builds its
    own once (a runner holding data it loaded). ``threads``: torch threads in this process during the run
    (restored after) and in each worker (None: as they are). Progress on a terminal or in a log unless ``progress``
    is False. The first task to fail stops the run, cancelling the tasks not yet started. Inside a
    :func:`results_folder` given its settings, each finished task's result is journalled, and the tasks a stopped
    run finished are not run again (a task is known by ``desc`` and a digest of its ``repr``).
    """
    results: list[Any] = [None] * len(tasks)
    journal = _JOURNAL.get()
    keys = [f"{desc}: {hashlib.sha256(repr(task).encode()).hexdigest()[:24]}" for task in tasks]
    pending = list(range(len(tasks)))
    if journal is not None:
        finished = journal.finished()
        pending = [i for i in pending if keys[i] not in finished]
        for i in set(range(len(tasks))) - set(pending):
            results[i] = finished[keys[i]]
        journal.resumed += len(tasks) - len(pending)
        if len(pending) < len(tasks):
            print(f"{desc}: {len(tasks) - len(pending)} of {len(tasks)} {unit}s finished by a stopped run in "
                  f"{journal.path.parent}, continuing", file=sys.stderr)

    def done(i: int, result: Any) -> None:
        results[i] = result if journal is None else journal.add(keys[i], result)
        bar.update()

    if not pending:
        return results
    with progress_bar(total=len(pending), disable=not progress, desc=desc, unit=unit) as bar:
        if workers == 1:
            with restored_threads(threads):
                for i in pending:
                    done(i, run(tasks[i]))
            return results
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                                   initargs=(None if build_in_worker is not None else run, build_in_worker, threads))
        try:
            futures = {pool.submit(_run_in_worker, tasks[i]): i for i in pending}
            for future in as_completed(futures):
                done(futures[future], future.result())
        except BrokenProcessPool:
            raise PoolkitError("a worker process died; called from a script, put the call under "
                               "`if __name__ == '__main__':` (workers are spawned), or use workers=1") from None
        finally:
            pool.shutdown(cancel_futures=True)
    return results
