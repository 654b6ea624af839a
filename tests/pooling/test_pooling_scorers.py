"""The token scorers of the attention poolers (``scorer=``): each formula on hand-set weights, and the defaults
unchanged. The contract suite runs the options too (helpers.POOLER_VARIANTS)."""

from __future__ import annotations

import hashlib

import pytest
import torch

from helpers import HIDDEN, make_pooler, mask_from_lengths
from poolkit import PoolkitError, get_pooler

pytestmark = pytest.mark.usefixtures("path")  # the fast and the plain forms

LENGTHS = [6, 2, 4]


def tokens(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(len(LENGTHS), max(LENGTHS), HIDDEN, generator=gen), mask_from_lengths(LENGTHS, max(LENGTHS))


def softmax_of(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.masked_fill(mask == 0, float("-inf")), dim=1)


@torch.no_grad()
def test_glu_with_a_zero_gate_is_half_a_linear_scorer_of_the_value_projection():
    """sigmoid(0) = 1/2: w . (V h * 1/2) is the linear scorer with weight w V / 2 (V's bias only shifts every
    logit by the same amount)."""
    glu = make_pooler("attention", scorer="glu")
    glu.gate.weight.zero_()
    glu.gate.bias.zero_()
    linear = make_pooler("attention", scorer="linear")
    linear.score.weight.copy_(0.5 * glu.score.weight @ glu.value.weight)
    x, mask = tokens()
    pooled, weights = glu(x, mask, return_weights=True)
    expected, expected_weights = linear(x, mask, return_weights=True)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-6)
    # and not the same weights as the full linear scorer w V (the 1/2 is a temperature)
    linear.score.weight.mul_(2)
    assert not torch.allclose(linear(x, mask, return_weights=True)[1], weights, atol=1e-3)


@torch.no_grad()
def test_bilinear_logits_are_the_sum_over_the_rank_of_the_factor_products():
    pooler = make_pooler("attention", scorer="bilinear", attn_size=3)
    x, mask = tokens()
    left = x @ pooler.value.weight.T + pooler.value.bias  # (B, T, r)
    right = x @ pooler.gate.weight.T + pooler.gate.bias
    logits = sum(left[..., k] * right[..., k] for k in range(3))  # one logit per position
    _, weights = pooler(x, mask, return_weights=True)
    torch.testing.assert_close(weights, softmax_of(logits, mask), rtol=1e-5, atol=1e-6)
    # No non-linearity: the logits are a quadratic form h^T (V^T U) h (+ the biases' linear terms) of rank <= r.
    form = pooler.value.weight.T @ pooler.gate.weight
    assert torch.linalg.matrix_rank(form) == 3
    quadratic = torch.einsum("btd,de,bte->bt", x, form, x)
    linear = x @ (pooler.value.weight.T @ pooler.gate.bias + pooler.gate.weight.T @ pooler.value.bias)
    torch.testing.assert_close(weights, softmax_of(quadratic + linear, mask), rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_glu_and_abmil_logits_follow_their_formulas():
    x, mask = tokens()
    for scorer, value_activation in (("glu", lambda v: v), ("abmil", torch.tanh)):
        pooler = make_pooler("attention", scorer=scorer)
        value = value_activation(x @ pooler.value.weight.T + pooler.value.bias)
        gate = torch.sigmoid(x @ pooler.gate.weight.T + pooler.gate.bias)
        logits = (value * gate) @ pooler.score.weight[0]
        _, weights = pooler(x, mask, return_weights=True)
        torch.testing.assert_close(weights, softmax_of(logits, mask), rtol=1e-5, atol=1e-6, msg=scorer)


@torch.no_grad()
def test_abmil_scorer_of_attention_is_gated_attention():
    attention = make_pooler("attention", scorer="abmil", init="default")
    gated = make_pooler("gated_attention")
    gated.load_state_dict(attention.state_dict())  # same parameter names: value, gate, score
    x, mask = tokens()
    torch.testing.assert_close(attention(x, mask), gated(x, mask), rtol=0, atol=0)


@torch.no_grad()
def test_half_precision_bilinear_logits_do_not_overflow():
    """Quadratic logits of projections of size ~10^3 exceed fp16's 65504: they are formed in float32."""
    pooler = make_pooler("attention", scorer="bilinear")
    x, mask = tokens()
    big = x * 300
    reference = pooler(big, mask)
    half = pooler.half()(big.half(), mask)
    assert torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), reference, rtol=2e-2, atol=2e-2 * reference.abs().max().item())


# The defaults before the scorer option existed (seed 0, hidden 16): the sha256 of the initial state dict and the
# pooled outputs of fixed inputs along a fixed direction.
DEFAULTS_BEFORE = {
    "attention": ("4c211fd9f028961c", [2.161081, -5.367264]),
    "attention_head": ("59ec20bfc7902f67", [1.926958, -6.834771]),
    "gated_attention": ("92ca3c628ca315c9", [2.720401, -5.896589]),
}


@pytest.mark.parametrize("name", sorted(DEFAULTS_BEFORE))
@torch.no_grad()
def test_defaults_are_unchanged(name):
    torch.manual_seed(0)
    pooler = get_pooler(name, hidden_size=16).eval()
    digest = hashlib.sha256()
    for key, value in pooler.state_dict().items():
        digest.update(key.encode())
        digest.update(value.numpy().tobytes())
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 16, generator=gen)
    mask = torch.arange(7)[None] < torch.tensor([7, 3])[:, None]
    direction = torch.randn(16, generator=gen)
    expected_digest, expected_output = DEFAULTS_BEFORE[name]
    assert digest.hexdigest()[:16] == expected_digest  # the same parameters, created in the same order
    torch.testing.assert_close(pooler(x, mask) @ direction, torch.tensor(expected_output), rtol=2e-6, atol=1e-6)


def test_unknown_scorer_names_the_choices():
    with pytest.raises(PoolkitError, match="scorer must be one of .*'glu'"):
        get_pooler("gated_attention", hidden_size=HIDDEN, scorer="gelu")

