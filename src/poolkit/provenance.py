"""Where and with what a result was made, recorded in every result file (leaderboards, training metrics, benches),
so that a published number names its commit, machine and library versions."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from . import __version__


#: folders of committed result files: rewriting them (a leaderboard rerun) does not change the code that runs
RESULT_FOLDERS = ("docs", "benchmarks/results")


def git_commit(root: Path = Path(__file__).resolve().parents[2]) -> str | None:
    """The git commit of the poolkit source in use (with ``+dirty`` when tracked files outside the result folders
    differ), or None when it does not run from a checkout of poolkit (an installed wheel, even one in a venv that
    sits inside some other repository)."""
    if not (root / "pyproject.toml").is_file() or not (root / "src" / "poolkit").is_dir():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":!{folder}" for folder in RESULT_FOLDERS)],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to on this machine (DEFAULT, AVX2, AVX512, ...): with the CPU
    model, what decides a kernel's vector width and so the order in which float sums are taken."""
    return torch.backends.cpu.get_cpu_capability()


def run_provenance() -> dict[str, Any]:
    """poolkit version and commit, torch / Python versions, the machine (CPU model, torch's CPU kernel instruction
    set, cores, CUDA device) and the UTC time."""
    return {"poolkit": __version__, "commit": git_commit(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "cpu": cpu_model(),
            "cpu_capability": cpu_capability(), "cores": os.cpu_count(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
