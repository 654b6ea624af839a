"""Zonotope attention (context-adaptive value maps): the pooler, the set-to-set layer and the TDOF measure."""

from __future__ import annotations

import pytest
import torch

from helpers import HIDDEN, make_pooler, mask_from_lengths
from poolkit import PoolkitError, ZonotopeSetAttention, get_pooler, tdof

VARIANTS = [{"gate": "element"}, {"gate": "context"}, {"gate": "both", "rank": 2}, {"num_generators": 1}]


def randomise_gates(layer, std: float = 0.5) -> None:
    """What training does to the zero-initialised gates."""
    torch.nn.init.normal_(layer.values.gate.weight, std=std)
    torch.nn.init.normal_(layer.values.gate.bias, std=std)


def explicit_pool(pooler, x, mask):
    """sum_j a_j W_V(c_j) x_j with the maps written out (B, T, D, D): the formula, not the folded sums."""
    _, weights = pooler(x, mask, return_weights=True)
    values = torch.einsum("btod,btd->bto", pooler.value_maps(x, mask), x)
    return torch.einsum("bt,bto->bo", weights, values)


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_zonotope_pooler_starts_as_the_attention_pooler(options):
    # catches an init with non-zero gates, a centre that is not I, or a value map applied the other way round
    attention = get_pooler("attention", HIDDEN, attn_size=8)
    zonotope = get_pooler("zonotope_attention", HIDDEN, attn_size=8, **options)
    zonotope.load_state_dict(attention.state_dict(), strict=False)
    x, mask = torch.randn(3, 6, HIDDEN), mask_from_lengths([6, 3, 1], 6)
    with torch.no_grad():
        want, want_weights = attention(x, mask, return_weights=True)
        got, got_weights = zonotope(x, mask, return_weights=True)
    assert torch.equal(got, want) and torch.equal(got_weights, want_weights)


def test_generators_learn_from_the_second_step_and_the_gates_from_the_first():
    # catches generators initialised to zero (then neither they nor the gates ever get a gradient)
    torch.manual_seed(0)
    pooler = get_pooler("zonotope_attention", HIDDEN, attn_size=8).train()
    optimiser = torch.optim.SGD(pooler.parameters(), lr=0.1)
    x, target = torch.randn(4, 5, HIDDEN), torch.randn(4, HIDDEN)
    for step in range(2):
        optimiser.zero_grad()
        (pooler(x) - target).square().mean().backward()
        gate_grad, generator_grad = pooler.values.gate.weight.grad, pooler.values.full.grad
        assert gate_grad.abs().max() > 1e-4
        assert (generator_grad.abs().max() > 1e-6) == (step == 1), (step, generator_grad.abs().max())
        optimiser.step()


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_zonotope_pooler_applies_its_value_maps_and_ignores_order_and_padding(options):
    # the folded form (K + 1 weighted sums) against the maps written out: catches G_k x read as x G_k, gates taken
    # from the wrong source, a context that reads padding, and maps stuck at W_V = C (= attention with its weights)
    torch.manual_seed(1)
    pooler = make_pooler("zonotope_attention", **options)
    randomise_gates(pooler)
    x, mask = torch.randn(3, 6, HIDDEN), mask_from_lengths([6, 4, 2], 6)
    x[1, 4:] = 1e3  # padding
    with torch.no_grad():
        pooled = pooler(x, mask)
        torch.testing.assert_close(pooled, explicit_pool(pooler, x, mask), rtol=1e-4, atol=1e-5)
        order = torch.tensor([3, 0, 2, 1, 4, 5])
        torch.testing.assert_close(pooler(x[:, order], mask[:, order]), pooled, rtol=1e-5, atol=1e-6)
        attention = make_pooler("attention")  # the same scorer weights: only the value maps can differ
        assert not attention.load_state_dict(pooler.state_dict(), strict=False).missing_keys
        assert torch.equal(attention(x, mask, return_weights=True)[1], pooler(x, mask, return_weights=True)[1])
        assert not torch.allclose(pooled, attention(x, mask), atol=1e-3)


