"""Parallel topologies (Liu & Jiang, arXiv 2601.07310): CA(x) and SA(x) computed side by side and fused.

Choices where the paper's exact form is not public: the input-dependent gates are per channel (a GAP-fed MLP gives
one logit per channel and branch); both orders of the bidirectional block share one CA and one SA (the same two
attentions, composed both ways). Gates keep PyTorch's default initialisation, so they start near, not at, equal
weights; the learnable fusion starts exactly at the plain average (g = 0).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .primitives import ChannelAttention, Gate, SpatialAttention
from .registry import Block, register_block


class Branches(Block):
    """A CA with reduction r and an SA with kernel k side by side; subclasses fuse them."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels)
        self.reduction, self.kernel_size = reduction, kernel_size
        self.ca = ChannelAttention(channels, reduction)
        self.sa = SpatialAttention(channels, kernel_size)


@register_block("parallel_avg", "parallel")
class ParallelAverage(Branches):
    """(CA(x) + SA(x)) / 2."""

    def attend(self, x: Tensor) -> Tensor:
        return (self.ca(x) + self.sa(x)) / 2


@register_block("parallel_learnable", "parallel")
class ParallelLearnable(Branches):
    """sigmoid(g) CA(x) + (1 - sigmoid(g)) SA(x), one learned scalar g, initialised to 0 (the plain average)."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels, reduction, kernel_size)
        self.g = nn.Parameter(torch.zeros(()))

    def attend(self, x: Tensor) -> Tensor:
        share = self.g.sigmoid()
        return share * self.ca(x) + (1 - share) * self.sa(x)


@register_block("bidirectional", "parallel")
class Bidirectional(Branches):
    """SA(CA(x)) + CA(SA(x)), the same CA and SA in both orders."""

    def attend(self, x: Tensor) -> Tensor:
        return self.sa(self.ca(x)) + self.ca(self.sa(x))


@register_block("bidirectional_gated", "parallel")
class BidirectionalGated(Branches):
    """t * B(x) + (1 - t) * x with B(x) = SA(CA(x)) + CA(SA(x)) and a per-channel gate t = sigmoid(GA(x))."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels, reduction, kernel_size)
        self.gate = Gate(channels, channels, reduction)

    def attend(self, x: Tensor) -> Tensor:
        share = self.gate(x).sigmoid()[:, :, None, None]
        both = self.sa(self.ca(x)) + self.ca(self.sa(x))
        return share * both + (1 - share) * x


@register_block("parallel_gated", "parallel")
class ParallelGated(Branches):
    """w_ca CA(x) + w_sa SA(x) with (w_ca, w_sa) = softmax(GA(x)) per channel: dynamic gating of two branches."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels, reduction, kernel_size)
        self.gate = Gate(channels, 2 * channels, reduction)

    def attend(self, x: Tensor) -> Tensor:
        w_ca, w_sa = self.gate.branch_weights(x, 2)
        return w_ca * self.ca(x) + w_sa * self.sa(x)


@register_block("parallel_gated3", "parallel")
class ParallelGatedThree(Branches):
    """w_x x + w_ca CA(x) + w_sa SA(x) with (w_x, w_ca, w_sa) = softmax(GA(x)) per channel."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels, reduction, kernel_size)
        self.gate = Gate(channels, 3 * channels, reduction)

    def attend(self, x: Tensor) -> Tensor:
        w_x, w_ca, w_sa = self.gate.branch_weights(x, 3)
        return w_x * x + w_ca * self.ca(x) + w_sa * self.sa(x)
