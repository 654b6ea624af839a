"""Any poolkit token pooler as a PyTorch Geometric aggregation (``pip install 'poolkit[pyg]'``).

PyG aggregations reduce ragged groups of rows, x (N, D) with a group ``index`` (N,) or CSR pointers ``ptr``
(G + 1,), to one row per group (G, D'). :class:`PoolerAggregation` turns the groups into a dense batch and mask
with ``torch_geometric.utils.to_dense_batch`` and calls the pooler on them::

    from poolkit.integrations.pyg import PoolerAggregation
    readout = PoolerAggregation("attention", hidden_size=64)     # a torch_geometric.nn.aggr.Aggregation
    graph_vectors = readout(node_states, batch)                   # (num_graphs, 64)

Groups with no row (``dim_size`` beyond the largest index) give zeros, as PyG's own aggregations do.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..errors import PoolkitError
from ..extras import require
from ..pooling import Pooler, build_pooler

require("pyg")
from torch_geometric.nn.aggr import Aggregation  # noqa: E402


class PoolerAggregation(Aggregation):
    """A poolkit token pooler (a name, a spec dict or a built pooler) as a PyG ``Aggregation``: (N, D) -> (G, D')."""

    def __init__(self, pooler: str | dict[str, Any] | Pooler, hidden_size: int | None = None) -> None:
        super().__init__()
        self.pooler = build_pooler(pooler, hidden_size)
        if self.pooler.kind != "token":
            raise PoolkitError(f"{self.pooler.name} pools over the layers of an encoder; a PyG aggregation needs a "
                               "token pooler such as 'attention'")

    def forward(self, x: Tensor, index: Tensor | None = None, ptr: Tensor | None = None, dim_size: int | None = None,
                dim: int = -2, max_num_elements: int | None = None) -> Tensor:
        """x (..., N, ..., D) grouped along ``dim`` (the rows' axis, not the features') -> (..., G, ..., D'), as PyG's
        own aggregations reduce: the other leading axes are independent sets of the same groups."""
        if dim in (-1, x.dim() - 1) or not -x.dim() <= dim < x.dim():
            raise PoolkitError(f"`dim` {dim} must be the axis of the rows (not the features, the last axis) of an "
                               f"input with {x.dim()} axes")
        if index is None:  # CSR pointers: group g holds rows ptr[g] .. ptr[g + 1] - 1
            index = torch.repeat_interleave(torch.arange(ptr.numel() - 1, device=x.device), ptr.diff())
        # to_dense_batch needs the groups in order; a stable sort keeps each group's rows in their order
        index, order = index.sort(stable=True)
        rows = x.movedim(dim, 0)[order]  # (N, ..., D): the other axes ride along as independent sets
        sets = rows.shape[1:-1]
        flat = rows.reshape(rows.shape[0], math.prod(rows.shape[1:]))  # explicit: -1 is ambiguous with no rows
        dense, mask = self.to_dense_batch(flat, index, dim_size=dim_size, dim=0, max_num_elements=max_num_elements)
        if dense.shape[1] == 0:  # no rows at all: every group empty, pooled from one padded position
            dense, mask = dense.new_zeros(dense.shape[0], 1, dense.shape[2]), mask.new_zeros(mask.shape[0], 1)
        groups, length = dense.shape[:2]
        count = math.prod(sets)
        dense = dense.view(groups, length, count, x.shape[-1]).transpose(1, 2).reshape(-1, length, x.shape[-1])
        pooled = self.pooler(dense, mask.repeat_interleave(count, dim=0))
        pooled = pooled.view(groups, *sets, -1)  # (G, ..., D')
        return pooled.movedim(0, dim % x.dim())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pooler.get_config()})"
