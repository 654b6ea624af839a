"""Multi-scale topologies (Liu & Jiang, arXiv 2601.07310): spatial attention at several kernel sizes, or channel
attention at several reductions. The paper's recommendation for small data is a "Channel -> Multi-scale Spatial"
cascade; its exact multi-scale spatial module is not public here, so ``ca_msa`` uses one sigmoid over the summed
k x k convs (k = 3, 5, 7) of the [mean_c; max_c] maps, and ``ca_msa_gated`` the input-gated mix of separate SAs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from ..pooling.registry import check_positive_int
from .primitives import ChannelAttention, Gate, SpatialAttention, channel_pool, check_kernel
from .registry import Block, register_block


def check_scales(values: Sequence[int], what: str, check) -> tuple[int, ...]:
    """A non-empty sequence of distinct values, each passing ``check``, as a tuple."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise PoolkitError(f"{what} must be a non-empty list of ints, got {values!r}")
    if len(set(values)) != len(values):
        raise PoolkitError(f"{what} must be distinct, got {list(values)!r}")
    return tuple(check(value, what) for value in values)


@register_block("ca_msa", "multiscale")
class ChannelMultiScaleSpatial(Block):
    """The channel -> multi-scale spatial cascade the paper recommends below 1k images: y = CA(x), then
    y * sigmoid(sum_k conv_k([mean_c y; max_c y])) over ``kernel_sizes`` (3, 5, 7)."""

    def __init__(self, channels: int, reduction: int = 16, kernel_sizes: Sequence[int] = (3, 5, 7)) -> None:
        super().__init__(channels)
        self.reduction, self.kernel_sizes = reduction, check_scales(kernel_sizes, "kernel_sizes", check_kernel)
        self.ca = ChannelAttention(channels, reduction)
        self.convs = nn.ModuleList(nn.Conv2d(2, 1, k, padding=k // 2, bias=False) for k in self.kernel_sizes)

    def attend(self, x: Tensor) -> Tensor:
        y = self.ca(x)
        pooled = channel_pool(y)
        return y * sum(conv(pooled) for conv in self.convs).sigmoid()


@register_block("ca_msa_gated", "multiscale")
class ChannelGatedMultiScaleSpatial(Block):
    """y = CA(x), then sum_k w_k SA_k(y) with (w_k) = softmax(GA(y)) over the kernels (one weight per image and
    kernel), SA_k the spatial attention with a k x k conv, k in ``kernel_sizes`` (3, 5, 7)."""

    def __init__(self, channels: int, reduction: int = 16, kernel_sizes: Sequence[int] = (3, 5, 7)) -> None:
        super().__init__(channels)
        self.reduction, self.kernel_sizes = reduction, check_scales(kernel_sizes, "kernel_sizes", check_kernel)
        self.ca = ChannelAttention(channels, reduction)
        self.sas = nn.ModuleList(SpatialAttention(channels, k) for k in self.kernel_sizes)
        self.gate = Gate(channels, len(self.kernel_sizes), reduction)

    def attend(self, x: Tensor) -> Tensor:
        y = self.ca(x)
        weights = self.gate(y).softmax(1)
        return sum(weights[:, i, None, None, None] * sa(y) for i, sa in enumerate(self.sas))


@register_block("mca_sa", "multiscale")
class MultiScaleChannelSpatial(Block):
    """Multi-scale channel attention, then SA: y = x * mean_r sigmoid(MLP_r(GAP x) + MLP_r(GMP x)) over
    ``reductions`` (4, 8, 16, 32; one CA per reduction, weights averaged), then SA(y) with kernel k."""

    def __init__(self, channels: int, reductions: Sequence[int] = (4, 8, 16, 32), kernel_size: int = 7) -> None:
        super().__init__(channels)
        self.reductions = check_scales(reductions, "reductions", check_positive_int)
        self.kernel_size = kernel_size
        self.cas = nn.ModuleList(ChannelAttention(channels, r) for r in self.reductions)
        self.sa = SpatialAttention(channels, kernel_size)

    def attend(self, x: Tensor) -> Tensor:
        weights = torch.stack([ca.weights(x) for ca in self.cas]).mean(0)
        return self.sa(x * weights)
