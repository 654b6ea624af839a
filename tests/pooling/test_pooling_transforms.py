"""Every pooler composes with PyTorch's transforms, on both code paths (the fast CPU forms and the plain ones).

Each check compares against plain autograd on the same pooler, so a transform that runs but answers
wrongly fails too: double backward (a gradient penalty reaching the parameters), batched incoming gradients
(``is_grads_batched``), ``torch.func.grad``, per-sample gradients (``vmap(grad)``), ``jacrev``,
``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, jacrev, vmap

from helpers import ALL_POOLERS, POOLER_VARIANTS, make_pooler, mask_from_lengths, random_layers, states_for
from poolkit import PoolkitError, list_poolers
from poolkit.pooling import Pooler, fast

LENGTHS = [4, 2, 3]
WITH_GLU = [*ALL_POOLERS, "attention[scorer=glu]"]  # one of the scorer options (helpers.POOLER_VARIANTS)


def setup(name: str, dtype=torch.float32):
    torch.manual_seed(0)
    pooler = make_pooler(name).to(dtype)
    gen = torch.Generator().manual_seed(1)
    layers = [h.to(dtype) for h in random_layers(len(LENGTHS), max(LENGTHS) + 1, gen)]
    return pooler, states_for(pooler, layers), mask_from_lengths(LENGTHS, max(LENGTHS) + 1)


def as_tuple(states):
    return tuple(states) if isinstance(states, list) else (states,)


def from_tuple(pooler, states: tuple):
    return list(states) if pooler.kind == "layer" else states[0]


def penalty_gradients(pooler, states, mask):
    """d/dθ of ||d(sum pooled^2)/dx||^2: a gradient penalty, which needs double backward."""
    inputs = [s.detach().requires_grad_() for s in as_tuple(states)]
    params = [p for p in pooler.parameters() if p.requires_grad]
    loss = pooler(from_tuple(pooler, tuple(inputs)), mask).pow(2).sum()
    first = torch.autograd.grad(loss, inputs, create_graph=True, allow_unused=True)  # layer_start skips some
    penalty = sum(g.pow(2).sum() for g in first if g is not None)
    return torch.autograd.grad(penalty, inputs + params, allow_unused=True)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_double_backward_matches_the_plain_path(name, path):
    pooler, states, mask = setup(name)
    ours = penalty_gradients(pooler, states, mask)
    with fast.disabled():
        plain = penalty_gradients(pooler, states, mask)
    params = [p for p in pooler.parameters() if p.requires_grad]
    reached = [g is not None and bool(g.abs().sum() > 0) for g in ours[len(ours) - len(params):]]
    if params:  # the penalty reaches the pooler's parameters (dropout-free learned poolers: at least one)
        assert any(reached), f"{name}: the gradient penalty reaches none of the parameters"
    for a, b in zip(ours, plain):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_batched_gradients_match_one_by_one(name, path):
    """``torch.autograd.grad(..., is_grads_batched=True)`` (torch's older vmap over the backward pass, also behind
    ``autograd.functional.jacobian(vectorize=True)``): the gradients of several incoming gradients at once equal each
    one's own. Catches a backward pass that writes a batched gradient into an unbatched buffer in place."""
    pooler, states, mask = setup(name)
    inputs = [s.detach().requires_grad_() for s in as_tuple(states)]
    out = pooler(from_tuple(pooler, tuple(inputs)), mask)
    incoming = torch.randn(3, *out.shape, generator=torch.Generator().manual_seed(2))
    batched = torch.autograd.grad(out, inputs, incoming, is_grads_batched=True, retain_graph=True, allow_unused=True)
    for i, one in enumerate(incoming):
        single = torch.autograd.grad(out, inputs, one, retain_graph=True, allow_unused=True)
        for many, alone in zip(batched, single):
            assert (many is None) == (alone is None)
            if many is not None:
                torch.testing.assert_close(many[i], alone)


@pytest.mark.parametrize("name", ["mean", "max", "attention", "gem", "adapool", "weighted_layer"])
def test_gradgradcheck_in_double_precision(name, path):
    """Second derivatives against finite differences (float64, a tiny batch)."""
    pooler, states, mask = setup(name, torch.float64)
    states = tuple(s[:2, :4, :].detach().clone().requires_grad_() for s in as_tuple(states))
    mask = mask[:2, :4]

    def run(*xs):
        return pooler(from_tuple(pooler, xs), mask)

    assert torch.autograd.gradgradcheck(run, states, atol=1e-5, rtol=1e-3)


