"""Masked statistics in one pass over the real tokens, compiled by numba (the ``kernels`` extra).

torch has no masked reduction over a row's real tokens: its forms read the padding too, copy half-precision x to
float32 before summing it (a (B, T, D) float32 tensor), or find a maximum's holder in a second pass (see
:mod:`fast`). The loops here read each real token once, skip the padding without reading it, sum bf16 in float32
as they go and keep each feature's first holder of its maximum beside the value. Each runs on one core, so it never
waits for a descheduled thread beside other work (a parallel region does, docs/performance.md, item 5).

Without numba, or where :func:`takes` says no, :mod:`fast` and :mod:`masking` answer as before. Tests hold these
to the plain forms of :mod:`masking`: the same maxima, holders and empty-row zeros bit for bit (a NaN keeps x's own
bits); float32 sums in another order (a row's sum may differ in its last bits, and a bf16 mean rounded once from it
but for one on the rounding's edge); in training, x's gradient the same values (for a finite incoming gradient).
"""

from __future__ import annotations

import functools
import importlib
import warnings

import numpy as np
import torch
from torch import Tensor

from ..extras import _missing

#: The dtypes the loops read: float32, and bf16 as the high half of a float32 (exact; fp16 is not one).
DTYPES = (torch.float32, torch.bfloat16)

#: What :func:`compiled_loops.sums` gives: the sum, the sum of each token times 1/n, the sum divided by n.
SUM, MEAN_OF_TERMS, MEAN_OF_SUM = 0, 1, 2

#: The switch tests turn off to reach :mod:`fast` 's torch forms.
_enabled = True


def available() -> bool:
    """Whether the loops are switched on and numba can run them (installed, importable with this numpy, JIT on)."""
    return _enabled and _loops() is not None


def takes(x: Tensor, mask: Tensor) -> bool:
    """Whether the loops read ``x`` (B, T, D) under ``mask`` (B, T): numba installed, a float32 or bf16 contiguous
    x and a bool mask, without autocast (under which the plain forms' products run in bf16, so a float32 sum would
    change a value with the path it takes). The caller checks :func:`fast.active`; the loops take no gradient, which
    :class:`fast.MaskedSums` and :class:`fast.MaskedExtreme` write."""
    return (x.dtype in DTYPES and mask.dtype == torch.bool and x.dim() == 3 and x.is_contiguous()
            and not torch.is_autocast_enabled("cpu") and available())


def masked_sum(x: Tensor, mask: Tensor) -> Tensor:
    """The float32 sum of x over each row's real tokens: (B, T, D), (B, T) bool -> float32 (B, D); empty rows 0.
    Not differentiable: :class:`fast.MaskedSums` gives it a gradient."""
    return _sums(x, mask, SUM, False)


def masked_mean(x: Tensor, mask: Tensor, root: bool = False) -> Tensor:
    """The mean of x over each row's real tokens (``root``: the sum over the square root of the count), float32 (B, D),
    empty rows 0, the count and the scale taken in the loop: for float32 x the product's terms, each token times 1/n
    summed (huge values stay finite where their sum would not), for bf16 x the float32 sum divided by n (rounded once
    to bf16, the correctly rounded mean): :func:`masking.masked_mean` 's two forms. Not differentiable:
    :class:`fast.MaskedSums` gives it a gradient."""
    return _sums(x, mask, MEAN_OF_TERMS if x.dtype == torch.float32 else MEAN_OF_SUM, root)


def _sums(x: Tensor, mask: Tensor, mean: int, root: bool) -> Tensor:
    out = torch.empty(x.shape[0], x.shape[2], dtype=torch.float32, device="cpu")
    _run("sums", *_arrays(x, mask), mean, root, out.numpy())
    return out


def spread(rows: Tensor, mask: Tensor) -> Tensor:
    """(B, T, D) in ``rows`` ' dtype (bf16 where poolkit calls it; float32 too): rows[b] (B, D) at each real token of
    row b, zeros at the padding, written in one pass (a sum's or a mean's gradient of x)."""
    out = torch.empty(*mask.shape, rows.shape[1], dtype=rows.dtype, device="cpu")
    _run("spread", _numpy(rows.contiguous()), mask.detach().contiguous().numpy(), _numpy(out))
    return out


def masked_extreme(x: Tensor, mask: Tensor, largest: bool, with_index: bool = False):
    """The max (``largest``) or min over each row's real tokens: (B, T, D), (B, T) bool -> values (B, D) in x's
    dtype [, index (B, D) int64, each feature's first holder], :func:`masking.masked_fill_reduce` 's, bit for bit but
    a NaN's: a NaN wins (the first one holds it, with the bits x has there, where torch's gather gives a bf16 NaN its
    own), a feature whose every real value is the fill (-inf for max) is held by the row's first real token, and an
    empty row gives 0 at index 0."""
    def rows(needed: bool, dtype: torch.dtype) -> Tensor:
        return torch.empty(x.shape[0] if needed else 0, x.shape[2] if needed else 0, dtype=dtype, device="cpu")

    values, index = rows(True, torch.float32), rows(with_index, torch.int32)  # int32 in the loop: see there
    half = rows(x.dtype == torch.bfloat16, torch.int16)
    _run("extremes", *_arrays(x, mask), np.uint32(0 if largest else 1 << 31), values.numpy(),
         half.numpy().view(np.uint16), index.numpy())
    if x.dtype == torch.bfloat16:  # the loop's high halves: x's own bits (a conversion would change a NaN's)
        values = half.view(torch.bfloat16)
    return (values, index.long()) if with_index else values


#: The prefix of the profiler events a loop runs in (``torch.profiler``; benchmarks/perf_where.py counts them).
EVENT = "poolkit.compiled::"


def _run(name: str, *arrays) -> None:
    """Loop ``name`` of :mod:`compiled_loops` on ``arrays``, as a named event when torch's profiler records (the
    loops are no ATen operator; the check costs nothing when it does not)."""
    loop = getattr(_loops(), name)
    if not torch.autograd.profiler._is_profiler_enabled:
        return loop(*arrays)
    with torch.profiler.record_function(EVENT + name):
        return loop(*arrays)


def _arrays(x: Tensor, mask: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """x as numpy without a copy (:func:`_numpy`), and the mask contiguous (one compiled layout)."""
    return _numpy(x), mask.detach().contiguous().numpy()


def _numpy(t: Tensor) -> np.ndarray:
    """``t`` as numpy without a copy, bf16 as its uint16 bits."""
    t = t.detach()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


@functools.cache
def _loops():
    """The numba loops (:mod:`compiled_loops`), imported on first use (importing numba takes a while); None where
    numba is missing, cannot be imported (a numpy newer than it supports, say: one warning) or has its JIT switched
    off (``NUMBA_DISABLE_JIT``): the torch forms answer then."""
    if _missing("numba"):
        return None
    try:
        from numba import config

        loops = importlib.import_module(f"{__package__}.compiled_loops")
    except (ImportError, RuntimeError, OSError) as err:
        warnings.warn(f"poolkit: numba is installed but cannot be used ({err}); the statistics run their torch forms",
                      RuntimeWarning, stacklevel=2)
        return None
    return None if config.DISABLE_JIT else loops
