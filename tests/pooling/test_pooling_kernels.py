"""The padding contract on the kernels a process chooses at start-up: the instruction sets of ATen, MKL and oneDNN.

A CPU picks its own vector width (AVX2 here, AVX-512 on many Intel Xeons), and with it the order in which sums are
taken: a float32 sum of huge values overflows to inf on one CPU and to NaN (inf - inf) on another. Each library
lets a process start with narrower kernels than its CPU has; these tests rerun the padding checks of
test_pooling_robustness.py in such a process, so that a result that holds only on this CPU's own kernels is red
here, not on the next machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
#: The generic (non-vectorised) ATen kernels, MKL's SSE4.2 and oneDNN's SSE4.1 code paths: every x86-64 CPU of this
#: project's machines has them, and each differs from the AVX2 / AVX-512 kernels a CPU picks by itself.
NARROW_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}


@pytest.mark.slow
def test_padding_is_never_read_on_the_narrowest_instruction_sets():
    """The huge-value and NaN padding checks of every pooler with its parameters as built (mixed signs: the cases
    whose overflow depends on the order of summation; the non-negative ones do not), fast and plain forms, in a
    process started with NARROW_KERNELS (which it checks took effect: torch reports the DEFAULT capability)."""
    child = ("import sys, torch, pytest\n"
             "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT', torch.backends.cpu.get_cpu_capability()\n"
             "sys.exit(pytest.main(['-q', '-p', 'no:xdist', '-p', 'no:cacheprovider', '-p', 'no:randomly',\n"
             f"                     {str(TESTS / 'test_pooling_robustness.py')!r},\n"
             "                     '-k', 'padding_never_changes and (3e+38-as-built or nan)']))\n")
    result = subprocess.run([sys.executable, "-c", child], cwd=TESTS.parents[1], env={**os.environ, **NARROW_KERNELS},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]  # "136 passed, 848 deselected in 5.1s": a selection that ran
    assert "failed" not in summary and int(summary.split(" passed")[0].split()[-1]) >= 100, summary
