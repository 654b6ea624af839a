"""Quadrature weights: pooling the samples of a function so that the result does not depend on where it was sampled.

Continuum attention (Calvello, Kovachki, Levine & Stuart, "Continuum Attention for Neural Operators", arXiv
2406.06486) reads the tokens as samples f(x_j) of a function on a domain and weights each by its quadrature
weight w_j: attention becomes softmax_j(s_j + log w_j), a discretisation of softmax over the domain, and mean
pooling sum_j w_j f(x_j) / sum_j w_j, of (1 / |Omega|) * integral of f. As the samples get denser, uniform or not,
both converge to the same integral-defined value; the unweighted forms converge to an average under the
sampling density instead. ``pooler(x, mask, quadrature_weights=w)`` takes the weights (B, T); this module makes
them (:func:`trapezoid_weights`) and checks them for :class:`base.Pooler`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import PoolkitError
from . import fast, masking


def trapezoid_weights(positions: Tensor, mask: Tensor | None = None) -> Tensor:
    """The composite trapezoid rule's weights for 1-D sample positions: (B, T) -> (B, T).

    The samples of a row need not be sorted (a set): each real sample gets half the distance between its two
    neighbours in position order, the first and last half the distance to their one neighbour, so
    ``sum_j w_j g(x_j)`` is the trapezoid rule's integral of g over [min x, max x] (error O(h^2) for smooth g).
    Padded positions (``mask`` False) get 0, a row with one real sample gets weight 1 there, coinciding
    positions share their interval. In more dimensions: for a tensor-product grid, multiply the weights of each
    axis' coordinates (the product rule); scattered points in 2-D or more need a mesh (cell areas), which
    poolkit does not build, so positions (B, T, d) are refused.
    """
    if not isinstance(positions, Tensor) or not positions.is_floating_point():
        raise PoolkitError(f"trapezoid_weights: positions must be a floating tensor (B, T), got "
                           f"{type(positions).__name__ if not isinstance(positions, Tensor) else positions.dtype}")
    if positions.dim() != 2:
        raise PoolkitError(f"trapezoid_weights takes 1-D positions (B, T), got shape {tuple(positions.shape)}; on a "
                           "tensor-product grid multiply the weights of each axis' coordinates (the product rule)")
    mask = torch.ones_like(positions, dtype=torch.bool) if mask is None else mask.bool()
    if mask.shape != positions.shape:
        raise PoolkitError(f"trapezoid_weights: mask shape {tuple(mask.shape)} does not match positions "
                           f"{tuple(positions.shape)}")
    # Padded samples sort to the end of their row; a gap counts only between two real neighbours.
    ordered, order = torch.where(mask, positions, torch.inf).sort(dim=1)
    real = mask.sum(dim=1, keepdim=True) > torch.arange(positions.shape[1], device=positions.device)
    gaps = torch.where(real[:, 1:], ordered.diff(dim=1), 0)
    padded_gaps = torch.nn.functional.pad(gaps, (1, 1))
    in_order = (padded_gaps[:, :-1] + padded_gaps[:, 1:]) / 2
    alone = real & (mask.sum(dim=1, keepdim=True) == 1)  # no interval to integrate over: the lone value is the mean
    in_order = torch.where(alone, 1.0, in_order)
    return torch.zeros_like(positions).scatter(1, order, in_order)


def checked_weights(pooler: Any, weights: Any, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Quadrature weights (B, T) for ``pooler`` (one that takes them) checked against ``mask`` (B, T), in their
    compute dtype, and the mask with every zero-weight position made padding (so no log 0 is taken). Image maps may
    give them as (B, H, W)."""
    if not isinstance(weights, Tensor) or not weights.is_floating_point():
        raise PoolkitError(f"{pooler.name}: quadrature_weights must be a floating tensor (B, T), got "
                           f"{weights.dtype if isinstance(weights, Tensor) else type(weights).__name__}")
    if weights.dim() == 3:  # an image map's (B, H, W), flattened like the map
        weights = weights.flatten(1)
    if weights.shape != mask.shape:
        raise PoolkitError(f"{pooler.name}: quadrature_weights shape {tuple(weights.shape)} does not match the "
                           f"tokens (B, T) = {tuple(mask.shape)}; make them with poolkit.trapezoid_weights(positions)")
    weights = torch.where(mask, masking.widen(weights.to(mask.device)), 0)  # padding's weights are never read
    if not fast.transformed() and not bool((weights.isfinite() & (weights >= 0)).all()):
        raise PoolkitError(f"{pooler.name}: quadrature_weights must be finite and >= 0 at real tokens (0 drops a "
                           "sample)")
    return weights, mask & (weights > 0)
