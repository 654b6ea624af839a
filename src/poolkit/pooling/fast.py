"""Fast CPU forms of masking's plain operations, chosen by one switch (:func:`active`).

Each form here gives the values and gradients of a plain form in :mod:`masking` (or, for the read by a few queries,
of ``attention.cross_attention``'s; tests hold them to it) with less work in eager CPU mode: a scoring matmul over the
real tokens only, a cheaper gradient for the weighted sum, a read by a few queries whose backward writes x's gradient
once, a masked max/min without a filled copy of the input. The half-precision sums per row's slice are
float32 sums like the plain form's, in another order: the same half-precision means once rounded, but for a
float32 sum that falls on the rounding's edge. They are custom autograd Functions
whose backward passes are written in differentiable operations, so double backward (gradient
penalties, Hessian-vector products) runs through them. Under ``torch.func`` transforms (grad, vmap,
jacrev), ``torch.compile``, export and on other devices, :func:`active` is False and the plain forms
run: those need no data-dependent shapes, host syncs or vmap rules.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.autograd import forward_ad
from torch.nn import functional as F

from . import compiled
from .hooks import hooked

_enabled = True


@contextmanager
def disabled() -> Iterator[None]:
    """Run the plain forms everywhere inside the block (the contract suite checks both paths this way)."""
    global _enabled
    previous, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = previous


def transformed() -> bool:
    """Whether a PyTorch transform is tracing or wrapping the current call: a ``torch.func`` transform
    (grad, vmap, jacrev, ...), forward-mode AD (``torch.autograd.forward_ad``), ``torch.compile``,
    ``torch.export`` (and the ONNX exporter built on it) or ``torch.jit.trace`` (and the older ONNX exporter).
    Cheap checks only: this runs on every pooler call."""
    return (torch._C._functorch.peek_interpreter_stack() is not None or forward_ad._current_level >= 0
            or torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing())


def active(x: Tensor) -> bool:
    """Whether the fast forms apply to ``x``: eager CPU mode, no transform, not switched off. GPUs keep the
    plain forms (caching allocators make temporaries cheap; a data-dependent shape costs a host sync)."""
    return _enabled and x.device.type == "cpu" and not transformed()


def batched(t: Tensor) -> bool:
    """Whether ``t`` is a batched tensor of torch's older vmap, which ``autograd.grad(..., is_grads_batched=True)`` and
    ``autograd.functional.jacobian(vectorize=True)`` pass to backward passes as their incoming gradient: writing it
    into an unbatched buffer in place fails, so a backward pass that writes in place takes an out-of-place form."""
    check = getattr(torch._C._functorch, "is_legacy_batchedtensor", None)
    return check is not None and bool(check(t))


#: The half-precision dtypes, which poolkit computes in float32 (masking.compute_dtype) and its fast forms test for.
HALF_DTYPES = (torch.float16, torch.bfloat16)


# -- blocks sized for the thread count ----------------------------------------------------------
#: With several torch threads the blocked forms take blocks of at least this many bytes. Each kernel call is then a
#: parallel region whose threads wait for each other, and beside other work a region waits whenever one of its
#: threads is descheduled (milliseconds each): at two threads beside busy processes, tens of cache-sized blocks per
#: call lost to the plain forms in about half the cells, a few large ones seldom (docs/performance.md, the block
#: sweeps).
THREADED_BLOCK_BYTES = 32 << 20


def block_bytes(single_thread: int) -> int:
    """Bytes per block of a blocked fast form: ``single_thread`` (sized for a core's cache) on one torch thread, at
    least :data:`THREADED_BLOCK_BYTES` with several."""
    return single_thread if torch.get_num_threads() == 1 else max(single_thread, THREADED_BLOCK_BYTES)


# -- half-precision matmuls this CPU has no kernels for ----------------------------------------------
def emulated_half(dtype: torch.dtype) -> bool:
    """Whether a CPU matmul in ``dtype`` (bfloat16, float16) has no oneDNN kernel on this machine: torch then runs it
    in a generic loop, several times slower than in float32 (bf16 on CPUs without AVX-512, such as AMD's before Zen 4;
    fp16 on CPUs without AVX-512-FP16 or AMX-FP16; docs/performance.md measures bf16). torch's own check decides;
    float32 and float64 are never emulated."""
    return dtype in _emulated_halves()


@functools.cache
def _emulated_halves() -> frozenset[torch.dtype]:
    checks = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}
    return frozenset(dtype for dtype, check in checks.items()
                     if hasattr(torch.ops.mkldnn, check) and not getattr(torch.ops.mkldnn, check)())


def dense(layer: nn.Module, h: Tensor) -> Tensor:
    """``layer(h)``, where the fast forms are active (:func:`active`, no autocast) and this CPU emulates h's
    half-precision matmuls (:func:`emulated_half`) with every ``nn.Linear`` in it (the layer itself, or an
    ``nn.Sequential``'s) multiplying in float32, its product rounded once to h's dtype. Layers with hooks, and any
    other module, are called as they are. For the few pooled rows after an attention (B x Q): autograd keeps their
    float32 copies, which on token-sized inputs would double the training memory."""
    if not (active(h) and emulated_half(h.dtype)) or torch.is_autocast_enabled("cpu") or hooked(layer):
        return layer(h)
    if type(layer) is nn.Sequential:
        for inner in layer:
            h = dense(inner, h)
        return h
    if type(layer) is not nn.Linear:
        return layer(h)
    bias = None if layer.bias is None else layer.bias.float()
    return F.linear(h.float(), layer.weight.float(), bias).to(h.dtype)


# -- logits: a few score vectors per token ------------------------------------------------------
def score_product(h: Tensor, weight: Tensor) -> Tensor:
    """Tokens h scored against a few vectors: ``F.linear(h, weight)`` for ``weight`` (K, A) shared by all rows (an
    attention's logit layer), or, for h (B, T, A) and ``weight`` (B, K, A) per row (queries folded into the keys),
    ``torch.bmm(weight, h.transpose(1, 2)).transpose(1, 2)``: -> (..., K).

    Where h's gradient is taken and the fast forms are active (no autocast), :class:`ScoreProduct` computes it as a
    contiguous tensor with no half-precision matmul over K (K = 1: a broadcast multiply; more: a float32 product
    rounded once): for one query per row, and for shared weights where this CPU emulates h's half-precision matmuls
    (:func:`emulated_half`). Shared weights otherwise keep F.linear's own backward (in float32 a first run of the
    broadcast multiply gained nothing on whole pooler calls: issue 29's note), and so do several queries per row."""
    shared = weight.dim() == 2
    if (active(h) and torch.is_grad_enabled() and h.requires_grad
            and not torch.is_autocast_enabled("cpu") and (emulated_half(h.dtype) if shared else weight.shape[1] == 1)):
        return ScoreProduct.apply(h, weight)
    return F.linear(h, weight) if shared else torch.bmm(weight, h.transpose(1, 2)).transpose(1, 2)


def score_layer(layer: nn.Module, h: Tensor) -> Tensor:
    """``layer(h)`` for a bias-free ``nn.Linear`` score layer through :func:`score_product`; a layer with hooks, a
    bias or of another type is called as it is."""
    if type(layer) is not nn.Linear or layer.bias is not None or hooked(layer):
        return layer(h)
    return score_product(h, layer.weight)


class ScoreProduct(torch.autograd.Function):
    """:func:`score_product` with h's gradient, grad @ weight (an outer product for K = 1), a contiguous tensor made
    without a half-precision matmul over K. For K = 1 a broadcast multiply: each entry the product of two values of
    h's dtype rounded once, the matmul's value exactly. torch's own backward of the per-row form takes a batched
    matmul with an inner dimension of 1 and writes h's gradient transposed, which autograd then adds to the gradient
    of another read of h element by element across the transposition. For larger K (shared weights in a half
    precision this CPU emulates: torch's generic half loop is many times slower than float32), a float32 product
    rounded once. The forward product (a matrix-vector product for K = 1, left in h's dtype so that no float32 copy
    of h is made; per row, h on the left: the plain form's value to float rounding) and the weight gradient,
    grad^T @ h (inner dimension: the tokens), stay in h's dtype."""

    @staticmethod
    def forward(h: Tensor, weight: Tensor) -> Tensor:
        return F.linear(h, weight) if weight.dim() == 2 else torch.bmm(h, weight.transpose(1, 2))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: Tensor):
        h, weight = ctx.saved_tensors
        grad_h = grad_weight = None
        if ctx.needs_input_grad[0]:
            if weight.shape[-2] == 1:
                grad_h = grad * weight
            else:
                wide = torch.promote_types(h.dtype, torch.float32)
                grad_h = (grad.to(wide) @ weight.to(wide)).to(h.dtype)
        if ctx.needs_input_grad[1]:
            if weight.dim() == 2:
                grad_weight = grad.reshape(-1, weight.shape[0]).t() @ h.reshape(-1, weight.shape[1])
            else:
                grad_weight = torch.bmm(grad.transpose(1, 2), h)
        return grad_h, grad_weight


# -- scoring projections over the real tokens only ---------------------------------------------
#: Gathered token blocks of GatheredLinear are at most this large on one thread (:func:`block_bytes`): a transient
#: copy, not the whole batch's.
GATHER_CHUNK_BYTES = 2 << 20


class GatheredLinear(torch.autograd.Function):
    """``F.linear(tokens[index], weight, bias)`` (every token where ``index`` is None), a block of at most
    ``block_bytes(GATHER_CHUNK_BYTES)`` of tokens at a time (a gathered copy is transient, never the size of a large
    batch), saving ``tokens`` (alive anyway) and ``index`` for backward, which gathers again block by block.

    Half-precision tokens whose matmuls this CPU emulates (:func:`emulated_half`) are multiplied in float32, block by
    block, each product rounded once to their dtype: what the half-precision matmul computes (float32 sums, one
    rounding), at float32 speed. The weight gradient then sums the blocks in float32 and rounds once at the end."""

    @staticmethod
    def forward(tokens: Tensor, index: Tensor | None, weight: Tensor, bias: Tensor | None) -> Tensor:
        out = tokens.new_empty(len(tokens) if index is None else len(index), weight.shape[0])
        wide = emulated_half(tokens.dtype)
        if wide:
            weight, bias = weight.float(), None if bias is None else bias.float()
        for rows, part in _blocks(tokens, index):
            block = _take(tokens, part)
            if wide:
                block = block.float()
                out[rows] = block.mm(weight.t()) if bias is None else torch.addmm(bias, block, weight.t())
            elif bias is None:
                torch.mm(block, weight.t(), out=out[rows])
            else:
                torch.addmm(bias, block, weight.t(), out=out[rows])
        return out

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        tokens, index, weight, bias = inputs
        ctx.save_for_backward(tokens, index, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad: Tensor):
        tokens, index, weight = ctx.saved_tensors
        wide = emulated_half(tokens.dtype)
        factor = weight.float() if wide else weight
        if batched(grad):  # the whole batch at once, out of place
            rows = _take(tokens, slice(None) if index is None else index)
            block_grad = grad.float() if wide else grad
            product = (block_grad @ factor).to(tokens.dtype)
            grad_tokens = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_tokens = product if index is None else tokens.new_zeros(tokens.shape).index_copy(0, index, product)
            if ctx.needs_input_grad[2]:
                grad_weight = (block_grad.transpose(-1, -2) @ (rows.float() if wide else rows)).to(weight.dtype)
            if ctx.has_bias and ctx.needs_input_grad[3]:
                grad_bias = grad.sum(dim=-2)
            return grad_tokens, None, grad_weight, grad_bias
        grad_tokens = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # every row written when every token is taken; else those not taken are 0
            grad_tokens = tokens.new_empty(tokens.shape) if index is None else tokens.new_zeros(tokens.shape)
        if ctx.needs_input_grad[2]:
            grad_weight = factor.new_zeros(weight.shape)
        for rows, part in _blocks(tokens, index):
            block_grad = grad[rows].float() if wide else grad[rows]
            if grad_tokens is not None:  # in place: autograd records it too
                product = block_grad.mm(factor).to(tokens.dtype)
                if index is None:
                    grad_tokens[part] = product
                else:
                    grad_tokens.index_copy_(0, part, product)
            if grad_weight is not None:
                block = _take(tokens, part)
                grad_weight.addmm_(block_grad.t(), block.float() if wide else block)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = grad.sum(dim=0)
        return grad_tokens, None, grad_weight, grad_bias


def _blocks(tokens: Tensor, index: Tensor | None):
    """(slice of the output rows, their tokens: a slice of ``tokens`` where ``index`` is None, else their indices) in
    blocks of at most ``block_bytes(GATHER_CHUNK_BYTES)`` of tokens."""
    step = max(1, block_bytes(GATHER_CHUNK_BYTES) // (tokens.shape[1] * tokens.element_size()))
    for start in range(0, len(tokens) if index is None else len(index), step):
        rows = slice(start, start + step)
        yield rows, rows if index is None else index[rows]


def _take(tokens: Tensor, part: slice | Tensor) -> Tensor:
    """The tokens of one block of :func:`_blocks`: a view of a slice, a gathered copy of indices."""
    return tokens[part] if isinstance(part, slice) else tokens.index_select(0, part)


# -- a projection with its activation inside the product ----------------------------------------
def activate(projection: Tensor, activations: tuple[str | None, ...]) -> tuple[Tensor, ...]:
    """``projection`` (N, A) cut into ``len(activations)`` equal column blocks, ``activations[i]`` ('tanh' or 'sigmoid':
    torch's function of that name, which oneDNN's linear also takes as a post-op; None: nothing) applied to the i-th:
    the plain form of :func:`activated_linear`. The last activated block's runs in place; any before it make new tensors
    (in place, a later block's would change what autograd saved of theirs: the blocks share a version counter)."""
    width = projection.shape[-1] // len(activations)
    last = -1  # a loop, not max() over a generator: torch.compile traces this
    for i, name in enumerate(activations):
        last = i if name is not None else last
    blocks = []
    for i, name in enumerate(activations):
        block = projection if len(activations) == 1 else projection.narrow(-1, i * width, width)
        blocks.append(block if name is None else getattr(block, f"{name}_")() if i == last
                      else getattr(torch, name)(block))
    return tuple(blocks)


def fuses_activation(tokens: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """Whether :func:`activated_linear` takes ``tokens`` ' projection: the fast forms active (:func:`active`, no
    autocast), no gradient taken (oneDNN's fused linear has none), bf16 tokens, weight and bias on a CPU that multiplies
    bf16 natively (:func:`emulated_half`; fp16 is not measured), and torch built with oneDNN and its use not switched
    off (``torch.backends.mkldnn.flags(enabled=False)``). In float32 the fused form was no faster than torch's product
    and an in-place activation in a probe, so it is not taken there."""
    graded = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (tokens, weight, bias))
    return (tokens.dtype == weight.dtype == torch.bfloat16 and (bias is None or bias.dtype == torch.bfloat16)
            and not emulated_half(torch.bfloat16) and active(tokens) and not graded
            and not torch.is_autocast_enabled("cpu") and torch.backends.mkldnn.is_available()
            and torch.backends.mkldnn.enabled)


def activated_linear(tokens: Tensor, index: Tensor | None, weight: Tensor, bias: Tensor | None,
                     activations: tuple[str | None, ...]) -> tuple[Tensor, ...]:
    """:func:`activate` of ``F.linear(tokens[index], weight, bias)`` (every token where ``index`` is None) as oneDNN's
    linear with the activation as a post-op (``torch.ops.mkldnn._linear_pointwise``, what torch.compile's CPU fusions
    call), one product per column block: no pass of its own over the (N, A) projection, the activation applied to the
    product's float32 sums before they are rounded to the tokens' dtype (the plain form rounds first, so the two differ
    in the last bits). The real tokens are gathered into one copy first (no gradient is taken, so none is kept), so
    that each block's product is written where it stays. Where :func:`fuses_activation` holds."""
    taken = (tokens if index is None else tokens.index_select(0, index)).contiguous()
    biases = (None,) * len(activations) if bias is None else bias.chunk(len(activations))
    return tuple(torch.ops.mkldnn._linear_pointwise(taken, w.contiguous(),
                                                    None if b is None else b.contiguous(), name or "none", [], "")
                 for w, b, name in zip(weight.chunk(len(activations)), biases, activations))


# -- weighted sums -------------------------------------------------------------------------------
class WeightedSum(torch.autograd.Function):
    """``torch.bmm(weights, x)`` for weights (B, H, T) and x (B, T, D) whose weight gradient is zero at padding
    (see backward), and whose x gradient for one weight row (H = 1) in float32 / float64 is a broadcast
    multiply: bmm's own backward computes weights^T @ grad as a matrix product with an inner dimension of 1,
    which on CPU costs more (in bf16 / fp16 it does not). ``real`` (B, 1, T) bool, or None: padding is where
    the weight is 0."""

    @staticmethod
    def forward(weights: Tensor, x: Tensor, real: Tensor | None) -> Tensor:
        return torch.bmm(weights, x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        weights, x, real = inputs
        ctx.save_for_backward(weights, x, real)

    @staticmethod
    def backward(ctx, grad: Tensor):
        weights, x, real = ctx.saved_tensors
        grad = grad.contiguous()  # often an expanded view (from a sum): slow to broadcast
        grad_weights = None
        if ctx.needs_input_grad[0]:
            # Selected away at padding, whatever the product gave there (a huge padded value overflows it).
            # Without ``real``, zero wherever the weight is: softmax weights, whose backward multiplies by the
            # weight itself, so nothing is lost.
            grad_weights = torch.bmm(grad, x.transpose(1, 2)).masked_fill(weights == 0 if real is None else ~real, 0)
        grad_x = None
        if ctx.needs_input_grad[1]:
            transposed = weights.transpose(1, 2)
            outer = weights.shape[1] == 1 and x.dtype not in HALF_DTYPES
            grad_x = transposed * grad if outer else torch.bmm(transposed, grad)
        return grad_weights, grad_x, None


def block_rows(length: int, dim: int, size: int) -> int:
    """Rows of ``length`` x ``dim`` float32 values in a block of at most ``size`` bytes, at least one."""
    return max(1, size // max(1, length * dim * 4))


def _float_blocks(x: Tensor, single_thread: int) -> Iterator[tuple[slice, Tensor]]:
    """(rows, their float32 copy) for blocks of rows of x (B, T, D) of at most ``block_bytes(single_thread)`` as
    float32 (:func:`block_rows`), each copied into one buffer that the next block reuses: the block stays in the cache
    between its copy and its use, and no fresh float32 tensor of x's size is made (one costs page faults worth several
    passes over x)."""
    batch, length, dim = x.shape
    rows = min(batch, block_rows(length, dim, block_bytes(single_thread)))
    block = torch.empty(rows, length, dim, dtype=torch.float32, device=x.device)
    for start in range(0, batch, rows):
        at = slice(start, min(start + rows, batch))
        yield at, block[:at.stop - start].copy_(x[at])


#: :class:`HalfWeightedSum` copies half-precision x to float32 a block of rows of at most this many float32 bytes at a
#: time on one thread (:func:`block_bytes`; at least one row), into one buffer that it reuses: the block stays in a
#: core's cache between its copy and its product, and no fresh float32 tensor of x's size is made (one costs page
#: faults worth several passes over x)
EXACT_BLOCK_BYTES = 512 << 10


class HalfWeightedSum(WeightedSum):
    """``torch.bmm(weights, x.float())`` for float32 weights (B, H, T) and half-precision x (B, T, D), -> float32
    (B, H, D): x is copied to float32 a block of rows at a time (``block_bytes(EXACT_BLOCK_BYTES)``) into one reused
    buffer, and nothing float32 of x's size is kept for the backward pass, which runs in x's precision (x's
    gradient is x's dtype whatever it is computed in); the weight gradient is dropped at padding as
    :class:`WeightedSum`'s, whose saved tensors it keeps."""

    @staticmethod
    def forward(weights: Tensor, x: Tensor, real: Tensor | None) -> Tensor:
        out = weights.new_empty(weights.shape[0], weights.shape[1], x.shape[2])
        for at, tokens in _float_blocks(x, EXACT_BLOCK_BYTES):
            torch.bmm(weights[at], tokens, out=out[at])
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        weights, x, real = ctx.saved_tensors
        grad = grad.contiguous().to(x.dtype)
        grad_weights = grad_x = None
        if ctx.needs_input_grad[0]:
            grad_weights = torch.bmm(grad, x.transpose(1, 2)).float()
            grad_weights = grad_weights.masked_fill(weights == 0 if real is None else ~real, 0)
        if ctx.needs_input_grad[1]:
            grad_x = torch.bmm(weights.transpose(1, 2).to(x.dtype), grad)
        return grad_weights, grad_x, None


# -- a read by a few queries, its backward in one pass ------------------------------------------------
class QueryRead(torch.autograd.Function):
    """x (B, T, D) read by per-row queries (B, K, D): the scores q . x_t (B, K, T), their weights ``weigh(scores)``
    (a softmax over each row's real tokens, shifted by constants such as log quadrature weights: 0 at padding and in
    empty rows; ``real`` (B, 1, T) bool marks the real tokens), and the weighted sums ``weights @ x`` (B, K, D)
    -> (sums, weights): the plain form's scores, softmax and sum (attention.cross_attention) as one node.

    Its backward pass (:func:`_read_gradients`) writes x's gradient once, where the plain form's score product and
    weighted sum each write a gradient of x's size and autograd adds them: one fresh tensor of x's size fewer (on the
    CPU a large one costs page faults worth several passes over x), and no pass to add them. With one query (K = 1) the
    scores and the weights' gradient are matrix-vector products with x on the left (:func:`_scores`; the plain form has
    x on the right), to float rounding the same values. The backward pass is written in differentiable operations, so
    double backward runs through it."""

    @staticmethod
    def forward(x: Tensor, queries: Tensor, real: Tensor, weigh: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
        return _weighted_read(x, queries, weigh)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, queries, real, _ = inputs
        ctx.save_for_backward(x, queries, real, output[1])

    @staticmethod
    def backward(ctx, grad: Tensor, grad_weights: Tensor):
        x, queries, real, weights = ctx.saved_tensors
        return *_read_gradients(x, queries, real, weights, grad, grad_weights, ctx.needs_input_grad[:2]), None, None


def query_read(x: Tensor, queries: Tensor, real: Tensor, weigh: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """:class:`QueryRead`'s (sums, weights): through the autograd node where a gradient of x or of the queries is
    taken, else its forward called as a function (a node's own cost is a sizeable share of a small batch's read)."""
    if _takes_gradient(x, queries):
        return QueryRead.apply(x, queries, real, weigh)
    return _weighted_read(x, queries, weigh)


def _takes_gradient(x: Tensor, queries: Tensor) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or queries.requires_grad)


def _weighted_read(x: Tensor, queries: Tensor, weigh: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """The scores of x by the queries, their weights and the weighted sums: (sums (B, K, D), weights (B, K, T))."""
    scores = _scores(x, queries)
    weights = weigh(scores).reshape(scores.shape)
    return torch.bmm(weights, x), weights


def _read_gradients(x: Tensor, queries: Tensor, real: Tensor, weights: Tensor, grad: Tensor, grad_weights: Tensor,
                    needs: tuple[bool, bool]) -> tuple[Tensor | None, Tensor | None]:
    """The gradients of x and of the queries of :func:`_weighted_read` given those of its sums and weights: x's,
    ``[weights; g_s]^T @ [grad; queries]`` in one product, g_s (the scores' gradient) the softmax's backward with the
    weights' gradient selected away at padding first (a padded x can make it overflow); the queries', g_s @ x."""
    weights_total = torch.where(real, _scores(x, grad) + grad_weights, 0)  # the weights' whole gradient
    grad_scores = weights * (weights_total - (weights * weights_total).sum(dim=-1, keepdim=True))
    grad_x = grad_queries = None
    if needs[0]:
        grad_x = torch.bmm(torch.cat([weights, grad_scores], 1).transpose(1, 2), torch.cat([grad, queries], 1))
    if needs[1]:
        grad_queries = torch.bmm(grad_scores, x)
    return grad_x, grad_queries


def _scores(x: Tensor, queries: Tensor) -> Tensor:
    """queries (B, K, D) . x (B, T, D) -> (B, K, T): for K = 1 a matrix-vector product with x on the left."""
    if queries.shape[1] == 1:
        return torch.bmm(x, queries.transpose(1, 2)).transpose(1, 2)
    return torch.bmm(queries, x.transpose(1, 2))


# -- a half-precision read by a few queries -----------------------------------------------------
#: :func:`half_query_read` copies x to float32 a block of rows of at most this many bytes at a time on one thread
#: (:func:`block_bytes`; at least one row): few enough blocks that the softmax's calls per block cost little, each
#: block still in the cache when it is read the second time.
QUERY_BLOCK_BYTES = 8 << 20


def query_blocks_pay(x: Tensor) -> bool:
    """Whether :func:`half_query_read` beats the plain form's float32 copy of half-precision x: on one torch thread,
    where x's rows take more than one block of :data:`QUERY_BLOCK_BYTES` as float32, so that the blocks reuse their
    buffer (a copy of one block is the plain form's work with the blocks' calls added). With several threads the
    float32 copy stays: its sweeps do not back the blocks there (docs/performance.md, the query read sweeps)."""
    return _half_on_one_thread(x) and x.shape[0] > block_rows(x.shape[1], x.shape[2], QUERY_BLOCK_BYTES)


def half_query_read(x: Tensor, queries: Tensor, real: Tensor,
                    weigh: Callable[[Tensor, slice], Tensor]) -> tuple[Tensor, Tensor]:
    """:func:`query_read` of half-precision x (B, T, D) by float32 queries (B, K, D), as if on x's float32 copy, but a
    block of rows at a time (``weigh(scores, rows)``: the weights of those rows of the batch), through
    :class:`HalfQueryRead` where a gradient of x or of the queries is taken. -> (sums (B, K, D), weights (B, K, T))."""
    if _takes_gradient(x, queries):
        return HalfQueryRead.apply(x, queries, real, weigh)
    return _half_blocks(x, queries, weigh)


class HalfQueryRead(QueryRead):
    """:class:`QueryRead` of half-precision x read a block of rows at a time (:func:`_half_blocks`), its backward pass
    too: each block copied to float32 again into one reused buffer, its gradients computed (:func:`_read_gradients`)
    and x's rounded once to x's dtype as it is written, the value the plain form gets from its float32 copy's
    backward. Nothing float32 of x's size is made or kept. Under double backward (a graph of the backward pass) or
    batched gradients it runs :class:`QueryRead`'s backward on x's float32 copy instead, the blocks' writes in place
    being nothing autograd can differentiate or vmap batch."""

    @staticmethod
    def forward(x: Tensor, queries: Tensor, real: Tensor,
                weigh: Callable[[Tensor, slice], Tensor]) -> tuple[Tensor, Tensor]:
        return _half_blocks(x, queries, weigh)

    @staticmethod
    def backward(ctx, grad: Tensor, grad_weights: Tensor):
        x, queries, real, weights = ctx.saved_tensors  # saved as QueryRead saves them
        needs = ctx.needs_input_grad[:2]
        if torch.is_grad_enabled() or batched(grad):  # a graph of the backward pass, or batched gradients
            grad_x, grad_queries = _read_gradients(x.float(), queries, real, weights, grad, grad_weights, needs)
            return None if grad_x is None else grad_x.to(x.dtype), grad_queries, None, None
        grad_x = torch.empty_like(x, memory_format=torch.contiguous_format) if needs[0] else None
        grad_queries = torch.empty_like(queries) if needs[1] else None
        for at, tokens in _float_blocks(x, QUERY_BLOCK_BYTES):
            part_x, part_queries = _read_gradients(tokens, queries[at], real[at], weights[at], grad[at],
                                                   grad_weights[at], needs)
            if grad_x is not None:
                grad_x[at] = part_x
            if grad_queries is not None:
                grad_queries[at] = part_queries
        return grad_x, grad_queries, None, None


def _half_blocks(x: Tensor, queries: Tensor, weigh: Callable[[Tensor, slice], Tensor]) -> tuple[Tensor, Tensor]:
    """:func:`_weighted_read` of x's float32 copy, a block of rows at a time (:func:`_float_blocks`): each block read
    twice while it sits in the cache, where a float32 copy of all of x (on the CPU a fresh tensor that size costs page
    faults worth several passes over x) would be read twice from memory. The same products per row: the values of
    :func:`_weighted_read` on the whole float32 copy."""
    batch, length, dim = x.shape
    out = queries.new_empty(batch, queries.shape[1], dim)
    weights = queries.new_empty(batch, queries.shape[1], length)
    for at, tokens in _float_blocks(x, QUERY_BLOCK_BYTES):
        out[at], weights[at] = _weighted_read(tokens, queries[at], lambda scores: weigh(scores, at))
    return out, weights


# -- masked max / min ----------------------------------------------------------------------------
_index_reduce_warned = False

#: Rows of at least this many real tokens on average are reduced one slice of x per row (:func:`reduce_row_slices`)
#: where :func:`slices_pay` says so; shorter rows pay more for a call per row than they save.
ROW_SLICE_TOKENS = 64


def reduce_into_rows(x: Tensor, mask: Tensor, largest: bool) -> Tensor:
    """Masked max / min over tokens without a filled (B, T, D) copy of x: (B, T, D) -> (B, D), the plain form's
    values exactly (:func:`masking.masked_fill_reduce`); empty rows give 0. On CPU a fresh tensor that size costs
    page faults worth several passes over x.

    Where every row's real tokens are one run (left or right padding) and :func:`slices_pay`, each row's run is
    reduced as one slice (:func:`reduce_row_slices`); otherwise in one ``index_reduce`` pass
    (:func:`reduce_by_index`).
    """
    runs = single_runs(mask) if slices_pay(x, mask) else None
    out = reduce_by_index(x, mask, largest) if runs is None else reduce_row_slices(x, runs, largest)
    return out.masked_fill_(~mask.any(dim=1)[:, None], 0)


def slices_pay(x: Tensor, mask: Tensor) -> bool:
    """Whether a kernel call per row (:func:`reduce_row_slices`) beats one ``index_reduce`` over the batch: on one
    torch thread, for half-precision rows of :data:`ROW_SLICE_TOKENS` real tokens or more on average. With several
    threads each call is a parallel region: faster still on a quiet machine, but beside other work a region waits
    whenever one of its threads is descheduled, and some calls run many times slower than ``index_reduce``, which
    runs on one thread and never waits. float32 on one thread: the row slices are faster in about half to two
    thirds of the cells and slower in the rest, short of the three in four the rule asks, so ``index_reduce``
    stays (docs/performance.md, the max rows sweeps)."""
    return _half_on_one_thread(x) and int(mask.sum()) >= ROW_SLICE_TOKENS * max(1, x.shape[0])


def _half_on_one_thread(x: Tensor) -> bool:
    """The premise the row and block rules share: half-precision x, one torch thread."""
    return x.dtype in HALF_DTYPES and torch.get_num_threads() == 1


#: Rows of at least this many real elements (tokens x features) on average are summed one slice per row
#: (:func:`sum_row_slices`) where :func:`row_sums_pay` says so.
ROW_SUM_ELEMENTS = 16 << 10


def row_sums_pay(x: Tensor, mask: Tensor) -> bool:
    """Whether a float32 sum per row's slice (:func:`sum_row_slices`) beats :class:`HalfWeightedSum`'s float32 copy
    and product for a half-precision mean or sum: on one torch thread, for rows of :data:`ROW_SUM_ELEMENTS` real
    elements or more on average; a call per row costs more than it saves on smaller ones. With several threads
    (each call a parallel region) the row slices were faster in fewer than three cells of four of every group of
    the sweeps, quiet or beside busy processes, so the product stays (docs/performance.md, the sum rows sweeps)."""
    return _half_on_one_thread(x) and int(mask.sum()) * x.shape[2] >= ROW_SUM_ELEMENTS * max(1, x.shape[0])


def single_runs(mask: Tensor) -> list[tuple[int, int]] | None:
    """Each row's real tokens as one ``(start, stop)`` run, or None when a row has padding between real tokens;
    an empty row gives ``(0, 0)``. In numpy on the CPU mask: a few small torch ops cost several times more here."""
    real = mask.numpy()
    if real.shape[1] == 0:
        return [(0, 0)] * real.shape[0]
    if bool(((real[:, 1:] > real[:, :-1]).sum(axis=1) + real[:, 0] > 1).any()):
        return None
    first = real.argmax(axis=1)  # the first real token (0 for an empty row)
    return list(zip(first.tolist(), (first + real.sum(axis=1)).tolist()))


def reduce_row_slices(x: Tensor, runs: list[tuple[int, int]], largest: bool) -> Tensor:
    """Max / min of ``x[b, start:stop]`` over its tokens for each row's run: (B, T, D) -> (B, D), an empty run giving
    -inf (min: +inf), as :func:`reduce_by_index`."""
    out = x.new_empty(x.shape[0], x.shape[2])
    reduce = torch.amax if largest else torch.amin
    for row, (start, stop) in enumerate(runs):
        if stop > start:
            reduce(x[row, start:stop], dim=0, out=out[row])
        else:
            out[row].fill_(float("-inf") if largest else float("inf"))
    return out


def sum_row_slices(x: Tensor, runs: list[tuple[int, int]]) -> Tensor:
    """The float32 sum of ``x[b, start:stop]`` over its tokens for each row's run: half-precision (B, T, D) -> float32
    (B, D), an empty run giving 0: each row's real tokens copied to float32 (torch's sum does that on the CPU) and
    summed, where :class:`HalfWeightedSum` copies every token, padding included, and multiplies them by the
    weights. No gradient: for x that needs none."""
    out = x.new_empty(x.shape[0], x.shape[2], dtype=torch.float32)
    for row, (start, stop) in enumerate(runs):
        torch.sum(x[row, start:stop], dim=0, dtype=torch.float32, out=out[row])
    return out


#: float32 batches of at least this many real elements (tokens x features, over the batch) are summed as one
#: embedding bag (:func:`bag_sum`) where :func:`bag_sums_pay` says so; on fewer, finding the real tokens and the offsets
#: costs more than the bag saves.
BAG_SUM_ELEMENTS = 1 << 18


def bag_sums_pay(x: Tensor, mask: Tensor) -> bool:
    """Whether one embedding bag over the real tokens (:func:`bag_sum`) beats the batched product for a float32 mean
    or sum: on one torch thread, without autocast, for contiguous float32 x and a bool mask, of
    :data:`BAG_SUM_ELEMENTS` real elements or more. With several threads the bag was the faster in most large cells on
    a quiet machine, but beside busy processes its share of them moved from run to run and fell under three in four in
    some runs, so the product stays (docs/performance.md, the bag rows sweeps). Under autocast the product runs in
    bf16 and the bag in float32, so the bag would change a value with the batch it comes in."""
    return (x.dtype == torch.float32 and torch.get_num_threads() == 1 and _bag_takes(x, mask)
            and int(mask.sum()) * x.shape[2] >= BAG_SUM_ELEMENTS)


def half_bag_sums_pay(x: Tensor, mask: Tensor) -> bool:
    """Whether one embedding bag over the real tokens (:func:`bag_sum`) gives a half-precision sum that is rounded to
    x's dtype anyway (sum pooling's output): for contiguous bf16 / fp16 x and a bool mask, without autocast, at every
    size. The bag sums half-precision rows in float32 inside its kernel and rounds once, where the forms that keep the
    float32 sum copy x to float32 first or sum it a row's slice at a time. In the sweeps (batches of one row and more,
    one and two threads, quiet and beside busy processes; two threads stand for several, as in the other rules) it was
    the faster in every cell, and within 2% in none but a few cells of earlier busy sweeps (docs/performance.md, the
    half bag rows sweeps)."""
    return x.dtype in HALF_DTYPES and _bag_takes(x, mask)


def _bag_takes(x: Tensor, mask: Tensor) -> bool:
    """The premise the bag rules share: a bool mask (its offsets are counts), no autocast (under which the batched
    product runs in bf16), and contiguous x (the bag reads its (B * T, D) view)."""
    return mask.dtype == torch.bool and not torch.is_autocast_enabled("cpu") and x.is_contiguous()


def bag_sum(x: Tensor, mask: Tensor) -> Tensor:
    """The sum of x over each row's real tokens: contiguous (B, T, D), (B, T) bool -> (B, D) in x's dtype, an empty row
    giving 0. One ``F.embedding_bag`` (mode sum, a bag per row) over x's (B * T, D) rows, indexed by the real tokens:
    each real token is read once and the padding never, where the batched product reads every token (and multiplies
    the padding by 0). The product's sums in another order; half-precision x is summed in float32 and the sum rounded
    once to a nearest value of x's dtype (bf16: a tie away from zero). No gradient: for x that needs none."""
    batch, length, dim = x.shape
    index = mask.reshape(-1).nonzero().squeeze(1)
    counts = mask.sum(dim=1)
    return F.embedding_bag(index, x.view(batch * length, dim), counts.cumsum(0).sub_(counts), mode="sum")


def reduce_by_index(x: Tensor, mask: Tensor, largest: bool) -> Tensor:
    """Masked max / min in one ``index_reduce`` pass: (B, T, D) -> (B, D); empty rows hold -inf (min: +inf).
    Every token is reduced into its row's slot, padded tokens into an extra slot that is dropped."""
    global _index_reduce_warned
    batch, length, dim = x.shape
    rows = torch.arange(batch, device=x.device)[:, None].expand(batch, length)
    slots = torch.where(mask, rows, batch).reshape(-1)
    start = torch.full((batch + 1, dim), float("-inf") if largest else float("inf"), dtype=x.dtype, device=x.device)
    reduce = "amax" if largest else "amin"
    if _index_reduce_warned:
        return start.index_reduce(0, slots, x.reshape(-1, dim), reduce)[:batch]
    # PyTorch warns once per process that index_reduce is in beta: silenced here, at its first call only,
    # so that importing poolkit leaves the global warning filters alone.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta", category=UserWarning)
        out = start.index_reduce(0, slots, x.reshape(-1, dim), reduce)[:batch]
    _index_reduce_warned = True
    return out


def masked_sums(x: Tensor, mask: Tensor, mean: bool, root: bool = False) -> Tensor:
    """The compiled loops' float32 sum (``mean`` False: :func:`compiled.masked_sum`) or mean
    (:func:`compiled.masked_mean`) of x over each row's real tokens, through :class:`MaskedSums` where a gradient of x
    is taken. The caller checks :func:`active` and :func:`compiled.takes`."""
    if torch.is_grad_enabled() and x.requires_grad:
        return MaskedSums.apply(x, mask, mean, root)
    return compiled.masked_mean(x, mask, root) if mean else compiled.masked_sum(x, mask)


class MaskedSums(torch.autograd.Function):
    """The compiled loops' sum or mean with the gradient of :mod:`masking` 's plain forms: the forward pass reads the
    real tokens once (where the plain forms multiply all of x by the weights in a matrix product), and the backward
    pass writes x's gradient once, the plain forms' values for a finite incoming gradient. For float32 x the weights
    (1, 1/n or 1/sqrt(n) at the real tokens, 0 at the padding) times the incoming gradient in one broadcast multiply,
    as the plain product's backward gives it. For bf16 x the incoming gradient (over the scale), rounded to bf16, at
    each real token and 0 at the padding, as the plain float32 sum of a bf16 copy gives it, written by
    :func:`compiled.spread` in one pass (torch multiplies bf16 tensors several times slower than it copies them;
    where the incoming gradient is not finite, the padding's gradient stays 0, where the plain product's is NaN);
    under double backward (``create_graph``) and for batched gradients, a broadcast multiply by the mask, which
    autograd differentiates."""

    @staticmethod
    def forward(x: Tensor, mask: Tensor, mean: bool, root: bool) -> Tensor:
        return compiled.masked_mean(x, mask, root) if mean else compiled.masked_sum(x, mask)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, mask, mean, root = inputs
        ctx.mean, ctx.root, ctx.dtype = mean, root, x.dtype
        ctx.save_for_backward(mask)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        grad = grad.contiguous()  # often an expanded view (from a sum): slow to broadcast
        weights = mask.float()
        if ctx.mean:
            scale = weights.sum(dim=1, keepdim=True).clamp_(min=1)
            scale = scale.sqrt_() if ctx.root else scale
            if ctx.dtype == torch.float32:  # the plain product's weights, 1/n at the real tokens
                weights = weights.div_(scale)
            else:  # the plain float32 sum's gradient, over the scale
                grad = grad / scale
        if ctx.dtype == torch.float32 or torch.is_grad_enabled() or batched(grad):  # or differentiated again
            return weights.to(ctx.dtype)[:, :, None] * grad.to(ctx.dtype)[:, None, :], None, None, None
        return compiled.spread(grad.to(ctx.dtype), mask), None, None, None


class MaskedExtreme(torch.autograd.Function):
    """:func:`reduce_into_rows` with the plain form's gradient: all of it to the first real holder of the value (none
    from an empty row, whose output is the constant 0). -> (values, index or None): where :func:`compiled.takes`, the
    values and their holders in one pass (:func:`compiled.masked_extreme`; the index is not differentiable).

    Otherwise the holder is found in the backward pass, with the (B, T, D) gradient tensor as the scratch buffer of
    :func:`first_holder` (one fresh tensor that size instead of two). The gradient is linear in the
    incoming gradient and piecewise constant in x, so double backward runs through ``put``.
    """

    @staticmethod
    def forward(x: Tensor, mask: Tensor, largest: bool) -> tuple[Tensor, Tensor | None]:
        if compiled.takes(x, mask):
            return compiled.masked_extreme(x, mask, largest, with_index=True)
        return reduce_into_rows(x, mask, largest), None

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, mask, largest = inputs
        values, index = output
        ctx.largest = largest
        if index is not None:
            ctx.mark_non_differentiable(index)
        ctx.save_for_backward(x, mask, values, index)

    @staticmethod
    def backward(ctx, grad: Tensor, _grad_index: Tensor | None):
        x, mask, values, index = ctx.saved_tensors
        batch, length, dim = x.shape
        with torch.no_grad():
            if index is None:
                grad_x = torch.empty_like(x, memory_format=torch.contiguous_format)
                index = first_holder(x, values, mask, ctx.largest, scratch=grad_x)
                grad_x.zero_()
            else:
                grad_x = torch.zeros_like(x, memory_format=torch.contiguous_format)
            flat = (torch.arange(batch, device=x.device)[:, None] * (length * dim)
                    + index * dim + torch.arange(dim, device=x.device))
        empty = ~mask.any(dim=1)[:, None]
        put = grad_x.put if batched(grad) else grad_x.put_  # recorded under create_graph
        return put(flat, grad.to(x.dtype).masked_fill(empty, 0)), None, None


#: The signed integer of each float dtype's width, whose view :func:`first_holder` reads a difference's bits through.
_SAME_WIDTH_INT = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16,
                   torch.float16: torch.int16}


def first_holder(x: Tensor, values: Tensor, mask: Tensor, largest: bool, scratch: Tensor | None = None) -> Tensor:
    """Index of the first real token whose value equals ``values`` (the masked max or min), per feature.

    On CPU, comparisons that write a bool tensor and reductions that return indices over dim 1 are several times
    slower than arithmetic and a plain ``amax``, so the index is read off an integer code instead: d = values - x
    (max; x - values for min) is >= 0 at every real token and 0 where it holds the value, so d's bits read as a signed
    integer of its width (:data:`_SAME_WIDTH_INT`), clamped to [0, 1], are 0 at a holder and 1 elsewhere (-0, which
    ``-0 - +0`` gives where both zeros tie, is the integer's minimum: clamped to 0, a holder as the comparison has
    it). (T - t) * (1 - that) on real tokens (0 on padding) then peaks at the first holder (padding's code is 0
    whatever it holds: its rank is 0). Integer arithmetic on those bits is exact, and in bf16 the training step of max
    and mean_max got faster than with torch's float ``sign`` (docs/performance.md, the extremes' holder). ``scratch``
    (x's shape and dtype), when given, is overwritten with the code. Ranks must fit the integer (32767 for half
    precision), so longer rows go in blocks of that many tokens, the last block first, an earlier holder replacing a
    later one. The code needs finite values (inf - inf is NaN); otherwise the comparison form answers, where a NaN
    value is held by the first real NaN. A feature with no real holder (an empty row) gives 0.
    """
    length = x.shape[1]
    if bool(values.isfinite().all()):
        scratch = torch.empty_like(x) if scratch is None else scratch
        integer = _SAME_WIDTH_INT[x.dtype]
        block = min(length, torch.iinfo(integer).max)
        index = None
        for start in reversed(range(0, length, block)):
            stop = min(start + block, length)
            rank = (mask[:, start:stop] * torch.arange(stop - start, 0, -1, device=x.device))[:, :, None].to(integer)
            high, low = (values[:, None, :], x[:, start:stop]) if largest else (x[:, start:stop], values[:, None, :])
            d = torch.sub(high, low, out=scratch[:, start:stop])
            best = d.view(integer).clamp_(0, 1).mul_(rank.neg()).add_(rank).amax(dim=1)  # 0: no holder here
            found = stop - best.long()
            index = found if index is None else torch.where(best > 0, found, index)
        return index.masked_fill_(index == length, 0)  # T: no real holder in any block
    values = values[:, None, :]
    hit = ((x == values) | (x.isnan() & values.isnan())).view(torch.uint8)
    hit.mul_(mask.view(torch.uint8)[:, :, None])  # a uint8 product: much cheaper than a broadcast bool &
    return hit.max(dim=1).indices