def naive_set_attention(layer, x, mask):
    """y_i = sum_j softmax_j(q_i . k_j / sqrt(D)) W_V(c_j) x_j, one row and element at a time."""
    maps = layer.value_maps(x, mask)
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        real = mask[b].nonzero().flatten().tolist()
        for i in real:
            scores = torch.stack([layer.query(x[b, i]) @ layer.key(x[b, j]) for j in real]) / HIDDEN ** 0.5
            values = torch.stack([maps[b, j] @ x[b, j] for j in real])
            out[b, i] = torch.softmax(scores, dim=0) @ values
    return out


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_set_layer_is_its_formula_and_permutation_equivariant(options):
    torch.manual_seed(2)
    layer = ZonotopeSetAttention(HIDDEN, **options)
    randomise_gates(layer)
    x, mask = torch.randn(2, 5, HIDDEN), mask_from_lengths([5, 3], 5).bool()
    x[1, 3:] = float("nan")  # padding is never read
    with torch.no_grad():
        out = layer(x, mask)
        torch.testing.assert_close(out, naive_set_attention(layer, x.nan_to_num(0), mask), rtol=1e-4, atol=1e-5)
        assert torch.equal(out[1, 3:], torch.zeros(2, HIDDEN))
        order = torch.tensor([4, 2, 0, 3, 1])
        torch.testing.assert_close(layer(x[:1, order], mask[:1, order]), out[:1, order], rtol=1e-5, atol=1e-6)


def sample(sets: int = 3, size: int = 8):
    return torch.randn(sets, size, HIDDEN, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("gate", ["element", "context", "both"])
@pytest.mark.parametrize("rank", [None, 1])
def test_tdof_counts_the_independent_value_maps(gate, rank):
    # 1 for standard attention and at init, K + 1 for K independent generators, K when two coincide: catches a rank
    # of the generators alone (no centre), a tolerance that counts rounding noise, or gates that never vary
    torch.manual_seed(4)
    x = sample(sets=6)  # 6 sets: 6 contexts, enough for K + 1 = 4 maps with gate="context"
    pooler = get_pooler("zonotope_attention", HIDDEN, num_generators=3, gate=gate, rank=rank, attn_size=8)
    assert tdof(pooler, x) == 1  # gates 0 at init: W_V = C everywhere
    randomise_gates(pooler)
    assert tdof(pooler, x) == 4
    with torch.no_grad():
        if rank is None:
            pooler.values.full[2] = pooler.values.full[0]
        else:
            pooler.values.left[2], pooler.values.right[2] = pooler.values.left[0], pooler.values.right[0]
    assert tdof(pooler, x) == 3
    assert tdof(get_pooler("zonotope_attention", HIDDEN, num_generators=0, gate=gate), x) == 1


def test_tdof_of_the_set_layer_and_of_too_small_a_sample():
    torch.manual_seed(5)
    layer = ZonotopeSetAttention(HIDDEN, num_generators=5, gate="context")
    randomise_gates(layer)
    assert tdof(layer, sample(sets=8)) == 6
    assert tdof(layer, sample(sets=2)) == 2  # two sets: two contexts, two maps
    assert tdof(ZonotopeSetAttention(HIDDEN, num_generators=0), sample()) == 1
    masked = mask_from_lengths([1, 1, 1], 8)
    assert tdof(layer, sample(), masked) == 3  # only the real elements count (one each: three contexts)


def test_bad_options_and_layers_without_value_maps_raise_one_clear_error():
    with pytest.raises(PoolkitError, match="num_generators must be an int >= 0"):
        get_pooler("zonotope_attention", HIDDEN, num_generators=-1)
    with pytest.raises(PoolkitError, match="gate must be one of"):
        get_pooler("zonotope_attention", HIDDEN, gate="set")
    with pytest.raises(PoolkitError, match="rank must be a positive int"):
        ZonotopeSetAttention(HIDDEN, rank=0)
    with pytest.raises(PoolkitError, match="tdof needs a layer with input-dependent value maps .* got attention"):
        tdof(get_pooler("attention", HIDDEN), sample())
    with pytest.raises(PoolkitError, match=r"mask shape \(3, 4\) does not match"):
        ZonotopeSetAttention(HIDDEN)(sample(), torch.ones(3, 4))
