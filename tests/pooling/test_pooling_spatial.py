"""Image maps (B, C, H, W): the contract on maps, the spatial names, flex (FlexPooling) and SAC."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn import functional as F

from helpers import HIDDEN, TOKEN_POOLERS, make_pooler, mask_from_lengths, to_left_padding
from poolkit import AuxiliaryClassifiers, PoolkitError, get_pooler, list_poolers
from poolkit.pooling.spec import resolve_name

#: The spatial names (aliases included) and flex with per-channel logits.
SPATIAL = ["gap", "gmp", "gem", "lse", "avgmax", "catavgmax", "flex", "flex_per_channel", "attention2d", "adapool2d"]
B, H, W = 3, 3, 4


def map_pooler(name: str, hidden: int = HIDDEN, dtype=torch.float32):
    """A spatial pooler in eval mode; flex with random logits (a trained flex, not the gap it starts as)."""
    torch.manual_seed(0)
    if name.startswith("flex"):
        pooler = get_pooler("flex", hidden, height=H, width=W, per_channel=name == "flex_per_channel").eval()
        with torch.no_grad():
            pooler.logits.normal_()
        return pooler.to(dtype)
    if hidden == HIDDEN:
        return make_pooler(name).to(dtype)
    return get_pooler(name, hidden, **({"attn_size": 4} if name == "attention2d" else {})).eval().to(dtype)


def random_map(batch: int = B, channels: int = HIDDEN, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, channels, H, W, generator=torch.Generator().manual_seed(seed))


def map_mask() -> torch.Tensor:
    """Row 0 all valid, row 1 a 2 x 3 image padded to 3 x 4, row 2 empty."""
    mask = torch.zeros(B, H, W, dtype=torch.bool)
    mask[0] = True
    mask[1, :2, :3] = True
    return mask


def test_registry_lists_the_new_poolers_and_the_spatial_aliases():
    assert {"avgmax", "flex"} <= set(list_poolers("token"))
    aliases = {"gap": "mean", "gmp": "max", "catavgmax": "mean_max", "attention2d": "gated_attention",
               "adapool2d": "adapool", "flexpool": "flex"}
    assert {alias: resolve_name(alias) for alias in aliases} == aliases


@pytest.mark.parametrize("name", ["gap", "gmp", "catavgmax", "attention2d", "adapool2d", "avgmax", "flex"])
def test_get_config_round_trip_on_maps(name):
    pooler = map_pooler(name)
    config = pooler.get_config()
    assert config["name"] == resolve_name(name) and json.loads(json.dumps(config)) == config
    rebuilt = get_pooler(**config).eval()
    rebuilt.load_state_dict(pooler.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(random_map(), map_mask()), pooler(random_map(), map_mask()))


@pytest.mark.parametrize("name", [n for n in TOKEN_POOLERS if n != "flex"])
def test_a_map_is_pooled_as_its_positions_in_row_major_order(name, path):
    """Every token pooler through the adapter: the map equals its (B, H*W, C) positions, weights (B, H, W)."""
    pooler = make_pooler(name)
    x, mask = random_map(), map_mask()
    tokens = x.permute(0, 2, 3, 1).reshape(B, H * W, HIDDEN)
    with torch.no_grad():
        pooled, weights = pooler(x, mask, return_weights=True)
        expected, token_weights = pooler(tokens, mask.reshape(B, H * W), return_weights=True)
    torch.testing.assert_close(pooled, expected)
    torch.testing.assert_close(weights, token_weights.reshape(B, H, W))


@pytest.mark.parametrize("name", SPATIAL)
def test_channels_first_and_channels_last_agree(name, path):
    pooler = map_pooler(name)
    x, mask = random_map(), map_mask()
    with torch.no_grad():
        first = pooler(x, mask, return_weights=True)
        last = pooler(x.permute(0, 2, 3, 1).contiguous(), mask, return_weights=True, input_format="NHWC")
    torch.testing.assert_close(first, last)


@pytest.mark.parametrize("name", SPATIAL)
def test_masked_positions_never_affect_outputs_and_empty_masks_give_zeros(name, path):
    pooler = map_pooler(name)
    x, mask = random_map(), map_mask()
    changed = torch.where(mask[:, None], x, torch.randn_like(x) * 100)
    with torch.no_grad():
        pooled, weights = pooler(x, mask, return_weights=True)
        again, weights_again = pooler(changed, mask, return_weights=True)
    torch.testing.assert_close(again, pooled, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights_again, weights)
    assert torch.equal(pooled[2], torch.zeros(pooler.output_dim)) and torch.equal(weights[2], torch.zeros(H, W))


@pytest.mark.parametrize("name", SPATIAL)
def test_weights_are_distributions_over_valid_positions(name):
    pooler = map_pooler(name)
    mask = map_mask()
    with torch.no_grad():
        _, weights = pooler(random_map(), mask, return_weights=True)
    assert weights.shape == (B, H, W) and (weights >= 0).all()
    torch.testing.assert_close(weights[:2].sum(dim=(1, 2)), torch.ones(2))
    assert torch.equal(weights[~mask], torch.zeros(int((~mask).sum())))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", SPATIAL)
def test_half_precision_maps_are_reduced_in_float32(name, dtype):
    """Large values (a 12-position sum of ~1e4 overflows fp16): the answer is finite, close, in the input's dtype."""
    pooler, mask = map_pooler(name), map_mask()
    x = random_map() * 1e4
    with torch.no_grad():
        reference = pooler(x, mask)
        half = pooler(x.to(dtype), mask)
    assert half.dtype == dtype and torch.isfinite(half).all()
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    assert (half.float() - reference).abs().max() <= tol * reference.abs().max()


