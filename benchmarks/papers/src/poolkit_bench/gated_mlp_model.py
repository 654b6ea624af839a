"""The feed-forward variants of ``poolkit bench gated-mlp`` and the small text transformer they sit in.

Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear Attention" (arXiv 2606.22172): hidden unit k of a gated
MLP computes phi(g_k . x) (v_k . x), a rank-1 bilinear form x^T g_k v_k^T x with a non-linearity on one factor.
Without phi the two factors can be exchanged (g <-> v) and rescaled (c g, v / c) without changing the output; phi on
one factor breaks the exchange symmetry, and a non-homogeneous phi (GELU) the scaling one as well. The variants
(:data:`FFNS`), each ``out(hidden(x))`` with out a linear map back to the model width:

- ``gelu_mlp``: gelu(W x), one factor (the transformer's original FFN);
- ``glu``: gelu(G x) * (V x), the non-linearity on one factor (GeGLU, Shazeer 2020);
- ``bilinear``: (G x) * (V x), no non-linearity (Pagliardini et al.'s bilinear layer);
- ``both``: gelu(G x) * gelu(V x), the non-linearity on both factors (symmetric again under exchange);
- ``bilinear_attention``: softmax_k((G x)_k (V x)_k): the rank-1 bilinear logits of the units normalised by a
  softmax over the units, as attention normalises its logits over keys (the hidden units read as memory slots,
  Sukhbaatar et al. 2019, Geva et al. 2021); symmetric under exchange and scaling like ``bilinear``. The paper's
  text gives the correspondence, not a layer: this normalisation is poolkit's reading of "bilinear attention".

The gated forms have three matrices to the MLP's two, so their hidden width is 2/3 of the MLP's
(:func:`hidden_width`), the parameter counts matched to within a unit's worth.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poolkit.pooling import get_pooler

from .gated_mlp_config import FFNS

#: the variants with two factors (G x, V x), which the symmetry checks act on
TWO_FACTOR = FFNS[1:]


def hidden_width(ffn: str, mlp_hidden: int) -> int:
    """The hidden width of ``ffn`` whose parameter count is nearest an MLP of ``mlp_hidden`` units (d in, d out):
    2 d h + h + d against 3 d h' + 2 h' + d, so h' = 2 h / 3 to within a unit."""
    return mlp_hidden if ffn == "gelu_mlp" else max(1, round(2 * mlp_hidden / 3))


class FeedForward(nn.Module):
    """One of :data:`FFNS`: (..., d) -> (..., d)."""

    def __init__(self, ffn: str, dim: int, mlp_hidden: int) -> None:
        super().__init__()
        if ffn not in FFNS:
            raise ValueError(f"ffn must be one of {FFNS}, got {ffn!r}")
        self.ffn, width = ffn, hidden_width(ffn, mlp_hidden)
        self.gate = nn.Linear(dim, width)
        self.value = None if ffn == "gelu_mlp" else nn.Linear(dim, width)
        self.out = nn.Linear(width, dim)

    def hidden(self, x: Tensor) -> Tensor:
        """The hidden units (..., width) before the output map."""
        g = self.gate(x)
        if self.ffn == "gelu_mlp":
            return F.gelu(g)
        v = self.value(x)
        if self.ffn == "glu":
            return F.gelu(g) * v
        if self.ffn == "both":
            return F.gelu(g) * F.gelu(v)
        if self.ffn == "bilinear":
            return g * v
        return torch.softmax(g * v, dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.hidden(x))


class Block(nn.Module):
    """A pre-LayerNorm transformer block: x + attention(LN x), then x + FFN(LN x), dropout on both branches."""

    def __init__(self, ffn: str, dim: int, heads: int, mlp_hidden: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ffn = FeedForward(ffn, dim, mlp_hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, padding: Tensor) -> Tensor:
        h = self.norm1(x)
        x = x + self.dropout(self.attention(h, h, h, key_padding_mask=padding, need_weights=False)[0])
        return x + self.dropout(self.ffn(self.norm2(x)))


class TextClassifier(nn.Module):
    """Token and position embeddings, ``layers`` blocks with the ``ffn`` variant, a final LayerNorm, poolkit's
    masked mean pooler and a linear head: token ids (B, T) and a 0/1 mask (B, T) -> class logits (B, classes)."""

    def __init__(self, ffn: str, vocab: int, classes: int, *, dim: int = 64, heads: int = 4, layers: int = 2,
                 mlp_hidden: int = 256, max_length: int = 64, dropout: float = 0.1) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim, padding_idx=0)
        self.positions = nn.Embedding(max_length, dim)
        self.blocks = nn.ModuleList(Block(ffn, dim, heads, mlp_hidden, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.pool = get_pooler("mean", dim)
        self.head = nn.Linear(dim, classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        x = self.dropout(self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device)))
        for block in self.blocks:
            x = block(x, padding=~mask.bool())
        return self.head(self.pool(self.norm(x), mask))


def ffn_parameters(model: TextClassifier) -> int:
    """The parameters of the model's feed-forward layers (what the variants differ in)."""
    return sum(p.numel() for block in model.blocks for p in block.ffn.parameters())


def symmetry_gaps(ffn: str, dim: int = 16, mlp_hidden: int = 24, scale: float = 2.0, seed: int = 0) -> dict:
    """How far the ``ffn`` variant's output moves, relative to its size, when its two factors are exchanged
    (G <-> V) and when they are rescaled (c G, V / c with c = ``scale``): {exchange, scaling}, at random weights and
    inputs (float64); None for the one-factor MLP. 0 (to rounding) means the symmetry holds."""
    if ffn not in TWO_FACTOR:
        return {"exchange": None, "scaling": None}
    torch.manual_seed(seed)
    layer = FeedForward(ffn, dim, mlp_hidden).double()
    x = torch.randn(256, dim, dtype=torch.float64)
    with torch.no_grad():
        before = layer(x)
        gaps = {}
        for name, (g_map, v_map) in {"exchange": (layer.value, layer.gate),
                                     "scaling": (_scaled(layer.gate, scale), _scaled(layer.value, 1 / scale))}.items():
            moved = FeedForward(ffn, dim, mlp_hidden).double()
            moved.load_state_dict(layer.state_dict())
            moved.gate.load_state_dict(g_map.state_dict())
            moved.value.load_state_dict(v_map.state_dict())
            gaps[name] = float((moved(x) - before).norm() / before.norm())
    return gaps


def _scaled(linear: nn.Linear, factor: float) -> nn.Linear:
    scaled = nn.Linear(linear.in_features, linear.out_features).double()
    with torch.no_grad():
        scaled.weight.copy_(linear.weight * factor)
        scaled.bias.copy_(linear.bias * factor)
    return scaled

