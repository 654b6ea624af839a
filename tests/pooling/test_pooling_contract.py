"""The pooler contract, checked for every registered pooler (token and layer poolers alike)."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import (ALL_POOLERS, HIDDEN, POOLER_VARIANTS, SET_POOLERS, TOKEN_POOLERS, make_pooler,
                     mask_from_lengths, random_layers, states_for, to_left_padding)
from poolkit import PoolkitError

# The attention poolers' scorer options go through the same contract.
ALL_POOLERS = [*ALL_POOLERS, *POOLER_VARIANTS]
SET_POOLERS = [*SET_POOLERS, *POOLER_VARIANTS]

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


@pytest.mark.parametrize("name", sorted(set(TOKEN_POOLERS) - set(SET_POOLERS)))
def test_poolers_not_marked_order_invariant_do_see_token_order(name):
    # catches order_invariant left False on a set pooler (the test above would then skip it); the test above catches
    # it set on a pooler that reads positions (cls, last, flex)
    torch.manual_seed(0)
    pooler = make_pooler(name)
    x = torch.randn(2, 5, HIDDEN)
    with torch.no_grad():
        for parameter in pooler.parameters():  # flex starts uniform (the mean): its learned map is what reads order
            parameter.normal_()
        assert not close(pooler(x), pooler(x.flip(1)))


def test_the_set_poolers_include_every_family_that_ignores_order():
    # the attribute, read from the classes, marks the poolers the contract expects to be sets
    assert {"mean", "max", "gem", "lse", "attention", "gated_attention", "latent", "adapool",
            "zonotope_attention"} <= set(SET_POOLERS)
    assert not {"cls", "last", "flex"} & set(SET_POOLERS)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_asking_for_the_weights_does_not_change_the_pooled_output(name):
    # catches a pool_without_weights (the cheaper form forward takes when no weights are asked for) that drifts
    # from pool, e.g. gem without its final root or lse without the log-count
    pooler = make_pooler(name)
    layers = random_layers(2, 6)
    mask = mask_from_lengths([6, 4], 6)
    with torch.no_grad():
        alone = pooler(states_for(pooler, layers), mask)
        pooled, _ = pooler(states_for(pooler, layers), mask, return_weights=True)
    assert close(alone, pooled)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_empty_rows_give_zeros_and_zero_weights(name):
    pooler = make_pooler(name)
    layers = random_layers(3, 5)
    mask = mask_from_lengths([3, 0, 5], 5)
    with torch.no_grad():
        pooled, weights = pooler(states_for(pooler, layers), mask, return_weights=True)
        alone = pooler(states_for(pooler, [h[[0, 2]] for h in layers]), mask[[0, 2]])
    assert pooled.shape == (3, pooler.output_dim)
    assert torch.equal(pooled[1], torch.zeros_like(pooled[1]))
    assert close(pooled[[0, 2]], alone)  # the other rows are what they are without the empty one
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
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    scale = reference.abs().max() + 1
    assert (mixed.float() - reference).abs().max() <= tol * scale
    assert (half.float() - reference).abs().max() <= tol * scale


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_fp16_extremes_do_not_overflow(name):
    """Large fp16 activations (~1000): the fp16 pooler gives what the same weights give in float32, to fp16 rounding
    (catches a -1e9 fill in fp16 and any overflow to inf / NaN)."""
    pooler = make_pooler(name).to(torch.float16)
    layers = [h.to(torch.float16) * 300 for h in random_layers(2, 8)]
    mask = mask_from_lengths([8, 3], 8)
    with torch.no_grad():
        pooled = pooler(states_for(pooler, layers), mask)
        reference = copy.deepcopy(pooler).float()(states_for(pooler, [h.float() for h in layers]), mask)
    assert pooled.dtype == torch.float16
    assert (pooled.float() - reference).abs().max() <= 2e-2 * (reference.abs().max() + 1)


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


def directional_derivative(f, tensor: torch.Tensor, direction: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(f(t + eps v) - f(t - eps v)) / 2 eps, moving ``tensor`` in place and back."""
    with torch.no_grad():
        tensor += eps * direction
        plus = f()
        tensor -= 2 * eps * direction
        minus = f()
        tensor += eps * direction
    return (plus - minus) / (2 * eps)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_gradients_match_finite_differences(name):
    """In float64, each parameter's gradient and the hidden states' gradient, along a random direction, equal central
    differences of the output, and each parameter moves the output (catches a part cut from autograd, a custom
    backward with a wrong or zero term, a parameter that never learns); padding and the empty row get exactly 0."""
    pooler = make_pooler(name, **({"dropout": 0.0} if "lstm" in name or "gru" in name else {})).double().train()
    gen = torch.Generator().manual_seed(1)
    layers = [h.double().requires_grad_() for h in random_layers(3, 5, gen)]
    mask = mask_from_lengths([5, 0, 3], 5)  # includes an empty row
    states = states_for(pooler, layers)
    used = layers if pooler.kind == "layer" else layers[-1:]
    out_grad = torch.randn(3, pooler.output_dim, generator=gen, dtype=torch.float64)

    def loss():
        return (pooler(states, mask) * out_grad).sum()

    params = [(n, p) for n, p in pooler.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss(), [p for _, p in params] + used, allow_unused=True)
    for (param_name, param), grad in zip(params, grads):
        grad = torch.zeros_like(param) if grad is None else grad
        direction = torch.randn(param.shape, generator=gen, dtype=torch.float64)
        numeric = directional_derivative(loss, param, direction)
        assert abs(numeric) > 1e-6, f"{param_name} does not change the output"
        torch.testing.assert_close((grad * direction).sum(), numeric, rtol=1e-5, atol=1e-8, msg=param_name)
    input_grads = [torch.zeros_like(h) if g is None else g for h, g in zip(used, grads[len(params):])]
    for h, grad in zip(used, input_grads):
        assert torch.equal(grad[1], torch.zeros_like(grad[1])) and torch.equal(grad[2, 3:], torch.zeros_like(grad[2, 3:]))
    directions = [torch.randn(h.shape, generator=gen, dtype=torch.float64) for h in used]
    numeric = sum(directional_derivative(loss, h, v) for h, v in zip(used, directions))
    analytic = sum((g * v).sum() for g, v in zip(input_grads, directions))
    torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-8)


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
def test_a_mask_that_is_not_0_1_is_refused_in_one_line(name):
    # a Hugging Face additive mask (0 = real, -10000 = padding) would be read inverted, and 0.5, -1 or NaN as real
    pooler = make_pooler(name)
    layers = random_layers(2, 4)
    good = mask_from_lengths([4, 2], 4).float()
    for bad, told in [((good - 1) * 10000, "pass (attention_mask == 0)"), (good * 0.5, "got 0.5"),
                      (good - (1 - good), "got -1"), (good.masked_fill(good == 0, float("nan")), "got nan")]:
        with pytest.raises(PoolkitError, match="attention_mask must hold 0 and 1 only") as refused:
            pooler(states_for(pooler, layers), bad)
        assert told in str(refused.value) and "\n" not in str(refused.value)
    pooler(states_for(pooler, layers), good)  # float, integer and bool 0/1 masks are taken
    pooler(states_for(pooler, layers), good.long())


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


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_a_pooler_that_says_it_starts_as_mean_computes_mean_pooling(name):
    # catches zeroing a layer that does not make the logits constant (the tanh scorer's first Linear, glu's gate),
    # and a pooler that claims the start but keeps its own weights; the attention family must be able to start there
    pooler = make_pooler(name)
    if not pooler.start_as_mean():
        assert pooler.name not in ("attention", "attention_head", "gated_attention", "latent", "adapool",
                                   "latent_dictionary"), name
        return
    assert_starts_as_mean(pooler, name)


