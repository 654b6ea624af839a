"""Residual topologies (Liu & Jiang, arXiv 2601.07310): the CBAM chain A(x) = SA(CA(x)) added back to its input.
The paper credits the identity path with steadier gradients at every data scale."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from .primitives import Gate
from .registry import Block, register_block
from .sequential import ChannelThenSpatial


class ResidualChain(Block):
    """x plus a CBAM chain SA(CA(x)) with reduction r and kernel k; subclasses scale the chain."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels)
        self.reduction, self.kernel_size = reduction, kernel_size
        self.chain = ChannelThenSpatial(channels, reduction, kernel_size)


@register_block("residual", "residual")
class Residual(ResidualChain):
    """x + SA(CA(x))."""

    def attend(self, x: Tensor) -> Tensor:
        return x + self.chain(x)


@register_block("residual_scaled", "residual")
class ResidualScaled(ResidualChain):
    """x + beta * SA(CA(x)), one learned scalar beta starting at ``beta_init`` (default 1: the plain residual block
    at the start; 0 would start at the identity, whose chain gets no gradient until beta moves)."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7, beta_init: float = 1.0) -> None:
        super().__init__(channels, reduction, kernel_size)
        if isinstance(beta_init, bool) or not isinstance(beta_init, (int, float)):
            raise PoolkitError(f"beta_init must be a number, got {beta_init!r}")
        self.beta_init = beta_init
        self.beta = nn.Parameter(torch.tensor(float(beta_init)))

    def attend(self, x: Tensor) -> Tensor:
        return x + self.beta * self.chain(x)


@register_block("residual_gated", "residual")
class ResidualGated(ResidualChain):
    """x + t * SA(CA(x)) with an input-dependent per-channel gate t = sigmoid(GA(x))."""

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7) -> None:
        super().__init__(channels, reduction, kernel_size)
        self.gate = Gate(channels, channels, reduction)

    def attend(self, x: Tensor) -> Tensor:
        return x + self.gate(x).sigmoid()[:, :, None, None] * self.chain(x)