def functional_loss(pooler, params, states, mask):
    return functional_call(pooler, params, (from_tuple(pooler, states), mask)).pow(2).sum()


@pytest.mark.parametrize("name", WITH_GLU)
def test_torch_func_grad_matches_autograd(name, path):
    pooler, states, mask = setup(name)
    params = {k: v.detach() for k, v in pooler.named_parameters()}
    g_params, g_states = grad(lambda p, s: functional_loss(pooler, p, s, mask), argnums=(0, 1))(
        params, as_tuple(states))
    inputs = [s.detach().requires_grad_() for s in as_tuple(states)]
    loss = pooler(from_tuple(pooler, tuple(inputs)), mask).pow(2).sum()
    named = [(k, p) for k, p in pooler.named_parameters() if p.requires_grad]
    expected = torch.autograd.grad(loss, inputs + [p for _, p in named], allow_unused=True)
    for a, b in zip(g_states, expected[:len(inputs)]):
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b, rtol=1e-4, atol=1e-5)
    for (key, _), b in zip(named, expected[len(inputs):]):
        torch.testing.assert_close(g_params[key], torch.zeros_like(g_params[key]) if b is None else b,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_per_sample_gradients_with_vmap(name, path):
    """vmap(grad) over a padded batch (parameters and hidden states) equals one autograd call per example."""
    pooler, states, mask = setup(name)
    named = [(k, v) for k, v in pooler.named_parameters() if v.requires_grad]
    params = {k: v.detach() for k, v in named}

    def one(p, s, m):
        return functional_loss(pooler, p, tuple(x[None] for x in s), m[None])

    g_params, g_states = vmap(grad(one, argnums=(0, 1)), in_dims=(None, 0, 0))(params, as_tuple(states), mask)
    for row in range(len(LENGTHS)):
        single = [s[row:row + 1].detach().requires_grad_() for s in as_tuple(states)]
        loss = pooler(from_tuple(pooler, tuple(single)), mask[row:row + 1]).pow(2).sum()
        expected = torch.autograd.grad(loss, single + [v for _, v in named], allow_unused=True)
        ours = [g[row] for g in g_states] + [g_params[k][row] for k, _ in named]
        for a, b in zip(ours, expected):
            b = torch.zeros_like(a) if b is None else b.reshape(a.shape)
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_jacrev_matches_autograd_jacobian(name, path):
    pooler, states, mask = setup(name)
    states = tuple(s[:2, :3, :] for s in as_tuple(states))
    mask = mask[:2, :3]

    def run(*xs):
        return pooler(from_tuple(pooler, xs), mask)

    ours = jacrev(run, argnums=tuple(range(len(states))))(*states)
    expected = torch.autograd.functional.jacobian(run, states)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


class _EveryPooler(torch.nn.Module):
    """Several poolers on the same input, one output each: one compile or export for all of them (each costs about
    a second whatever the graph's size)."""

    def __init__(self, poolers: list) -> None:
        super().__init__()
        self.poolers = torch.nn.ModuleList(poolers)

    def forward(self, x, mask):
        return tuple(pooler(x, mask) for pooler in self.poolers)


def together_or_name_the_failures(names: list[str], poolers: list, run):
    """``run`` on all the poolers in one module; when that fails, on each alone, to name the ones that fail (the
    slow path, only when something is broken)."""
    try:
        return run(_EveryPooler(poolers))
    except Exception:
        failing = []
        for name, pooler in zip(names, poolers):
            try:
                run(_EveryPooler([pooler]))
            except Exception as error:
                failing.append(f"{name}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        pytest.fail(f"fails for {'; '.join(failing) or 'the poolers together only'}")


def by_kind(names: list[str], layer: bool) -> tuple[list[str], list]:
    """The token (or layer) poolers of ``names``, built after one seed."""
    torch.manual_seed(0)
    poolers = [make_pooler(name) for name in names]
    chosen = [(n, p) for n, p in zip(names, poolers) if (p.kind == "layer") == layer]
    return [n for n, _ in chosen], [p for _, p in chosen]


@pytest.mark.parametrize("kind", ["token", "layer"])
def test_compile_fullgraph_matches_eager(kind):
    """Every pooler (and a scorer option) in one graph, no breaks (aot_eager), the eager outputs and gradients.

    Dynamo refuses modules holding an nn.LSTM / nn.GRU unless PyTorch's own ``allow_rnn`` switch is on
    (the README lists this limit); with it, lstm_layers / gru_layers trace their unrolled cells in one graph.
    """
    names, poolers = by_kind(WITH_GLU, kind == "layer")
    _, states, mask = setup(names[0])
    torch._dynamo.reset()

    def outputs_and_gradients(module, compiled: bool):
        inputs = [s.detach().requires_grad_() for s in as_tuple(states)]
        run = torch.compile(module, backend="aot_eager", fullgraph=True) if compiled else module
        with torch._dynamo.config.patch(allow_rnn=kind == "layer"):
            out = run(from_tuple(poolers[0], tuple(inputs)), mask)
        sum(o.pow(2).sum() for o in out).backward()
        return out, [x.grad for x in inputs]

    out, grads = together_or_name_the_failures(names, poolers, lambda module: outputs_and_gradients(module, True))
    expected, eager_grads = outputs_and_gradients(_EveryPooler(poolers), False)
    for name, a, b in zip(names, out, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    for compiled_grad, eager_grad in zip(grads, eager_grads):  # the compiled backward is the eager one
        assert (compiled_grad is None) == (eager_grad is None)
        if eager_grad is not None:
            torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-4, atol=1e-5)
    assert any(g is not None for g in eager_grads)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mean", "attention", "weighted_layer", "adapool"])
def test_inductor_compile_matches_eager(name):
    """One pooler per family through inductor (minutes in all: slow)."""
    torch._dynamo.reset()
    pooler, states, mask = setup(name)
    compiled = torch.compile(pooler, fullgraph=True)
    torch.testing.assert_close(compiled(states, mask), pooler(states, mask), rtol=1e-4, atol=1e-5)


def test_importing_poolkit_leaves_warning_filters_alone():
    import subprocess
    import sys

    code = ("import warnings, torch; before = list(warnings.filters); import poolkit, poolkit.pooling.fast; "
            "x = __import__('torch').randn(2, 3, 4); poolkit.get_pooler('max', hidden_size=4)(x); "
            "assert warnings.filters == before, 'poolkit changed the warning filters'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_fast_forms_are_off_under_every_transform():
    seen = []

    def probe(x):
        seen.append(fast.active(x))
        return x.sum()

    x = torch.randn(3, 2)
    probe(x)
    grad(probe)(x)
    vmap(probe)(x)
    torch.compile(probe, backend="eager", fullgraph=True)(x)
    with fast.disabled():
        probe(x)
    assert seen == [True, False, False, False, False]



def export_inputs():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 6, 16, generator=gen)
    return x, mask_from_lengths([6, 2, 4], 6), torch.randn(2, 5, 16, generator=gen), mask_from_lengths([1, 5], 5)


@pytest.mark.parametrize("kind", ["token", "layer"])
def test_torch_export_answers_like_eager_on_other_inputs(kind):
    """Every pooler through torch.export (in one program) with dynamic batch and length; the exported program on a
    differently padded batch."""
    names, poolers = by_kind(ALL_POOLERS, kind == "layer")
    x, mask, other_x, other_mask = export_inputs()
    states = states_for(poolers[0], random_layers(3, 6)) if kind == "layer" else x
    other = states_for(poolers[0], random_layers(2, 5)) if kind == "layer" else other_x
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dims = {0: batch, 1: length}
    shapes = ([dims] * len(states) if kind == "layer" else dims, dims)
    program = together_or_name_the_failures(
        names, poolers, lambda module: torch.export.export(module, (states, mask), dynamic_shapes=shapes))
    for name, pooler, out in zip(names, poolers, program.module()(other, other_mask)):
        torch.testing.assert_close(out, pooler(other, other_mask), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, name=name: f"{name}: {m}")


def _onnx_outputs(module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor) -> list:
    import onnxruntime as ort

    program = torch.onnx.export(module, (x, mask), dynamo=True, verbose=False)
    session = ort.InferenceSession(program.model_proto.SerializeToString())
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {names[0]: x.numpy(), names[1]: mask.numpy()})


@pytest.mark.slow
def test_onnx_export_runs_in_onnxruntime():
    """Every token pooler exported to ONNX (torch.onnx dynamo exporter), in one graph, and run by onnxruntime equals
    eager PyTorch; when the graph does not export, each pooler is exported alone to name the ones that fail."""
    pytest.importorskip("onnxruntime")
    names, poolers = by_kind(list_poolers("token"), layer=False)
    x, mask, _, _ = export_inputs()
    outputs = together_or_name_the_failures(names, poolers, lambda module: _onnx_outputs(module, x, mask))
    assert len(outputs) == len(names)
    for name, pooler, out in zip(names, poolers, outputs):
        torch.testing.assert_close(torch.from_numpy(out), pooler(x, mask).detach(), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_forward_mode_ad_matches_func_jvp(name, path):
    """Dual numbers (torch.autograd.forward_ad) give torch.func.jvp's tangent: the fast forms, which have no
    jvp rule, must step aside."""
    from torch.autograd import forward_ad

    pooler, states, mask = setup(name)
    tangents = tuple(torch.randn_like(s) for s in as_tuple(states))

    def run(*xs):
        return pooler(from_tuple(pooler, xs), mask)

    _, expected = torch.func.jvp(run, as_tuple(states), tangents)
    with forward_ad.dual_level():
        duals = tuple(forward_ad.make_dual(s, t) for s, t in zip(as_tuple(states), tangents))
        tangent = forward_ad.unpack_dual(run(*duals)).tangent
    torch.testing.assert_close(tangent, expected, rtol=1e-4, atol=1e-5)


# -- module hooks (pooling/hooks.py) ----------------------------------------------------------------
#: Option sets whose folded forms differ from the defaults' (several heads / queries, a picked query token, a
#: projection after the heads, zonotope's other gate sources, a linear token pooler that layer poolers pool per layer).
HOOK_OPTIONS = {"latent[heads=2,queries=3]": ("latent", {"num_heads": 2, "num_queries": 3}),
                "adapool[query_index=0,heads=2]": ("adapool", {"query_index": 0, "num_heads": 2}),
                "multihead_attention[combine=project]": ("multihead_attention", {"combine": "project"}),
                "zonotope_attention[gate=both,rank=2]": ("zonotope_attention", {"gate": "both", "rank": 2}),
                "zonotope_attention[gate=context]": ("zonotope_attention", {"gate": "context"}),
                "weighted_layer[token=mean]": ("weighted_layer", {"token_pooler": "mean"}),
                "mean_layers[token=mean]": ("mean_layers", {"token_pooler": "mean"})}
HOOKED = [*ALL_POOLERS, *POOLER_VARIANTS, *HOOK_OPTIONS]


def hook_setup(name: str, dtype=torch.float64):
    """A pooler in training mode (no dropout) and its inputs, the padding holding NaN and an empty row."""
    base, options = HOOK_OPTIONS.get(name, (name, {}))
    if "lstm" in name or "gru" in name:
        options = {**options, "dropout": 0.0}
    torch.manual_seed(0)
    pooler = make_pooler(base, **options).to(dtype).train()
    gen = torch.Generator().manual_seed(2)
    mask = mask_from_lengths([5, 0, 3], 5).bool()
    layers = [h.to(dtype).masked_fill(~mask[:, :, None], float("nan")).requires_grad_()
              for h in random_layers(3, 5, gen)]
    return pooler, layers, mask


def outputs_and_gradients(pooler, layers, mask):
    out = pooler(states_for(pooler, layers), mask)
    leaves = [p for p in pooler.parameters()] + layers
    grads = torch.autograd.grad(out.float().square().sum(), leaves, allow_unused=True)
    return out.detach(), [torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, grads)]


def callable_layers(pooler):
    """The submodules a call can run: those with a forward of their own (not ModuleLists, not parameter holders)."""
    return [(name, m) for name, m in pooler.named_modules() if name and type(m).forward is not torch.nn.Module.forward]


@pytest.mark.parametrize("name", HOOKED)
def test_hooks_on_every_layer_run_and_leave_outputs_and_gradients_alone(name, path):
    """A forward hook on every layer of a pooler runs on each call (in training, with NaN in the padding), never on an
    input that holds the padding, once per call in a token pooler (the non-finite guard never pools twice); hooks
    that only watch change neither the output nor any gradient, and the padding's gradient is exactly 0. Catches a
    layer folded into another product and so never called (an attention's scoring layers, latent / adapool's keys and
    values, a composite's parts, a layer pooler's token pooler), or its module form computing other values, reading
    the padding or running twice."""
    pooler, layers, mask = hook_setup(name)
    expected_out, expected_grads = outputs_and_gradients(pooler, layers, mask)
    ran = []

    def watch(module, args, output, layer_name):  # the padding holds NaN: a layer that reads it sees a NaN
        ran.append(layer_name)
        if not isinstance(module, Pooler):  # a part gets the tokens as its parent got them, as a caller would
            assert all(bool(a.isfinite().all()) for a in args if isinstance(a, torch.Tensor)), f"{layer_name}: padding"

    for layer_name, layer in callable_layers(pooler):
        layer.register_forward_hook(lambda module, args, output, layer_name=layer_name:
                                    watch(module, args, output, layer_name))
    out, grads = outputs_and_gradients(pooler, layers, mask)
    assert sorted(set(ran)) == sorted(layer_name for layer_name, _ in callable_layers(pooler))
    if pooler.kind == "token":
        assert len(ran) == len(set(ran)), ran
    torch.testing.assert_close(out, expected_out, rtol=1e-9, atol=1e-12)
    for grad, expected in zip(grads, expected_grads):
        assert bool(grad.isfinite().all())
        torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)
    for grad in grads[-len(layers):]:
        assert bool((grad[~mask] == 0).all())


