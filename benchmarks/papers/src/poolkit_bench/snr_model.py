"""The noise-robustness model and its training (Brothers, ICML 2025, Sec. 5.1 and the paper's code).

A pre-LayerNorm transformer encoder (final LayerNorm, no positional encoding, attention without bias,
GELU feed-forward with dropout on its output) over the vectors, a learned two-type embedding marking
position 0, a poolkit pooler, and -- only when the pooler's output is not ``dim`` wide -- a linear head.
Position 0 is vector 0 (the query), or, with ``cls_token``, a learned token prepended to the set as the
paper's ``ClsToken`` does (its ``Attenuator`` then marks the token and leaves vector 0 unmarked).
Weights start N(0, 0.02), biases 0, LayerNorms at identity, the pooler included, as in the paper; the
CLS token starts U(0, 1), as the paper's ``torch.rand``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poolkit.errors import PoolkitError


class EncoderLayer(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + Dropout(FF(LN(x)))."""

    def __init__(self, dim: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise PoolkitError(f"width {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.norm_attn = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ff), nn.GELU(), nn.Linear(ff, dim), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm_attn(x)).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, length, dim)
        x = x + self.out(attn)
        return x + self.ff(self.norm_ff(x))


class SNRModel(nn.Module):
    """Encoder -> pooler -> (head): predicts the K-neighbour centroid of vector 0 from all vectors. With
    ``cls_token``, a learned token is prepended (the pooler sees it at index 0, vector 0 at index 1)."""

    def __init__(self, pooler: nn.Module, dim: int = 16, layers: int = 12, heads: int = 8, ff: int = 64,
                 dropout: float = 0.1, seed: int = 0, cls_token: bool = False) -> None:
        super().__init__()
        self.type_embedding = nn.Embedding(2, dim)  # 0 marks position 0, 1 the rest
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, ff, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.pooler = pooler
        out_dim = int(getattr(pooler, "output_dim", dim))
        self.head = nn.Identity() if out_dim == dim else nn.Linear(out_dim, dim)
        gen = torch.Generator().manual_seed(seed)  # encoder first: it starts the same whatever the pooler
        for module in self.modules():
            _paper_init(module, gen)
        self.cls_token = nn.Parameter(torch.rand(1, 1, dim, generator=gen)) if cls_token else None

    def forward(self, x: Tensor) -> Tensor:
        if self.cls_token is not None:
            x = torch.cat((self.cls_token.expand(len(x), -1, -1), x), dim=1)
        types = torch.ones(x.shape[1], dtype=torch.long, device=x.device)
        types[0] = 0
        h = x + self.type_embedding(types)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.pooler(self.norm(h), None))


def _paper_init(module: nn.Module, gen: torch.Generator) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02, generator=gen)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm) and module.elementwise_affine:
        nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


@dataclass(frozen=True)
class FitResult:
    """Held-out test MSE of the best-validation epoch, and the loss history."""

    test_mse: float
    best_epoch: int
    train_loss: list[float]
    val_loss: list[float]


def evaluate(model: nn.Module, x: Tensor, y: Tensor, index: Tensor, batch_size: int) -> float:
    """Mean squared error of ``model`` on the rows ``index`` of ``(x, y)``, in eval mode."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for idx in index.split(batch_size):
            idx = idx.to(x.device)
            total += F.mse_loss(model(x[idx]), y[idx], reduction="sum").item()
    return total / (len(index) * y.shape[1])


def fit(model: nn.Module, x: Tensor, y: Tensor, *, train: Tensor, val: Tensor, test: Tensor, epochs: int,
        batch_size: int, lr: float, seed: int) -> FitResult:
    """Adam on minibatches of the rows ``train``, shuffled by ``seed``; keep the epoch with the lowest MSE
    on the rows ``val`` and report its MSE on the rows ``test`` (the paper's protocol)."""
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    best = (float("inf"), -1, copy.deepcopy(model.state_dict()))
    train_hist, val_hist = [], []
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for idx in train[torch.randperm(len(train), generator=gen)].split(batch_size):
            idx = idx.to(x.device)
            loss = F.mse_loss(model(x[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        train_hist.append(total / len(train))
        val_hist.append(evaluate(model, x, y, val, batch_size))
        if val_hist[-1] < best[0]:
            best = (val_hist[-1], epoch, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[2])
    return FitResult(test_mse=evaluate(model, x, y, test, batch_size), best_epoch=best[1],
                     train_loss=train_hist, val_loss=val_hist)
