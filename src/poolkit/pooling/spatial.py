"""Poolers for image feature maps (B, C, H, W): avgmax and flex (Simple Auxiliary Classifiers, the loss flex comes
with: ``poolkit.nn.AuxiliaryClassifiers``).

Every token pooler takes a map through Pooler's adapter (the H*W positions are its tokens), so the classic
spatial poolers are registry names of token poolers, not classes of their own: ``gap`` = mean, ``gmp`` = max,
``catavgmax`` = mean_max (timm's concatenation of average and max), ``attention2d`` = gated_attention,
``adapool2d`` = adapool; gem and lse serve tokens and maps alike.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..errors import PoolkitError
from . import masking
from .base import Pooler
from .registry import check_positive_int
from .spec import register_aliases, register_pooler
from .statistics import MeanMaxPooler

register_aliases("mean", "gap", "global_avg")
register_aliases("max", "gmp", "global_max")
register_aliases("mean_max", "catavgmax")
register_aliases("gated_attention", "attention2d")
register_aliases("adapool", "adapool2d")


@register_pooler("avgmax")
class AvgMaxPooler(MeanMaxPooler):
    """The average of mean and max over the valid positions, 0.5 * (avg + max): (B, C, H, W) -> (B, C).

    timm's ``adaptive_avgmax_pool2d`` (its ``catavgmax`` is the concatenation: poolkit's ``mean_max``).
    Weights are mean_max's: half the uniform weights, half the share of channels each position wins.
    """

    def __init__(self, hidden_size: int, *, on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        self.output_dim = hidden_size

    def pool(self, x: Tensor, mask: Tensor):
        both, weights = super().pool(x, mask)
        return _average_halves(both), weights

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return _average_halves(super().pool_without_weights(x, mask))


def _average_halves(both: Tensor) -> Tensor:
    """(B, 2C) [mean, max] -> (B, C) 0.5 * (mean + max)."""
    mean, maximum = both.chunk(2, dim=-1)
    return 0.5 * (mean + maximum)


@register_pooler("flex", "flexpool", "flex_pooling")
class FlexPooler(Pooler):
    """FlexPooling: a learned weighted average over positions, softmax(logits) over the valid ones.

    (B, C, H, W) -> (B, C). Ali, Alsuwaidi & Khan, "FlexPooling with Simple Auxiliary Classifiers in Deep
    Networks" (VISAPP 2023). One logit per position of a ``height`` x ``width`` map (``per_channel``: one map
    per channel), initialised to zero: the softmax is then 1/n at each of the n valid positions, the very
    weights of ``gap``, summed by the same product, so flex starts as gap exactly. Each image gets the logit
    map resized bilinearly (``align_corners=False``, as ``F.interpolate``; no antialiasing) to its own valid
    extent, the rows and columns that hold a valid position: a padded image is pooled as it is unpadded,
    wherever the padding sits. Token states (B, T, D) are read as a 1 x T map (each row's real tokens
    spanning the logit map's width). ``l2`` sets the penalty :meth:`regularization` returns (the trainer
    adds it to the loss); ``weight_dropout`` drops softmax weights in training.
    """
    option_docs = {
        "height": "the height of the learned logit map (maps of another size get it resized bilinearly)",
        "width": "the width of the learned logit map (tokens (B, T, D) are read as a 1 x T map)",
        "per_channel": "one logit map per channel (True) or one shared by all channels",
        "l2": "the coefficient of the L2 penalty on the logits that regularization() returns",
        "weight_dropout": "dropout on the softmax weights (training only)",
    }

    positional = True

    def __init__(self, hidden_size: int, *, height: int = 7, width: int = 7, per_channel: bool = False,
                 l2: float = 0.0, weight_dropout: float = 0.0, on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        check_positive_int(height, "flex: height")
        check_positive_int(width, "flex: width")
        if not l2 >= 0:
            raise PoolkitError(f"flex: l2 must be >= 0, got {l2!r}")
        if not 0 <= weight_dropout < 1:
            raise PoolkitError(f"flex: weight_dropout must be in [0, 1), got {weight_dropout!r}")
        self.logits = nn.Parameter(torch.zeros(hidden_size if per_channel else 1, height, width))
        self.l2 = l2
        self.weight_dropout = weight_dropout

    def regularization(self) -> Tensor:
        """The L2 penalty ``l2 * sum(logits ** 2)`` to add to the training loss (0 when ``l2`` is 0)."""
        return self.l2 * self.logits.pow(2).sum()

    def position_logits(self, valid: Tensor) -> Tensor:
        """Each position's logit, the logit map resized bilinearly to its row's valid extent: valid (B, H, W) ->
        (B, K, H*W), K = 1 or C, in the compute dtype (padded positions get some logit, to be masked)."""
        logits = masking.widen(self.logits)
        y0, y1, fy = _source_points(valid.any(dim=2), logits.shape[1], logits.dtype)  # (B, H) each
        x0, x1, fx = _source_points(valid.any(dim=1), logits.shape[2], logits.dtype)  # (B, W) each

        def across(rows: Tensor) -> Tensor:  # the logits of the rows ``rows`` (B, H) interpolated across: (K, B, H, W)
            left, right = logits[:, rows[:, :, None], x0[:, None, :]], logits[:, rows[:, :, None], x1[:, None, :]]
            return left + (right - left) * fx[:, None, :]

        top, bottom = across(y0), across(y1)
        return (top + (bottom - top) * fy[:, :, None]).transpose(0, 1).flatten(2)

    def pool(self, x: Tensor, mask: Tensor, grid: tuple[int, int] | None = None):
        batch, length, _ = x.shape
        logits = self.position_logits(mask.view(batch, *((1, length) if grid is None else grid)))
        weights = masking.masked_softmax(logits, mask[:, None, :])  # (B, K, P)
        if self.weight_dropout:
            weights = F.dropout(weights, self.weight_dropout, self.training)
        if weights.shape[1] == 1:  # one weight row: the product gap uses, so that zero logits give gap exactly
            return masking.masked_weighted_sum(x, weights[:, 0]), weights[:, 0]
        pooled = torch.einsum("bcp,bpc->bc", weights.to(masking.compute_dtype(x.dtype)), masking.widen(x))
        return pooled, weights.mean(dim=1)


def _source_points(valid: Tensor, size: int, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """Bilinear source points (``align_corners=False``) on one axis of ``size`` logits for each index's rank among
    its row's n valid ones (a resize from ``size`` to n): valid (B, N) -> lower index, upper index, upper weight."""
    count = valid.sum(dim=1, keepdim=True).clamp(min=1)
    rank = valid.cumsum(dim=1) - 1
    source = ((rank + 0.5) * (size / count.to(dtype)) - 0.5).clamp(min=0)
    lower = source.long().clamp(max=size - 1)
    return lower, (lower + 1).clamp(max=size - 1), source - lower
