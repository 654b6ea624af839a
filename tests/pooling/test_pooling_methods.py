"""Each pooler against a straightforward reference computation, and the layer family's specifics."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import HIDDEN, NUM_LAYERS, make_pooler, mask_from_lengths, random_layers
from poolkit import PoolkitError, get_pooler, list_poolers
from poolkit.pooling import compiled, fast


def close(a, b, tol=1e-5):
    return torch.allclose(a.float(), b.float(), atol=tol, rtol=tol)


@pytest.fixture
def batch():
    x = torch.randn(3, 6, HIDDEN)
    lengths = [6, 2, 4]
    return x, mask_from_lengths(lengths, 6), lengths


def rows(x, lengths):
    return [x[i, :n] for i, n in enumerate(lengths)]


def test_statistics_match_references(batch):
    x, mask, lengths = batch
    reference = {
        "cls": lambda r: r[0], "last": lambda r: r[-1], "mean": lambda r: r.mean(0),
        "sum": lambda r: r.sum(0), "max": lambda r: r.max(0).values, "min": lambda r: r.min(0).values,
        "mean_sqrt_len": lambda r: r.sum(0) / len(r) ** 0.5,
        "mean_max": lambda r: torch.cat([r.mean(0), r.max(0).values]),
    }
    for name, fn in reference.items():
        expected = torch.stack([fn(r) for r in rows(x, lengths)])
        assert close(make_pooler(name)(x, mask), expected), name


def test_gem_limits(batch):
    x, mask, lengths = batch
    positive = x.abs() + 0.1
    big_p = get_pooler("gem", HIDDEN, p=60.0)(positive, mask)
    maxima = torch.stack([r.max(0).values for r in rows(positive, lengths)])
    floor = maxima * torch.tensor(lengths, dtype=torch.float32)[:, None] ** (-1 / 60)  # (mean x^p)^(1/p) >= max n^(-1/p)
    assert (big_p <= maxima + 1e-4).all() and (big_p >= floor - 1e-4).all()
    classic = get_pooler("gem", HIDDEN, p=3.0, signed=False)(positive, mask)
    expected = torch.stack([(r ** 3).mean(0) ** (1 / 3) for r in rows(positive, lengths)])
    assert close(classic, expected, 1e-4)


def test_gem_fixed_p_1_is_the_mean(batch):
    """A fixed p = 1 is the mean to float rounding: p nudged to 1.001 (to keep softplus finite) is off by ~1e-3."""
    x, mask, lengths = batch
    pooled = get_pooler("gem", HIDDEN, p=1.0, learn_p=False)(x * 5, mask)
    assert close(pooled, torch.stack([r.mean(0) for r in rows(x * 5, lengths)]), 1e-5)


def test_signed_gem_on_mixed_signs_is_the_odd_power_mean(batch):
    """sign(m) |m|^(1/p), m = mean(sign(x) |x|^p): a clamp to eps (the classic form) or |x|^p without the sign
    gives other values on features whose tokens disagree in sign."""
    x, mask, lengths = batch
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])[None, :, None]  # every row: both signs per feature
    x = 2 * x.abs() * signs
    pooled = get_pooler("gem", HIDDEN, p=3.0, learn_p=False)(x, mask)
    expected = []
    for r in rows(x.double(), lengths):
        m = (r.sign() * r.abs() ** 3).mean(0)
        expected.append(m.sign() * m.abs() ** (1 / 3))
    assert close(pooled, torch.stack(expected), 1e-4)


def test_lse_interpolates_between_mean_and_max(batch):
    x, mask, lengths = batch
    hot = get_pooler("lse", HIDDEN, temperature=1e-3)(x, mask)
    cold = get_pooler("lse", HIDDEN, temperature=1e3)(x, mask)
    assert close(hot, torch.stack([r.max(0).values for r in rows(x, lengths)]), 1e-2)
    assert close(cold, torch.stack([r.mean(0) for r in rows(x, lengths)]), 1e-2)


@pytest.mark.parametrize("t", [0.5, 2.0])
def test_lse_is_t_log_mean_exp_over_real_tokens(batch, t):
    """The documented t * log(mean exp(x / t)) (a mean inside the log: a sum is larger by t log n, and
    counting padded tokens in n shifts short rows by t log(T / n)). The temperature starts at t itself (it was
    t + 1e-4, the floor added on top: 3.9e-4 from timm's LsePlus2d), so the tolerance is float32's."""
    x, mask, lengths = batch
    pooled, weights = get_pooler("lse", HIDDEN, temperature=t, learn_temperature=False)(x, mask, return_weights=True)
    expected = torch.stack([t * torch.log(torch.exp(r.double() / t).mean(0)) for r in rows(x, lengths)])
    assert close(pooled, expected, 1e-5)
    for i, r in enumerate(rows(x, lengths)):  # each token's share of exp(x / t), averaged over features
        assert close(weights[i, : len(r)], torch.softmax(r / t, dim=0).mean(1), 1e-5)


@pytest.mark.parametrize("dtype,bits", [(torch.bfloat16, 7), (torch.float16, 10)])
@pytest.mark.parametrize("name,power", [("mean", 0.0), ("sum", 1.0), ("mean_sqrt_len", 0.5)])
def test_long_half_precision_rows_are_summed_in_float32(name, power, dtype, bits, path):
    """T = 2048 half-precision tokens near 1: the result is the exact float64 value to within one unit in the last
    place of the half format (2^-bits relative). Accumulating in the half format itself stalls once the running sum
    outgrows the terms: measured 90 ulp (70%) off for bf16 and 13-25 ulp for fp16."""
    gen = torch.Generator().manual_seed(0)
    lengths = [2048, 1500, 1031, 7]
    x = (1 + 0.5 * torch.randn(4, 2048, HIDDEN, generator=gen)).to(dtype)
    pooled = get_pooler(name, HIDDEN)(x, mask_from_lengths(lengths, 2048))
    exact = torch.stack([r.double().sum(0) / len(r) ** (1 - power) for r in rows(x, lengths)])
    assert pooled.dtype == dtype
    assert ((pooled.double() - exact).abs() <= exact.abs() * 2.0 ** -bits).all()


def test_attention_is_a_masked_softmax_over_its_scores(batch):
    x, mask, lengths = batch
    pooler = get_pooler("attention", HIDDEN, attn_size=12)
    pooled, weights = pooler(x, mask, return_weights=True)
    for i, r in enumerate(rows(x, lengths)):
        w = torch.softmax(pooler.score(r).squeeze(-1), dim=0)
        assert close(weights[i, : len(r)], w)
        assert close(pooled[i], w @ r)
    assert pooler.score[0].out_features == 12
    assert get_pooler("attention", HIDDEN).score[0].out_features == 512  # the recipe's default
    assert get_pooler("attention_head", HIDDEN).score[0].out_features == HIDDEN


def test_gated_attention_reference(batch):
    x, mask, lengths = batch
    p = get_pooler("gated_attention", HIDDEN, attn_size=8)
    pooled = p(x, mask)
    for i, r in enumerate(rows(x, lengths)):
        s = p.score(torch.tanh(p.value(r)) * torch.sigmoid(p.gate(r))).squeeze(-1)
        assert close(pooled[i], torch.softmax(s, 0) @ r)


def _plain_scores(p, r):
    """Scores of the real tokens r (n, D) by the pooler's own modules, the textbook way: (n,) or (n, H)."""
    if p.name == "gated_attention":
        return p.score(torch.tanh(p.value(r)) * torch.sigmoid(p.gate(r))).squeeze(-1)
    if p.name == "multihead_attention":
        hidden = torch.tanh(p.hidden(r)).view(len(r), p.num_heads, -1)
        return (hidden * p.head_scores).sum(-1)
    return p.score(r).squeeze(-1)


@pytest.mark.parametrize("name", ["attention", "attention_head", "multihead_attention", "gated_attention"])
@pytest.mark.parametrize("grad,blocks", [(False, "one"), (True, "one"), (True, "3 tokens")])
def test_attention_family_output_and_gradients_match_the_textbook_form(name, grad, blocks, monkeypatch):
    """Row by row on the real tokens only, with autograd: the same output, and the same gradients for the
    hidden states and every parameter (the fast paths skip padded tokens, gather them in blocks, and
    gather again in backward)."""
    if blocks == "3 tokens":
        monkeypatch.setattr(fast, "GATHER_CHUNK_BYTES", 3 * HIDDEN * 4)
        monkeypatch.setattr(fast, "THREADED_BLOCK_BYTES", 0)  # those blocks at any thread count
    gen = torch.Generator().manual_seed(5)
    lengths = [7, 2, 5, 0]
    x = torch.randn(4, 7, HIDDEN, generator=gen)
    mask = mask_from_lengths(lengths, 7)
    p = make_pooler(name)
    xs = [x.clone().requires_grad_(grad) for _ in range(2)]
    with torch.set_grad_enabled(grad):
        pooled = p(xs[0], mask)
        expected = []
        for i, n in enumerate(lengths):
            if n == 0:
                expected.append(torch.zeros(p.output_dim))
                continue
            r = xs[1][i, :n]
            w = torch.softmax(_plain_scores(p, r), dim=0).reshape(n, -1)  # (n, heads)
            expected.append((w.transpose(0, 1) @ r).flatten())
        expected = torch.stack(expected)
    assert close(pooled, expected)
    if not grad:
        return
    g = torch.randn(pooled.shape, generator=gen)
    params = list(p.parameters())
    ours = torch.autograd.grad(pooled, [xs[0], *params], g)
    theirs = torch.autograd.grad(expected, [xs[1], *params], g, allow_unused=True)
    for a, b in zip(ours, theirs):
        assert close(a, torch.zeros_like(a) if b is None else b)


@pytest.mark.parametrize("emulated", [True, False])
@pytest.mark.parametrize("lengths", [[7, 2, 5, 1], [7, 7, 7, 7]], ids=["padded", "unpadded"])
def test_half_precision_scoring_runs_in_float32_where_the_cpu_emulates_half_matmuls(emulated, lengths, monkeypatch):
    """Where torch emulates bf16 matmuls (fast.emulated_half, forced here either way), the scoring projection runs in
    float32 a block at a time, padded batches or not, each product rounded once to bf16: within bf16 rounding of the
    plain bf16 form, gradients included (weights summed over blocks in float32), and of the float32 product itself.
    Catches the rule ignored (a bf16 matmul where it is emulated, or a float32 one where it is not), the unpadded
    batch left to the slow matmul, rows dropped or repeated between blocks, or gradients lost in the casts."""
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}) if emulated else frozenset())
    monkeypatch.setattr(fast, "GATHER_CHUNK_BYTES", 3 * HIDDEN * 2)  # blocks of 3 tokens, the last one short
    monkeypatch.setattr(fast, "THREADED_BLOCK_BYTES", 0)
    widened = []
    original = fast.GatheredLinear.forward
    monkeypatch.setattr(fast.GatheredLinear, "forward", staticmethod(
        lambda tokens, index, weight, bias: widened.append(index is None) or original(tokens, index, weight, bias)))
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(4, 7, HIDDEN, generator=gen).bfloat16()
    mask = mask_from_lengths(lengths, 7).bool()
    for name in ("attention", "attention_head", "multihead_attention", "gated_attention"):
        p = make_pooler(name).bfloat16()
        results = []
        for fast_forms in (True, False):
            monkeypatch.setattr(fast, "_enabled", fast_forms)
            xs = x.clone().requires_grad_()
            pooled = p(xs, mask)
            g = torch.randn(pooled.shape, generator=torch.Generator().manual_seed(0)).bfloat16()
            results.append([pooled, *torch.autograd.grad(pooled, [xs, *p.parameters()], g)])
        for got, expected in zip(*results):
            scale = expected.float().abs().max().item()
            torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=scale * 2 ** -6)
    padded = not all(n == 7 for n in lengths)
    assert widened == ([False] * 4 if padded else [True] * 4 if emulated else [])  # the fast forms of 4 poolers

    tokens, weight, bias = x.reshape(-1, HIDDEN), torch.randn(5, HIDDEN).bfloat16(), torch.randn(5).bfloat16()
    index = mask.reshape(-1).nonzero().squeeze(1)
    exact = torch.nn.functional.linear(tokens.float()[index], weight.float(), bias.float())
    with _ProductDtypes() as products:
        product = fast.GatheredLinear.apply(tokens, index, weight, bias)
    assert products.seen == {torch.float32 if emulated else torch.bfloat16}
    rounded_once = exact.bfloat16() if emulated else torch.nn.functional.linear(tokens[index], weight, bias)
    torch.testing.assert_close(product, rounded_once, rtol=2 ** -8, atol=1e-6)


