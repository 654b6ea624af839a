"""Every pooler composes with PyTorch's transforms, on both code paths (the fast CPU forms and the plain ones).

Each check compares against plain autograd on the same pooler, so a transform that runs but answers
wrongly fails too: double backward (a gradient penalty reaching the parameters), ``torch.func.grad``,
per-sample gradients (``vmap(grad)``), ``jacrev``, ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, jacrev, vmap

from helpers import ALL_POOLERS, make_pooler, mask_from_lengths, random_layers, states_for
from poolkit import list_poolers
from poolkit.pooling import fast

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


@pytest.mark.parametrize("name", WITH_GLU)
def test_compile_fullgraph_matches_eager(name):
    """One graph, no breaks (aot_eager: seconds per pooler), the eager output and gradients.

    Dynamo refuses modules holding an nn.LSTM / nn.GRU unless PyTorch's own ``allow_rnn`` switch is on
    (the README lists this limit); with it, lstm_layers / gru_layers trace their unrolled cells in one graph.
    """
    torch._dynamo.reset()
    pooler, states, mask = setup(name)
    compiled = torch.compile(pooler, backend="aot_eager", fullgraph=True)
    inputs = [s.detach().requires_grad_() for s in as_tuple(states)]
    with torch._dynamo.config.patch(allow_rnn=name in ("lstm_layers", "gru_layers")):
        out = compiled(from_tuple(pooler, tuple(inputs)), mask)
    expected = pooler(from_tuple(pooler, as_tuple(states)), mask)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    out.pow(2).sum().backward()
    eager = [s.detach().requires_grad_() for s in as_tuple(states)]
    pooler(from_tuple(pooler, tuple(eager)), mask).pow(2).sum().backward()
    for compiled_input, eager_input in zip(inputs, eager):  # the compiled backward is the eager one
        assert (compiled_input.grad is None) == (eager_input.grad is None)
        if eager_input.grad is not None:
            torch.testing.assert_close(compiled_input.grad, eager_input.grad, rtol=1e-4, atol=1e-5)
    assert any(x.grad is not None for x in eager)


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


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_torch_export_answers_like_eager_on_other_inputs(name):
    """torch.export with dynamic batch and length; the exported program on a differently padded batch."""
    torch.manual_seed(0)
    pooler = make_pooler(name)
    x, mask, other_x, other_mask = export_inputs()
    states = states_for(pooler, random_layers(3, 6)) if pooler.kind == "layer" else x
    other = states_for(pooler, random_layers(2, 5)) if pooler.kind == "layer" else other_x
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dims = {0: batch, 1: length}
    shapes = ([dims] * len(states) if pooler.kind == "layer" else dims, dims)
    program = torch.export.export(pooler, (states, mask), dynamic_shapes=shapes)
    torch.testing.assert_close(program.module()(other, other_mask), pooler(other, other_mask), rtol=1e-5, atol=1e-6)


class _EveryPooler(torch.nn.Module):
    """Several poolers on the same input, one output each: one ONNX export for all of them (an export costs about
    2 s whatever the graph's size)."""

    def __init__(self, poolers: list) -> None:
        super().__init__()
        self.poolers = torch.nn.ModuleList(poolers)

    def forward(self, x, mask):
        return tuple(pooler(x, mask) for pooler in self.poolers)


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
    torch.manual_seed(0)
    names = list_poolers("token")
    poolers = [make_pooler(name) for name in names]
    x, mask, _, _ = export_inputs()
    try:
        outputs = _onnx_outputs(_EveryPooler(poolers), x, mask)
    except Exception:  # which ones? (the slow path, only when something is broken)
        failing = []
        for name, pooler in zip(names, poolers):
            try:
                _onnx_outputs(pooler, x, mask)
            except Exception as error:
                failing.append(f"{name}: {type(error).__name__}")
        pytest.fail(f"ONNX export fails for {', '.join(failing) or 'the poolers together only'}")
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