@pytest.mark.parametrize("name, options, starts", [
    ("multihead_attention", {"num_heads": 3, "combine": "project"}, True),
    ("multihead_attention", {"num_heads": 1}, True),
    ("multihead_attention", {"num_heads": 3}, False),  # three copies of the mean are not the mean
    ("latent", {"num_queries": 3, "combine": "mean", "num_heads": 2}, True),
    ("latent", {"num_queries": 2}, False),
    ("latent", {"mlp": False}, True),
    ("adapool", {"query_index": [0, 1], "num_heads": 2}, True),
    ("adapool", {"query_index": 0}, False),  # the residual adds the first token to the mean
    ("adapool", {"residual": True}, False)])
def test_the_learned_query_poolers_start_as_mean_where_their_output_can_be_the_mean(name, options, starts):
    # catches a projection of the heads that is not their average, a value / output projection left random, the
    # MLP left in, and a start claimed where the output has k copies of the mean or a residual token beside it
    pooler = make_pooler(name, **options)
    before = {key: value.clone() for key, value in pooler.state_dict().items()}
    assert pooler.start_as_mean() is starts
    if starts:
        assert_starts_as_mean(pooler, name)
    else:  # a pooler that cannot start there keeps its own weights
        assert all(torch.equal(before[key], value) for key, value in pooler.state_dict().items())


def assert_starts_as_mean(pooler, name):
    """The pooler (after start_as_mean) gives the masked mean of the last layer, and a gradient to some weight."""
    layers = random_layers(2, 6)
    mask = mask_from_lengths([6, 3], 6)
    pooled = pooler(states_for(pooler, layers), mask)
    last = layers[-1]
    mean = (last * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    assert close(pooled.detach(), mean)
    (pooled * torch.randn_like(pooled)).sum().backward()  # training can move away from the start
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in pooler.parameters()), name
