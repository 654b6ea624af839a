"""Sequential topologies (Liu & Jiang, arXiv 2601.07310): channel (CA) and spatial (SA) attention applied one after
the other. A step repeated in a chain (CA->SA->CA) has its own weights each time: the paper does not say whether
they are shared; independent steps make each chain a plain composition of the reference blocks."""

from __future__ import annotations

from torch import Tensor, nn

from .primitives import ChannelAttention, SpatialAttention
from .registry import Block, register_block


class Chain(Block):
    """The steps of ``order`` ('c' = CA with reduction r, 's' = SA with kernel k) applied left to right."""

    order: str = ""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels)
        self.reduction, self.kernel_size = reduction, kernel_size
        build = {"c": lambda: ChannelAttention(channels, reduction),
                 "s": lambda: SpatialAttention(channels, kernel_size)}
        self.steps = nn.ModuleList(build[step]() for step in self.order)

    def attend(self, x: Tensor) -> Tensor:
        for step in self.steps:
            x = step(x)
        return x


@register_block("ca_sa", "sequential", "cbam")
class ChannelThenSpatial(Chain):
    """CBAM: SA(CA(x))."""

    order = "cs"


@register_block("sa_ca", "sequential")
class SpatialThenChannel(Chain):
    """CA(SA(x)): the order the paper finds steadier on fine-grained classes."""

    order = "sc"


@register_block("ca_sa_ca", "sequential")
class ChannelSpatialChannel(Chain):
    """CA2(SA(CA1(x))), CA1 and CA2 with their own weights."""

    order = "csc"


@register_block("sa_ca_sa", "sequential")
class SpatialChannelSpatial(Chain):
    """SA2(CA(SA1(x))), SA1 and SA2 with their own weights."""

    order = "scs"
