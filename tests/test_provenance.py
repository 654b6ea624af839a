"""Result files name the commit, machine and versions they were made with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

import poolkit
from poolkit.provenance import cpu_model, git_commit, run_provenance

ROOT = Path(__file__).resolve().parents[1]


def test_provenance_names_this_checkout_commit_and_versions():
    """Catches a commit read from the wrong folder (None, or another repository's) and stale versions."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    info = run_provenance()
    assert info["commit"].removesuffix("+dirty") == head
    assert (info["poolkit"], info["torch"]) == (poolkit.__version__, torch.__version__) and info["cores"] >= 1
    assert info["omp_wait_policy"] == os.environ.get("OMP_WAIT_POLICY")  # what torch's threads ran with


def test_only_source_changes_mark_a_commit_dirty(tmp_path):
    """A rerun rewriting result files (docs/, benchmarks/results/) keeps the commit clean; an edit of code does not.
    Catches a check that ignores every change, or one that flags result files too."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    assert git_commit(tmp_path) is None  # not a poolkit checkout (a wheel in a venv inside some repository)
    for name in ("pyproject.toml", "docs/board.json", "benchmarks/results/r.json", "src/poolkit/code.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = git_commit(tmp_path)
    assert len(head) == 40
    (tmp_path / "docs/board.json").write_text("2")
    (tmp_path / "benchmarks/results/r.json").write_text("2")
    assert git_commit(tmp_path) == head
    (tmp_path / "src/poolkit/code.py").write_text("2")
    assert git_commit(tmp_path) == head + "+dirty"


def test_provenance_names_the_cpu_model_and_the_kernels_torch_dispatches_to():
    """The machine a result was made on is its CPU model (as /proc/cpuinfo names it), its generation (family, model)
    and the speed-deciding extensions it has, and torch's CPU kernel instruction set: what decides the order of float
    sums. Catches a record of the architecture alone ('x86_64'), or of the brand alone ('AMD EPYC' covers CPUs with
    and without VNNI)."""
    info = run_provenance()
    if Path("/proc/cpuinfo").is_file():
        assert info["cpu"] == cpu_model(Path("/proc/cpuinfo").read_text())
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    documented = ("DEFAULT", "VSX", "Z VECTOR", "NO AVX", "AVX2", "AVX512", "SVE256")
    assert info["cpu_capability"] in documented


def test_the_cpu_model_reads_the_first_processors_name_generation_and_speed_flags():
    """Fixed /proc/cpuinfo texts: an Intel block with VNNI and AMX, an AMD block with no trailing blank line, a
    second processor that differs (ignored), tab-separated keys, an ARM text (no model name: its implementer, part
    and ARM speed flags), and a text with neither (platform's answer). Catches flags read from another processor,
    flags outside SPEED_FLAGS, a lost family or model (or ARM part), and a crash where a field is missing."""
    import platform

    intel = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
             "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse avx2 avx512f avx512_vnni amx_int8 "
             "amx_bf16 avx512_bf16 sha_ni\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 1\n"
             "model name\t: Other\nflags\t\t: avx2\n")
    assert cpu_model(intel) == ("Intel(R) Xeon(R) Processor (family 6 model 143; avx2 avx512f avx512_vnni "
                                "avx512_bf16 amx_bf16 amx_int8)")
    amd = "cpu family\t: 23\nmodel\t\t: 49\nmodel name\t: AMD EPYC\nflags\t\t: fma avx avx2 f16c"
    assert cpu_model(amd) == "AMD EPYC (family 23 model 49; avx2)"
    assert cpu_model("model name\t: Plain CPU\n") == "Plain CPU"
    arm = ("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd asimddp sve i8mm bf16\nCPU implementer\t: 0x41\n"
           "CPU part\t: 0xd40\n\nprocessor\t: 1\nFeatures\t: fp asimd sve2\nCPU implementer\t: 0x41\n")
    assert cpu_model(arm) == "ARM (implementer 0x41 part 0xd40; asimddp i8mm bf16 sve)"
    assert cpu_model("processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0xc0\n") == (
        "ARM (implementer 0xc0 part unknown)")
    assert cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") == (platform.processor() or platform.machine())