native_bf16 = pytest.mark.skipif(fast.emulated_half(torch.bfloat16) or not torch.backends.mkldnn.is_available(),
                                 reason="this CPU has no native bf16 matmul: the activations stay outside the product")


@native_bf16
@pytest.mark.parametrize("activations", [("tanh",), ("sigmoid",), ("tanh", "sigmoid"), (None, "sigmoid")])
@pytest.mark.parametrize("taken", ["every token", "some tokens", "no token"])
def test_activated_linear_is_the_activation_of_the_float32_product(activations, taken):
    """fast.activated_linear (oneDNN's linear with the activation as a post-op) on gathered tokens: each column block's
    activation of the float32 product, rounded once to bf16 (within one bf16 rounding), and within bf16 rounding of
    fast.activate on the bf16 product, the plain form, block for block. Catches rows dropped, repeated or reordered in
    the gather, an activation on the wrong column block or left out, the bias left out, and no rows (a batch of no real
    token) failing."""
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randn(8, HIDDEN, generator=gen).bfloat16()
    weight = (torch.randn(6, HIDDEN, generator=gen) * HIDDEN ** -0.5).bfloat16()
    bias = torch.randn(6, generator=gen).bfloat16()
    index = {"every token": None, "some tokens": torch.tensor([0, 2, 3, 5, 6, 7, 1]),
             "no token": torch.tensor([], dtype=torch.long)}[taken]
    chosen = tokens if index is None else tokens[index]
    exact = fast.activate(torch.nn.functional.linear(chosen.float(), weight.float(), bias.float()), activations)
    with torch.inference_mode():
        got = fast.activated_linear(tokens, index, weight, bias, activations)
        plain = fast.activate(torch.nn.functional.linear(chosen, weight, bias), activations)
    assert len(got) == len(exact) == len(plain) == len(activations)
    for ours, wide, bf16 in zip(got, exact, plain):
        assert ours.dtype == torch.bfloat16 and ours.shape == (len(chosen), 6 // len(activations))
        torch.testing.assert_close(ours.float(), wide.bfloat16().float(), rtol=2 ** -8, atol=1e-6)
        torch.testing.assert_close(ours.float(), bf16.float(), rtol=2 ** -6, atol=2 ** -6)


def test_activate_gives_each_block_its_activation_and_autograd_its_gradients():
    """fast.activate, the plain form: each column block its activation (None: as it is), and with several blocks the
    gradient of every block correct (the last activated block runs in place; in place, an earlier one's would change
    what autograd saved). Catches an activation on the wrong block, and the in-place error or a wrong gradient."""
    gen = torch.Generator().manual_seed(6)
    z = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    for activations in [("tanh",), ("tanh", "sigmoid"), (None, "sigmoid"), ("sigmoid", None, "tanh")]:
        leaf = z.clone().requires_grad_()
        blocks = fast.activate(leaf * 1, activations)  # a non-leaf, as a product is
        width = 6 // len(activations)
        for i, (block, name) in enumerate(zip(blocks, activations)):
            part = z[:, i * width:(i + 1) * width]
            torch.testing.assert_close(block, part if name is None else getattr(torch, name)(part))
        assert torch.autograd.gradcheck(lambda t: fast.activate(t * 1, activations), (leaf,))


@native_bf16
def test_half_precision_scoring_without_a_gradient_activates_inside_the_product(monkeypatch):
    """In bf16 on a CPU with native bf16 matmuls, without a gradient, the tanh scorers (attention, attention_head,
    multihead_attention) and gated_attention's abmil (tanh and sigmoid) and glu (sigmoid) take oneDNN's fused linear,
    and pool within bf16 rounding of the plain forms; with a gradient taken, in float32 and fp16, and with oneDNN
    switched off, they do not. Catches the fused form taken where it has no gradient, in a dtype where it was not
    measured faster, or against the user's switch, or missing from a scorer."""
    taken = []
    original = fast.activated_linear
    monkeypatch.setattr(fast, "activated_linear", lambda *a: taken.append(a[4]) or original(*a))
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 6, HIDDEN, generator=gen)
    mask = mask_from_lengths([6, 2, 4], 6).bool()
    poolers = [("attention", {}), ("attention_head", {}), ("multihead_attention", {}), ("gated_attention", {}),
               ("gated_attention", {"scorer": "glu"})]
    for name, options in poolers:
        p, before = get_pooler(name, hidden_size=HIDDEN, **options), len(taken)
        p(x, mask).sum().backward()  # a gradient taken: no fused form
        with torch.inference_mode():
            p(x, mask)  # float32: no fused form
            p.half()(x.half(), mask)  # fp16: none
        p = p.bfloat16()
        p(x.bfloat16(), mask).sum().backward()
        with torch.inference_mode(), torch.backends.mkldnn.flags(enabled=False):
            p(x.bfloat16(), mask)  # oneDNN switched off: none
        assert len(taken) == before, name
        with torch.inference_mode():
            got = p(x.bfloat16(), mask)
            with fast.disabled():
                expected = p(x.bfloat16(), mask)
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=expected.float().abs().max().item() / 64)
    assert taken == [("tanh",)] * 3 + [("tanh", "sigmoid"), (None, "sigmoid")]


def test_where_bf16_products_are_emulated_the_activations_stay_outside_the_product(monkeypatch):
    """Where this CPU emulates bf16 matmuls (fast.emulated_half, forced here), no scorer takes oneDNN's fused linear,
    which runs its products in bf16. Catches the fused form taken on CPUs where its bf16 product is the slow one."""
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}))
    monkeypatch.setattr(fast, "activated_linear", lambda *a: pytest.fail("the fused form was taken"))
    x, mask = torch.randn(3, 6, HIDDEN).bfloat16(), mask_from_lengths([6, 2, 4], 6).bool()
    for name in ("attention", "multihead_attention", "gated_attention"):
        with torch.inference_mode():
            assert torch.isfinite(make_pooler(name).bfloat16()(x, mask)).all()


@pytest.mark.parametrize("taken", ["every token", "some tokens"])
def test_gathered_linear_gradients_match_the_plain_product_block_by_block(taken, monkeypatch):
    """fast.GatheredLinear in blocks of two tokens: its tokens', weight's and bias's gradients are those of
    ``F.linear(tokens[index])``, with 0 for the tokens not taken. Catches a block of the tokens' gradient left
    unwritten (every token taken: the gradient starts uninitialised, so each block must be written), and a token not
    taken given a gradient."""
    monkeypatch.setattr(fast, "GATHER_CHUNK_BYTES", 2 * HIDDEN * 4)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # block_bytes: the single-thread size
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randn(7, HIDDEN, generator=gen)  # every taken token's gradient is nonzero: an unwritten one fails
    weight, bias = torch.randn(5, HIDDEN, generator=gen), torch.randn(5, generator=gen)
    index = None if taken == "every token" else torch.tensor([0, 2, 3, 6])
    grad = torch.randn(7 if index is None else 4, 5, generator=gen)
    got = torch.autograd.grad(fast.GatheredLinear.apply(tokens.requires_grad_(), index, weight.requires_grad_(),
                                                        bias.requires_grad_()), [tokens, weight, bias], grad)
    chosen = tokens if index is None else tokens[index]
    expected = torch.autograd.grad(torch.nn.functional.linear(chosen, weight, bias), [tokens, weight, bias], grad)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name, options", [("latent", {}), ("adapool", {}),
                                           ("multihead_attention", {"combine": "project"})])
