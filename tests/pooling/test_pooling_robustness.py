"""The padding contract whatever the padding holds (NaN, inf, huge values), on the kernel paths torch lets a process
choose (tests/pooling/test_pooling_kernels.py: the instruction sets chosen at start-up), edge shapes, and stable gem."""

from __future__ import annotations

import math

import contextlib

import pytest
import torch

from helpers import (ALL_POOLERS, HIDDEN, LAYER_POOLERS, POOLER_VARIANTS, TOKEN_POOLERS, make_pooler,
                     mask_from_lengths, random_layers, states_for)
from poolkit import PoolkitError, get_pooler

pytestmark = pytest.mark.usefixtures("path")  # on the fast and on the plain forms

LENGTHS = [5, 2, 0, 4]
#: No row of only padding: such a row's pooled value comes from padding alone, and when it is not finite, forward
#: pools the whole batch again from zeroed padding, which would hide every other row's use of the padding.
FULL_LENGTHS = [5, 2, 3, 4]
#: What the padded positions hold, and the parameters: as built, or made non-negative. A huge finite value (3e38)
#: overflows float32 once a backward pass multiplies it by an incoming gradient above ~1.1 (the output's gradient
#: here reaches 4); with non-negative parameters, every linear map of a same-signed padded token overflows to inf,
#: never to NaN (inf - inf), whatever the order of summation. Which of the two a kernel gives with mixed signs
#: depends on the CPU (an AVX-512 kernel gave inf where AVX2 gives NaN): this takes the inf branch on every CPU.
PADDING = [(float("nan"), "as-built"), (float("inf"), "as-built"), (float("-inf"), "as-built"), (3e38, "as-built"),
           (3e38, "non-negative"), (-3e38, "non-negative")]
#: Options that change how a pooler reads its tokens, checked here beside the registry's defaults.
OPTION_VARIANTS = {"flex[per_channel=True]": ("flex", {"per_channel": True}),
                   "zonotope_attention[gate=context]": ("zonotope_attention", {"gate": "context"}),
                   "zonotope_attention[gate=both]": ("zonotope_attention", {"gate": "both", "rank": 2}),
                   "lse[temperature=0.5]": ("lse", {"temperature": 0.5})}
PADDED_POOLERS = [*ALL_POOLERS, *POOLER_VARIANTS, *OPTION_VARIANTS]


def with_padding(layers, mask, value):
    return [torch.where(mask.bool()[:, :, None], h, torch.full_like(h, value)) for h in layers]


def token_weights(weights):
    return weights["token"] if isinstance(weights, dict) else weights


def padded_pooler(name, parameters="as-built", **options):
    base, preset = OPTION_VARIANTS.get(name, (name, {}))
    if base in ("lstm_layers", "gru_layers"):
        options.setdefault("dropout", 0.0)
    pooler = make_pooler(base, **preset, **options)
    if parameters == "non-negative":
        with torch.no_grad():
            for parameter in pooler.parameters():
                parameter.abs_()
    return pooler


def pool_with_gradients(pooler, layers, mask):
    layers = [h.clone().requires_grad_() for h in layers]
    pooled, weights = pooler(states_for(pooler, layers), mask, return_weights=True)
    params = [p for p in pooler.parameters() if p.requires_grad]
    grads = torch.autograd.grad((pooled * torch.linspace(-4, 4, pooled.shape[-1])).sum(), params + layers,
                                allow_unused=True)
    return pooled.detach(), token_weights(weights).detach(), grads


def check_padding_is_never_read(pooler, value):
    """Outputs, weights and gradients with ``value`` at every padded position equal those with zeros there, in a
    batch with a row of only padding (whose output is 0) and in one without."""
    for lengths in (LENGTHS, FULL_LENGTHS):
        mask = mask_from_lengths(lengths, 5)
        layers = random_layers(len(lengths), 5)
        clean = pool_with_gradients(pooler, with_padding(layers, mask, 0.0), mask)
        dirty = pool_with_gradients(pooler, with_padding(layers, mask, value), mask)
        torch.testing.assert_close(dirty[0], clean[0], rtol=1e-5, atol=1e-6)
        if 0 in lengths:
            assert torch.equal(dirty[0][lengths.index(0)], torch.zeros_like(dirty[0][0]))
        torch.testing.assert_close(dirty[1], clean[1], rtol=1e-5, atol=1e-6)
        for ours, expected in zip(dirty[2], clean[2]):
            if expected is None:
                assert ours is None or not ours.abs().sum()
            else:
                torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value, parameters", PADDING, ids=[f"{v}-{p}" for v, p in PADDING])
