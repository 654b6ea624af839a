"""The pooler contract, checked for every registered pooler (token and layer poolers alike)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import (ALL_POOLERS, HIDDEN, SET_POOLERS, make_pooler, mask_from_lengths, random_layers,
                     states_for, to_left_padding)
from poolkit import PoolkitError

pytestmark = pytest.mark.usefixtures("path")  # every contract test on the fast and on the plain forms

lengths_strategy = st.lists(st.integers(1, 6), min_size=1, max_size=4)


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return bool(((a.float() - b.float()).abs() <= tol * (1 + b.float().abs())).all())


@pytest.mark.parametrize("name", ALL_POOLERS)
@given(lengths=lengths_strategy, extra=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_adding_padding_does_not_change_output(name, lengths, extra, seed):
    torch.manual_seed(0)
    pooler = make_pooler(name)
    gen = torch.Generator().manual_seed(seed)
    length = max(lengths)
    layers = random_layers(len(lengths), length, gen)
    mask = mask_from_lengths(lengths, length)
    padded = [torch.cat([h, torch.randn(h.shape[0], extra, HIDDEN, generator=gen) * 10], dim=1) for h in layers]
    padded_mask = torch.cat([mask, torch.zeros(len(lengths), extra, dtype=mask.dtype)], dim=1)
    with torch.no_grad():
        base = pooler(states_for(pooler, layers), mask)
        more = pooler(states_for(pooler, padded), padded_mask)
    assert close(base, more)


@pytest.mark.parametrize("name", ALL_POOLERS)
@given(lengths=lengths_strategy, seed=st.integers(0, 10_000))
def test_left_and_right_padding_agree(name, lengths, seed):
    torch.manual_seed(0)
    pooler = make_pooler(name)
    gen = torch.Generator().manual_seed(seed)
    length = max(lengths) + 2
    layers = random_layers(len(lengths), length, gen)
    right_mask = mask_from_lengths(lengths, length)
    left_layers, left_mask = to_left_padding(layers, lengths)
    with torch.no_grad():
        right = pooler(states_for(pooler, layers), right_mask)
        left = pooler(states_for(pooler, left_layers), left_mask)
    assert close(right, left)


@pytest.mark.parametrize("name", SET_POOLERS)
@given(lengths=lengths_strategy, seed=st.integers(0, 10_000))
def test_set_poolers_ignore_token_order(name, lengths, seed):
    torch.manual_seed(0)
    pooler = make_pooler(name)
    gen = torch.Generator().manual_seed(seed)
    length = max(lengths)
    x = torch.randn(len(lengths), length, HIDDEN, generator=gen)
    shuffled = x.clone()
    for row, n in enumerate(lengths):
        shuffled[row, :n] = x[row, torch.randperm(n, generator=gen)]
    mask = mask_from_lengths(lengths, length)
    with torch.no_grad():
        assert close(pooler(x, mask), pooler(shuffled, mask))


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_empty_rows_give_zeros_and_zero_weights(name):
    pooler = make_pooler(name)
    layers = random_layers(3, 5)
    mask = mask_from_lengths([3, 0, 5], 5)
    with torch.no_grad():
        pooled, weights = pooler(states_for(pooler, layers), mask, return_weights=True)
    assert pooled.shape == (3, pooler.output_dim)
    assert torch.isfinite(pooled).all()
    assert torch.equal(pooled[1], torch.zeros_like(pooled[1]))
    assert pooled[0].abs().sum() > 0 and pooled[2].abs().sum() > 0
    token_weights = weights["token"] if isinstance(weights, dict) else weights
    assert token_weights.shape == (3, 5)
    assert torch.equal(token_weights[1], torch.zeros(5))
    assert torch.equal(token_weights[0, 3:], torch.zeros(2))  # padding gets no weight


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_empty_rows_can_raise_instead(name):
    pooler = make_pooler(name, on_empty="raise")
    layers = random_layers(2, 4)
    with pytest.raises(PoolkitError, match="no real token"):
        pooler(states_for(pooler, layers), mask_from_lengths([2, 0], 4))
    pooler(states_for(pooler, layers), mask_from_lengths([2, 1], 4))  # no empty row: fine


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ALL_POOLERS)
def test_half_precision_matches_float32(name, dtype):
    pooler = make_pooler(name)
    layers = random_layers(3, 6)
    mask = mask_from_lengths([6, 2, 4], 6)
    with torch.no_grad():
        reference = pooler(states_for(pooler, layers), mask)
        # A float32 pooler fed half inputs computes in float32 and answers in the input's dtype.
        mixed = pooler(states_for(pooler, [h.to(dtype) for h in layers]), mask)
        half = pooler.to(dtype)(states_for(pooler, [h.to(dtype) for h in layers]), mask)
    assert mixed.dtype == dtype and half.dtype == dtype
    assert torch.isfinite(half).all()
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    scale = reference.abs().max() + 1
    assert (mixed.float() - reference).abs().max() <= tol * scale
    assert (half.float() - reference).abs().max() <= tol * scale


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_fp16_extremes_do_not_overflow(name):
    """Large fp16 activations: no -1e9 literal, no fp16 softmax/sum overflow."""
    pooler = make_pooler(name).to(torch.float16)
    layers = [h.to(torch.float16) * 300 for h in random_layers(2, 8)]
    with torch.no_grad():
        pooled = pooler(states_for(pooler, layers), mask_from_lengths([8, 3], 8))
    if name in ("sum",):  # a sum of 8 values of ~1000 fits in fp16; the check is about NaN/inf
        assert pooled.abs().max() < 65504
    assert torch.isfinite(pooled).all()


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_rows_are_independent_and_batch_of_one_works(name):
    pooler = make_pooler(name)
    layers = random_layers(3, 5)
    mask = mask_from_lengths([5, 2, 4], 5)
    with torch.no_grad():
        batch = pooler(states_for(pooler, layers), mask)
        for row in range(3):
            single = pooler(states_for(pooler, [h[row:row + 1] for h in layers]), mask[row:row + 1])
            assert single.shape == (1, pooler.output_dim)
            assert close(single[0], batch[row])
        changed = [h.clone() for h in layers]
        for h in changed:
            h[1:] = torch.randn_like(h[1:])
        assert close(pooler(states_for(pooler, changed), mask)[0], batch[0])


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_gradients_reach_every_parameter_and_stay_finite(name):
    pooler = make_pooler(name, **({"dropout": 0.0} if "lstm" in name or "gru" in name else {})).train()
    layers = [h.requires_grad_() for h in random_layers(3, 5)]
    mask = mask_from_lengths([5, 0, 3], 5)  # includes an empty row
    pooled = pooler(states_for(pooler, layers), mask)
    (pooled * torch.randn_like(pooled)).sum().backward()
    for param_name, param in pooler.named_parameters():
        if not param.requires_grad:
            continue
        assert param.grad is not None, f"{param_name} got no gradient"
        assert torch.isfinite(param.grad).all(), f"{param_name} has a non-finite gradient"
        assert param.grad.abs().sum() > 0, f"{param_name} has an all-zero gradient"
    used = layers if pooler.kind == "layer" else layers[-1:]
    for h in used:
        if h.grad is not None:
            assert torch.isfinite(h.grad).all()
            assert torch.equal(h.grad[2, 3:], torch.zeros_like(h.grad[2, 3:]))
    assert any(h.grad is not None and h.grad.abs().sum() > 0 for h in used)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_inputs_are_not_modified(name):
    pooler = make_pooler(name)
    layers = random_layers(2, 4)
    mask = mask_from_lengths([4, 2], 4).float()
    before = [h.clone() for h in layers], mask.clone()
    pooler(states_for(pooler, layers), mask, return_weights=True)
    assert all(torch.equal(a, b) for a, b in zip(layers, before[0]))
    assert torch.equal(mask, before[1])


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.int32, torch.float32])
def test_any_mask_dtype_and_none(mask_dtype):
    pooler = make_pooler("mean")
    x = torch.randn(2, 4, HIDDEN)
    mask = mask_from_lengths([4, 2], 4)
    expected = torch.stack([x[0].mean(0), x[1, :2].mean(0)])
    assert close(pooler(x, mask.to(mask_dtype)), expected)
    assert close(pooler(x, None), x.mean(1))


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_weights_are_a_distribution_over_real_tokens(name):
    pooler = make_pooler(name)
    layers = random_layers(2, 6)
    mask = mask_from_lengths([6, 3], 6)
    with torch.no_grad():
        _, weights = pooler(states_for(pooler, layers), mask, return_weights=True)
    token = weights["token"] if isinstance(weights, dict) else weights
    assert (token >= 0).all()
    assert close(token.sum(dim=1), torch.ones(2), 1e-4)
    if isinstance(weights, dict) and "layer" in weights:
        assert close(weights["layer"].sum(dim=1), torch.ones(2), 1e-4)
