"""Context-adaptive value projections (matrix zonotopes) for set attention, and their TDOF.

Standard attention applies one value map W_V to every element, so a layer's output is a weighted mean of
x W_V: one linear map, whatever the input. Zonotope attention lets the map depend on the element or its set:

    W_V(c) = C + sum_k g_k(c) G_k,    g(c) = tanh(c A^T + b) in [-1, 1]^K,

a centre C plus K generator matrices whose coefficients are gated by c = the element x_j (``gate="element"``),
the set's (masked, or quadrature-weighted) mean (``"context"``) or both concatenated (``"both"``); the maps
lie in a matrix zonotope. Gating by the element or by a permutation-invariant summary keeps the pooler
permutation invariant and the set layer permutation equivariant. Generators may be low rank, G_k = L_k R_k^T.
The Transform Degrees of Freedom (``poolkit.nn.tdof``) count how many independent linear maps a layer applies: 1
for standard attention, up to K + 1 here. The set-to-set layer (``poolkit.nn.ZonotopeSetAttention``) uses the same
value maps.

Initialisation: C = I, the gate's weights and bias 0 (so g = 0 and W_V = C = I: the pooler starts as the
``attention`` pooler with the same scorer, exactly), generators random N(0, 1/D) entries (full rank) or
factors with N(0, 1/D) and N(0, 1/r) entries (rank r; G_k entries of variance 1/D either way). The first
step's gradient reaches the gate (its d out / d A = G_k x_j ... is non-zero because G_k is), the generators'
is 0 until the gate has moved (d out / d G_k carries g_k = 0), so from the second step on both learn.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..errors import PoolkitError
from . import hooks, masking
from .attention import AttentionPooler
from .registry import check_positive_int
from .spec import register_pooler

GATE_SOURCES = ("element", "context", "both")


class ZonotopeValues(nn.Module):
    """The value maps W_V(c) = C + sum_k g_k(c) G_k of a D-wide set (see the module docstring)."""

    def __init__(self, hidden_size: int, num_generators: int = 4, gate: str = "element", rank: int | None = None,
                 who: str = "zonotope") -> None:
        super().__init__()
        if not isinstance(num_generators, int) or isinstance(num_generators, bool) or num_generators < 0:
            raise PoolkitError(f"{who}: num_generators must be an int >= 0 (0: standard attention), got "
                               f"{num_generators!r}")
        if gate not in GATE_SOURCES:
            raise PoolkitError(f"{who}: gate must be one of {GATE_SOURCES}, got {gate!r}")
        if rank is not None:
            check_positive_int(rank, f"{who}: rank")
        self.num_generators, self.gate_source, self.rank = num_generators, gate, rank
        self.centre = nn.Parameter(torch.eye(hidden_size))
        self.left = self.right = self.full = self.gate = None
        if num_generators == 0:
            return
        if rank is None:
            self.full = nn.Parameter(torch.randn(num_generators, hidden_size, hidden_size) * hidden_size ** -0.5)
        else:
            self.left = nn.Parameter(torch.randn(num_generators, hidden_size, rank) * hidden_size ** -0.5)
            self.right = nn.Parameter(torch.randn(num_generators, hidden_size, rank) * rank ** -0.5)
        self.gate = nn.Linear(hidden_size * (2 if gate == "both" else 1), num_generators)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)

    def generators(self) -> Tensor:
        """The generator matrices G_k: (K, D, D), G_k acting as x -> G_k x."""
        return self.full if self.rank is None else torch.einsum("kor,kdr->kod", self.left, self.right)

    def coefficients(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None) -> Tensor:
        """g_k(c_j) in [-1, 1] for every element: (B, T, D) -> (B, T, K) (``gate="context"``: (B, 1, K), one per set).

        The gate's Linear is split into its element and context columns: the context is projected once per set,
        never broadcast over its elements. (Padded elements get gates too; their attention weight is 0.)
        """
        if self.gate_source == "element":
            return torch.tanh(self.gate(x))
        dim = x.shape[-1]
        weights = (masking.uniform_weights(mask) if quadrature_weights is None
                   else masking.quadrature_mean_weights(mask, quadrature_weights))
        context = masking.masked_weighted_sum(x, weights).to(x.dtype)[:, None, :]  # (B, 1, D)
        if hooks.hooked(self.gate):  # called as a module on what it reads (hooks.py)
            both = self.gate_source == "both"
            return torch.tanh(self.gate(torch.cat([x, context.expand_as(x)], dim=-1) if both else context))
        pre = F.linear(context, self.gate.weight[:, -dim:], self.gate.bias)  # (B, 1, K)
        if self.gate_source == "both":
            pre = pre + F.linear(x, self.gate.weight[:, :dim])
        return torch.tanh(pre)

    def maps(self, x: Tensor, mask: Tensor) -> Tensor:
        """W_V(c_j) for every element: (B, T, D) -> (B, T, D, D)."""
        centre = self.centre.expand(*x.shape[:2], -1, -1)
        if self.num_generators == 0:
            return centre
        gates = self.coefficients(x, mask).expand(*x.shape[:2], -1)
        return centre + torch.einsum("btk,kod->btod", gates, self.generators())

    def transform(self, x: Tensor, mask: Tensor) -> Tensor:
        """W_V(c_j) x_j for every element: (B, T, D) -> (B, T, D)."""
        out = F.linear(x, self.centre.to(x.dtype))
        if self.num_generators == 0:
            return out
        moved = torch.einsum("btd,kod->btko", x, self.generators().to(x.dtype))
        return out + (self.coefficients(x, mask)[..., None] * moved).sum(dim=2)

    def pool(self, x: Tensor, mask: Tensor, weights: Tensor, mixed: Tensor,
             quadrature_weights: Tensor | None = None) -> Tensor:
        """sum_j a_j W_V(c_j) x_j from the attention weights a (B, T) and mixed = sum_j a_j x_j (B, D).

        = C mixed + sum_k G_k (sum_j a_j g_k(c_j) x_j): K + 1 weighted sums of the tokens, no (B, T, D, D) map.
        """
        out = F.linear(mixed, self.centre.to(mixed.dtype))
        if self.num_generators == 0:
            return out
        gates = self.coefficients(x, mask, quadrature_weights)  # (B, T, K) or (B, 1, K)
        # With the mask: a_j g_k(c_j) is 0 wherever a gate is (at init everywhere) and has a gradient there; only
        # the padded positions' is dropped, by a selection (a huge padded x_j overflows it: masking's rules).
        gated_weights = weights[:, None, :] * gates.transpose(1, 2)
        per_generator = masking.masked_weighted_sum(x, gated_weights, mask).to(mixed.dtype)  # (B, K, D)
        return out + torch.einsum("bkd,kod->bo", per_generator, self.generators().to(per_generator.dtype))


@register_pooler("zonotope_attention", "zonotope")
class ZonotopeAttentionPooler(AttentionPooler):
    """Attention pooling with context-adaptive values: sum_j softmax_j(s_j) W_V(c_j) x_j, W_V(c) = C + sum_k g_k(c) G_k.

    (B, T, D) -> (B, D). The scores s_j are the ``attention`` pooler's (Linear -> tanh -> Linear); at init it
    equals that pooler with the same scorer weights (W_V = I). See the module docstring for the formula, the
    gate sources and the initialisation; :func:`tdof` counts the maps it applies.
    """
    option_docs = {
        "num_generators": "K generator matrices of W_V(c) = C + sum_k g_k(c) G_k (0: plain attention)",
        "gate": "what gates g_k(c) read: 'element' (x_j), 'context' (the set's mean) or 'both'",
        "rank": "rank r of each generator G_k = L_k R_k^T (None: full D x D matrices)",
    }

    def __init__(self, hidden_size: int, *, num_generators: int = 4, gate: str = "element", rank: int | None = None,
                 attn_size: int = 512, init: str = "xavier", on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, attn_size=attn_size, init=init, on_empty=on_empty)
        self.values = ZonotopeValues(hidden_size, num_generators, gate, rank, who=self.name)

    def pool(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None):
        mixed, weights = super().pool(x, mask, quadrature_weights)
        return self.values.pool(x, mask, weights, mixed, quadrature_weights), weights

    def start_as_mean(self) -> bool:
        """Never: uniform weights average the mapped values W_V(c_j) x_j, not the tokens."""
        return False

    def value_maps(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """W_V(c_j) for every element (B, T, D) -> (B, T, D, D) (for :func:`tdof`)."""
        return self.values.maps(x, set_mask(x, mask))


def set_mask(x: Tensor, mask: Tensor | None, hidden_size: int | None = None) -> Tensor:
    """A checked boolean mask (B, T) for a set x (B, T, D): all True when None."""
    if not isinstance(x, Tensor) or x.dim() != 3 or (hidden_size is not None and x.shape[-1] != hidden_size):
        raise PoolkitError(f"a set must be a tensor (B, T, D={hidden_size or 'D'}), got "
                           f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
    if mask is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    if tuple(mask.shape) != tuple(x.shape[:2]):
        raise PoolkitError(f"mask shape {tuple(mask.shape)} does not match the set (B, T) = {tuple(x.shape[:2])}")
    return mask.bool()
