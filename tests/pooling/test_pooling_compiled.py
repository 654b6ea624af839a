"""The compiled loops (poolkit.pooling.compiled, numba: the ``kernels`` extra) against the plain forms of masking.

Their gradients, winners under padding and ties run through test_pooling_methods.py's ``extreme_form`` fixture (its
"compiled loops" form); the registry-wide contract suite runs with them on.
"""

from __future__ import annotations

import pytest
import torch

from helpers import mask_from_lengths
from poolkit import get_pooler
from poolkit.pooling import compiled, fast, masking

pytest.importorskip("numba")

DTYPES = [torch.float32, torch.bfloat16]


def awkward(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (5, 9, 16) with ties, signed zeros, NaN and infinities, and a mask with right, left and inner padding, an
    empty row and a full one."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, (5, 9, 16), generator=gen).to(dtype)  # many ties
    x[torch.rand(x.shape, generator=gen) < 0.15] = -0.0
    x[torch.rand(x.shape, generator=gen) < 0.05] = float("nan")
    x[torch.rand(x.shape, generator=gen) < 0.05] = float("inf")
    x[torch.rand(x.shape, generator=gen) < 0.05] = float("-inf")
    x[:, :, 0] = float("-inf")  # the max's fill at every token
    x[:, :, 1] = float("inf")  # the min's
    wide = {torch.float32: (torch.int32, 0x7FC00005, -0x3FFFFD), torch.bfloat16: (torch.int16, 0x7FC5, -0x3D)}
    integer, quiet, negative = wide[dtype]  # NaNs with payloads, one of them negative: their bits must come through
    x.view(integer)[:, 5, 2], x.view(integer)[:, 6, 3] = quiet, negative
    mask = torch.rand(5, 9, generator=gen) > 0.35
    mask[1] = False
    mask[2] = True
    mask[3, :4] = False
    return x, mask


def bits(t: torch.Tensor) -> torch.Tensor:
    """The values' bits, every NaN as one code: equal bits are the same value, sign of zero included (torch's gather
    gives bf16 NaNs its own canonical bits, where the loops keep x's: tested apart)."""
    raw = t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16}[t.dtype]).clone()
    return raw.masked_fill_(t.isnan(), -1)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_loops_give_the_plain_extremes_and_holders_bit_for_bit(dtype, largest):
    """Values and first holders of masking.masked_fill_reduce, bit for bit: a NaN wins and its first token holds it,
    a tie between -0 and +0 goes to the first, a feature at the fill at every real token is held by the first real
    token, and an empty row gives 0 at index 0; a NaN comes out with the bits x holds at its holder (sign and payload
    kept through the min's sign flips). Catches a later holder kept on ties, a min taken as a max, a NaN that loses or
    changes, a fill's holder at token 0 under left padding, and an empty row left at the fill."""
    for seed in range(6):
        x, mask = awkward(dtype, seed)
        values, index = masking.masked_fill_reduce(x, mask, largest)
        got, held = compiled.masked_extreme(x, mask, largest, with_index=True)
        assert torch.equal(bits(got), bits(values)) and torch.equal(held, index)
        assert torch.equal(bits(compiled.masked_extreme(x, mask, largest)), bits(values))
        raw = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[dtype]
        at_holder = x.view(raw).gather(1, held[:, None, :]).squeeze(1)
        nan = got.isnan()
        assert nan.any() and torch.equal(got.view(raw)[nan], at_holder[nan])


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_loops_sum_the_real_tokens_in_float32(dtype):
    """The float32 sum over the real tokens, padding never read (huge and NaN values there), to float32 rounding of
    the float64 sum; an empty row gives 0. Catches padding summed, a bf16 widening that is not exact (the bits
    shifted into the wrong half), and a sum kept in x's precision."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 50, 24, generator=gen).to(dtype)
    mask = mask_from_lengths([50, 0, 13, 1], 50).bool()
    x[~mask] = float("nan")
    x[3, 1:] = torch.finfo(dtype).max
    reference = (x.double().masked_fill(~mask[:, :, None], 0)).sum(dim=1)
    got = compiled.masked_sum(x, mask)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, reference.float(), rtol=1e-6, atol=1e-5)
    assert torch.equal(got[1], torch.zeros(24))


@pytest.mark.parametrize("root", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_loops_mean_is_its_two_forms_in_token_order_bit_for_bit(dtype, root):
    """compiled.masked_mean against the same arithmetic in torch, one real token at a time: float32 x each token times
    1/n summed, bf16 x the float32 sum divided by n; n the row's real count clamped to 1 (its square root with
    ``root``). Bit for bit, padding never read (NaN there), an empty row 0. Catches a count that includes padding, an
    empty row divided by 0, ``root`` ignored, the two forms swapped, and a product fused into the sum (one rounding
    fewer)."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(5, 30, 40, generator=gen).mul(1e3).to(dtype)
    mask = mask_from_lengths([30, 0, 7, 1, 19], 30).bool()
    mask[4, :5] = False  # left padding too
    x[~mask] = float("nan")
    expected = torch.zeros(5, 40)
    for b in range(5):
        count = mask[b].sum().clamp(min=1).float()
        scale = count.sqrt() if root else count
        for t in mask[b].nonzero().flatten().tolist():
            token = x[b, t].float()
            expected[b] = expected[b] + (token * (1 / scale) if dtype == torch.float32 else token)
        if dtype == torch.bfloat16:
            expected[b] = expected[b] / scale
    got = compiled.masked_mean(x, mask, root)
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    assert torch.equal(got[1], torch.zeros(40))


