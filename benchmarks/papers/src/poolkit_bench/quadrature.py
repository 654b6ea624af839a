"""Discretisation invariance of quadrature-weighted pooling: a smooth function sampled on finer and finer grids.

A function h: [0, 1] -> R^4 is sampled at n points of a uniform, a random and a clustered grid; mean pooling and
attention pooling (a fixed, seeded scorer) pool the samples with the trapezoid rule's weights
(:func:`poolkit.trapezoid_weights`) and without. The weighted forms converge to the integral-defined values,
integral of h and integral of e^s h / integral of e^s (s the scorer's logit), at the trapezoid rule's rate
O(n^-2) on every grid; the unweighted ones converge to averages under the sampling density, which differ from
grid to grid (Calvello et al., "Continuum Attention for Neural Operators", arXiv 2406.06486).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from poolkit.pooling import get_pooler
from poolkit.pooling.quadrature import trapezoid_weights

GRIDS = ("uniform", "random", "clustered")
#: The exact mean over [0, 1] of each feature of :func:`smooth_features`.
FEATURE_MEANS = (0.5, 1 / 3, math.e - 1, 2 / math.pi)


def smooth_features(x: Tensor) -> Tensor:
    """h(x) = (sin(2 pi x) + x, x^2, e^x, cos(pi x / 2)): positions (..., n) -> samples (..., n, 4)."""
    return torch.stack([torch.sin(2 * math.pi * x) + x, x ** 2, torch.exp(x), torch.cos(math.pi * x / 2)], dim=-1)


def sample_grid(kind: str, n: int, generator: torch.Generator | None = None) -> Tensor:
    """n >= 2 sample positions in [0, 1], both ends included: ``uniform`` (equal steps), ``random`` (the inner
    n - 2 drawn uniformly) or ``clustered`` (u^2 on equal steps u: dense near 0, sparse near 1). float64 (n,)."""
    steps = torch.linspace(0, 1, n, dtype=torch.float64)
    if kind == "uniform":
        return steps
    if kind == "clustered":
        return steps ** 2
    if kind == "random":
        inner = torch.rand(n - 2, generator=generator, dtype=torch.float64)
        return torch.cat([steps[:1], inner.sort().values, steps[-1:]])
    raise ValueError(f"grid must be one of {GRIDS}, got {kind!r}")


def attention_reference(pooler: torch.nn.Module, points: int = 200_001) -> np.ndarray:
    """integral of e^s h / integral of e^s for the pooler's fixed scorer s, by Simpson's rule on a fine grid (4,)."""
    from scipy.integrate import simpson

    x = torch.linspace(0, 1, points, dtype=torch.float64)
    with torch.no_grad():
        h = smooth_features(x)
        s = pooler.score(h).squeeze(-1)
    e = torch.exp(s - s.max()).numpy()
    return simpson(e[:, None] * h.numpy(), x=x.numpy(), axis=0) / simpson(e, x=x.numpy())


def study_poolers(seed: int = 0) -> dict[str, torch.nn.Module]:
    """The poolers of the study, in float64: mean, and attention with a scorer seeded by ``seed``."""
    torch.manual_seed(seed)
    return {"mean": get_pooler("mean", 4), "attention": get_pooler("attention", 4, attn_size=8).double().eval()}


def convergence(sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024), seed: int = 0) -> list[dict]:
    """Absolute error (max over the 4 features) of each pooler, weighted or not, on each grid and size: rows of
    {pooler, grid, n, weighted, error}. The attention pooler is seeded by ``seed``; the random grids too."""
    poolers = study_poolers(seed)
    references = {"mean": np.array(FEATURE_MEANS), "attention": attention_reference(poolers["attention"])}
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for grid in GRIDS:
        for n in sizes:
            x = sample_grid(grid, n, generator)[None]
            h, w = smooth_features(x), trapezoid_weights(x)
            for name, pooler in poolers.items():
                with torch.no_grad():
                    for weighted in (True, False):
                        pooled = pooler(h, quadrature_weights=w if weighted else None)[0].numpy()
                        rows.append({"pooler": name, "grid": grid, "n": n, "weighted": weighted,
                                     "error": float(np.abs(pooled - references[name]).max())})
    return rows


def convergence_rate(rows: list[dict], pooler: str, grid: str, weighted: bool = True) -> float:
    """The least-squares slope of log error against log n for one pooler and grid (-2: the trapezoid rate)."""
    picked = [r for r in rows if r["pooler"] == pooler and r["grid"] == grid and r["weighted"] == weighted]
    return float(np.polyfit(np.log([r["n"] for r in picked]), np.log([r["error"] for r in picked]), 1)[0])
