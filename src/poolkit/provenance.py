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


#: Instruction-set extensions that change how fast int8, bf16 and float32 kernels can run (onnxruntime's int8 matmuls
#: on VNNI, torch's bf16 on AVX512-BF16 / AMX): a result names the ones its CPU has.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
#: The same on ARM (/proc/cpuinfo's Features): int8 dot products, int8 matrix products, bf16, scalable vectors.
ARM_SPEED_FLAGS = ("asimddp", "i8mm", "bf16", "sve", "sve2")


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name and generation as ``cpuinfo`` (default: /proc/cpuinfo's text) gives them for its first
    processor ('AMD EPYC (family 23 model 49; avx2)': family, model and the :data:`SPEED_FLAGS` it has); an ARM
    processor, which names no model there, by its implementer and part codes and its :data:`ARM_SPEED_FLAGS`
    ('ARM (implementer 0x41 part 0xd0c; asimddp)'); else what platform knows. A brand name alone covers generations
    whose int8 and bf16 speeds differ severalfold."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if not key.strip() and fields:
            break  # the first processor's block is read
        fields.setdefault(key.strip(), value.strip())
    if "model name" not in fields and "CPU implementer" in fields:
        features = set(fields.get("Features", "").split())
        parts = [f"implementer {fields['CPU implementer']} part {fields.get('CPU part', 'unknown')}",
                 " ".join(flag for flag in ARM_SPEED_FLAGS if flag in features)]
        return "ARM (" + "; ".join(part for part in parts if part) + ")"
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    parts = [" ".join(f"{name} {fields[key]}" for name, key in (("family", "cpu family"), ("model", "model"))
                      if key in fields),
             " ".join(flag for flag in SPEED_FLAGS if flag in flags)]
    parts = [part for part in parts if part]
    return fields["model name"] + (f" ({'; '.join(parts)})" if parts else "")


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to on this machine (DEFAULT, AVX2, AVX512, ...): with the CPU
    model, what decides a kernel's vector width and so the order in which float sums are taken."""
    return torch.backends.cpu.get_cpu_capability()


def run_provenance() -> dict[str, Any]:
    """poolkit version and commit, torch / Python versions, the machine (CPU model, torch's CPU kernel instruction
    set, cores, CUDA device), the OpenMP wait policy the process was started with (None: OpenMP's default; the
    ``poolkit`` command sets PASSIVE) and the UTC time."""
    return {"poolkit": __version__, "commit": git_commit(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "cpu": cpu_model(),
            "cpu_capability": cpu_capability(), "cores": os.cpu_count(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
