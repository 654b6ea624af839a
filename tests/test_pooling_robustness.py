"""The padding contract whatever the padding holds (NaN, inf, huge values), edge shapes, and stable gem."""

from __future__ import annotations

import pytest
import torch

from helpers import (ALL_POOLERS, HIDDEN, LAYER_POOLERS, TOKEN_POOLERS, make_pooler, mask_from_lengths,
                     random_layers, states_for)
from poolkit import PoolkitError, get_pooler

pytestmark = pytest.mark.usefixtures("path")  # on the fast and on the plain forms

LENGTHS = [5, 2, 0, 4]


def with_padding(layers, mask, value):
    return [torch.where(mask.bool()[:, :, None], h, torch.full_like(h, value)) for h in layers]


def token_weights(weights):
    return weights["token"] if isinstance(weights, dict) else weights


def pool_with_gradients(pooler, layers, mask):
    layers = [h.clone().requires_grad_() for h in layers]
    pooled, weights = pooler(states_for(pooler, layers), mask, return_weights=True)
    params = [p for p in pooler.parameters() if p.requires_grad]
    grads = torch.autograd.grad((pooled * torch.linspace(-1, 1, pooled.shape[-1])).sum(), params + layers,
                                allow_unused=True)
    return pooled.detach(), token_weights(weights).detach(), grads


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 3e38])
@pytest.mark.parametrize("name", ALL_POOLERS)
def test_padding_never_changes_an_output_whatever_it_holds(name, value):
    """Outputs, weights and gradients with NaN / inf / 3e38 at padded positions (and a row that is all padding)
    equal those with zeros there."""
    pooler = make_pooler(name, **({"dropout": 0.0} if name in ("lstm_layers", "gru_layers") else {}))
    mask = mask_from_lengths(LENGTHS, 5)
    layers = random_layers(len(LENGTHS), 5)
    clean = pool_with_gradients(pooler, with_padding(layers, mask, 0.0), mask)
    dirty = pool_with_gradients(pooler, with_padding(layers, mask, value), mask)
    torch.testing.assert_close(dirty[0], clean[0], rtol=1e-5, atol=1e-6)
    assert torch.equal(dirty[0][2], torch.zeros_like(dirty[0][2]))  # the all-padding row
    torch.testing.assert_close(dirty[1], clean[1], rtol=1e-5, atol=1e-6)
    for ours, expected in zip(dirty[2], clean[2]):
        if expected is None:
            assert ours is None or not ours.abs().sum()
        else:
            torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("token_pooler", TOKEN_POOLERS)
@pytest.mark.parametrize("name", LAYER_POOLERS)
def test_layer_poolers_keep_the_contract_with_every_token_pooler(name, token_pooler):
    token = {"name": token_pooler, "attn_size": 8} if "attn_size" in get_pooler(token_pooler, HIDDEN).get_config() \
        else token_pooler
    pooler = make_pooler(name, token_pooler=token)
    mask = mask_from_lengths(LENGTHS, 5)
    layers = random_layers(len(LENGTHS), 5)
    with torch.no_grad():
        clean = pooler(with_padding(layers, mask, 0.0), mask)
        dirty = pooler(with_padding(layers, mask, float("nan")), mask)
    torch.testing.assert_close(dirty, clean, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_a_real_non_finite_value_stays_in_its_own_row(name):
    """NaN at a real token is the input's own value: it shows in that row's output (not hidden), and no other."""
    pooler = make_pooler(name)
    mask = mask_from_lengths([5, 3, 4], 5)
    layers = random_layers(3, 5)
    broken = [h.clone() for h in layers]
    for h in broken:
        h[1, :3] = float("nan")
    with torch.no_grad():
        clean, dirty = pooler(states_for(pooler, layers), mask), pooler(states_for(pooler, broken), mask)
    assert not torch.isfinite(dirty[1]).all()
    torch.testing.assert_close(dirty[[0, 2]], clean[[0, 2]])


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_no_rows_and_no_tokens(name):
    pooler = make_pooler(name)
    with torch.no_grad():
        empty_batch = pooler(states_for(pooler, random_layers(0, 4)), torch.zeros(0, 4))
        pooled, weights = pooler(states_for(pooler, random_layers(3, 0)), torch.zeros(3, 0), return_weights=True)
    assert empty_batch.shape == (0, pooler.output_dim)
    assert torch.equal(pooled, torch.zeros(3, pooler.output_dim))
    assert token_weights(weights).shape == (3, 0)


@pytest.mark.parametrize("mask", [[[1, 1, 0]], ((1, 1, 0),), "110"])
def test_a_mask_that_is_not_a_tensor_is_refused(mask):
    with pytest.raises(PoolkitError, match="attention_mask must be a tensor"):
        make_pooler("mean")(torch.randn(1, 3, HIDDEN), mask)


@pytest.mark.parametrize("name", ["latent", "adapool", "attention", "gem", "lse", "weighted_layer"])
def test_double_precision_poolers_compute_in_double(name):
    pooler = make_pooler(name)
    layers = random_layers(3, 5)
    mask = mask_from_lengths([5, 2, 4], 5)
    with torch.no_grad():
        single = pooler(states_for(pooler, layers), mask)
        double = pooler.double()(states_for(pooler, [h.double() for h in layers]), mask)
    assert double.dtype == torch.float64
    torch.testing.assert_close(double.float(), single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1.5, 50.0, 200.0])
def test_gem_is_stable_at_large_powers(p):
    """float32 gem with |x| up to ~20 and p = 200 (|x|^p overflows float32 beyond ~1.6): the float64 formula."""
    x = torch.randn(3, 6, HIDDEN) * 7
    mask = mask_from_lengths([6, 3, 1], 6)
    pooler = get_pooler("gem", HIDDEN, p=p, learn_p=False)
    with torch.no_grad():
        ours = pooler(x, mask)
        true_p = pooler.p.double()
    expected = []
    for row, n in enumerate([6, 3, 1]):
        real = x[row, :n].double()
        mean = (real.sign() * real.abs().pow(true_p)).mean(0)
        expected.append(mean.sign() * mean.abs().pow(1 / true_p))
    torch.testing.assert_close(ours.double(), torch.stack(expected), rtol=1e-4, atol=1e-5)
