"""The loops of :mod:`compiled`, compiled by numba on first call and cached on disk (beside this file, or in numba's
user cache, or ``NUMBA_CACHE_DIR``; compiled in each process where none can be written). Imported only by
:func:`compiled._loops`: importing numba takes a while."""

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload


def jit(function):
    """``function`` compiled without the GIL and cached on disk, or compiled in each process where no cache location
    can be written (numba refuses ``cache=True`` there)."""
    try:
        return njit(nogil=True, cache=True)(function)
    except RuntimeError:
        return njit(nogil=True)(function)


@intrinsic
def _float32_of(typingctx, bits):
    """The float32 whose bits are ``bits`` (uint32): a reinterpretation, no conversion."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.uint32), codegen


@intrinsic
def _bits_of(typingctx, value):
    """The bits (uint32) of the float32 ``value``: a reinterpretation, no conversion."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))
    return types.uint32(types.float32), codegen


def as_float32(row, d, flip):
    """Feature ``d`` of token ``row`` as float32 with its sign bit xor ``flip`` (0, or 1 << 31 to negate exactly: a
    min is the negated max of the negated values): bf16 bits (uint16) shifted into a float32's high half (exact),
    float32 as it is. Compiled per dtype by its overload, inline, so that the loops over ``d`` vectorise."""


@overload(as_float32)
def _as_float32(row, d, flip):
    if row.dtype == types.uint16:
        return lambda row, d, flip: _float32_of((np.uint32(row[d]) << np.uint32(16)) ^ flip)
    return lambda row, d, flip: _float32_of(_bits_of(row[d]) ^ flip)


@jit
def sums(x, mask, mean, root, out):
    """out[b] = the float32 sum of x[b, t] over the real tokens t (mask[b, t]), in token order. ``mean`` 1: each token
    times 1 / n first (the product's terms), 2: the sum divided by n; n the row's count of real tokens, at least 1 (its
    square root with ``root``), in float32 as torch's count, clamp and cast give it. (``mean``: compiled.SUM,
    MEAN_OF_TERMS, MEAN_OF_SUM.)"""
    batch, length, dim = x.shape
    none = np.uint32(0)
    for b in range(batch):
        total = out[b]
        total[:] = 0
        count = 0
        for t in range(length):
            count += mask[b, t]
        scale = np.float32(max(count, 1))
        if root:
            scale = np.sqrt(scale)
        weight = np.float32(1) / scale
        for t in range(length):
            if mask[b, t]:
                row = x[b, t]
                if mean == 1:
                    for d in range(dim):
                        total[d] += as_float32(row, d, none) * weight
                else:
                    for d in range(dim):
                        total[d] += as_float32(row, d, none)
        if mean == 2:
            for d in range(dim):
                total[d] /= scale


@jit
def spread(rows, mask, out):
    """out[b, t] = rows[b] at the real tokens t (mask[b, t]), zeros at the padding: a gradient of x written in one
    pass. Any dtype whose zero is all zero bits (float32, bf16 as uint16 bits)."""
    batch, length, dim = out.shape
    for b in range(batch):
        row = rows[b]
        for t in range(length):
            target = out[b, t]
            if mask[b, t]:
                for d in range(dim):
                    target[d] = row[d]
            else:
                for d in range(dim):
                    target[d] = 0


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
    ``index`` (B, D) int32 (else (0, 0)), index[b] = its first holder. A NaN wins, a feature at the fill (-inf for max)
    at every real token is held by the first real token, an empty row gives 0 at index 0. The updates are selects, which
    the compiler vectorises."""
    batch, length, dim = x.shape
    holders, halves = index.shape[0] > 0, half.shape[0] > 0
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
                row = x[b, t]
                if holders:
                    at, token = index[b], np.int32(t)  # 32-bit holders: a select as wide as the values'
                    for d in range(dim):
                        v, held = as_float32(row, d, flip), best[d]
                        keep = (held != held) | (v <= held)  # a NaN held stays; a NaN v is taken
                        best[d] = held if keep else v
                        at[d] = at[d] if keep else token
                else:
                    for d in range(dim):
                        v, held = as_float32(row, d, flip), best[d]
                        best[d] = held if (held != held) | (v <= held) else v
        if flip:  # the sign bits back, exactly (a NaN's too)
            for d in range(dim):
                raw[d] ^= flip
        if halves:
            row = half[b]
            for d in range(dim):
                row[d] = raw[d] >> 16
