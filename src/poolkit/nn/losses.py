"""Training-only modules that add a loss: Simple Auxiliary Classifiers (Ali et al. 2023, the "SAC" of FlexPooling)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn
from torch.nn import functional as F

from ..errors import PoolkitError
from ..pooling.registry import check_positive_int
from ..pooling.spec import get_pooler


class AuxiliaryClassifiers(nn.Module):
    """Simple Auxiliary Classifiers (SAC, Ali et al. 2023): extra supervision on a CNN's earlier stages.

    Each earlier stage's map (B, C_i, H_i, W_i) is flex-pooled to (B, C_i) and classified by its own
    Linear(C_i, num_classes); calling the module with the maps, the targets and ``progress`` (the fraction
    of training done, in [0, 1]) returns sum_i weight_i * s(progress) * cross_entropy(logits_i, targets),
    to add to the main head's loss. ``schedule``: "constant" (s = 1) or "linear" (s = 1 - progress, 0 at
    the end of training). ``weights``: one for all stages or one per stage (default 0.3, GoogLeNet's).
    Training only: inference uses the main head, and this module is not called. ``flex_options`` go to
    every flex pooler (e.g. ``l2``); :meth:`regularization` sums their penalties.
    """

    SCHEDULES = ("constant", "linear")

    def __init__(self, channels: Sequence[int], sizes: Sequence[tuple[int, int]], num_classes: int, *,
                 weights: float | Sequence[float] = 0.3, schedule: str = "constant",
                 flex_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        if len(channels) != len(sizes) or not channels:
            raise PoolkitError(f"AuxiliaryClassifiers: give one (H, W) size per stage: {len(channels)} channel counts "
                               f"but {len(sizes)} sizes")
        weights = [float(weights)] * len(channels) if isinstance(weights, (int, float)) else list(weights)
        if len(weights) != len(channels) or any(not w >= 0 for w in weights):
            raise PoolkitError(f"AuxiliaryClassifiers: weights must be one number >= 0 or one per stage "
                               f"({len(channels)}), got {weights!r}")
        if schedule not in self.SCHEDULES:
            raise PoolkitError(f"AuxiliaryClassifiers: schedule must be one of {self.SCHEDULES}, got {schedule!r}")
        check_positive_int(num_classes, "AuxiliaryClassifiers: num_classes")
        self.poolers = nn.ModuleList(get_pooler("flex", c, height=h, width=w, **(flex_options or {}))
                                     for c, (h, w) in zip(channels, sizes))
        self.heads = nn.ModuleList(nn.Linear(c, num_classes) for c in channels)
        self.weights = weights
        self.schedule = schedule

    def logits(self, maps: Sequence[Tensor]) -> list[Tensor]:
        """Each stage's class logits: maps (B, C_i, H_i, W_i) -> [(B, num_classes)]."""
        if len(maps) != len(self.heads):
            raise PoolkitError(f"AuxiliaryClassifiers was built for {len(self.heads)} stages but got {len(maps)} maps")
        return [head(pooler(m)) for pooler, head, m in zip(self.poolers, self.heads, maps)]

    def forward(self, maps: Sequence[Tensor], targets: Tensor, progress: float = 0.0) -> Tensor:
        if not 0 <= progress <= 1:
            raise PoolkitError(f"AuxiliaryClassifiers: progress is the fraction of training done, in [0, 1]; "
                               f"got {progress!r}")
        scale = 1 - progress if self.schedule == "linear" else 1.0
        losses = [F.cross_entropy(logits, targets) for logits in self.logits(maps)]
        return sum(w * scale * loss for w, loss in zip(self.weights, losses))

    def regularization(self) -> Tensor:
        """The flex poolers' L2 penalties, summed."""
        return sum(pooler.regularization() for pooler in self.poolers)
