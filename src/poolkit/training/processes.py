"""The processes of one launch (torchrun / accelerate launch) that share a job through files: which one this is, its
device, what tells this launch from an earlier one, and how one waits for another's file."""

from __future__ import annotations

import atexit
import functools
import json
import os
import time
from pathlib import Path

from ..errors import PoolkitError


def process_rank() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun and accelerate launch set both); (0, 1) alone."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def process_device(world: int) -> str | None:
    """This process's device among several (``cuda:LOCAL_RANK``, or the CPU when there is no CUDA or accelerate
    was told ``--cpu``); alone: None (the encoder's own choice)."""
    import torch

    if world == 1:
        return None
    if torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true", "yes"):
        return f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"  # more processes: shared
    return "cpu"


def launch_id() -> str:
    """What the processes of one launch share and those of an earlier launch do not: torchrun's run id and the
    launcher's process id (so a resumed run never takes an interrupted run's done-marks for its own)."""
    return f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}:{os.getppid()}"


def read_json(path: Path) -> dict | None:
    """A JSON file's content (the manifest, a process's done-mark, rank 0's word), None when absent or not (yet)
    whole."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wait_for(ready, what: str, poll: float = 0.2) -> None:
    """Poll until ``ready()``; a failed process makes the launcher stop this one, so there is no deadline."""
    start = note = time.monotonic()
    while not ready():
        time.sleep(poll)
        if time.monotonic() - note > 600:
            note = time.monotonic()
            print(f"still waiting for {what} ({(note - start) / 60:.0f} min)", flush=True)


def cpu_launch() -> bool:
    """Whether accelerate should run this launch's processes on CPUs (gloo): it was told so (ACCELERATE_USE_CPU,
    ``accelerate launch --cpu``), or several processes were launched on a machine without CUDA (``torchrun`` or
    ``accelerate launch --multi_gpu`` there), where accelerate alone would see one process."""
    import torch
    from accelerate.utils import parse_flag_from_env

    return parse_flag_from_env("ACCELERATE_USE_CPU") or (process_rank()[1] > 1 and not torch.cuda.is_available())


@functools.cache
def _tear_down_at_exit() -> None:
    """Destroy the process group at exit, while the interpreter is still whole (registered once): left to the
    interpreter's own teardown, gloo's worker threads can abort a process whose work is done ('terminate called
    without an active exception', SIGABRT; pytorch/pytorch#190489), failing a launch that succeeded."""
    def destroy() -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    atexit.register(destroy)


def accelerate_state():
    """accelerate's process state, on CPUs where :func:`cpu_launch` says so (``Accelerator`` is told the same)."""
    from accelerate import PartialState

    check_launch()
    state = PartialState(cpu=cpu_launch())
    if state.num_processes > 1:
        _tear_down_at_exit()
    launched = int(os.environ.get("WORLD_SIZE", 1))
    if launched != state.num_processes:
        raise PoolkitError(f"{launched} processes were launched but accelerate sees {state.num_processes}: "
                           "launch with torchrun --nproc_per_node N (on CPUs: ACCELERATE_USE_CPU=1 where CUDA is "
                           "present)")
    return state


def launcher_asked() -> int:
    """How many processes the ``accelerate launch`` that started this one was asked for (``--num_processes N`` on
    its command line); 1 when this process was not started so or the count is not on the command line."""
    try:
        import psutil  # accelerate's own dependency
    except ImportError:
        return 1
    try:
        words = psutil.Process().parent().cmdline()
    except (psutil.Error, AttributeError):  # no parent, or one we may not read
        return 1
    starts = [i for i in range(1, len(words)) if (words[i] == "launch" and "accelerate" in words[i - 1])
              or words[i] == "accelerate.commands.launch"]
    if not starts:
        return 1
    for i, word in enumerate(words[starts[0] + 1:], starts[0] + 1):
        if word == "-m" or word.endswith(".py"):  # the launched program: its own arguments follow
            break
        name, _, value = word.partition("=")
        if name in ("--num_processes", "--num-processes"):
            value = value or (words[i + 1] if i + 1 < len(words) else "")
            return int(value) if value.isdigit() else 1
    return 1


def check_launch() -> None:
    """Refuse a launch that started fewer processes than it was asked for, before any work: ``accelerate launch
    --num_processes N`` on a machine without GPUs starts one process (its simple launcher) and says nothing."""
    asked, world = launcher_asked(), process_rank()[1]
    if world == 1 and asked > 1:
        raise PoolkitError(f"accelerate launch was asked for {asked} processes but started 1 (without GPUs it starts "
                           f"one): on CPUs launch with `accelerate launch --multi_gpu --num_processes {asked}` or "
                           f"`torchrun --nproc_per_node {asked}` (gloo)")
