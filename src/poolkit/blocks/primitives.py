"""The attentions the topologies combine (Woo et al., CBAM, ECCV 2018; Liu & Jiang, arXiv 2601.07310):

- channel attention CA(x) = x * sigmoid(MLP(GAP x) + MLP(GMP x)), one MLP C -> C/r -> C (ReLU) for both;
- spatial attention SA(x) = x * sigmoid(conv_k([mean_c x; max_c x])), a k x k conv from 2 maps to 1, no bias;
- a gate GA(x) = MLP(GAP x), C -> C/r -> outputs: logits, which the topologies squash with a sigmoid or softmax.

The hidden width is max(1, C // r) (a narrow stage with a large r keeps one unit). Weights keep PyTorch's default
initialisation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from ..pooling.registry import check_positive_int
from .registry import Block, register_block


def check_kernel(value: object, what: str = "kernel_size") -> int:
    """An odd positive int (odd so that 'same' padding keeps H and W)."""
    if check_positive_int(value, what) % 2 == 0:
        raise PoolkitError(f"{what} must be odd (the map keeps its size), got {value!r}")
    return value


def mlp(channels: int, reduction: int, outputs: int) -> nn.Sequential:
    """Linear C -> max(1, C // r) -> ReLU -> Linear -> ``outputs``."""
    hidden = max(1, channels // check_positive_int(reduction, "reduction"))
    return nn.Sequential(nn.Linear(channels, hidden), nn.ReLU(), nn.Linear(hidden, outputs))


@register_block("ca", "reference", "channel")
class ChannelAttention(Block):
    """CA(x) = x * sigmoid(MLP(GAP x) + MLP(GMP x)) (CBAM's channel module), one shared MLP with reduction r."""

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__(channels)
        self.reduction = reduction
        self.mlp = mlp(channels, reduction, channels)

    def weights(self, x: Tensor) -> Tensor:
        """sigmoid(MLP(GAP x) + MLP(GMP x)): (B, C, 1, 1)."""
        logits = self.mlp(x.mean((2, 3))) + self.mlp(x.amax((2, 3)))
        return logits.sigmoid()[:, :, None, None]

    def attend(self, x: Tensor) -> Tensor:
        return x * self.weights(x)


def channel_pool(x: Tensor) -> Tensor:
    """[mean over channels; max over channels]: (B, C, H, W) -> (B, 2, H, W)."""
    return torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], dim=1)


@register_block("sa", "reference", "spatial")
class SpatialAttention(Block):
    """SA(x) = x * sigmoid(conv_k([mean_c x; max_c x])) (CBAM's spatial module): a k x k conv, 2 maps -> 1, no bias."""

    def __init__(self, channels: int, kernel_size: int = 7) -> None:
        super().__init__(channels)
        self.kernel_size = check_kernel(kernel_size)
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)

    def weights(self, x: Tensor) -> Tensor:
        """sigmoid(conv_k([mean_c x; max_c x])): (B, 1, H, W)."""
        return self.conv(channel_pool(x)).sigmoid()

    def attend(self, x: Tensor) -> Tensor:
        return x * self.weights(x)


class Gate(nn.Module):
    """GA(x) = MLP(GAP x): (B, C, H, W) -> logits (B, outputs); C -> max(1, C // r) -> outputs."""

    def __init__(self, channels: int, outputs: int, reduction: int = 16) -> None:
        super().__init__()
        self.mlp = mlp(channels, reduction, outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp(x.mean((2, 3)))

    def branch_weights(self, x: Tensor, branches: int) -> Tensor:
        """Per-channel softmax weights over ``branches`` (the gate has ``branches * C`` outputs, branch-major):
        (branches, B, C, 1, 1)."""
        weights = self(x).view(len(x), branches, -1).softmax(1)
        return weights.permute(1, 0, 2)[..., None, None]