@pytest.mark.parametrize("name", HOOKED)
def test_a_hook_that_replaces_a_layers_output_changes_the_pooled_output(name, path):
    """For each layer, a forward hook returning another output (the tensor, or a tuple's first tensor: a part's pooled
    vectors, rescaled and shifted) changes what the pooler returns. Catches a layer that is called, so its hooks
    run, but whose output is then dropped for the folded product's."""
    pooler, layers, mask = hook_setup(name)

    def replace(module, args, output):
        if isinstance(output, torch.Tensor):
            return output * 1.5 + 0.25
        return (output[0] * 1.5 + 0.25, *output[1:])

    with torch.no_grad():
        expected = pooler(states_for(pooler, layers), mask)
        for layer_name, layer in callable_layers(pooler):
            handle = layer.register_forward_hook(replace)
            changed = pooler(states_for(pooler, layers), mask)
            handle.remove()
            if layer_name in RETURNS_TUPLE.get(name.partition("[")[0], ()):
                continue
            assert not torch.allclose(changed[[0, 2]], expected[[0, 2]]), layer_name


#: Layers whose tuple output's first tensor the pooler does not read: a recurrence's outputs (it reads final states).
RETURNS_TUPLE = {"lstm_layers": ("rnn",), "gru_layers": ("rnn",)}