def test_half_precision_dense_layers_multiply_in_float32_where_the_cpu_emulates_half_matmuls(name, options,
                                                                                             monkeypatch):
    """The layers after the attention, Linear and MLP, multiply in float32 where bf16 matmuls are emulated
    (forced here), rounded once to bf16: within bf16 rounding of the plain bf16 form, gradients included; bf16 products
    where they are not. A layer with a forward hook is called as it is, so the hook still fires. Catches a bf16 product
    left where it is emulated, a float32 one where it is not, or hooks skipped."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 6, HIDDEN, generator=gen).bfloat16()
    mask = mask_from_lengths([6, 2, 4], 6).bool()
    p = make_pooler(name, **options).bfloat16()
    for emulated in (True, False):
        monkeypatch.setattr(fast, "_emulated_halves", lambda e=emulated: frozenset({torch.bfloat16}) if e else frozenset())
        results = []
        for fast_forms in (True, False):
            monkeypatch.setattr(fast, "_enabled", fast_forms)
            xs = x.clone().requires_grad_()
            with _ProductDtypes() as products:
                pooled = p(xs, mask)
            results.append([pooled, *torch.autograd.grad(pooled, [xs, *p.parameters()], torch.ones_like(pooled))])
            if fast_forms:  # multihead_attention's score head (N, H * a) x (H * a, H) stays a bf16 product
                assert (products.seen == {torch.float32} | ({torch.bfloat16} if name == "multihead_attention" else set())
                        if emulated else torch.bfloat16 in products.seen)
                dense = [p.project] if name == "multihead_attention" else [p.out, *(getattr(p, "mlp", None) or [])]
                assert all(products.weights[m.weight.shape] == {torch.float32 if emulated else torch.bfloat16}
                           for m in dense if type(m) is nn.Linear)
        for got, expected in zip(*results):
            scale = expected.float().abs().max().item()
            torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=scale * 2 ** -5)
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}))
    monkeypatch.setattr(fast, "_enabled", True)
    layer = p.project if name == "multihead_attention" else p.out
    seen = []
    handle = layer.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    p(x, mask)
    assert seen == [torch.bfloat16]
    handle.remove()
    layer.register_full_backward_hook(lambda module, grad_in, grad_out: seen.append("backward"))
    p(x.clone().requires_grad_(), mask).sum().backward()
    assert seen == [torch.bfloat16, "backward"]


def test_double_backward_runs_through_the_float32_scoring_products(monkeypatch):
    """A gradient penalty (the gradient of a gradient) through the float32 blocks where bf16 matmuls are emulated
    (forced): within bf16 rounding of the plain bf16 form's. Catches a backward pass written in operations autograd
    cannot differentiate again, or casts that cut the second-order path."""
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}))
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 6, HIDDEN, generator=gen).bfloat16()
    mask = mask_from_lengths([6, 2, 4], 6).bool()
    p = make_pooler("attention").bfloat16()
    results = []
    for fast_forms in (True, False):
        monkeypatch.setattr(fast, "_enabled", fast_forms)
        xs = x.clone().requires_grad_()
        (first,) = torch.autograd.grad(p(xs, mask).float().pow(2).sum(), xs, create_graph=True)
        results.append(torch.autograd.grad(first.float().pow(2).sum(), xs)[0])
    scale = results[1].float().abs().max().item()
    assert scale > 0
    torch.testing.assert_close(results[0].float(), results[1].float(), rtol=0, atol=scale * 2 ** -4)


@pytest.mark.parametrize("emulated", [True, False])
@pytest.mark.parametrize("scores", [1, 3])
def test_score_products_take_no_half_matmul_with_an_inner_dimension_of_k_where_half_matmuls_are_emulated(
        emulated, scores, monkeypatch):
    """fast.score_product (an attention's logits: bf16 tokens h (..., A) times K score vectors) against F.linear,
    with bf16 matmuls counted as emulated or not (forced): the same values and weight gradient; h's gradient the same
    exactly for K = 1 (a broadcast multiply: one rounding of an exact product, as the matmul's) and within one bf16
    rounding for K = 3 (a float32 product rounded once). Where bf16 is emulated no bf16 product with an inner
    dimension of K is taken (K = 1: none at all); where it is not, F.linear's own backward runs. Catches the outer
    product left to the generic bf16 loop, the custom form where torch has the kernels, or a gradient of the wrong
    shape or with the weight transposed."""
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}) if emulated else frozenset())
    gen = torch.Generator().manual_seed(6)
    h = torch.randn(2, 5, HIDDEN, generator=gen).bfloat16()  # (B, T, A): the linear scorer scores the tokens
    w = torch.randn(scores, HIDDEN, generator=gen).bfloat16()
    g = torch.randn(2, 5, scores, generator=gen).bfloat16()
    hs, ws = [h.clone().requires_grad_() for _ in range(2)], [w.clone().requires_grad_() for _ in range(2)]
    ours, theirs = fast.score_product(hs[0], ws[0]), torch.nn.functional.linear(hs[1], ws[1])
    assert (ours.grad_fn.name() == "ScoreProductBackward") is emulated and torch.equal(ours, theirs)
    with _InnerDimensions() as products:
        got_h, got_w = torch.autograd.grad(ours, [hs[0], ws[0]], g)
    expected_h, expected_w = torch.autograd.grad(theirs, [hs[1], ws[1]], g)
    torch.testing.assert_close(got_w, expected_w)
    if scores == 1:
        assert torch.equal(got_h, expected_h)
    else:
        torch.testing.assert_close(got_h.float(), expected_h.float(), rtol=2 ** -7, atol=1e-6)
    avoided = [inner for inner, dtypes in products.inner
               if inner == scores and (scores == 1 or torch.bfloat16 in dtypes)]
    assert products.inner and bool(avoided) is not emulated  # the weight gradient's product over the tokens is seen


def test_score_products_are_plain_in_float32(monkeypatch):
    """float32 logits keep F.linear and its own backward, also with half matmuls counted as emulated. Catches the
    custom form taken where it gained nothing (docs/performance.md)."""
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}))
    h, w = torch.randn(4, HIDDEN, requires_grad=True), torch.randn(1, HIDDEN, requires_grad=True)
    assert fast.score_product(h, w).grad_fn.name() != "ScoreProductBackward"


@pytest.mark.parametrize("queries", [1, 2])
def test_per_row_score_products_write_the_token_gradient_in_its_own_layout(queries):
    """fast.score_product with per-row queries (B, K, A) (latent / adapool's queries folded into the keys) against
    torch's bmm: the same values and gradients; for one query per row the custom form, whose token gradient is a
    broadcast multiply laid out as the tokens are (torch's is a batched matmul with an inner dimension of 1, written
    transposed); several queries, and tokens that take no gradient, keep torch's. Catches the custom form left out
    (or taken for several queries, or for the queries' gradient alone), a transposed or wrongly laid out gradient, or
    a weight gradient summed over the wrong axis."""
    gen = torch.Generator().manual_seed(12)
    h = torch.randn(3, 6, HIDDEN, generator=gen)
    q = torch.randn(3, queries, HIDDEN, generator=gen)
    g = torch.randn(3, 6, queries, generator=gen)
    hs, qs = [h.clone().requires_grad_() for _ in range(2)], [q.clone().requires_grad_() for _ in range(2)]
    ours = fast.score_product(hs[0], qs[0])
    theirs = torch.bmm(qs[1], hs[1].transpose(1, 2)).transpose(1, 2)
    assert (ours.grad_fn.name() == "ScoreProductBackward") is (queries == 1)
    torch.testing.assert_close(ours, theirs)
    with _InnerDimensions() as products:
        got_h, got_q = torch.autograd.grad(ours, [hs[0], qs[0]], g)
    expected_h, expected_q = torch.autograd.grad(theirs, [hs[1], qs[1]], g)
    torch.testing.assert_close(got_h, expected_h)
    torch.testing.assert_close(got_q, expected_q)
    if queries == 1:
        assert got_h.is_contiguous() and [inner for inner, _ in products.inner] == [6]  # the query gradient's only
    frozen = fast.score_product(h, qs[0])  # tokens without a gradient (a frozen encoder): nothing to gain, torch's
    assert frozen.grad_fn.name() != "ScoreProductBackward"


@pytest.mark.parametrize("scores", [1, 3])
def test_score_products_differentiate_once_and_twice(scores):
    """Gradients and gradients of gradients through fast.ScoreProduct, shared and per-row weights (float64, numerical
    checks). Catches a wrong first derivative (in any branch, the per-row float32 product included) or a backward
    pass written in operations autograd cannot differentiate again."""
    gen = torch.Generator().manual_seed(8)
    h = torch.randn(2, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    shared, per_row = (torch.randn(*rows, scores, 5, dtype=torch.float64, generator=gen) for rows in ((), (2,)))
    for w in (shared, per_row):
        inputs = (h, w.requires_grad_())
        assert torch.autograd.gradcheck(fast.ScoreProduct.apply, inputs)
        assert torch.autograd.gradgradcheck(fast.ScoreProduct.apply, inputs)


@pytest.mark.parametrize("scorer", ["glu", "abmil"])
def test_score_layers_with_hooks_are_called_as_they_are(scorer, monkeypatch):
    """The two-factor scorers' logit layer goes through fast.score_product when it is a plain bias-free Linear (bf16,
    counted as emulated), and is called as a module when it has a hook, so the hook fires, in training too. Catches
    hooks skipped by the fast form, or the fast form never taken."""
    monkeypatch.setattr(fast, "_emulated_halves", lambda: frozenset({torch.bfloat16}))
    x = torch.randn(3, 6, HIDDEN, generator=torch.Generator().manual_seed(9)).bfloat16().requires_grad_()
    mask = mask_from_lengths([6, 2, 4], 6).bool()
    p = make_pooler("attention", scorer=scorer).bfloat16()
    seen = []
    original = fast.ScoreProduct.apply
    monkeypatch.setattr(fast.ScoreProduct, "apply", lambda *a: seen.append("fast") or original(*a))
    p(x, mask).sum().backward()
    handle = p.score.register_forward_hook(lambda module, args, out: seen.append("hook"))
    p(x, mask).sum().backward()
    handle.remove()
    assert seen == ["fast", "hook"]


def test_half_matmuls_count_as_emulated_exactly_where_torch_has_no_onednn_kernel_for_them():
    """Catches the rule reversed (float32 products on CPUs with bf16 instructions), or float32 counted as emulated."""
    assert fast.emulated_half(torch.bfloat16) is not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert fast.emulated_half(torch.float16) is not torch.ops.mkldnn._is_mkldnn_fp16_supported()
    assert not fast.emulated_half(torch.float32) and not fast.emulated_half(torch.float64)


class _ProductDtypes(torch.overrides.TorchFunctionMode):
    """Records the dtypes the matrix products inside the block are taken in."""

    def __init__(self):
        super().__init__()
        self.seen, self.weights = set(), {}  # every product's dtypes; F.linear's by its weight's shape

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("mm", "addmm", "linear", "matmul", "bmm", "einsum"):
            self.seen.update(a.dtype for a in args if isinstance(a, torch.Tensor))
        if name == "linear":
            self.weights.setdefault(args[1].shape, set()).add(args[1].dtype)
        return func(*args, **(kwargs or {}))


class _InnerDimensions(TorchDispatchMode):
    """Records (inner dimension, operand dtypes) of every matrix product ATen runs inside the block, backward passes
    included (a dispatch mode sees the autograd engine's calls, a function mode does not)."""

    def __init__(self):
        super().__init__()
        self.inner = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.bmm.default):
            self.inner.append((args[0].shape[-1], {args[0].dtype, args[1].dtype}))
        elif func is torch.ops.aten.addmm.default:
            self.inner.append((args[1].shape[-1], {args[1].dtype, args[2].dtype}))
        return func(*args, **(kwargs or {}))


def test_multihead_output_dims():
    x = torch.randn(2, 5, HIDDEN)
    assert get_pooler("multihead_attention", HIDDEN, num_heads=3)(x).shape == (2, 3 * HIDDEN)
    assert get_pooler("multihead_attention", HIDDEN, num_heads=3, combine="project")(x).shape == (2, HIDDEN)
    assert get_pooler("latent", HIDDEN, num_queries=4, num_heads=4)(x).shape == (2, 4 * HIDDEN)
    assert get_pooler("latent", HIDDEN, num_queries=4, combine="mean")(x).shape == (2, HIDDEN)


def mixed_padding_batch():
    """(4, 7, D) states with right-padded, left-and-right-padded and one-token rows: (x, bool mask, real rows)."""
    x = torch.randn(4, 7, HIDDEN, generator=torch.Generator().manual_seed(3))
    mask = mask_from_lengths([7, 3, 5, 1], 7).bool()
    mask[2] = mask[2].roll(2)
    return x, mask, [x[i, mask[i]] for i in range(4)]


def torch_attention(p, query_weight: torch.Tensor) -> nn.MultiheadAttention:
    """nn.MultiheadAttention holding the pooler's key / value / output weights (and ``query_weight``)."""
    mha = nn.MultiheadAttention(HIDDEN, p.num_heads, batch_first=True).eval()
    value_bias = torch.zeros(HIDDEN) if p.value.bias is None else p.value.bias
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([query_weight, p.key.weight, p.value.weight]))
        mha.in_proj_bias.copy_(torch.cat([torch.zeros(2 * HIDDEN), value_bias]))
        mha.out_proj.weight.copy_(p.out.weight)
        mha.out_proj.bias.copy_(torch.zeros(HIDDEN) if p.out.bias is None else p.out.bias)
    return mha


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("queries,combine", [(1, "concat"), (3, "concat"), (3, "mean")])
def test_latent_equals_torch_multihead_attention(heads, queries, combine):
    """latent = nn.MultiheadAttention(learned queries, x, x) with the same weights, then the residual MLP, under
    padding (catches a 1/sqrt(D) scale with several heads, and padding that is attended)."""
    x, mask, _ = mixed_padding_batch()
    p = get_pooler("latent", HIDDEN, num_heads=heads, num_queries=queries, combine=combine).eval()
    with torch.no_grad():
        p.value.bias.normal_()
        p.out.bias.normal_()
        attended, _ = torch_attention(p, torch.eye(HIDDEN))(p.queries.expand(4, -1, -1), x, x, key_padding_mask=~mask)
        expected = attended + p.mlp(attended)
        expected = expected.flatten(1) if combine == "concat" else expected.mean(1)
        assert close(p(x, mask), expected)


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("query_index", [None, 0, -1, 2, [0, -1]])
def test_adapool_equals_torch_multihead_attention(heads, query_index):
    """adapool = nn.MultiheadAttention(query token(s), x, x) with the same weights, its query picked per row among
    the real tokens alone (mean, first, last, third -- clamped on a shorter row --, mean of first and last), the
    query token added back when it is a single one (catches a query taken at a padded position or by absolute
    index, a 1/sqrt(D) scale with several heads, a residual on the mean query)."""
    x, mask, real = mixed_padding_batch()
    p = get_pooler("adapool", HIDDEN, num_heads=heads, query_index=query_index).eval()
    picks = [query_index] if isinstance(query_index, int) else query_index
    source = torch.stack([r.mean(0) if picks is None else torch.stack([r[min(i, len(r) - 1)] for i in picks]).mean(0)
                          for r in real])
    with torch.no_grad():
        attended, _ = torch_attention(p, p.query.weight)(source[:, None], x, x, key_padding_mask=~mask)
        expected = attended[:, 0] + (source if isinstance(query_index, int) else 0)
        assert close(p(x, mask), expected)


@pytest.mark.parametrize("heads,queries", [(2, 1), (2, 3)])
def test_head_rows_are_torch_multihead_attentions_per_head_weights(heads, queries):
    """return_weights="heads": latent's (B, H * Q, T) rows, heads outermost, are nn.MultiheadAttention's per-head
    softmax (no weight at padding) and average to return_weights=True's weights (catches rows averaged over heads,
    heads and queries swapped, weights on padding)."""
    x, mask, _ = mixed_padding_batch()
    p = get_pooler("latent", HIDDEN, num_heads=heads, num_queries=queries).eval()
    with torch.no_grad():
        _, expected = torch_attention(p, torch.eye(HIDDEN))(p.queries.expand(4, -1, -1), x, x, key_padding_mask=~mask,
                                                            average_attn_weights=False)  # (B, H, Q, T)
        _, rows = p(x, mask, return_weights="heads")
        _, weights = p(x, mask, return_weights=True)
    assert rows.shape == (4, heads * queries, 7) and close(rows, expected.flatten(1, 2))
    assert close(rows.mean(dim=1), weights)


def test_head_rows_of_maps_and_empty_batches_keep_their_row_axis():
    # catches the map reshape or the empty-batch cut folding the row axis into the positions
    p = get_pooler("multihead_attention", HIDDEN, num_heads=3).eval()
    _, rows = p(torch.randn(2, HIDDEN, 4, 5), return_weights="heads")
    _, weights = p(torch.randn(2, HIDDEN, 4, 5), return_weights=True)
    assert rows.shape == (2, 3, 4, 5) and weights.shape == (2, 4, 5)
    assert p(torch.randn(0, 6, HIDDEN), return_weights="heads")[1].shape == (0, 3, 6)
    for name in ("adapool", "multihead_attention"):
        _, rows = get_pooler(name, HIDDEN, num_heads=2)(torch.randn(3, 6, HIDDEN), return_weights="heads")
        assert rows.shape == (3, 2, 6) and torch.allclose(rows.sum(-1), torch.ones(3, 2))
    with pytest.raises(PoolkitError, match="one row of weights"):
        get_pooler("attention", HIDDEN)(torch.randn(2, 3, HIDDEN), return_weights="heads")
    with pytest.raises(PoolkitError, match="True, False or 'heads'"):
        p(torch.randn(2, 3, HIDDEN), return_weights="head")


def test_adapool_query_choices_follow_real_tokens():
    x = torch.randn(2, 6, HIDDEN)
    right = mask_from_lengths([6, 3], 6)
    p = get_pooler("adapool", HIDDEN, query_index=[0, -1])
    q = p.query_tokens(x, right)
    assert close(q[1], (x[1, 0] + x[1, 2]) / 2)
    assert close(get_pooler("adapool", HIDDEN).query_tokens(x, right)[1], x[1, :3].mean(0))
    assert close(get_pooler("adapool", HIDDEN, query_index=-1).query_tokens(x, right)[1], x[1, 2])


def test_concat_is_its_parts_side_by_side(batch):
    x, mask, _ = batch
    p = get_pooler("concat", HIDDEN, poolers=["mean", {"name": "attention", "attn_size": 4}])
    out = p(x, mask)
    assert p.output_dim == 2 * HIDDEN
    assert close(out[:, :HIDDEN], p.parts[0](x, mask)) and close(out[:, HIDDEN:], p.parts[1](x, mask))


# -- layer family ----------------------------------------------------------------------------------
def test_weighted_layer_with_cls_equals_the_stacking_reference():
    layers = random_layers(3, 6)
    mask = mask_from_lengths([6, 2, 4], 6)
    p = get_pooler("weighted_layer", HIDDEN, num_layers=NUM_LAYERS, layer_start=2)
    with torch.no_grad():
        p.layer_weights.copy_(torch.rand(NUM_LAYERS - 1) + 0.5)
    stacked = torch.stack(layers)[2:]  # the snippet: (L, B, T, D)
    w = p.layer_weights[:, None, None, None]
    expected = ((w * stacked).sum(0) / p.layer_weights.sum())[:, 0]
    pooled, weights = p(layers, mask, return_weights=True)
    assert close(pooled, expected)
    assert close(weights["layer"][0], p.layer_weights / p.layer_weights.sum())


@pytest.mark.parametrize("token_pooler", ["mean", "max", "attention", "last"])
@pytest.mark.parametrize("weighting", ["sum", "softmax"])
def test_weighted_layer_equals_mix_then_pool(token_pooler, weighting):
    """The pool-first fast path (linear token poolers) and the mix-first path give the same result."""
    layers = random_layers(2, 5)
    mask = mask_from_lengths([5, 3], 5)
    p = get_pooler("weighted_layer", HIDDEN, num_layers=NUM_LAYERS, weighting=weighting,
                   token_pooler=token_pooler)
    with torch.no_grad():
        p.layer_weights.copy_(torch.rand_like(p.layer_weights) + 0.5)
    w = p.normalized_weights()
    mixed = sum(wl * h for wl, h in zip(w, layers[p.layer_start:]))
    assert close(p(layers, mask), p.token(mixed, mask))


def test_mean_and_concat_layers():
    layers = random_layers(2, 5)
    mask = mask_from_lengths([5, 3], 5)
    mean = get_pooler("mean_layers", HIDDEN, num_layers=NUM_LAYERS, last_n=3, token_pooler="mean")
    assert close(mean(layers, mask), get_pooler("mean", HIDDEN)(sum(layers[-3:]) / 3, mask))
    concat = get_pooler("concat_layers", HIDDEN, num_layers=NUM_LAYERS, last_n=3)
    assert concat.output_dim == 3 * HIDDEN
    assert close(concat(layers, mask), torch.cat([h[:, 0] for h in layers[-3:]], dim=-1))
    concat_max = get_pooler("concat_layers", HIDDEN, num_layers=NUM_LAYERS, last_n=2, token_pooler="max")
    expected = torch.stack([torch.cat([h[i, :n].max(0).values for h in layers[-2:]]) for i, n in enumerate([5, 3])])
    assert close(concat_max(layers, mask), expected)


@pytest.mark.parametrize("name", ["lstm_layers", "gru_layers"])
def test_bidirectional_rnn_backward_half_reads_the_first_layer(name):
    p = make_pooler(name, dropout=0.0, layer_start=1)
    layers = random_layers(2, 4)
    mask = mask_from_lengths([4, 4], 4)
    base = p(layers, mask)
    changed = list(layers)
    changed[1] = layers[1] + torch.randn_like(layers[1])  # the first transformer layer only
    moved = p(changed, mask)
    hidden = p.output_dim // 2
    forward_half, backward_half = (moved - base)[:, :hidden], (moved - base)[:, hidden:]
    assert backward_half.abs().max() > 1e-4  # the snippets' out[:, -1] backward half never sees layer 1
    assert forward_half.abs().max() > 1e-4
    # and it is each direction's final state: forward = last step, backward = first step of `out`
    vectors = torch.stack([h[:, 0] for h in layers[1:]], dim=1)
    out, _ = p.rnn(vectors)
    assert close(base, torch.cat([out[:, -1, :hidden], out[:, 0, hidden:]], dim=-1))


def test_unidirectional_rnn_dims():
    p = make_pooler("lstm_layers", bidirectional=False)
    assert p.output_dim == 8 and p(random_layers(2, 3)).shape == (2, 8)


def test_attention_layers_weights_per_example():
    layers = random_layers(3, 5)
    p = make_pooler("attention_layers")
    pooled, weights = p(layers, None, return_weights=True)
    assert weights["layer"].shape == (3, NUM_LAYERS)
    vectors = torch.stack([h[:, 0] for h in layers[1:]], dim=1)
    assert close(pooled, torch.einsum("bl,bld->bd", weights["layer"], vectors))
    assert not close(weights["layer"][0], weights["layer"][1])


def test_token_poolers_given_all_layers_use_the_last():
    layers = random_layers(2, 4)
    p = get_pooler("mean", HIDDEN)
    assert close(p(layers), p(layers[-1]))


def test_layer_poolers_do_not_stack_all_positions_for_cls(monkeypatch):
    """With cls the layer mix sees (B, D) rows, never a (L, B, T, D) stack."""
    stack_shapes = []
    real_stack = torch.stack

    def spy(tensors, *args, **kwargs):
        stack_shapes.append(tuple(tensors[0].shape))
        return real_stack(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "stack", spy)
    layers = random_layers(2, 7)
    get_pooler("weighted_layer", HIDDEN, num_layers=NUM_LAYERS)(layers, mask_from_lengths([7, 3], 7))
    assert stack_shapes and all(len(shape) <= 2 for shape in stack_shapes), stack_shapes


@pytest.mark.parametrize("token_pooler", ["cls", "mean", "attention", "max"])
def test_float32_layer_pooler_converts_selected_rows_not_whole_bf16_layers(token_pooler, monkeypatch):
    """A float32 weighted_layer given bf16 states: no float32 copy of any whole (B, T, D) layer is made
    for a linear token pooler (a mean reduces a block of rows at a time in float32: one row here), and at
    most the one mixed layer for a non-linear one; the result matches the float32 computation to bf16 rounding."""
    monkeypatch.setattr(fast, "EXACT_BLOCK_BYTES", 9 * HIDDEN * 4)
    monkeypatch.setattr(fast, "THREADED_BLOCK_BYTES", 0)  # those blocks at any thread count
    from torch.utils._python_dispatch import TorchDispatchMode

    class FullFloat32Tensors(TorchDispatchMode):
        def __init__(self, shape):
            super().__init__()
            self.shape, self.count = shape, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dtype == torch.float32 and tuple(out.shape) == self.shape:
                self.count += 1
            return out

    layers = [h.bfloat16() for h in random_layers(3, 9)]
    mask = mask_from_lengths([9, 4, 6], 9)
    token = {"name": "attention", "attn_size": 8} if token_pooler == "attention" else token_pooler
    pooler = make_pooler("weighted_layer", num_layers=NUM_LAYERS, layer_start=1, token_pooler=token)
    with torch.no_grad(), FullFloat32Tensors((3, 9, HIDDEN)) as spy:
        pooled = pooler(layers, mask)
    assert spy.count <= (0 if pooler.token.linear else 1), spy.count
    with torch.no_grad():
        expected = pooler([h.float() for h in layers], mask)
    assert pooled.dtype == torch.bfloat16 and close(pooled, expected, 2e-2)


@pytest.mark.parametrize("name", ["weighted_layer", "mean_layers"])
@pytest.mark.parametrize("token_pooler", ["attention", "max", "gem"])
def test_inference_mixes_in_row_chunks_with_the_same_result(name, token_pooler):
    """Without autograd a non-linear token pooler's rows are mixed and pooled in chunks (11 rows: uneven
    chunks, one of them holding an empty row): outputs and weights are those of the one-piece path."""
    gen = torch.Generator().manual_seed(1)
    layers = random_layers(11, 7, generator=gen)
    mask = mask_from_lengths([7, 1, 3, 0, 5, 7, 2, 6, 4, 7, 1], 7)
    options = {"num_layers": NUM_LAYERS} if name == "weighted_layer" else {"last_n": 3}
    token = {"name": "attention", "attn_size": 8} if token_pooler == "attention" else token_pooler
    pooler = make_pooler(name, token_pooler=token, **options)
    whole, whole_weights = pooler(layers, mask, return_weights=True)  # autograd on: one piece
    with torch.inference_mode():
        chunked, chunked_weights = pooler(layers, mask, return_weights=True)
    assert close(chunked, whole.detach(), 1e-6)
    assert close(chunked_weights["token"], whole_weights["token"].detach(), 1e-6)


def test_registry_lists_both_families():
    assert set(list_poolers("token")) >= {"cls", "last", "mean", "max", "min", "sum", "mean_sqrt_len",
                                          "mean_max", "gem", "lse", "attention", "attention_head",
                                          "multihead_attention", "gated_attention", "latent", "adapool",
                                          "concat"}
    assert set(list_poolers("layer")) == {"weighted_layer", "mean_layers", "concat_layers", "lstm_layers",
                                          "gru_layers", "attention_layers"}
    assert get_pooler("avg", HIDDEN).name == "mean"  # aliases resolve


@pytest.fixture(params=["plain", "row slices", "index_reduce", "compiled loops"])
def extreme_form(request, monkeypatch):
    """The masked max / min made to take its plain form, one of its two torch fast forms whatever the thread count
    and row lengths (the compiled loops off), or the compiled loops (numba: where they take the dtype); yields
    whether a form that records its calls was asked for and the calls it got (to check that the form asked for
    ran)."""
    if request.param == "compiled loops" and compiled._loops() is None:
        pytest.skip("numba is not installed, or cannot run here")
    calls = []
    slices, loops = fast.reduce_row_slices, compiled.masked_extreme
    monkeypatch.setattr(compiled, "_enabled", request.param == "compiled loops")
    monkeypatch.setattr(fast, "slices_pay", lambda x, mask: request.param == "row slices")
    monkeypatch.setattr(fast, "reduce_row_slices", lambda *args: calls.append(args) or slices(*args))
    monkeypatch.setattr(compiled, "masked_extreme", lambda *args, **kw: calls.append(args) or loops(*args, **kw))
    with fast.disabled() if request.param == "plain" else contextlib.nullcontext():
        yield request.param in ("row slices", "compiled loops"), calls


@pytest.mark.parametrize("dtype,length", [(torch.float32, 7), (torch.bfloat16, 7), (torch.bfloat16, 300)])
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("finite", [True, False])
def test_extreme_gradient_goes_to_the_first_real_holder_of_the_value(name, dtype, length, finite, extreme_form):
    """With ties (coarse values, bf16), the winner and the gradient are those of max / min(dim=0) on the
    real tokens alone, under left and right padding; bf16 at T = 300 exceeds bf16's exact integers and
    infinite values take the comparison path. Both forms of the fast reduction (every row here is one run)."""
    gen = torch.Generator().manual_seed(length)
    x = torch.randint(-3, 4, (4, length, HIDDEN), generator=gen).to(dtype)  # many ties
    x[:, length * 6 // 7, : HIDDEN // 2] = 9 if name == "max" else -9  # late holders (past 256 at T = 300)
    if not finite:
        x[1, 2, :3] = float("inf") if name == "max" else float("-inf")
    lengths = [length, 3, length - 2, 1]
    mask = mask_from_lengths(lengths, length).bool()
    mask[2] = mask[2].roll(2)  # left-and-right padded row
    pooler = get_pooler(name, hidden_size=HIDDEN).to(dtype)
    x.requires_grad_(True)
    pooled, weights = pooler(x, mask, return_weights=True)
    grad = torch.randn(pooled.shape, generator=gen).to(dtype)
    pooled.backward(grad)
    for row in range(4):
        real = mask[row].nonzero().flatten()
        ref = x.detach()[row, real]
        reduced = ref.max(dim=0) if name == "max" else ref.min(dim=0)
        assert torch.equal(pooled[row].detach(), reduced.values)
        expected = torch.zeros(length, HIDDEN, dtype=dtype)
        expected[real[reduced.indices], torch.arange(HIDDEN)] = grad[row]
        assert torch.equal(x.grad[row], expected)
        share = torch.zeros(length).index_add_(0, real[reduced.indices], torch.full((HIDDEN,), 1 / HIDDEN))
        assert close(weights[row], share)
    asked, calls = extreme_form
    assert bool(calls) == asked


def runs_mask(rows: list[str]) -> torch.Tensor:
    """A (B, T) bool mask from strings of '1' (real) and '.' (padding)."""
    return torch.tensor([[c == "1" for c in row] for row in rows])


def test_single_runs_finds_each_rows_run_or_a_gap():
    """(start, stop) with stop exclusive under right, left and both-sided padding, (0, 0) for an empty row (and for
    every row of a batch of no tokens); a row with padding between real tokens (or two runs) gives None: catches
    off-by-one stops and gaps taken for runs."""
    assert fast.single_runs(torch.zeros(2, 0, dtype=torch.bool)) == [(0, 0), (0, 0)]
    assert fast.single_runs(runs_mask(["111..", "..111", ".11..", ".....", "11111"])) == [
        (0, 3), (2, 5), (1, 3), (0, 0), (0, 5)]
    assert fast.single_runs(runs_mask(["111..", "1.1.."])) is None
    assert fast.single_runs(runs_mask(["11111", "11.11"])) is None
    assert fast.single_runs(runs_mask([".1.1."])) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("largest", [True, False])
def test_both_fast_extreme_forms_give_the_plain_values(dtype, largest):
    """reduce_row_slices and reduce_by_index against the filled plain form, exactly, on non-contiguous x under
    right / left / both-sided padding, a one-token row, NaN and infinite values at real tokens and huge ones at
    padding, and a feature that holds -inf (min: +inf) at every real token of a padded row and of a full one;
    empty rows hold -inf (+inf) in both (reduce_into_rows zeroes them). Catches max for min, a run one token short
    or long, padding read, an empty row left unwritten, and a start or a clamp at the dtype's finite extreme."""
    from poolkit.pooling import masking

    gen = torch.Generator().manual_seed(3)
    mask = runs_mask(["1111111..", "..1111111", ".11111...", ".........", "....1....", "111111111"])
    x = torch.randn(mask.shape[1], mask.shape[0], HIDDEN, generator=gen).to(dtype).transpose(0, 1)  # strided
    info = torch.finfo(dtype)
    x[~mask] = info.max if largest else info.min  # padding that would win
    x[0, 3, 1], x[2, 2, 4], x[5, 8, 2] = float("nan"), float("inf"), float("-inf")
    losing = float("-inf") if largest else float("inf")
    x[1, 2:, 5] = x[5, :, 6] = losing  # at every real token of a padded row and of a full one
    expected, _ = masking.masked_fill_reduce(x, mask, largest)
    assert expected[1, 5] == expected[5, 6] == losing
    runs = fast.single_runs(mask)
    for got in (fast.reduce_row_slices(x, runs, largest), fast.reduce_by_index(x, mask, largest)):
        assert got.dtype == dtype and torch.equal(got[3], torch.full((HIDDEN,), losing, dtype=dtype))
        got[3] = 0
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(fast.reduce_into_rows(x, mask, largest), expected, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_half_precision_sum_takes_row_slices_only_where_no_gradient_and_one_run_per_row(dtype, monkeypatch):
    """masking.masked_sum with the rule saying yes: one float32 sum per row's slice (fast.sum_row_slices), exactly
    the plain product's float32 sums on integers (every float32 sum exact, many of them past what the half
    precision holds exactly), on non-contiguous x under right / left /
    both-sided padding, a one-token row and an empty one, a NaN at a real token and the dtype's largest value at
    padding; x that needs a gradient, or a row with a gap, takes the product. Catches padding read, a run one token
    short or long, an empty row left unwritten, a sum rounded to x's dtype, and row slices cutting a gradient off."""
    from poolkit.pooling import masking

    calls = []
    slices = fast.sum_row_slices
    monkeypatch.setattr(fast, "row_sums_pay", lambda x, mask: True)
    monkeypatch.setattr(fast, "sum_row_slices", lambda *args: calls.append(args) or slices(*args))
    gen = torch.Generator().manual_seed(5)
    mask = runs_mask(["1111111..", "..1111111", ".11111...", ".........", "....1....", "111111111"])
    x = torch.randint(-1000, 1001, (mask.shape[1], mask.shape[0], HIDDEN), generator=gen).to(dtype).transpose(0, 1)
    x[~mask] = torch.finfo(dtype).max
    x[2, 3, 1] = float("nan")
    expected = masking.masked_weighted_sum(x, mask)
    got = masking.masked_sum(x, mask)
    assert len(calls) == 1 and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    assert bool(got[2, 1].isnan()) and torch.equal(got[3], torch.zeros(HIDDEN))
    gapped = mask.clone()
    gapped[0, 3] = False
    torch.testing.assert_close(masking.masked_sum(x, gapped), masking.masked_weighted_sum(x, gapped), rtol=0, atol=0,
                               equal_nan=True)
    leaf = x.nan_to_num().requires_grad_()
    masking.masked_sum(leaf, mask).sum().backward()
    assert len(calls) == 1 and torch.equal(leaf.grad, mask[..., None].expand_as(x).to(dtype))
    with torch.no_grad():
        masking.masked_sum(leaf, mask)
    assert len(calls) == 2


@pytest.mark.parametrize("name", ["max", "min", "mean_max"])
def test_padding_never_changes_an_extreme_its_winner_or_its_gradient(name, extreme_form):
    """A row pooled alone without padding and inside a batch with left, right and both-sided padding (holding
    values that would win, and NaN) gives the same values, winners, weights and gradient, where a feature holds the
    losing infinity at every real token (the fill ties with it), another holds NaN, a third ties at a finite value
    and a fourth holds the dtype's finite extreme at one token, the losing infinity at the others;
    padding takes no gradient and an empty row neither. Catches a finite fill (the finite extreme for -inf), a
    winner on padding (max's first index under left padding), a gradient put there, and an empty row's gradient
    put at its index 0; the winner an empty row reports is 0 (the plain form's). mean_max's forward zeroes the padding
    (its mean reads it), so for mean_max the padded values never reach the extreme: the losing infinity's tie with the
    fill is what it checks."""
    from poolkit.pooling import masking

    gen = torch.Generator().manual_seed(5)
    largest = name != "min"
    losing, winning = (float("-inf"), float("inf")) if largest else (float("inf"), float("-inf"))
    row = torch.randn(4, HIDDEN, generator=gen)
    row[:, 0], row[1, 1], row[:, 2] = losing, float("nan"), 1.0
    row[:, 4] = losing
    row[2, 4] = torch.finfo(row.dtype).min if largest else torch.finfo(row.dtype).max  # ties a finite fill
    pooler = get_pooler(name, hidden_size=HIDDEN)

    def pooled(x, mask):
        x = x.clone().requires_grad_(True)
        out, weights = pooler(x, mask, return_weights=True)
        out.backward(torch.ones_like(out))
        return out.detach(), weights, x.grad

    alone = pooled(row[None], torch.ones(1, 4, dtype=torch.bool))
    mask = runs_mask(["...1111", "1111...", ".1111..", "......."])
    x = torch.full((4, 7, HIDDEN), winning)
    x[:, :, 3] = float("nan")
    x[mask] = row.repeat(3, 1)
    out, weights, grad = pooled(x, mask)
    for b in range(3):
        torch.testing.assert_close(out[b], alone[0][0], rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(weights[b][mask[b]], alone[1][0], rtol=0, atol=0)
        torch.testing.assert_close(grad[b][mask[b]], alone[2][0], rtol=0, atol=0)
    assert not grad[~mask].any() and torch.equal(weights[~mask], torch.zeros(int((~mask).sum())))
    assert torch.equal(out[3], torch.zeros_like(out[3]))
    index = masking.masked_extreme(x, mask, largest, with_index=True)[1]
    first = mask.to(torch.uint8).argmax(dim=1, keepdim=True)
    expected = masking.masked_extreme(row[None], torch.ones(1, 4, dtype=torch.bool), largest, with_index=True)[1]
    assert torch.equal(index - first, expected.expand(4, -1) * mask.any(dim=1, keepdim=True))  # empty row: 0
    finite = torch.randn(2, 3, HIDDEN, generator=gen)  # finite values: the fast forms' float-code search
    assert not masking.masked_extreme(finite, runs_mask(["11.", "..."]), largest, with_index=True)[1][1].any()
    asked, calls = extreme_form
    assert bool(calls) == asked


def test_blocks_are_cache_sized_on_one_thread_and_few_with_several(monkeypatch):
    """block_bytes: a form's own (cache-sized) bytes on one torch thread; with several, at least THREADED_BLOCK_BYTES
    (a larger size of its own kept); and both blocked forms ask it. Catches the rule inverted, a minimum taken for the
    maximum, and a form that reads its constant directly."""
    monkeypatch.setattr(compiled, "_enabled", False)  # the torch forms (the compiled loops: their own tests)
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    assert fast.block_bytes(2 << 20) == 2 << 20
    threads["n"] = 2
    assert fast.block_bytes(2 << 20) == fast.THREADED_BLOCK_BYTES and fast.block_bytes(1 << 40) == 1 << 40
    asked = []
    monkeypatch.setattr(fast, "block_bytes", lambda single: asked.append(single) or single)
    x, mask = torch.randn(2, 5, HIDDEN), mask_from_lengths([5, 2], 5).bool()
    get_pooler("attention", hidden_size=HIDDEN)(x, mask)
    get_pooler("mean", hidden_size=HIDDEN)(x.bfloat16(), mask)
    assert asked == [fast.GATHER_CHUNK_BYTES, fast.EXACT_BLOCK_BYTES]


def test_row_slices_run_where_the_sweep_says_they_pay(monkeypatch):
    """The rule of slices_pay: half-precision rows of ROW_SLICE_TOKENS real tokens or more on average, on one torch
    thread; float32, several threads (each row's call a parallel region that waits under load), shorter rows and
    an empty batch keep index_reduce."""
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    long, short = fast.ROW_SLICE_TOKENS, fast.ROW_SLICE_TOKENS - 1
    x = torch.zeros(2, 2 * long, 4)
    mask = mask_from_lengths([long + 1, long - 1], 2 * long).bool()
    assert fast.slices_pay(x.bfloat16(), mask) and fast.slices_pay(x.half(), mask)
    assert not fast.slices_pay(x, mask)  # float32
    assert not fast.slices_pay(x.bfloat16(), mask_from_lengths([short, short], 2 * long).bool())
    assert not fast.slices_pay(x[:0].bfloat16(), mask[:0])
    threads["n"] = 2
    assert not fast.slices_pay(x.bfloat16(), mask)


def test_row_sums_run_where_the_sweep_says_they_pay(monkeypatch):
    """The rule of row_sums_pay: half-precision rows of ROW_SUM_ELEMENTS real elements (tokens x features) or more
    on average, on one torch thread; float32, several threads, smaller rows (by tokens or by width) and an empty
    batch keep the float32 copy and product. Catches the tokens counted without the width, and a rule by T (the
    padded length) instead of the real tokens."""
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    width = 64
    tokens = fast.ROW_SUM_ELEMENTS // width
    x = torch.zeros(1, 1, 1).expand(2, 4 * tokens, width)
    mask = mask_from_lengths([tokens + 1, tokens - 1], 4 * tokens).bool()
    assert fast.row_sums_pay(x.bfloat16(), mask) and fast.row_sums_pay(x.half(), mask)
    assert not fast.row_sums_pay(x, mask)  # float32
    assert not fast.row_sums_pay(x.bfloat16(), mask_from_lengths([tokens, tokens - 1], 4 * tokens).bool())
    assert not fast.row_sums_pay(x[..., :width - 1].bfloat16(), mask)  # narrower rows
    assert not fast.row_sums_pay(x[:0].bfloat16(), mask[:0])
    threads["n"] = 2
    assert not fast.row_sums_pay(x.bfloat16(), mask)



@pytest.mark.parametrize("name, options", [("latent", {}), ("latent", {"num_heads": 2, "num_queries": 3}),
                                           ("adapool", {"num_heads": 2})])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_half_precision_query_read_by_blocks_gives_the_float32_copys_values(name, options, dtype, monkeypatch):
    """latent / adapool in half precision with the rule saying yes: x read by fast.half_query_read in blocks of two
    rows (the last one short), the values of the read of x's float32 copy (the rule saying no) exactly: outputs and
    weights without a gradient, and with one, the gradients of x and of every parameter from a loss on the output
    and the weights, and a gradient penalty's (double backward: the float32 copy's backward; x's own to a few units in
    the last place), under right / left /
    both-sided padding with an empty row, a one-token row, huge values and NaN at padding and quadrature weights.
    Catches a block's weights, sums or gradients written to other rows, the short last block left unwritten, the mask
    or the quadrature weights not cut to the block, and x's gradient rounded twice."""
    calls, copies = [], []
    node, blocks, copied = fast.HalfQueryRead.apply, fast._half_blocks, fast._float_blocks
    monkeypatch.setattr(fast, "_float_blocks", lambda *args: (copies.append(at) or (at, t) for at, t in copied(*args)))
    monkeypatch.setattr(fast, "query_blocks_pay", lambda x: True)
    monkeypatch.setattr(fast, "QUERY_BLOCK_BYTES", 2 * 9 * HIDDEN * 4)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # blocks of QUERY_BLOCK_BYTES
    monkeypatch.setattr(fast.HalfQueryRead, "apply", lambda *args: calls.append("node") or node(*args))
    monkeypatch.setattr(fast, "_half_blocks", lambda *args: calls.append("blocks") or blocks(*args))
    gen = torch.Generator().manual_seed(3)
    mask = runs_mask(["1111111..", "..1111111", ".11111...", ".........", "....1....", "111111111", "..11....."])
    x = torch.randn(mask.shape[0], mask.shape[1], HIDDEN, generator=gen).to(dtype)
    x[~mask] = torch.finfo(dtype).max
    quadrature = torch.rand(mask.shape, generator=gen) + 0.5
    torch.manual_seed(0)
    pooler = get_pooler(name, hidden_size=HIDDEN, **options).to(dtype)
    out_weight = torch.randn(mask.shape[0], pooler.output_dim, generator=gen).to(dtype)

    def pooled(nan: bool, **kwargs):
        with torch.no_grad():
            held = x.clone()
            held[0, 8, 2] = float("nan") if nan else held[0, 8, 2]
            return pooler(held, mask, return_weights=True, **kwargs)

    def trained(**kwargs):
        leaf = x.clone().requires_grad_()
        out, weights = pooler(leaf, mask, return_weights=True, **kwargs)
        loss = (out * out_weight).float().sum() + (weights * quadrature).sum()
        copies.clear()
        first = torch.autograd.grad(loss, [leaf, *pooler.parameters()], retain_graph=True)  # the blocks' backward
        blocked = len(copies)
        grads = torch.autograd.grad(loss, [leaf, *pooler.parameters()], create_graph=True)
        penalty = torch.autograd.grad(grads[0].float()[mask].pow(2).sum(), [leaf, *pooler.parameters()],
                                      allow_unused=True)
        return [out, weights, *first], [g for g in penalty if g is not None], blocked

    for kwargs in ({}, {"quadrature_weights": quadrature}):
        got = [*pooled(True, **kwargs), *pooled(False, **kwargs), *trained(**kwargs)[0]]
        _, penalty, blocked = trained(**kwargs)
        assert "blocks" in calls and "node" in calls and blocked == 4  # 7 rows in blocks of 2, backward by blocks
        calls.clear()
        with monkeypatch.context() as plain:
            plain.setattr(fast, "query_blocks_pay", lambda x: False)
            expected = [*pooled(True, **kwargs), *pooled(False, **kwargs), *trained(**kwargs)[0]]
            _, expected_penalty, blocked = trained(**kwargs)
        assert not blocked
        assert not calls
        for ours, theirs in zip(got + penalty[1:], expected + expected_penalty[1:], strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        # x's own penalty gradient: two terms each rounded to x's dtype (the backward's float32 copy, the weights'
        # path through the blocks) where the float32 copy's backward rounds their sum once: a few units in the last
        # place of the largest value
        scale = 4 * torch.finfo(dtype).eps * expected_penalty[0].float().abs().max()
        torch.testing.assert_close(penalty[0].float(), expected_penalty[0].float(), rtol=0, atol=float(scale))
        assert torch.equal(got[0][3], torch.zeros_like(got[0][3])) and not got[1][3].any()
    leaf = x.clone().requires_grad_()  # batched incoming gradients (is_grads_batched): the out-of-place backward
    out = pooler(leaf, mask)
    incoming = torch.randn(2, *out.shape, generator=gen).to(dtype)
    many = torch.autograd.grad(out, leaf, incoming, is_grads_batched=True, retain_graph=True)[0]
    for i, one in enumerate(incoming):
        torch.testing.assert_close(many[i], torch.autograd.grad(out, leaf, one, retain_graph=True)[0], rtol=0, atol=0)


@pytest.mark.parametrize("name, options", [("latent", {}), ("latent", {"num_heads": 2, "num_queries": 3}),
                                           ("adapool", {})])
def test_the_query_read_gives_the_plain_forms_values_and_gradients(name, options, monkeypatch):
    """fast.QueryRead (latent / adapool's scores, softmax and weighted sum as one node, x's gradient written once)
    against the plain forms (fast.disabled) in float64: outputs, weights, and the gradients of x and of every
    parameter from a loss on both the output and the weights, under right / left / both-sided padding holding huge
    values, a one-token row and an empty one, with and without quadrature weights, and the gradient of a gradient
    penalty (double backward). Catches a softmax backward without its sum term, the weights' gradient dropped or kept
    at padding (the huge values overflow it there), a gradient of x missing one of its two terms, and a backward
    written in operations autograd cannot differentiate. Where no gradient is taken, the read runs without the
    node, to the same values."""
    calls, reads = [], []
    node, read = fast.QueryRead.apply, fast._weighted_read
    monkeypatch.setattr(fast.QueryRead, "apply", lambda *args: calls.append(len(args)) or node(*args))
    monkeypatch.setattr(fast, "_weighted_read", lambda *args: reads.append(len(args)) or read(*args))
    gen = torch.Generator().manual_seed(4)
    mask = runs_mask(["1111111..", "..1111111", ".11111...", ".........", "....1...."])
    x = torch.randn(mask.shape[0], mask.shape[1], HIDDEN, generator=gen, dtype=torch.float64)
    x[~mask] = torch.finfo(torch.float64).max / 4  # the weights' gradient there overflows to inf
    quadrature = torch.rand(mask.shape, generator=gen, dtype=torch.float64) + 0.5
    torch.manual_seed(0)
    pooler = get_pooler(name, hidden_size=HIDDEN, **options).double()
    for parameter in pooler.parameters():  # away from start values that zero some paths
        parameter.data.add_(torch.randn(parameter.shape, generator=gen, dtype=torch.float64) * 0.1)
    out_weight = torch.randn(mask.shape[0], pooler.output_dim, generator=gen, dtype=torch.float64)
    weight_weight = torch.randn(mask.shape, generator=gen, dtype=torch.float64)

    def run(**kwargs):
        leaf = x.clone().requires_grad_()
        out, weights = pooler(leaf, mask, return_weights=True, **kwargs)
        loss = (out * out_weight).sum() + (weights * weight_weight).sum()
        grads = torch.autograd.grad(loss, [leaf, *pooler.parameters()], create_graph=True)
        penalty = torch.autograd.grad(grads[0][mask].pow(2).sum(), [*pooler.parameters()], allow_unused=True)
        return out, weights, grads, penalty

    for kwargs in ({}, {"quadrature_weights": quadrature}):
        ours = run(**kwargs)
        assert calls
        calls.clear()
        with fast.disabled():
            plain = run(**kwargs)
        assert not calls
        torch.testing.assert_close(ours[:2], plain[:2])
        reads.clear()
        with torch.no_grad():  # no node where no gradient is taken: the same read called as a function
            torch.testing.assert_close(pooler(x, mask, return_weights=True, **kwargs), ours[:2], rtol=0, atol=0)
        assert reads and not calls
        for a, b in zip(ours[2], plain[2]):
            torch.testing.assert_close(a, b)
        assert not ours[2][0][~mask].any()
        for a, b in zip(ours[3], plain[3]):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)


def test_query_blocks_run_where_the_sweep_says_they_pay(monkeypatch):
    """The rule of query_blocks_pay: half-precision x whose rows take more than one block of QUERY_BLOCK_BYTES as
    float32, on one torch thread; float32, x of one block (a single row larger than a block too) and several threads
    keep the plain form. Catches the rule counting x's own bytes instead of its float32 copy's, a rule by bytes that
    takes one long row for several blocks, and a rule that ignores the thread count."""
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    one_block = torch.zeros(1, 1, 1).expand(2, fast.QUERY_BLOCK_BYTES // 4 // 2 // 64, 64)
    assert not fast.query_blocks_pay(one_block.bfloat16())
    x = torch.zeros(1, 1, 1).expand(2, one_block.shape[1] + 1, 64)
    assert fast.query_blocks_pay(x.bfloat16()) and fast.query_blocks_pay(x.half())
    assert not fast.query_blocks_pay(x)  # float32
    assert not fast.query_blocks_pay(torch.zeros(1, 1, 1).expand(1, 4 * x.shape[1], 64).bfloat16())  # one long row
    threads["n"] = 2
    assert not fast.query_blocks_pay(torch.zeros(1, 1, 1).expand(64, x.shape[1], 64).bfloat16())


@pytest.mark.parametrize("root", [False, True])
def test_the_float32_mean_and_sum_by_one_bag_give_the_products_values(root, monkeypatch):
    """masking.masked_mean / masked_sum with the rule saying yes: one embedding bag over the real tokens (fast.bag_sum),
    the plain product's values to float32 rounding, under right / left / both-sided padding, a row with gaps, a
    one-token row and an empty one; NaN and inf at padding never reach a sum, while inf and NaN at real tokens do as in
    the product; x that needs a gradient takes the product. Catches padding read (or a wrong token index), bags cut at
    the wrong offsets, a mean not divided by its own row's count, an empty row left unwritten, and the bag cutting a
    gradient off."""
    monkeypatch.setattr(compiled, "_enabled", False)  # the torch forms (the compiled loops: their own tests)
    from poolkit.pooling import masking

    calls = []
    bag = fast.bag_sum
    monkeypatch.setattr(fast, "bag_sums_pay", lambda x, mask: True)
    monkeypatch.setattr(fast, "bag_sum", lambda *args: calls.append(args) or bag(*args))
    mask = runs_mask(["1111111..", "..1111111", ".11111...", ".........", "....1....", "111111111", "1.11..1.1"])
    x = torch.randn(*mask.shape, HIDDEN, generator=torch.Generator().manual_seed(3))
    with fast.disabled():
        expected_mean, expected_sum = masking.masked_mean(x, mask, root=root), masking.masked_sum(x, mask)
    x[~mask] = float("nan")
    x[0, 7, :3] = float("inf")
    got_mean, got_sum = masking.masked_mean(x, mask, root=root), masking.masked_sum(x, mask)
    assert len(calls) == 2 and got_mean.dtype == got_sum.dtype == torch.float32
    torch.testing.assert_close(got_mean, expected_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_sum, expected_sum, rtol=1e-6, atol=1e-6)
    assert torch.equal(got_mean[3], torch.zeros(HIDDEN)) and torch.equal(got_sum[4], x[4, 4])
    x[2, 3, 1], x[1, 4, 2] = float("nan"), float("inf")  # at real tokens: they reach the sums
    assert bool(masking.masked_sum(x, mask)[2, 1].isnan()) and masking.masked_mean(x, mask, root=root)[1, 2] == math.inf
    leaf = x.nan_to_num(0.0, 0.0, 0.0).requires_grad_()
    masking.masked_mean(leaf, mask, root=root).sum().backward()
    masking.masked_sum(leaf, mask).sum().backward()
    assert len(calls) == 4 and torch.equal(leaf.grad != 0, mask[..., None].expand_as(x))


def test_bag_sums_run_where_the_sweep_says_they_pay(monkeypatch):
    """The rule of bag_sums_pay: contiguous float32 x of BAG_SUM_ELEMENTS real elements (tokens x features, over the
    batch) or more with a bool mask, on one torch thread, without autocast; a token fewer, half precision, float64, a
    non-contiguous x, a float mask, autocast and several threads keep the product. Catches the padded tokens counted
    instead of the real ones, the width left out, a size off by a token's width or more (or > for >=), and a rule that
    ignores the thread count, autocast or the layout (a non-contiguous x has no (B * T, D) view for the bag)."""
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    width = 64
    tokens = fast.BAG_SUM_ELEMENTS // width // 2
    x = torch.zeros(2, 2 * tokens, width)
    mask = mask_from_lengths([tokens, tokens], 2 * tokens).bool()  # exactly BAG_SUM_ELEMENTS real elements
    assert fast.bag_sums_pay(x, mask)
    assert not fast.bag_sums_pay(x, mask_from_lengths([tokens, tokens - 1], 2 * tokens).bool())
    wider = torch.zeros(2, 2 * tokens, width + 1)
    assert fast.bag_sums_pay(wider, mask_from_lengths([tokens, tokens - 1], 2 * tokens).bool())  # the width counts
    assert not fast.bag_sums_pay(x[..., :width - 1], mask)  # narrower rows (and not contiguous)
    assert not fast.bag_sums_pay(x.bfloat16(), mask) and not fast.bag_sums_pay(x.double(), mask)
    assert not fast.bag_sums_pay(x.transpose(0, 1).contiguous().transpose(0, 1), mask)
    assert not fast.bag_sums_pay(x, mask.float())
    with torch.autocast("cpu"):
        assert not fast.bag_sums_pay(x, mask)
    threads["n"] = 2
    assert not fast.bag_sums_pay(x, mask)


def assert_nearest(got: torch.Tensor, exact: torch.Tensor) -> None:
    """Every element of ``got`` (half precision) is a nearest value of its dtype to the float64 ``exact``: within half
    the dtype's spacing there, so a tie may go either way."""
    _, exponent = torch.frexp(exact)  # exact = m * 2^exponent, 0.5 <= |m| < 1
    half_spacing = torch.ldexp(torch.full_like(exact, torch.finfo(got.dtype).eps), exponent - 2)
    assert ((got.double() - exact).abs() <= half_spacing).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sum_pooling_of_half_precision_x_by_one_bag_rounds_the_float32_sum_once(dtype, monkeypatch):
    """sum pooling's output for half-precision x without a gradient: one embedding bag over the real tokens
    (fast.bag_sum) in x's dtype, the exact sum rounded once, under right / left / both-sided padding, gaps, a one-token
    row and an empty one (0); NaN / inf at padding never reach it, at real tokens they do. The values are multiples of
    1/8 (fp16: 1/256) whose sums float32 holds exactly and x's dtype does not, so the expected value is exact (the bag
    may round a tie away from zero, where torch rounds it to even). With weights asked for, with a gradient, and as
    another pooler's part (whose values it mixes further), and in a subclass with its own sum, the float32 sum is kept.
    Catches a sum accumulated in x's precision (or rounded twice), padding read, bags cut at the wrong offsets, an empty
    row left unwritten, and the bag cutting a gradient off, rounding a part or passing over a subclass's sum."""
    calls = []
    bag = fast.bag_sum
    monkeypatch.setattr(fast, "bag_sum", lambda *args: calls.append(args) or bag(*args))
    gen = torch.Generator().manual_seed(5)
    rows = ["1" * 64, "." * 5 + "1" * 59, "." * 10 + "1" * 40 + "." * 14, "." * 64, "." * 30 + "1" + "." * 33,
            "11.1" * 16]
    mask = runs_mask(rows)
    steps = 8 if dtype == torch.bfloat16 else 256  # values in [-5, 5] that x's dtype holds exactly
    x = (torch.randint(-5 * steps, 5 * steps + 1, (*mask.shape, HIDDEN), generator=gen) / steps).to(dtype)
    exact = (x.double() * mask[..., None]).sum(dim=1)
    assert not torch.equal(exact.to(dtype).double(), exact)  # the sums need more bits than x's dtype has
    x[~mask] = float("nan")
    x[1, 0, :2] = float("inf")
    pooler = get_pooler("sum", hidden_size=HIDDEN)
    with torch.no_grad():
        got = pooler(x, mask)
    assert len(calls) == 1 and got.dtype == dtype
    assert_nearest(got, exact)
    assert not got[3].any()  # the empty row: exactly 0
    with torch.no_grad():
        pooled, _ = pooler(x, mask, return_weights=True)
    assert len(calls) == 1 and torch.equal(pooled, exact.to(dtype))  # the float32 product, exact here, rounded
    x[2, 20, 3], x[5, 3, 4] = float("nan"), float("inf")  # at real tokens: they reach the sum
    with torch.no_grad():
        got = pooler(x, mask)
    assert len(calls) > 1 and bool(got[2, 3].isnan()) and got[5, 4] == math.inf
    calls.clear()
    leaf = x.nan_to_num(0.0, 0.0, 0.0).requires_grad_()
    pooler(leaf, mask).float().sum().backward()
    assert torch.equal(leaf.grad != 0, mask[..., None].expand_as(x))
    assert pooler.pool_for_output(leaf, mask).dtype == torch.float32  # forward rounds it, after its guard
    part = pooler.pool_as_part(x.nan_to_num(0.0, 0.0, 0.0), mask, weights=False)
    assert not calls and part.dtype == torch.float32

    class Doubled(type(pooler)):  # a subclass's own sum is what its forward runs
        def pool_without_weights(self, x, mask):
            return 2 * super().pool_without_weights(x, mask)

    with torch.no_grad():
        assert torch.equal(Doubled(hidden_size=HIDDEN)(x.nan_to_num(0.0, 0.0, 0.0), mask), (2 * part).to(dtype))
    assert not calls


def test_half_bag_sums_run_where_the_sweep_says_they_pay(monkeypatch):
    """The rule of half_bag_sums_pay: contiguous bf16 / fp16 x with a bool mask, without autocast, at any size and
    thread count; float32 (whose sum pooling keeps its own rule), float64, a non-contiguous x, a float mask and autocast
    keep the float32 sum. Catches the rule taking float32 (whose output is the float32 sum itself) or a layout the bag
    has no (B * T, D) view of, and one that ignores autocast."""
    threads = {"n": 1}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    x, mask = torch.zeros(2, 3, 4, dtype=torch.bfloat16), torch.ones(2, 3, dtype=torch.bool)
    assert fast.half_bag_sums_pay(x, mask) and fast.half_bag_sums_pay(x.half(), mask)
    assert not fast.half_bag_sums_pay(x.float(), mask) and not fast.half_bag_sums_pay(x.double(), mask)
    assert not fast.half_bag_sums_pay(x[..., :2], mask)
    assert not fast.half_bag_sums_pay(x, mask.float())
    with torch.autocast("cpu"):
        assert not fast.half_bag_sums_pay(x, mask)
    threads["n"] = 2
    assert fast.half_bag_sums_pay(x, mask)


@pytest.mark.parametrize("rnn", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_unrolled_recurrence_equals_torch_rnn(rnn, bidirectional):
    """The plain cell loop that transforms trace gives nn.LSTM / nn.GRU's own final states."""
    from poolkit.pooling.layers import final_state

    module = rnn(6, 5, batch_first=True, bidirectional=bidirectional)
    x = torch.randn(3, 4, 6)
    _, final = module(x)
    final = final[0] if isinstance(final, tuple) else final
    directions = 2 if bidirectional else 1
    unrolled = torch.stack([final_state(module, x, reverse=d == 1) for d in range(directions)])
    torch.testing.assert_close(unrolled, final)


@pytest.mark.parametrize("name", ["mean_layers", "concat_layers"])
def test_last_n_defaults_to_what_a_shallow_encoder_has(name):
    """Default last_n is 4, or every hidden state of a 2-layer encoder (3); an explicit value past them fails."""
    assert get_pooler(name, HIDDEN, num_layers=NUM_LAYERS).last_n == 4
    shallow = get_pooler(name, HIDDEN, num_layers=2)
    assert shallow.last_n == 3 and shallow.output_dim == (3 * HIDDEN if name == "concat_layers" else HIDDEN)
    layers = [torch.randn(2, 4, HIDDEN) for _ in range(3)]
    assert shallow(layers, mask_from_lengths([4, 2], 4)).shape == (2, shallow.output_dim)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["mean", "mean_sqrt_len", "sum", "mean_max"])
def test_half_precision_means_are_the_correctly_rounded_ones(name, dtype, monkeypatch):
    """issue 32 item 18: the 1/n weights cast to bf16 before the sum put a bf16 mean one ulp off in about a fifth of
    its elements, where sentence-transformers' and timm's are correctly rounded. Catches any rounding before the
    float32 sum and its division (the float64 reference rounded once to the dtype must come out exactly), in the
    plain form and the fast ones (blocks of float32 rows and a product; a float32 sum per row's slice), and blocks of
    rows that drop or repeat rows. Sum pooling's own output for half-precision x is one embedding bag, whose float32
    sum rounds once to a nearest value but may take a tie away from zero (bf16): checked as the nearest."""
    monkeypatch.setattr(compiled, "_enabled", False)  # the torch forms (the compiled loops: their own tests)
    from poolkit.pooling import masking

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(6, 40, 64, generator=gen).to(dtype)
    mask = mask_from_lengths([40, 1, 17, 0, 33, 9], 40).bool()
    total = (x.double() * mask[..., None]).sum(dim=1)
    count = mask.sum(dim=1, keepdim=True).clamp(min=1).double()
    reference = {"mean": total / count, "mean_sqrt_len": total / count.sqrt(), "sum": total}
    reference["mean_max"] = torch.cat([reference["mean"], masking.masked_fill_reduce(x, mask, True)[0].double()], 1)
    expected = reference[name].to(dtype)
    pooler = get_pooler(name, hidden_size=64)
    for fast_forms in (True, False):
        monkeypatch.setattr(fast, "_enabled", fast_forms)
        got = pooler(x, mask)
        assert got.dtype == dtype
        if name == "sum" and fast_forms:  # one embedding bag, which may round a tie away from zero
            assert_nearest(got, reference[name])
        else:
            assert torch.equal(got, expected), (fast_forms, (got != expected).float().mean())
    monkeypatch.setattr(fast, "_enabled", True)
    if name == "sum":  # the float32 sums that its mean's forms share, rounded once: as in the mean
        pooler = lambda x, mask: masking.masked_sum(x, mask).to(dtype)  # noqa: E731
    monkeypatch.setattr(fast, "EXACT_BLOCK_BYTES", 40 * 64 * 4 * 4)  # blocks of 4 rows, the last one short
    monkeypatch.setattr(fast, "THREADED_BLOCK_BYTES", 0)
    assert torch.equal(pooler(x, mask), expected)
    calls = []
    slices = fast.sum_row_slices
    monkeypatch.setattr(fast, "ROW_SUM_ELEMENTS", 1)  # one float32 sum per row's slice (no gradient is taken)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(fast, "sum_row_slices", lambda *args: calls.append(args) or slices(*args))
    assert torch.equal(pooler(x, mask), expected) and calls


@pytest.mark.parametrize("name", ["mean", "attention", "weighted_mean"])
def test_the_half_precision_weighted_sum_gives_the_plain_forms_values_and_gradients(name):
    """fast.HalfWeightedSum (blocks of float32 tokens forward, x's precision backward) against the plain form (the
    float32 copy of x under autograd): the same outputs, gradients within bf16 rounding, for x and the pooler's
    parameters. Catches a forward that drops or repeats tokens, and a backward that loses x's or the weights'
    gradient."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 23, HIDDEN, generator=gen).bfloat16()
    mask = mask_from_lengths([23, 5, 0, 11], 23).bool()
    pooler = make_pooler(name).to(torch.bfloat16)  # bf16 weights: a float32 pooler widens x before the sum
    results = []
    for fast_forms in (True, False):
        inputs = x.clone().requires_grad_()
        with (contextlib.nullcontext() if fast_forms else fast.disabled()):
            pooler.zero_grad()
            out = pooler(inputs, mask)
            (out.float() * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
        grads = [inputs.grad.float()] + [p.grad.float().clone() for p in pooler.parameters() if p.grad is not None]
        results.append((out, grads))
    (fast_out, fast_grads), (plain_out, plain_grads) = results
    assert torch.equal(fast_out, plain_out) and len(fast_grads) == len(plain_grads)
    for ours, theirs in zip(fast_grads, plain_grads):
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("largest", [True, False])
def test_first_holder_takes_signed_zeros_as_ties_and_long_rows_in_blocks(dtype, largest):
    """fast.first_holder against the first real token equal to the value, worked out by hand: zeros of both signs
    tie (-0 - +0 is -0, whose integer bits are the most negative: a code clamped at 1 alone would lose that holder),
    and a half-precision row longer than int16's largest rank is read in blocks, a holder in the first block beating
    a tie in the second. Catches the clamp's lower bound left out, ranks that overflow, and a later block's holder
    kept over an earlier one's, and blocks one token too long (a block's first token then has a rank that wraps)."""
    sign = 1 if largest else -1
    # The value is the zero whose sign makes d -0 at the holder (rank 3 there: odd, so that a wrapped product of the
    # integer's minimum cannot pass for the rank), then the other zero, then a zero of either sign after a loser.
    x = (torch.tensor([[-1.0, -1.0, 0.0, -1.0, -1.0], [-1.0, -0.0, 0.0, -1.0, -1.0], [-1.0, 0.0, -0.0, 0.0, -1.0]])
         * sign).T.reshape(1, 5, 3).to(dtype)
    values = torch.tensor([[-0.0, 0.0, 0.0]], dtype=dtype) * sign
    assert fast.first_holder(x, values, torch.ones(1, 5, dtype=torch.bool), largest).tolist() == [[2, 1, 1]]
    if dtype.itemsize == 2:
        length = torch.iinfo(torch.int16).max + 5
        x = torch.zeros(2, length, 3, dtype=dtype)
        x[:, [3, length - 2], 0] = sign * 1.0  # a tie across the blocks: the first block's holder wins
        x[:, length - 1, 1] = sign * 2.0  # the only holder, in the second block
        x[0, [0, 5], 2] = sign * 3.0  # a block's first token, whose rank is the largest, then a tie
        mask = torch.ones(2, length, dtype=torch.bool)
        mask[1, :2] = False  # padding before the first holder
        values = x.amax(dim=1) if largest else x.amin(dim=1)
        values[1, 2] = 0  # row 1's third feature: every real token holds it, the first real one is token 2
        assert fast.first_holder(x, values, mask, largest).tolist() == [[3, length - 1, 0], [3, length - 1, 2]]
