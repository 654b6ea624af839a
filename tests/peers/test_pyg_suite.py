"""PyG's own aggregation, global-pooling and SAGEConv cases with ``PoolerAggregation`` in place of PyG's aggregation
(issue 32, "peer suites"). Each case is one of PyG's test situations (origin named beside it, pytorch_geometric's
``test/`` folder), written here, and run twice: through PyG's own aggregation and through the poolkit pooler of the
same statistic. The two must agree: the same output, or the same kind of error. Nothing is fetched at run time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

pytest.importorskip("torch_geometric", reason="torch_geometric is NOT INSTALLED: pip install 'poolkit[pyg]' "
                                              "(make test installs it)")
from torch_geometric.nn import SAGEConv, aggr  # noqa: E402

from poolkit.integrations.pyg import PoolerAggregation  # noqa: E402

HIDDEN = 16
#: PyG's aggregation -> the poolkit pooler of the same statistic
PAIRS = {"MeanAggregation": "mean", "SumAggregation": "sum", "MaxAggregation": "max", "MinAggregation": "min"}


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


INDEX, PTR = torch.tensor([0, 0, 1, 1, 1, 2]), torch.tensor([0, 2, 5, 6])
#: (case, origin in PyG's tests, what it does with an aggregation of HIDDEN features)
CASES: list[tuple[str, str, Callable]] = [
    ("by index", "nn/aggr/test_basic.py::test_basic_aggregation", lambda a: a(_x(6, HIDDEN), INDEX)),
    ("by ptr", "nn/aggr/test_basic.py::test_basic_aggregation", lambda a: a(_x(6, HIDDEN), ptr=PTR)),
    ("no index, no ptr: one group", "nn/aggr/test_basic.py::test_validate", lambda a: a(_x(6, HIDDEN))),
    ("an invalid dim", "nn/aggr/test_basic.py::test_validate", lambda a: a(_x(6, HIDDEN), INDEX, dim=-3)),
    ("ptr with another dim_size", "nn/aggr/test_basic.py::test_validate",
     lambda a: a(_x(6, HIDDEN), ptr=PTR, dim_size=2)),
    ("dim_size with empty groups", "nn/aggr/test_basic.py", lambda a: a(_x(6, HIDDEN), INDEX, dim_size=5)),
    ("dim_size below the largest index", "nn/aggr/base.py (its dim_size check)",
     lambda a: a(_x(6, HIDDEN), INDEX, dim_size=2)),
    ("a permuted batch", "nn/pool/test_glob.py::test_permuted_global_pool",
     lambda a: a(_x(10, HIDDEN), torch.tensor([0, 1, 1, 0, 1, 1, 0, 1, 0, 1]))),
    ("3-D input along dim=-2", "nn/pool/test_glob.py::test_dense_global_pool",
     lambda a: a(_x(3, 6, HIDDEN), INDEX, dim=-2)),
    ("3-D input along dim=0", "nn/aggr/test_basic.py (dim)", lambda a: a(_x(6, 3, HIDDEN), INDEX, dim=0)),
    ("an empty input", "nn/aggr/base.py (index.numel() == 0)",
     lambda a: a(_x(0, HIDDEN), torch.zeros(0, dtype=torch.long), dim_size=2)),
    ("gradients", "nn/aggr/test_basic.py::test_gen_aggregation (backward)", lambda a: _gradient(a)),
    ("SAGEConv on a graph", "nn/conv/test_sage_conv.py::test_sage_conv",
     lambda a: _sage(a, (_x(4, HIDDEN),), torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]]))),
    ("SAGEConv with size", "nn/conv/test_sage_conv.py::test_sage_conv",
     lambda a: _sage(a, (_x(4, HIDDEN),), torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]]), size=(4, 4))),
    ("SAGEConv bipartite", "nn/conv/test_sage_conv.py::test_sage_conv",
     lambda a: _sage(a, ((_x(4, HIDDEN), _x(2, HIDDEN, seed=1)),), torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]]))),
    ("SAGEConv bipartite without targets", "nn/conv/test_sage_conv.py::test_sage_conv",
     lambda a: _sage(a, ((_x(4, HIDDEN), None),), torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]]), size=(4, 2))),
]


def _gradient(aggregation) -> torch.Tensor:
    x = _x(6, HIDDEN).requires_grad_()
    aggregation(x, INDEX).pow(2).sum().backward()
    return x.grad


def _sage(aggregation, inputs: tuple, edge_index: torch.Tensor, size=None) -> torch.Tensor:
    first = inputs[0]
    channels = (HIDDEN, HIDDEN) if isinstance(first, tuple) else HIDDEN
    torch.manual_seed(0)  # the same lin_l / lin_r weights for both aggregations
    conv = SAGEConv(channels, 8, aggr=aggregation)
    return conv(first, edge_index, size=size)


def outcome(case: Callable, aggregation) -> tuple[str, torch.Tensor | None]:
    """("ok", the output) or (the error's class name, None)."""
    try:
        return "ok", case(aggregation)
    except Exception as err:  # noqa: BLE001 - the kind of error is what is compared
        return type(err).__name__ if not isinstance(err, ValueError) else "ValueError", None


@pytest.mark.parametrize("theirs", sorted(PAIRS))
@pytest.mark.parametrize(("name", "origin", "case"), CASES, ids=[c[0] for c in CASES])
def test_pooler_aggregation_does_what_pygs_own_does(theirs, name, origin, case):
    ours = PoolerAggregation(PAIRS[theirs], hidden_size=HIDDEN)
    expected, got = outcome(case, getattr(aggr, theirs)()), outcome(case, ours)
    assert got[0] == expected[0], f"{name} ({origin}): PyG {expected[0]}, poolkit {got[0]}"
    if expected[1] is not None:
        torch.testing.assert_close(got[1], expected[1], atol=1e-6, rtol=1e-5)
