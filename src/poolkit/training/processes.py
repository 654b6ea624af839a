"""The processes of one launch (torchrun / accelerate launch) that share a job through files: which one this is, its
device, what tells this launch from an earlier one, and how one waits for another's file."""

from __future__ import annotations

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


def accelerate_state():
    """accelerate's process state; like ``Accelerator`` it honours ACCELERATE_USE_CPU, which multi-process CPU
    runs (gloo) need."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    launched = int(os.environ.get("WORLD_SIZE", 1))
    if launched != state.num_processes:
        raise PoolkitError(f"{launched} processes were launched but accelerate sees {state.num_processes}: "
                           "on CPUs launch with ACCELERATE_USE_CPU=1 torchrun --nproc_per_node N")
    return state