@pytest.mark.parametrize("name", SPATIAL)
def test_gradcheck_on_a_tiny_double_map(name):
    pooler = map_pooler(name, hidden=3, dtype=torch.float64)
    x = random_map(2, 3).double().requires_grad_()
    mask = map_mask()[:2]
    assert torch.autograd.gradcheck(lambda m: pooler(m, mask), (x,), atol=1e-6, rtol=1e-4)
    if name.startswith("flex"):  # and through the learned logits
        logits = pooler.logits.detach().clone().requires_grad_()
        run = lambda lg: torch.func.functional_call(pooler, {"logits": lg}, (x.detach(), mask))  # noqa: E731
        assert torch.autograd.gradcheck(run, (logits,), atol=1e-6, rtol=1e-4)


def test_flex_compiles_in_one_graph_on_a_map():
    torch._dynamo.reset()
    pooler, x, mask = map_pooler("flex"), random_map(), map_mask()
    compiled = torch.compile(pooler, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, mask), pooler(x, mask))
    compiled(x, mask).pow(2).sum().backward()
    assert pooler.logits.grad is not None and pooler.logits.grad.abs().sum() > 0


def test_avgmax_and_catavgmax_follow_timm():
    x = random_map()
    with torch.no_grad():
        avgmax, catavgmax = get_pooler("avgmax", HIDDEN)(x), get_pooler("catavgmax", HIDDEN)(x)
    mean, maximum = x.mean(dim=(2, 3)), x.amax(dim=(2, 3))
    torch.testing.assert_close(avgmax, 0.5 * (mean + maximum))
    torch.testing.assert_close(catavgmax, torch.cat([mean, maximum], dim=1))


@pytest.mark.usefixtures("path")
@given(height=st.integers(1, 9), width=st.integers(1, 9), batch=st.integers(1, 3), masked=st.booleans(),
       seed=st.integers(0, 10_000))
