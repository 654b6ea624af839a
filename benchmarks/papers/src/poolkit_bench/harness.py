"""What every paper benchmark runs its tasks with: torch threads set and restored, and one runner that takes
the tasks in this process or in spawned worker processes, with a progress bar, results in task order."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

import torch

from poolkit.errors import PoolkitError


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
    (restored after) and in each worker (None: as they are). A progress bar on a terminal unless ``progress`` is
    False. The first task to fail stops the run, cancelling the tasks not yet started.
    """
    from tqdm.auto import tqdm

    results: list[Any] = [None] * len(tasks)
    with tqdm(total=len(tasks), disable=None if progress else True, desc=desc, unit=unit) as bar:
        if workers == 1:
            with restored_threads(threads):
                for i, task in enumerate(tasks):
                    results[i] = run(task)
                    bar.update()
            return results
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                                   initargs=(None if build_in_worker is not None else run, build_in_worker, threads))
        try:
            futures = {pool.submit(_run_in_worker, task): i for i, task in enumerate(tasks)}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        except BrokenProcessPool:
            raise PoolkitError("a worker process died; called from a script, put the call under "
                               "`if __name__ == '__main__':` (workers are spawned), or use workers=1") from None
        finally:
            pool.shutdown(cancel_futures=True)
    return results
