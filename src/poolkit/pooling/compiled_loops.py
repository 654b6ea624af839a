"""The loops of :mod:`compiled`, compiled by numba on first call and cached on disk (beside this file, or in numba's
user cache, or ``NUMBA_CACHE_DIR``; compiled in each process where none can be written). Imported only by
:func:`compiled._loops`: importing numba takes a while."""

import numpy as np
from numba import njit, types
from numba.extending import overload


def jit(function):
    """``function`` compiled without the GIL and cached on disk, or compiled in each process where no cache location
    can be written (numba refuses ``cache=True`` there)."""
    try:
        return njit(nogil=True, cache=True)(function)
    except RuntimeError:
        return njit(nogil=True)(function)


def as_float32(row, bits, flip):
    """Token ``row`` (D,) as float32 with its sign bits xor ``flip`` (0, or 1 << 31 to negate exactly: a min is the
    negated max of the negated values): bf16 bits (uint16) shifted into a float32's high half, float32 as it is
    (flipped into ``bits`` (D,) uint32 when asked). Compiled per dtype by its overload."""


@overload(as_float32)
def _as_float32(row, bits, flip):
    if row.dtype == types.uint16:
        def widen(row, bits, flip):
            for d in range(row.shape[0]):
                bits[d] = (np.uint32(row[d]) << 16) ^ flip
            return bits.view(np.float32)
        return widen

    def same(row, bits, flip):
        if flip == 0:
            return row
        raw = row.view(np.uint32)
        for d in range(row.shape[0]):
            bits[d] = raw[d] ^ flip
        return bits.view(np.float32)
    return same


@jit
def sums(x, mask, scale, out):
    """out[b] = the float32 sum of x[b, t] * scale[b] over the real tokens t (mask[b, t]), in token order."""
    batch, length, dim = x.shape
    bits = np.empty(dim, np.uint32)
    for b in range(batch):
        total, weight = out[b], scale[b]
        total[:] = 0
        for t in range(length):
            if mask[b, t]:
                values = as_float32(x[b, t], bits, np.uint32(0))
                if weight == 1:  # a sum: no product to take
                    for d in range(dim):
                        total[d] += values[d]
                else:
                    for d in range(dim):
                        total[d] += values[d] * weight


@jit
def first_real(mask, b):
    """The first real token of row b, or its length when it has none."""
    length = mask.shape[1]
    first = 0
    while first < length and not mask[b, first]:
        first += 1
    return first


@jit
def extremes(x, mask, flip, out, half, index):
    """out[b] = the max (``flip`` 0) or min (``flip`` 1 << 31: the negated max of the negated values) of x[b, t] over
    the real tokens; with ``half`` (B, D) uint16 (else (0, 0)), half[b] = its high halves, x's own bf16 bits; with
    ``index`` (B, D) (else (0, 0)), index[b] = its first holder. A NaN wins, a feature at the fill (-inf for max) at
    every real token is held by the first real token, an empty row gives 0 at index 0. The updates are selects, which
    the compiler vectorises."""
    batch, length, dim = x.shape
    holders, halves = index.shape[0] > 0, half.shape[0] > 0
    bits = np.empty(dim, np.uint32)
    for b in range(batch):
        best = out[b]
        raw = best.view(np.uint32)
        first = first_real(mask, b)
        if first == length:
            best[:] = 0
            if holders:
                index[b] = 0
            if halves:
                half[b] = 0
            continue
        best[:] = -np.inf
        if holders:
            index[b] = first
        for t in range(first, length):
            if mask[b, t]:
                values = as_float32(x[b, t], bits, flip)
                if holders:
                    at = index[b]
                    for d in range(dim):
                        v, held = values[d], best[d]
                        keep = (held != held) | (v <= held)  # a NaN held stays; a NaN v is taken
                        best[d] = held if keep else v
                        at[d] = at[d] if keep else t
                else:
                    for d in range(dim):
                        v, held = values[d], best[d]
                        best[d] = held if (held != held) | (v <= held) else v
        if flip:  # the sign bits back, exactly (a NaN's too)
            for d in range(dim):
                raw[d] ^= flip
        if halves:
            row = half[b]
            for d in range(dim):
                row[d] = raw[d] >> 16