@pytest.mark.parametrize("name", ["weighted_layer", "mean_layers"])
@pytest.mark.parametrize("grad", [True, False])
def test_a_hooked_linear_token_pooler_is_called_once_on_the_mixed_layer(name, grad, path):
    """A layer pooler whose linear token pooler (mean) has a hook calls it once per call on the mixed layer, the whole
    batch, in training and in inference (which otherwise mixes in chunks of rows): a squaring hook then gives the
    square of the mixed layer's mean. Catches the per-layer pooling kept (the hook on each layer, its outputs
    mixed: an affine hook cannot tell the two apart, a square can) or the hook called on parts of the batch."""
    pooler, layers, _ = hook_setup(f"{name}[token=mean]")
    layers = [h.detach().nan_to_num(0.0) for h in layers]
    mask = torch.ones(layers[0].shape[:2], dtype=torch.bool)
    with torch.no_grad():
        mixing = pooler(states_for(pooler, layers), mask, return_weights=True)[1]["layer"][0]  # (L',) per layer
        mixed = sum(w * h for w, h in zip(mixing, layers[-len(mixing):]))
    shapes = []

    def square(module, args, output):  # output: (pooled, weights), the layer pooler asks for the token weights
        shapes.append(tuple(args[0].shape))
        return (output[0].square(), *output[1:])

    pooler.token.register_forward_hook(square)
    with torch.set_grad_enabled(grad):
        out = pooler(states_for(pooler, layers), mask)
    assert shapes == [tuple(layers[0].shape)]
    torch.testing.assert_close(out.detach(), mixed.mean(dim=1).square(), rtol=1e-6, atol=1e-9)  # float32 weights


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", ["attention", "gated_attention", "multihead_attention", "latent", "adapool"])
def test_hooked_and_folded_forms_agree_in_half_precision(name, dtype, path):
    """In bf16 (and float32) the module forms answer as the folded ones to the dtype's rounding: their projections run
    in the layers' own dtype. Catches a module form that rounds its scores or sums in bf16 where the folded form
    keeps float32."""
    pooler, layers, mask = hook_setup(name, dtype)
    layers = [h.detach() for h in layers]
    with torch.no_grad():
        expected = pooler(states_for(pooler, layers), mask).float()
        for _, layer in callable_layers(pooler):
            layer.register_forward_hook(lambda module, args, output: None)
        got = pooler(states_for(pooler, layers), mask).float()
    tolerance = 0.05 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


