"""A launch's processes (poolkit.training.processes): a launch that started fewer processes than it was asked for is
refused before any work (``accelerate launch --num_processes N`` on a machine without GPUs starts one, silently), and
several processes on a machine without CUDA run on its CPUs without ACCELERATE_USE_CPU."""

from __future__ import annotations

import sys

import psutil
import pytest
import torch
from quick_starts import launched

from poolkit.errors import PoolkitError
from poolkit.training import processes

ACCELERATE = [sys.executable, "/venv/bin/accelerate", "launch"]


def started_by(monkeypatch, words: list[str]) -> None:
    """Make this process's parent read as one started with ``words``."""

    class Parent:
        def cmdline(self):
            return words

    monkeypatch.setattr(psutil.Process, "parent", lambda self: Parent())


@pytest.mark.parametrize("words, asked", [
    ([*ACCELERATE, "--num_processes", "2", "-m", "poolkit.cli", "train"], 2),
    ([*ACCELERATE, "--mixed_precision", "no", "--num-processes=3", "run.py"], 3),
    ([sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "4", "run.py"], 4),
    ([*ACCELERATE, "-m", "poolkit.cli", "merge", "--num_processes", "5"], 1),  # the program's flag, not the launch's
    ([*ACCELERATE, "run.py"], 1),
    (["/bin/bash", "-c", "poolkit train --num_processes 2"], 1),
    ([], 1),
])
def test_the_count_asked_of_accelerate_launch_is_read_from_its_command_line(monkeypatch, words, asked):
    # catches the program's own arguments read as the launcher's, '=' forms missed, and any parent taken for accelerate
    started_by(monkeypatch, words)
    assert processes.launcher_asked() == asked


def test_one_process_where_two_were_asked_is_refused_naming_the_cpu_forms(monkeypatch):
    started_by(monkeypatch, [*ACCELERATE, "--num_processes", "2", "-m", "poolkit.cli", "train"])
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(PoolkitError, match=r"asked for 2 processes but started 1.*--multi_gpu --num_processes 2.*"
                                           r"torchrun --nproc_per_node 2"):
        processes.check_launch()
    monkeypatch.setenv("WORLD_SIZE", "2")  # the two it was asked for: nothing to refuse
    processes.check_launch()


def test_several_processes_without_cuda_run_on_the_cpus(monkeypatch):
    # catches the flag demanded again (accelerate alone sees one process there: "2 launched but accelerate sees 1")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert processes.cpu_launch()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not processes.cpu_launch()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not processes.cpu_launch()  # GPUs: theirs, unless told otherwise
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    assert processes.cpu_launch()


@pytest.mark.slow  # one real launch (a few seconds of imports)
@pytest.mark.skipif(torch.cuda.device_count() > 1, reason="with GPUs accelerate starts the processes asked for")
def test_a_real_one_process_accelerate_launch_is_refused_before_any_work(tmp_path):
    (tmp_path / "in.csv").write_text("text\na cat\n")
    result = launched("accelerate launch --num_processes 2 -m poolkit.cli embed --data in.csv --out v.npy", tmp_path)
    assert result.returncode != 0
    assert "error: accelerate launch was asked for 2 processes but started 1" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_a_launched_process_group_is_destroyed_at_exit_by_one_handler(monkeypatch, tmp_path):
    """Several processes register one exit handler (however often the state is asked for) that destroys the process
    group while the interpreter is whole: left to teardown, gloo's threads can abort a finished process (SIGABRT).
    Catches the handler missing, registered per call, or leaving the group alive; it is a no-op once destroyed."""
    import atexit

    import torch.distributed as dist

    handlers = []
    monkeypatch.setattr(atexit, "register", handlers.append)
    processes._tear_down_at_exit.cache_clear()
    processes._tear_down_at_exit()
    processes._tear_down_at_exit()
    assert len(handlers) == 1
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        handlers[0]()
        assert not dist.is_initialized()
        handlers[0]()  # nothing left to destroy
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        processes._tear_down_at_exit.cache_clear()