@pytest.mark.parametrize("name", PADDED_POOLERS)
def test_padding_never_changes_an_output_whatever_it_holds(name, value, parameters):
    """Outputs, weights and gradients with NaN / inf / 3e38 at padded positions equal those with zeros there.
    Catches a form that drops padding by multiplying with 0 anywhere in forward or backward (0 * inf is NaN),
    as zonotope_attention's gates and weighted sum, lse's division and flex's per-channel sum did."""
    check_padding_is_never_read(padded_pooler(name, parameters), value)


@contextlib.contextmanager
def switched(get, put, value):
    """``put(value)`` inside the block, the setting of before restored after it."""
    previous = get()
    put(value)
    try:
        yield
    finally:
        put(previous)


#: The kernel choices torch lets a running process make (the instruction sets are chosen at start-up:
#: tests/pooling/test_pooling_kernels.py): oneDNN on / off, one thread or two (blocked reductions split differently), and
#: the float32 matmul precision (oneDNN may use bf16 / tf32 kernels where the CPU has them). (Not
#: torch.backends.mkldnn.flags(): it also resets oneDNN's TF32 switch, with a warning on CPU-only builds.)
KERNELS = {"oneDNN off": lambda: switched(lambda: torch.backends.mkldnn.enabled,
                                          lambda on: setattr(torch.backends.mkldnn, "enabled", on), False),
           "1 thread": lambda: switched(torch.get_num_threads, torch.set_num_threads, 1),
           "2 threads": lambda: switched(torch.get_num_threads, torch.set_num_threads, 2),
           "matmul medium": lambda: switched(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision,
                                             "medium")}


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", ALL_POOLERS)
def test_padding_is_never_read_on_other_kernels(name, kernels):
    """The padding checks under each of KERNELS: catches a result that holds only on the kernels a default run picks."""
    with KERNELS[kernels]():
        for value, parameters in [(float("nan"), "as-built"), (3e38, "as-built"), (3e38, "non-negative")]:
            check_padding_is_never_read(padded_pooler(name, parameters), value)


@pytest.mark.parametrize("token_pooler", TOKEN_POOLERS)
@pytest.mark.parametrize("name", LAYER_POOLERS)
def test_layer_poolers_keep_the_contract_with_every_token_pooler(name, token_pooler):
    """The padding checks (gradients included) for every layer pooler over every token pooler: catches a layer
    weight whose gradient reads the padding of the layers it mixes (0 * NaN), as weighted_layer's did."""
    accepted = get_pooler(token_pooler, HIDDEN).get_config()
    token = {"name": token_pooler, **{key: 8 for key in ("attn_size", "num_latents") if key in accepted}}
    for value, parameters in [(float("nan"), "as-built"), (3e38, "non-negative")]:
        check_padding_is_never_read(padded_pooler(name, parameters, token_pooler=token), value)


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


@pytest.mark.parametrize("signed", [True, False])
def test_gem_at_an_infinite_power_is_its_limit_and_empty_rows_are_zeros(signed):
    """Issue 32, item 7: p = inf is the limit of the generalised mean, the largest magnitude with its sign (signed)
    or the max of the clamped values (classic form); rows with no real token give zeros in both forms (was 0.0 for
    every feature at p = inf, NaN for signed=False's empty rows)."""
    x = torch.randn(3, 6, HIDDEN)
    if not signed:
        x = x.abs() + 0.1  # the classic form's domain: positive features (after a ReLU)
    mask = mask_from_lengths([6, 3, 0], 6)
    with torch.no_grad():
        ours = get_pooler("gem", HIDDEN, p=math.inf, signed=signed)(x, mask)
    for row, n in enumerate([6, 3]):
        real = x[row, :n]
        largest = real.gather(0, real.abs().argmax(dim=0, keepdim=True))[0]
        torch.testing.assert_close(ours[row], largest)
    assert torch.equal(ours[2], torch.zeros(HIDDEN))
    with torch.no_grad():
        empty = get_pooler("gem", HIDDEN, signed=signed)(x, mask)
    assert torch.equal(empty[2], torch.zeros(HIDDEN)) and torch.isfinite(empty).all()


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
