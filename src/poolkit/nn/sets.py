"""Set-to-set layers and their measures: zonotope self-attention (each element's value map W_V(c) = C + sum_k
g_k(c) G_k, the maps of the ``zonotope_attention`` pooler; formula and init in :mod:`poolkit.pooling.sets`) and the
Transform Degrees of Freedom of a layer (:func:`tdof`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from ..pooling import Pooler, masking
from ..pooling.registry import check_positive_int
from ..pooling.sets import ZonotopeValues, set_mask


class ZonotopeSetAttention(nn.Module):
    """A set-to-set layer: self-attention with zonotope values, y_i = sum_j softmax_j(q_i . k_j / sqrt(D)) W_V(c_j) x_j.

    (B, T, D), mask (B, T) -> (B, T, D), permutation equivariant; padded positions give 0 and are never read.
    One head, query and key Linear(D, D) without bias; ``num_generators=0`` is standard single-head
    self-attention with value map C (initialised to I). Formula and init: see the module docstring.
    """

    def __init__(self, hidden_size: int, *, num_generators: int = 4, gate: str = "element",
                 rank: int | None = None) -> None:
        super().__init__()
        self.hidden_size = check_positive_int(hidden_size, "ZonotopeSetAttention: hidden_size")
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.values = ZonotopeValues(hidden_size, num_generators, gate, rank, who="ZonotopeSetAttention")

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = set_mask(x, mask, self.hidden_size)
        x = masking.zero_padding(x, mask)
        scores = torch.bmm(self.query(x), self.key(x).transpose(1, 2)) * self.hidden_size ** -0.5  # (B, T, T)
        weights = masking.masked_softmax(scores, mask[:, None, :])
        weights = torch.where(mask[:, :, None], weights, 0)  # padded queries: 0
        return masking.masked_weighted_sum(self.values.transform(x, mask), weights).to(x.dtype)

    def value_maps(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """W_V(c_j) for every element (B, T, D) -> (B, T, D, D) (for :func:`tdof`)."""
        return self.values.maps(x, set_mask(x, mask, self.hidden_size))


def tdof(layer: nn.Module, x: Tensor, mask: Tensor | None = None, *, rtol: float = 1e-5) -> int:
    """Transform Degrees of Freedom: the numerical rank of the value maps W_V(c_j) a layer applies to the real
    elements of a sample of sets x (B, T, D).

    The maps are flattened to vectors (N real elements, D * D) and their singular values sigma counted above
    ``rtol`` * sigma_max (in float64): 1 for standard attention (one map), K + 1 for K independent generators
    whose gates vary over the sample, fewer when generators coincide or their gates do not vary (at init, with
    the gates 0: 1). The sample must hold at least K + 1 elements with independent gate values (with
    ``gate="context"``: that many sets).
    """
    if not hasattr(layer, "value_maps"):
        name = layer.name if isinstance(layer, Pooler) else type(layer).__name__
        raise PoolkitError(f"tdof needs a layer with input-dependent value maps (zonotope_attention, "
                           f"ZonotopeSetAttention), got {name}; standard attention applies one map: TDOF 1")
    mask = set_mask(x, mask)
    with torch.no_grad():
        maps = layer.value_maps(x, mask)[mask].flatten(1).double()
    if maps.shape[0] == 0:
        raise PoolkitError("tdof: the sample has no real element")
    singular = torch.linalg.svdvals(maps)
    return int((singular > rtol * singular[0]).sum())