def test_flex_at_init_is_gap_bit_for_bit(height, width, batch, masked, seed):
    """Zero logits, any float32 map size (the logit map is 7 x 7): exactly gap's output and weights. (Not in
    float64: gap's uniform weights are float32, flex's softmax is float64.)"""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, HIDDEN, height, width, generator=gen)
    mask = torch.rand(batch, height, width, generator=gen) < 0.7 if masked else None
    flex, gap = get_pooler("flex", HIDDEN), get_pooler("gap", HIDDEN)
    pooled, weights = flex(x, mask, return_weights=True)
    expected, gap_weights = gap(x, mask, return_weights=True)
    assert torch.equal(pooled, expected) and torch.equal(weights, gap_weights)
    if mask is None:
        torch.testing.assert_close(pooled, x.mean(dim=(2, 3)))


def test_flex_per_channel_at_init_is_gap():
    x, mask = random_map(), map_mask()
    flex = get_pooler("flex", HIDDEN, per_channel=True)
    torch.testing.assert_close(flex(x, mask), get_pooler("gap", HIDDEN)(x, mask))


@pytest.mark.parametrize("per_channel", [False, True])
def test_flex_is_the_softmax_of_its_logits_resized_to_each_valid_extent(per_channel, path):
    """A 2 x 3 logit map: on the full 3 x 4 image, the softmax of F.interpolate's bilinear resize
    (align_corners=False); on the 2 x 3 image padded to 3 x 4, of the logits themselves; per channel when asked."""
    pooler = get_pooler("flex", HIDDEN, height=2, width=3, per_channel=per_channel)
    with torch.no_grad():
        pooler.logits.normal_()
    x, mask = random_map(), map_mask()
    logits = pooler.logits.detach().expand(HIDDEN, 2, 3)
    full = F.interpolate(logits[None], size=(H, W), mode="bilinear", align_corners=False)[0]
    weights = [torch.softmax(full.flatten(1), dim=1).view(HIDDEN, H, W), torch.zeros(HIDDEN, H, W)]
    weights[1][:, :2, :3] = torch.softmax(logits.flatten(1), dim=1).view(HIDDEN, 2, 3)
    expected = torch.stack([(w * x[row]).sum(dim=(1, 2)) for row, w in enumerate(weights)] + [torch.zeros(HIDDEN)])
    with torch.no_grad():
        pooled, got_weights = pooler(x, mask, return_weights=True)
    torch.testing.assert_close(pooled, expected)
    torch.testing.assert_close(got_weights[:2], torch.stack(weights).mean(dim=1))


@pytest.mark.parametrize("name", SPATIAL)
@pytest.mark.parametrize("top, left", [(0, 0), (2, 1), (1, 3)])
def test_padding_an_image_anywhere_does_not_change_its_output(name, top, left, path):
    """A 3 x 4 image inside a 6 x 8 canvas of large values, at any offset: the image's own output (a trained flex
    resizes its logits to the image's valid extent, not to the canvas)."""
    pooler, x = map_pooler(name), random_map()
    canvas = torch.randn(B, HIDDEN, 6, 8) * 100
    canvas[:, :, top:top + H, left:left + W] = x
    mask = torch.zeros(B, 6, 8, dtype=torch.bool)
    mask[:, top:top + H, left:left + W] = True
    with torch.no_grad():
        alone, alone_weights = pooler(x, return_weights=True)
        padded, padded_weights = pooler(canvas, mask, return_weights=True)
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(padded_weights[:, top:top + H, left:left + W], alone_weights)


def test_trained_flex_on_tokens_keeps_the_padding_contract():
    """Tokens: a sentence's own real tokens span the logit map, so extra padding and left padding change nothing."""
    pooler = map_pooler("flex")
    tokens, lengths = torch.randn(3, 5, HIDDEN), [5, 2, 3]
    right, padded_right = mask_from_lengths(lengths, 5), mask_from_lengths(lengths, 9)
    padded = torch.cat([tokens, torch.randn(3, 4, HIDDEN) * 100], dim=1)
    (left_tokens,), left = to_left_padding([padded], lengths)
    with torch.no_grad():
        expected = pooler(tokens, right)
        torch.testing.assert_close(pooler(padded, padded_right), expected)
        torch.testing.assert_close(pooler(left_tokens, left), expected)