def test_a_hook_on_a_part_leaves_its_empty_row_policy_as_it_was(path):
    """A part built with on_empty="raise" raises on an empty row whether or not it has a hook (a module call would
    check it; so does the part called through pool). Catches a hook that changes what a call does."""
    pooler = make_pooler("concat", poolers=[{"name": "attention", "on_empty": "raise"}, "mean"])
    x, mask = torch.randn(2, 4, pooler.hidden_size), mask_from_lengths([4, 0], 4)
    for hooked in (False, True):
        if hooked:
            pooler.parts[0].register_forward_hook(lambda module, args, output: None)
        with pytest.raises(PoolkitError, match="no real token"):
            pooler(x, mask)


@pytest.mark.parametrize("name, layer", [("attention", "score.0"), ("latent", "key"), ("adapool", "value"),
                                         ("multihead_attention", "hidden"), ("gated_attention", "gate"),
                                         ("concat", "parts.0.score.0"), ("weighted_layer", "token.score.0")])
def test_a_pruned_scoring_layer_prunes_the_pooler(name, layer, path):
    """torch.nn.utils.prune sets a layer's weight from weight_orig * mask in a forward pre-hook: after an optimiser
    step on weight_orig the pooler answers as one whose layer holds the new pruned weight. Catches a folded form that
    reads the weight attribute the pre-hook would have refreshed (stale: computed when the pruning was applied)."""
    from torch.nn.utils import prune

    options = {"token_pooler": "attention"} if name == "weighted_layer" else {}
    torch.manual_seed(0)
    pooler = make_pooler(name, **options).double()
    gen = torch.Generator().manual_seed(2)
    mask = mask_from_lengths([5, 0, 3], 5)
    layers = [h.double() for h in random_layers(3, 5, gen)]
    pruned = pooler.get_submodule(layer)
    prune.random_unstructured(pruned, "weight", amount=0.5)
    with torch.no_grad():
        pruned.weight_orig.add_(torch.randn_like(pruned.weight_orig))  # an optimiser step
        out = pooler(states_for(pooler, layers), mask)
        prune.remove(pruned, "weight")  # makes weight_orig * mask the layer's plain weight
        torch.testing.assert_close(out, pooler(states_for(pooler, layers), mask), rtol=1e-9, atol=1e-12)


def test_a_hooked_part_that_reads_the_maps_size_is_called_on_the_map(path):
    """A composite's positional part (flex reads the map's size) with a hook of its own is called as a module on the
    map, channels last: the hook runs and sees the map, and the output and weights are the unhooked ones. Catches the
    part called on the flattened positions (read as a 1 x H*W map)."""
    pooler = make_pooler("concat", poolers=["flex", "mean"])
    gen = torch.Generator().manual_seed(3)
    feature_map = torch.randn(2, pooler.hidden_size, 3, 4, generator=gen)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 2:] = False
    expected = pooler(feature_map, mask, return_weights=True)
    shapes = []
    pooler.parts[0].register_forward_hook(lambda module, args, output: shapes.append(tuple(args[0].shape)))
    for got, want in zip(pooler(feature_map, mask, return_weights=True), expected):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(pooler(feature_map, mask), expected[0])
    assert shapes == [(2, 3, 4, pooler.hidden_size)] * 2
