"""The paper benchmarks' task runner: results in task order, in this process or in spawned workers, and torch's
threads restored after a run."""

from __future__ import annotations

import functools
import math
import operator

import pytest
import torch

from poolkit_bench.harness import restored_threads, run_tasks


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_task_order(workers):
    # many more tasks than workers, finishing in any order: catches results kept in completion order
    tasks = list(range(-40, 0, 3))
    assert run_tasks(abs, tasks, workers=workers, progress=False) == [abs(t) for t in tasks]


def test_workers_build_their_own_runner_once_given_a_builder():
    # in this process the runner given is used; each worker builds its own (here: another function), catching a
    # builder that is ignored or a runner pickled in its place
    build = functools.partial(operator.methodcaller, "upper")
    assert run_tasks(str.lower, ["Ab", "cD"], workers=1, progress=False, build_in_worker=build) == ["ab", "cd"]
    assert run_tasks(str.lower, ["Ab", "cD"], workers=2, progress=False, build_in_worker=build) == ["AB", "CD"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_task_stops_the_run_with_its_error(workers):
    with pytest.raises(ValueError, match="math domain error"):
        run_tasks(math.sqrt, [4.0, -1.0, 9.0], workers=workers, progress=False)


def test_threads_are_set_for_the_run_and_restored_after():
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    seen = run_tasks(lambda _: torch.get_num_threads(), [0], threads=other, progress=False)
    assert seen == [other] and torch.get_num_threads() == before
    with pytest.raises(RuntimeError), restored_threads():
        torch.set_num_threads(other)
        raise RuntimeError  # the count of before comes back even when the block fails
    assert torch.get_num_threads() == before
