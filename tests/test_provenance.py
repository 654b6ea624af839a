"""Result files name the commit, machine and versions they were made with."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

import poolkit
from poolkit.provenance import SPEED_FLAGS, git_commit, run_provenance

ROOT = Path(__file__).resolve().parents[1]


def test_provenance_names_this_checkout_commit_and_versions():
    """Catches a commit read from the wrong folder (None, or another repository's) and stale versions."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    info = run_provenance()
    assert info["commit"].removesuffix("+dirty") == head
    assert (info["poolkit"], info["torch"]) == (poolkit.__version__, torch.__version__) and info["cores"] >= 1


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
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        first = cpuinfo.read_text().split("\n\n")[0].splitlines()
        field = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in first if ":" in line}
        flags = [flag for flag in SPEED_FLAGS if flag in field.get("flags", "").split()]
        assert info["cpu"] == (f"{field['model name']} (family {field['cpu family']} model {field['model']}"
                               + (f"; {' '.join(flags)})" if flags else ")"))
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    documented = ("DEFAULT", "VSX", "Z VECTOR", "NO AVX", "AVX2", "AVX512", "SVE256")
    assert info["cpu_capability"] in documented
