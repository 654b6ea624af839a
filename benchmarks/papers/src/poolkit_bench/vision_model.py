"""The vision benchmark's CNN and its training: conv stages -> a poolkit pooler on the last map -> Linear.

Each stage is conv3x3 -> BatchNorm -> ReLU, with a 2x2 max-pool between stages (28x28 -> 14x14 -> 7x7 for
Fashion-MNIST with the default 32-64-128 widths). Optional Simple Auxiliary Classifiers (Ali et al., VISAPP
2023) flex-pool the earlier stages' maps and add their losses while training.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poolkit.nn import AuxiliaryClassifiers


def map_sizes(height: int, width: int, stages: int) -> list[tuple[int, int]]:
    """Each stage's map size: halved (floor, as max-pool) before every stage but the first."""
    return [(height >> i, width >> i) for i in range(stages)]


class Backbone(nn.Module):
    """conv3x3-BN-ReLU stages of ``widths`` channels, max-pool 2x2 between: (B, in_channels, H, W) -> every stage's
    map. Inputs are standardised by the training pool's pixel ``mean`` and ``std``."""

    def __init__(self, widths: Sequence[int] = (32, 64, 128), mean: float = 0.0, std: float = 1.0,
                 in_channels: int = 1) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(float(mean)))
        self.register_buffer("std", torch.tensor(float(std)))
        channels = [in_channels, *widths]
        self.stages = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())
            for c_in, c_out in zip(channels, channels[1:]))

    def forward(self, x: Tensor) -> list[Tensor]:
        maps, h = [], (x - self.mean) / self.std
        for i, stage in enumerate(self.stages):
            h = stage(F.max_pool2d(h, 2) if i else h)
            maps.append(h)
        return maps


class PooledHead(nn.Module):
    """A pooler on the last map, then a Linear classifier: (B, C, H, W) -> (B, num_classes)."""

    def __init__(self, pooler: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.pooler = pooler
        self.linear = nn.Linear(int(pooler.output_dim), num_classes)

    def forward(self, maps: Tensor) -> Tensor:
        return self.linear(self.pooler(maps))

    def loss(self, maps: Tensor, targets: Tensor, progress: float) -> Tensor:
        """Cross-entropy plus the pooler's own penalty (flex's ``l2``), if it has one."""
        return F.cross_entropy(self(maps), targets) + _penalty(self.pooler)


class VisionModel(nn.Module):
    """Backbone -> :class:`PooledHead` on the last map; ``aux`` (SAC) sees the earlier maps in training only."""

    def __init__(self, backbone: Backbone, head: PooledHead, aux: AuxiliaryClassifiers | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.aux = aux

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x)[-1])

    def loss(self, x: Tensor, targets: Tensor, progress: float) -> Tensor:
        """The head's loss, plus the auxiliary classifiers' weighted losses and penalties when there are some."""
        maps = self.backbone(x)
        loss = self.head.loss(maps[-1], targets, progress)
        if self.aux is not None:
            loss = loss + self.aux(maps[:-1], targets, progress) + self.aux.regularization()
        return loss


def _penalty(pooler: nn.Module) -> Tensor | float:
    regularization = getattr(pooler, "regularization", None)
    return regularization() if regularization is not None else 0.0


@dataclass(frozen=True)
class FitResult:
    """Test accuracy of the best-validation epoch (scored once), and the per-epoch curves."""

    test_accuracy: float
    best_epoch: int
    train_loss: list[float]
    val_accuracy: list[float]


def accuracy(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 128) -> float:
    """Fraction of ``x`` whose argmax class is ``y``, in eval mode."""
    model.eval()
    with torch.no_grad():
        right = sum(int((model(xb).argmax(1) == yb).sum()) for xb, yb in zip(x.split(batch_size), y.split(batch_size)))
    return right / len(y)


def fit(model: nn.Module, train: tuple[Tensor, Tensor], val: tuple[Tensor, Tensor] | None,
        test: tuple[Tensor, Tensor] | None, *, epochs: int, batch_size: int, lr: float, weight_decay: float, seed: int,
        augment: Callable[[Tensor, torch.Generator], Tensor] | None = None) -> FitResult:
    """AdamW with a one-cycle schedule over ``epochs`` on shuffled minibatches (order and augmentation drawn from
    ``seed``); keeps the epoch with the best validation accuracy (the first of ties; the last epoch when ``val`` is
    None) and scores the test set once, with it (accuracy NaN when ``test`` is None). ``model.loss(x, y, progress)``
    gives the training loss."""
    gen = torch.Generator().manual_seed(seed)
    (x, y), steps = train, -(-len(train[1]) // batch_size)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * steps, pct_start=0.2)
    best = (-1.0, -1, None if val is None else copy.deepcopy(model.state_dict()))
    losses, val_accuracy = [], []
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for step, idx in enumerate(torch.randperm(len(y), generator=gen).split(batch_size)):
            xb = x[idx.to(x.device)]
            if augment is not None:
                xb = augment(xb, gen)
            loss = model.loss(xb, y[idx.to(y.device)], (epoch * steps + step) / (epochs * steps))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(idx)
        losses.append(total / len(y))
        if val is None:
            best = (float("nan"), epoch, None)
            continue
        val_accuracy.append(accuracy(model, *val))
        if val_accuracy[-1] > best[0]:
            best = (val_accuracy[-1], epoch, copy.deepcopy(model.state_dict()))
    if best[2] is not None:
        model.load_state_dict(best[2])
    return FitResult(float("nan") if test is None else accuracy(model, *test), best[1], losses, val_accuracy)


def map_weights(pooler: nn.Module, maps: Tensor) -> Tensor:
    """The pooler's weights over each map's positions, (B, C, h, w) -> (B, h, w) (eval mode, no gradients)."""
    pooler.eval()
    with torch.no_grad():
        return pooler(maps, return_weights=True)[1]


def encode(backbone: Backbone, x: Tensor, batch_size: int = 128) -> Tensor:
    """The frozen backbone's last map of every image (eval mode, no gradients): (N, C, h, w)."""
    backbone.eval()
    with torch.no_grad():
        return torch.cat([backbone(xb)[-1] for xb in x.split(batch_size)])