def test_flex_reads_tokens_as_a_one_row_map():
    pooler = map_pooler("flex")
    tokens = torch.randn(2, 5, HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(pooler(tokens), pooler(tokens.transpose(1, 2)[:, :, None, :]))


def test_flex_regularization_and_weight_dropout():
    pooler = get_pooler("flex", HIDDEN, l2=0.1, weight_dropout=0.5)
    with torch.no_grad():
        pooler.logits.normal_()
    torch.testing.assert_close(pooler.regularization(), 0.1 * pooler.logits.pow(2).sum())
    assert get_pooler("flex", HIDDEN).regularization() == 0
    x = random_map()
    with torch.no_grad():
        _, train_weights = pooler.train()(x, return_weights=True)
        eval_out, eval_weights = pooler.eval()(x, return_weights=True)
    assert (train_weights == 0).any() and not (eval_weights == 0).any()  # dropped in training only
    reference = get_pooler("flex", HIDDEN)
    reference.load_state_dict(pooler.state_dict())
    torch.testing.assert_close(eval_out, reference.eval()(x))


@pytest.mark.parametrize("schedule, progress, scale", [("constant", 0.5, 1.0), ("linear", 0.25, 0.75),
                                                        ("linear", 1.0, 0.0)])
def test_sac_adds_exactly_the_weighted_auxiliary_losses(schedule, progress, scale):
    torch.manual_seed(0)
    sac = AuxiliaryClassifiers([4, 6], [(4, 4), (2, 2)], num_classes=5, weights=[0.3, 0.7], schedule=schedule)
    with torch.no_grad():
        for pooler in sac.poolers:
            pooler.logits.normal_()
    maps = [torch.randn(3, 4, 4, 4), torch.randn(3, 6, 2, 2)]
    targets = torch.tensor([0, 4, 2])
    expected = 0
    for weight, pooler, head, m in zip([0.3, 0.7], sac.poolers, sac.heads, maps):
        attention = torch.softmax(pooler.logits.flatten(), dim=0)  # same size: no resize
        pooled = (m.flatten(2) * attention).sum(-1)
        log_probs = torch.log_softmax(head(pooled), dim=1)
        expected = expected + weight * scale * -log_probs[torch.arange(3), targets].mean()
    torch.testing.assert_close(sac(maps, targets, progress=progress), expected)


def test_sac_checks_its_input():
    sac = AuxiliaryClassifiers([4], [(2, 2)], num_classes=3)
    with pytest.raises(PoolkitError, match="built for 1 stages but got 2 maps"):
        sac([torch.randn(1, 4, 2, 2)] * 2, torch.tensor([0]))
    with pytest.raises(PoolkitError, match="progress"):
        sac([torch.randn(1, 4, 2, 2)], torch.tensor([0]), progress=2)
    with pytest.raises(PoolkitError, match="one per stage"):
        AuxiliaryClassifiers([4, 8], [(2, 2), (1, 1)], num_classes=3, weights=[0.3])


@pytest.mark.parametrize("call, match", [
    (lambda p: p(torch.randn(2, HIDDEN)), "3 dims .* or be one image map"),
    (lambda p: p(torch.randn(2, HIDDEN, 1, 3, 4)), "3 dims"),
    (lambda p: p(random_map(), torch.ones(B, H * W)), r"mask of a map must be a \(B, H, W\) = \(3, 3, 4\)"),
    (lambda p: p(random_map(), input_format="NWHC"), "input_format must be one of"),
    (lambda p: p(torch.randn(2, 5, HIDDEN), input_format="NHWC"), "is for an image map"),
    (lambda p: p(random_map().permute(0, 2, 3, 1)), "needs input_format='NHWC'"),
    (lambda p: make_pooler("weighted_layer")(random_map()), "cannot take an image map"),
])
def test_bad_maps_give_one_line_errors(call, match):
    with pytest.raises(PoolkitError, match=match) as error:
        call(get_pooler("gap", HIDDEN))
    assert "\n" not in str(error.value)
