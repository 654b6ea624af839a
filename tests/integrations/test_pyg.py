"""poolkit.integrations.pyg: poolers as PyTorch Geometric aggregations, against PyG's own where they coincide."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest
import torch

from poolkit import PoolkitError, get_pooler

needs_pyg = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                               reason="torch_geometric is NOT INSTALLED, so the PyG adapter is untested: "
                                      "pip install 'poolkit[pyg]' (make test installs it)")
HIDDEN = 8


def ragged(sizes: list[int], seed: int = 0):
    """Rows of len(sizes) groups, shuffled: x (N, D), its group index (N,) and, for the groups in order, x and ptr."""
    gen = torch.Generator().manual_seed(seed)
    index = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    x = torch.randn(len(index), HIDDEN, generator=gen) - 0.5  # negative values too: an empty max must not be a fill
    shuffle = torch.randperm(len(index), generator=gen)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.tensor(sizes).cumsum(0)])
    return x[shuffle], index[shuffle], x, ptr


@needs_pyg
@pytest.mark.parametrize(("name", "theirs"), [("mean", "MeanAggregation"), ("max", "MaxAggregation")])
def test_statistic_poolers_match_pyg_aggregations(name, theirs):
    # catches rows given to the wrong group (an unsorted index), a ptr read off by one, empty groups that are not 0
    from torch_geometric.nn import aggr

    from poolkit.integrations.pyg import PoolerAggregation

    ours, reference = PoolerAggregation(name, hidden_size=HIDDEN), getattr(aggr, theirs)()
    x, index, x_sorted, ptr = ragged([3, 1, 4, 2])
    torch.testing.assert_close(ours(x, index), reference(x, index))
    torch.testing.assert_close(ours(x, index, dim_size=6), reference(x, index, dim_size=6))  # two empty groups
    torch.testing.assert_close(ours(x_sorted, ptr=ptr), reference(x_sorted, ptr=ptr))


@needs_pyg
@needs_pyg
@pytest.mark.parametrize(("name", "theirs"), [("mean", "MeanAggregation"), ("max", "MaxAggregation")])
def test_inputs_with_more_axes_reduce_along_dim_as_pyg_does(name, theirs):
    """Issue 32, item 17: x (B, N, D) with an index over N gave an IndexError; PyG's aggregations reduce along
    dim=-2 (and any other rows' axis) and keep the rest: (B, G, D). Catches the sets mixed with each other or the
    groups put on the wrong axis."""
    from torch_geometric.nn import aggr

    from poolkit.integrations.pyg import PoolerAggregation

    ours, reference = PoolerAggregation(name, hidden_size=HIDDEN), getattr(aggr, theirs)()
    gen = torch.Generator().manual_seed(2)
    index = torch.tensor([0, 0, 1, 1, 1, 2, 0])
    x = torch.randn(2, 7, HIDDEN, generator=gen)
    assert ours(x, index).shape == (2, 3, HIDDEN)
    torch.testing.assert_close(ours(x, index), reference(x, index))
    x4 = torch.randn(3, 7, 2, HIDDEN, generator=gen)  # the rows on axis 1 of four
    torch.testing.assert_close(ours(x4, index, dim=1, dim_size=4), reference(x4, index, dim=1, dim_size=4))
    with pytest.raises(PoolkitError, match="must be the axis of the rows"):
        ours(x, torch.arange(HIDDEN) % 2, dim=-1)


def test_attention_pooler_matches_attentional_aggregation_with_the_same_gate():
    from torch_geometric.nn.aggr import AttentionalAggregation

    from poolkit.integrations.pyg import PoolerAggregation

    pooler = get_pooler("attention", HIDDEN, attn_size=4)
    ours, reference = PoolerAggregation(pooler), AttentionalAggregation(gate_nn=pooler.score)  # one shared scorer
    x, index, _, _ = ragged([5, 2, 3], seed=1)
    torch.testing.assert_close(ours(x, index), reference(x, index))
    x.requires_grad_()
    (grad,) = torch.autograd.grad(ours(x, index).square().sum(), x)
    (want,) = torch.autograd.grad(reference(x, index).square().sum(), x)
    torch.testing.assert_close(grad, want)


@needs_pyg
def test_layer_poolers_are_refused():
    from poolkit.integrations.pyg import PoolerAggregation

    with pytest.raises(PoolkitError, match="needs a token pooler"):
        PoolerAggregation(get_pooler("weighted_layer", HIDDEN, num_layers=4))


def test_without_torch_geometric_the_import_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric", None)  # find_spec answers None: not installed
    monkeypatch.delitem(sys.modules, "poolkit.integrations.pyg", raising=False)
    with pytest.raises(PoolkitError, match=r"pip install 'poolkit\[pyg\]'"):
        importlib.import_module("poolkit.integrations.pyg")
