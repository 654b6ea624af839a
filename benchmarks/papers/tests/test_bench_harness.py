"""The paper benchmarks' task runner: results in task order, in this process or in spawned workers, and torch's
threads restored after a run."""

from __future__ import annotations

import functools
import math
import operator

import pytest
import torch

from poolkit_bench.harness import Stopwatch, restored_threads, run_tasks


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


class _Stop(Exception):
    pass


def _result(task: int) -> dict:
    return {"square": task * task, "half": task / 2}


def _stopping_at(stop: int, calls: list):
    def run(task):
        calls.append(task)
        if task == stop:
            raise _Stop
        return _result(task)
    return run


@pytest.mark.parametrize("workers", [1, 2])
def test_a_stopped_run_keeps_its_finished_tasks_and_the_same_run_continues(tmp_path, workers):
    # catches results kept only in memory until the end (a stopped bench wrote nothing: issue 33), finished tasks
    # run again, results taken from the journal in the wrong order, and a journal left behind after the results
    from poolkit_bench.harness import JOURNAL, results_folder

    tasks = list(range(6))
    calls: list = []
    with pytest.raises(_Stop), results_folder(tmp_path / "out", ("results.json",), settings={"seeds": 3}):
        run_tasks(_stopping_at(3, calls), tasks, progress=False, desc="t")
    assert (tmp_path / "out" / JOURNAL).read_text().count('"key"') == 3  # tasks 0, 1, 2 kept as they finished
    with open(tmp_path / "out" / JOURNAL, "a") as handle:
        handle.write('{"key": "t: half a li')  # a line cut short by a kill is dropped
    calls.clear()
    with results_folder(tmp_path / "out", ("results.json",), settings={"seeds": 3}):
        clock = Stopwatch()
        results = run_tasks(_stopping_at(-1, calls) if workers == 1 else _result, tasks, progress=False, desc="t",
                            workers=workers)  # spawned workers need a runner they can import
        assert clock.record()["tasks_from_a_stopped_run"] == 3  # its seconds are this run's part only: said so
    assert results == [_result(t) for t in tasks]
    if workers == 1:
        assert calls == [3, 4, 5]
    assert not (tmp_path / "out" / JOURNAL).exists()


def test_a_journal_of_other_settings_is_refused_unless_forced(tmp_path):
    # catches a run that mixes the finished tasks of other settings into its results
    from poolkit.errors import PoolkitError
    from poolkit_bench.harness import JOURNAL, results_folder

    with pytest.raises(_Stop), results_folder(tmp_path / "out", ("results.json",), settings={"seeds": 3}):
        run_tasks(_stopping_at(1, []), [0, 1], progress=False)
    with pytest.raises(PoolkitError, match="finished tasks of a stopped run with another settings: run it again as"):
        with results_folder(tmp_path / "out", ("results.json",), settings={"seeds": 5}):
            pass
    calls: list = []
    with results_folder(tmp_path / "out", ("results.json",), settings={"seeds": 5}, force=True):
        run_tasks(_stopping_at(-1, calls), [0, 1], progress=False)
    assert calls == [0, 1]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / JOURNAL).write_text("my notes\n")
    with pytest.raises(PoolkitError, match="is not a benchmark journal poolkit wrote"):
        with results_folder(tmp_path / "mine", ("results.json",), settings={}, force=True):
            pass
    assert (tmp_path / "mine" / JOURNAL).read_text() == "my notes\n"


def test_progress_in_a_log_is_lines_from_the_first_task(capsys):
    # the benches printed nothing into a log for 12-15 minutes (tqdm is off when stderr is not a terminal)
    run_tasks(abs, list(range(-10, 0)), progress=True, desc="bench-x", unit="run")
    err = capsys.readouterr().err
    assert "bench-x: 1/10 run (10%)" in err and "bench-x: 10/10 runs (100%), done" in err and "\r" not in err
