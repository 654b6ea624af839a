"""Quantised embeddings: ``poolkit.quantize(vectors, kind)``, the kinds and codes of sentence-transformers'
``quantize_embeddings`` (numpy only).

- ``float32``: the vectors as float32.
- ``int8`` / ``uint8``: each dimension's range [low, high] (``ranges`` (2, D); else the ``calibration`` vectors';
  else the vectors' own) cut into steps of (high - low) / 255; a value's code is the number of whole steps it lies
  above low, clipped to 0..255 (uint8), minus 128 for int8. A dimension with no spread (high = low) counts steps of
  1.
- ``binary`` / ``ubinary``: one bit per dimension, 1 where the value is > 0, packed eight to a byte, first dimension
  in the highest bit (numpy's ``packbits``; the last byte zero-padded): uint8 codes (ubinary), or those minus 128 as
  int8 (binary). D dimensions give ceil(D / 8) bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import PoolkitError

KINDS = ("float32", "int8", "uint8", "binary", "ubinary")


def quantize(vectors: Any, kind: str, *, calibration: Any = None, ranges: Any = None) -> np.ndarray:
    """``vectors`` (N, D) (a numpy array or a torch tensor) quantised to ``kind`` (see the module docstring): float32,
    int8 / uint8 (N, D) or binary / ubinary (N, ceil(D / 8))."""
    if kind not in KINDS:
        raise PoolkitError(f"`kind` must be one of {', '.join(KINDS)}, got {kind!r}")
    values = _matrix(vectors, "vectors")
    if kind == "float32":
        return values
    if kind in ("binary", "ubinary"):
        packed = np.packbits(values > 0, axis=-1)
        return packed if kind == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    source = ranges if ranges is not None else quantization_ranges(values if calibration is None else calibration)
    low, high = _ranges(source, values.shape[1])
    step = (high - low) / 255
    codes = np.clip(np.floor((values - low) / np.where(step > 0, step, 1)), 0, 255)
    return codes.astype(np.uint8) if kind == "uint8" else (codes - 128).astype(np.int8)


def dequantize(codes: Any, kind: str, dims: int, *, ranges: Any = None) -> np.ndarray:
    """Codes of ``kind`` back to float32 vectors (N, ``dims``) in the float vectors' coordinates: int8 / uint8 codes
    to the low end of their step (``ranges``, the (2, D) they were made with: low + code x step, as
    sentence-transformers' rescoring reads them), binary / ubinary bits to +1 / -1 (their dot products are then
    ``dims`` - 2 x the Hamming distance)."""
    if kind not in KINDS:
        raise PoolkitError(f"`kind` must be one of {', '.join(KINDS)}, got {kind!r}")
    values = np.asarray(codes)
    if kind == "float32":
        return values.astype(np.float32)
    if kind in ("binary", "ubinary"):
        packed = values.astype(np.uint8) if kind == "ubinary" else (values.astype(np.int16) + 128).astype(np.uint8)
        return np.unpackbits(packed, axis=-1)[:, :dims].astype(np.float32) * 2 - 1
    if ranges is None:
        raise PoolkitError(f"dequantizing {kind} codes needs the `ranges` they were made with")
    low, high = _ranges(ranges, dims)
    step = (high - low) / 255
    steps = values.astype(np.float64) + (128 if kind == "int8" else 0)
    return (steps * np.where(step > 0, step, 1) + low).astype(np.float32)


def quantization_ranges(calibration: Any) -> np.ndarray:
    """Each dimension's [low, high] over the ``calibration`` vectors (N, D): (2, D) float32, what int8 / uint8 codes
    are relative to (keep it to quantise queries like the corpus)."""
    values = _matrix(calibration, "calibration")
    if len(values) == 0:
        raise PoolkitError("`calibration` holds no vectors: pass some, or the ranges themselves")
    return np.stack([values.min(axis=0), values.max(axis=0)])


def _matrix(vectors: Any, name: str) -> np.ndarray:
    if hasattr(vectors, "detach"):  # a torch tensor
        vectors = vectors.detach().cpu().float().numpy()
    values = np.asarray(vectors, dtype=np.float32)
    if values.ndim != 2:
        raise PoolkitError(f"`{name}` must be a matrix (N, D) of vectors, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise PoolkitError(f"`{name}` holds NaN or inf: quantise finite vectors only")
    return values


def _ranges(ranges: Any, dims: int) -> np.ndarray:
    values = np.asarray(ranges, dtype=np.float32)
    if values.shape != (2, dims):
        raise PoolkitError(f"`ranges` must be (2, {dims}): each dimension's low and high, got shape {values.shape}")
    return values