@pytest.mark.parametrize("name", ["mean", "sum", "mean_sqrt_len", "mean_max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_loops_training_step_gives_the_plain_gradient(name, dtype, monkeypatch):
    """In training the sums and means take the loops forward (fast.MaskedSums) and give x the gradient of the torch
    forms (the loops switched off): the same values, 0 at padding (NaN there) and in an empty row, written by the
    spreading loop in a plain backward pass and by a broadcast multiply under double backward and for batched
    gradients, which agree too; the forward values agree to float rounding. Catches the weights of another pooler
    (1/n for 1/sqrt(n)), a gradient at padding, a bf16 gradient rounded in another order (1/n rounded to bf16 first),
    a row spread to the wrong tokens, a backward that autograd cannot differentiate, and a training step that never
    reaches the loops."""
    taken, spread = [], []
    original, spreading = compiled._sums, compiled.spread
    monkeypatch.setattr(compiled, "_sums", lambda *a: taken.append(a[2]) or original(*a))
    monkeypatch.setattr(compiled, "spread", lambda *a: spread.append(a) or spreading(*a))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(5, 30, 24, generator=gen).to(dtype)
    mask = mask_from_lengths([30, 0, 7, 1, 19], 30).bool()
    mask[4, :5] = False
    x[~mask] = float("nan")
    pooler = get_pooler(name, hidden_size=24)
    grad = torch.randn(5, pooler.output_dim, generator=gen).to(dtype)
    mix = torch.randn(5, 30, 24, generator=gen).to(dtype)

    def step():
        leaf = x.clone().requires_grad_()
        out = pooler(leaf, mask)
        out.backward(grad)
        upstream = grad.clone().requires_grad_()
        (again,) = torch.autograd.grad(pooler(leaf, mask), leaf, upstream, create_graph=True)
        (second,) = torch.autograd.grad((again.float() * mix.float()).sum(), upstream)
        (batched,) = torch.autograd.grad(pooler(leaf, mask), leaf, torch.stack([grad, 2 * grad]),
                                         is_grads_batched=True)
        return out.detach(), leaf.grad, again.detach(), second, batched

    values, *gradients = step()
    form = compiled.SUM if name == "sum" else compiled.MEAN_OF_TERMS if dtype == torch.float32 else compiled.MEAN_OF_SUM
    assert taken == [form] * 3  # the three training steps
    assert len(spread) == (dtype == torch.bfloat16)  # the plain backward pass's; the others multiply
    monkeypatch.setattr(compiled, "_enabled", False)
    expected, *plain = step()
    torch.testing.assert_close(values, expected, rtol=1e-6 if dtype == torch.float32 else 2 ** -8, atol=1e-6)
    for got, want in zip(gradients, plain):
        assert torch.equal(got, want)
    assert not gradients[0][~mask].any() and torch.isfinite(gradients[0]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_mean_of_values_derived_from_the_padding_keeps_the_product_in_training(dtype, monkeypatch):
    """masking.masked_mean(..., derived=True), gem's powers: the loops in inference, the product forms in training,
    whose output a NaN at the padding makes NaN (so that the pooler pools again from zeroed padding). Catches the
    rule dropped on either dtype's path (bf16's goes through masked_sum)."""
    taken = []
    original = compiled._sums
    monkeypatch.setattr(compiled, "_sums", lambda *a: taken.append(a[2]) or original(*a))
    x = torch.randn(2, 5, 8).to(dtype)
    mask = mask_from_lengths([5, 2], 5).bool()
    x[1, 3] = float("nan")
    with torch.no_grad():
        assert torch.isfinite(masking.masked_mean(x, mask, derived=True)).all() and len(taken) == 1
    assert masking.masked_mean(x.requires_grad_(), mask, derived=True)[1].isnan().all() and len(taken) == 1


@pytest.mark.parametrize("name", ["mean", "mean_sqrt_len", "mean_max", "max", "min"])
def test_bf16_statistics_through_the_loops_are_the_correctly_rounded_ones(name, monkeypatch):
    """The poolers on bf16 x in inference take the loops, and give the float64 reference rounded once to bf16 (the
    mean's float32 sum divided, then rounded by torch to the nearest, ties to even): as the torch forms do
    (test_pooling_methods.py). Catches a sum rounded before its division and a pooler that never reaches the loops.
    (Sum pooling's own bf16 output stays one embedding bag: docs/performance.md.)"""
    calls = []
    for form in ("masked_sum", "masked_mean", "masked_extreme"):
        original = getattr(compiled, form)
        monkeypatch.setattr(compiled, form, lambda *a, f=original, **k: calls.append(a) or f(*a, **k))
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 40, 64, generator=gen).bfloat16()
    mask = mask_from_lengths([40, 1, 17, 0, 33, 9], 40).bool()
    total = (x.double() * mask[..., None]).sum(dim=1)
    count = mask.sum(dim=1, keepdim=True).clamp(min=1).double()
    with fast.disabled():
        extreme = {largest: masking.masked_fill_reduce(x, mask, largest)[0] for largest in (True, False)}
    reference = {"mean": total / count, "mean_sqrt_len": total / count.sqrt(), "max": extreme[True],
                 "min": extreme[False]}
    reference["mean_max"] = torch.cat([reference["mean"], extreme[True].double()], 1)
    with torch.inference_mode():
        got = get_pooler(name, hidden_size=64)(x, mask)
    assert got.dtype == torch.bfloat16 and calls
    assert torch.equal(got, reference[name].to(torch.bfloat16)), (got != reference[name].to(torch.bfloat16)).sum()


def test_the_loops_take_only_what_they_read(monkeypatch):
    """takes: float32 and bf16 contiguous (B, T, D) x under a bool mask, outside autocast, with numba installed and
    the loops on. Catches fp16 read as bf16 bits, a strided x read as if contiguous, a float mask, a sum that would
    differ from autocast's bf16 product, and the switches ignored."""
    x, mask = torch.randn(2, 5, 8), mask_from_lengths([5, 2], 5).bool()
    assert compiled.takes(x, mask) and compiled.takes(x.bfloat16(), mask)
    assert not compiled.takes(x.half(), mask) and not compiled.takes(x.double(), mask)
    assert not compiled.takes(x.transpose(0, 1).contiguous().transpose(0, 1), mask)
    assert not compiled.takes(x, mask.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not compiled.takes(x, mask)
    monkeypatch.setattr(compiled, "_enabled", False)
    assert not compiled.takes(x, mask)


def test_without_numba_the_torch_forms_answer(monkeypatch):
    """With numba missing (the ``kernels`` extra not installed) the loops are never taken and every statistic still
    pools, to the same values (sum pooling's bf16 bag may take a tie away from zero: within one unit in the last place
    there). Catches the loops taken without numba, and a torch form that gives other values."""
    x, mask = torch.randn(3, 6, 8).bfloat16(), mask_from_lengths([6, 0, 3], 6).bool()
    with torch.inference_mode():
        expected = {name: get_pooler(name, hidden_size=8)(x, mask) for name in ("mean", "sum", "max")}
        monkeypatch.setattr(compiled, "_loops", lambda: None)
        assert not compiled.available()
        for name, values in expected.items():
            got = get_pooler(name, hidden_size=8)(x, mask)
            assert torch.equal(got, values) or name == "sum" and torch.allclose(got, values, rtol=2 ** -7, atol=0)


def test_a_float32_mean_of_huge_values_stays_finite():
    """The float32 mean through the loops sums each token times 1/n, the plain product's terms: two real tokens at 3e38
    give 3e38, as the plain form does, where their sum divided by 2 would be inf. Catches a float32 mean taken as a sum
    divided afterwards."""
    x = torch.full((2, 3, 8), 3e38)
    x[1, 0] = -3e38
    mask = mask_from_lengths([2, 3], 3).bool()
    with torch.inference_mode():
        got = get_pooler("mean", hidden_size=8)(x, mask)
        with fast.disabled():
            expected = get_pooler("mean", hidden_size=8)(x, mask)
    assert torch.isfinite(got).all() and torch.allclose(got, expected, rtol=1e-6)


def test_numba_that_cannot_run_warns_once_and_the_torch_forms_answer(monkeypatch):
    """numba installed but not importable (a numpy newer than it supports, say): one RuntimeWarning naming it, the loops
    unavailable, and the poolers' values from the torch forms. Catches an import error that escapes into every pooler
    call."""
    import sys

    x, mask = torch.randn(2, 4, 8), mask_from_lengths([4, 2], 4).bool()
    with fast.disabled():
        expected = get_pooler("max", hidden_size=8)(x, mask)
    compiled._loops.cache_clear()
    monkeypatch.setitem(sys.modules, "poolkit.pooling.compiled_loops", None)  # its import raises ImportError
    try:
        with pytest.warns(RuntimeWarning, match="numba is installed but cannot be used"):
            assert not compiled.available()
        assert not compiled.takes(x, mask)
        with torch.inference_mode():
            assert torch.equal(get_pooler("max", hidden_size=8)(x, mask), expected)
    finally:
        monkeypatch.undo()
        compiled._loops.cache_clear()

