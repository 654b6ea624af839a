"""The MIL benchmark's model and its training: an instance MLP on the packed instances of a batch of bags, a poolkit
pooler over each bag's instances (padded only for the pooler), a linear classifier giving one logit per bag.

The instance network is the one of Ilse, Tomczak & Welling (ICML 2018) for MUSK / ELEPHANT: fc-256 + ReLU,
fc-128 + ReLU; the pooler sees 128-dim instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poolkit.pooling import build_pooler
from .mil_data import Bags


def pad_bags(packed: Tensor, offsets: Tensor) -> tuple[Tensor, Tensor]:
    """Packed instances (N, D) of bags ``offsets`` (B + 1,) apart -> padded (B, T, D) with T the largest bag, and
    the (B, T) bool mask of real instances. Differentiable (one index_put)."""
    sizes = offsets.diff()
    bag = torch.repeat_interleave(torch.arange(len(sizes), device=packed.device), sizes)
    position = torch.arange(len(packed), device=packed.device) - offsets[:-1][bag]
    longest = int(sizes.max()) if len(sizes) else 0
    padded = packed.new_zeros(len(sizes), longest, packed.shape[1]).index_put((bag, position), packed)
    return padded, torch.arange(longest, device=packed.device)[None, :] < sizes[:, None]


class MILModel(nn.Module):
    """Instance MLP -> pooler over each bag -> Linear(pooler.output_dim, 1): packed (N, F) + offsets -> (B,) logits.

    ``pooler``: a poolkit pooler spec (name or dict), built for the MLP's last width after the MLP, so that the MLP's
    initial weights do not depend on the pooler."""

    def __init__(self, in_features: int, pooler: str | dict, widths: Sequence[int] = (256, 128)) -> None:
        super().__init__()
        dims = [in_features, *widths]
        self.instance = nn.Sequential(*[layer for a, b in zip(dims, dims[1:])
                                        for layer in (nn.Linear(a, b), nn.ReLU())])
        self.pooler = build_pooler(pooler, hidden_size=widths[-1])
        self.classifier = nn.Linear(int(self.pooler.output_dim), 1)

    def forward(self, features: Tensor, offsets: Tensor) -> Tensor:
        # The MLP runs once per real instance; only its (N, 128) output is padded, for the pooler.
        return self.classifier(self.pooler(*pad_bags(self.instance(features), offsets))).squeeze(-1)


@dataclass(frozen=True)
class Checkpoint:
    """Scores of the model after ``epoch`` epochs on the bags it was evaluated on."""

    epoch: int
    accuracy: float
    loss: float


def predict(model: MILModel, bags: Bags) -> Tensor:
    """Positive-class probabilities of every bag (eval mode, no gradients): (B,)."""
    model.eval()
    with torch.no_grad():
        return torch.sigmoid(model(bags.features, bags.offsets))


def score(model: MILModel, bags: Bags) -> Checkpoint:
    """Accuracy (threshold 1/2) and mean log-loss of the model on ``bags`` (epoch left 0)."""
    probability = predict(model, bags)
    labels = bags.labels.float()
    loss = F.binary_cross_entropy(probability.clamp(1e-7, 1 - 1e-7), labels).item()
    correct = int(((probability > 0.5).float() == labels).sum())
    return Checkpoint(0, correct / len(labels), loss)


def fit(model: MILModel, train: Bags, *, epochs: int, batch_size: int, lr: float, weight_decay: float, seed: int,
        evaluate: Bags | None = None, eval_every: int = 10) -> list[Checkpoint]:
    """Adam (betas 0.9 / 0.999, L2 weight decay, as the paper) on shuffled minibatches of ``batch_size`` bags, the
    order drawn from ``seed``; binary cross-entropy on the bag logits. Returns ``evaluate``'s scores after every
    ``eval_every`` epochs (and the last), none without it."""
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay, fused=True)
    curve = []
    for epoch in range(1, epochs + 1):
        model.train()
        for batch in torch.randperm(len(train), generator=gen).split(batch_size):
            part = train.subset(batch)
            loss = F.binary_cross_entropy_with_logits(model(part.features, part.offsets), part.labels.float())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if evaluate is not None and (epoch % eval_every == 0 or epoch == epochs):
            scores = score(model, evaluate)
            curve.append(Checkpoint(epoch, scores.accuracy, scores.loss))
    return curve


def auc(labels: np.ndarray, probability: np.ndarray) -> float:
    """ROC AUC of the bag probabilities (NaN when the bags hold one class only)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, probability)) if len(np.unique(labels)) == 2 else float("nan")
