"""The only place that knows how to mask.

Rules (the bugs of the snippets in the wild): masked logits are filled with ``finfo(dtype).min`` or
handled with boolean masks, never a literal like ``-1e9`` (it overflows fp16); softmax and sums run in
float32 for half-precision inputs; a row with no real token gives zeros and zero weights, never NaN;
CLS / last mean the first / last *real* token under left or right padding. Values at padded positions
never reach an output (they only need to be finite, as every encoder's are).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn import functional as F

# masked_extreme's one-pass path uses index_reduce, which warns (once) that its API is in beta.
warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta", category=UserWarning)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs (reductions and softmax), the dtype itself otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def eager_cpu(x: Tensor) -> bool:
    """Whether x is on the CPU in plain eager mode (not traced by ``torch.compile`` or ONNX export): where
    data-dependent shapes and one-pass CPU kernels are allowed. GPUs keep the plain forms (caching
    allocators make temporaries cheap; a data-dependent shape costs a host sync)."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling() and not torch.onnx.is_in_onnx_export()


def project_tokens(x: Tensor, mask: Tensor, weight: Tensor, bias: Tensor | None,
                   head: Callable[[Tensor], Tensor]) -> Tensor:
    """``head(F.linear(token, weight, bias))`` for every token: (B, T, D) -> (B, T, K), ``head``: (N, A) -> (N, K).

    On eager CPU (without autocast), when there is padding, only the real tokens are projected (one
    gathered (N_real, D) block) and padded positions get 0, which callers mask: a scoring matmul then
    skips the padding, often a third of the positions of a batch padded to its longest text. The
    gathered copy is not kept for backward (:class:`_GatheredLinear` gathers again there), so training
    memory is that of the all-tokens form. Elsewhere all B*T tokens are projected (no data-dependent
    shapes, no host sync). ``head`` may work in place on its input.
    """
    batch, length, dim = x.shape
    tokens = x.reshape(batch * length, dim)
    if eager_cpu(x) and not torch.is_autocast_enabled("cpu") and not bool(mask.all()):
        index = mask.reshape(-1).nonzero().squeeze(1)
        real = head(_GatheredLinear.apply(tokens, index, weight, bias))
        return real.new_zeros(batch * length, real.shape[-1]).index_copy(0, index, real).view(batch, length, -1)
    return head(F.linear(tokens, weight, bias)).view(batch, length, -1)


#: Gathered token blocks of _GatheredLinear are at most this large (a transient copy, not the whole batch's).
GATHER_CHUNK_BYTES = 2 << 20


class _GatheredLinear(torch.autograd.Function):
    """``F.linear(tokens[index], weight, bias)``, gathering the tokens in blocks of at most
    ``GATHER_CHUNK_BYTES`` (the copy is transient, never the size of the batch), and saving ``tokens``
    (alive anyway) and ``index`` for backward, which gathers again block by block."""

    @staticmethod
    def forward(ctx, tokens: Tensor, index: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(tokens, index, weight)
        ctx.has_bias = bias is not None
        out = tokens.new_empty(len(index), weight.shape[0])
        for rows, part in _blocks(tokens, index):
            block = tokens.index_select(0, part)
            if bias is None:
                torch.mm(block, weight.t(), out=out[rows])
            else:
                torch.addmm(bias, block, weight.t(), out=out[rows])
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        tokens, index, weight = ctx.saved_tensors
        grad_tokens = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_tokens = tokens.new_zeros(tokens.shape)
        if ctx.needs_input_grad[2]:
            grad_weight = weight.new_zeros(weight.shape)
        for rows, part in _blocks(tokens, index):
            if grad_tokens is not None:
                grad_tokens.index_copy_(0, part, grad[rows].mm(weight))
            if grad_weight is not None:
                grad_weight.addmm_(grad[rows].t(), tokens.index_select(0, part))
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = grad.sum(dim=0)
        return grad_tokens, None, grad_weight, grad_bias


def _blocks(tokens: Tensor, index: Tensor):
    """(slice of the gathered rows, their token indices) in blocks of at most GATHER_CHUNK_BYTES of tokens."""
    step = max(1, GATHER_CHUNK_BYTES // (tokens.shape[1] * tokens.element_size()))
    for start in range(0, len(index), step):
        yield slice(start, start + step), index[start:start + step]


def real_counts(mask: Tensor) -> Tensor:
    """Number of real tokens per row: (B, T) bool -> (B,) int64."""
    return mask.sum(dim=1)


def masked_weighted_sum(x: Tensor, weights: Tensor) -> Tensor:
    """sum_t weights[b, t] * x[b, t, :] as one batched matmul, accumulated in float32.

    x: (B, T, D); weights: (B, T) or (B, H, T) already zero at padding. Returns (B, D) or (B, H, D)
    in the compute dtype (float32 for half inputs). No (B, T, D) temporary is made: half-precision x is
    not upcast (that copy, twice x's size, costs more than the sum itself); the weights are cast to x's
    dtype instead and the matmul accumulates in float32 (oneDNN on CPU, cuBLAS on GPU), so only the
    weights and the (B, D) result are rounded to x's precision.
    """
    squeeze = weights.dim() == 2
    w = (weights.unsqueeze(1) if squeeze else weights).to(x.dtype)
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad) and not torch.onnx.is_in_onnx_export():
        out = _WeightedSum.apply(w, x)
    else:
        out = torch.bmm(w, x)
    out = out.to(compute_dtype(x.dtype))
    return out.squeeze(1) if squeeze else out


class _WeightedSum(torch.autograd.Function):
    """``torch.bmm(weights, x)`` for weights (B, H, T) and x (B, T, D), with a cheaper gradient for x.

    bmm's own backward computes x's gradient, weights^T @ grad, as a matrix product with an inner
    dimension of H; with one weight row per example (H = 1: mean, sum, attention) that is an outer
    product, and on CPU a float32 K = 1 matrix product costs ~3x the broadcast multiply used here (in
    bf16 the matrix product stays: PyTorch's bf16 multiply is the slower one there).
    """

    @staticmethod
    def forward(ctx, weights: Tensor, x: Tensor) -> Tensor:
        ctx.save_for_backward(weights, x)
        return torch.bmm(weights, x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        weights, x = ctx.saved_tensors
        grad = grad.to(x.dtype).contiguous()  # often an expanded view (from a sum): ~10x slower to broadcast
        grad_weights = torch.bmm(grad, x.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_x = None
        if ctx.needs_input_grad[1]:
            transposed = weights.transpose(1, 2)
            outer = weights.shape[1] == 1 and compute_dtype(x.dtype) == x.dtype
            grad_x = transposed * grad if outer else torch.bmm(transposed, grad)
        return grad_weights, grad_x


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over the real tokens: (B, T, D), (B, T) bool -> (B, D) in the compute dtype; empty rows 0."""
    dtype = compute_dtype(x.dtype)
    counts = real_counts(mask).clamp(min=1).to(dtype)
    return masked_weighted_sum(x, mask.to(dtype) / counts[:, None])


def masked_fill_reduce(x: Tensor, mask: Tensor, largest: bool) -> tuple[Tensor, Tensor]:
    """Masked max (``largest``) or min over tokens with the dtype's own extreme as fill.

    Returns (values (B, D), argmax/argmin indices (B, D)); rows with no real token give 0.
    """
    info = torch.finfo(x.dtype)
    fill = info.min if largest else info.max
    filled = x.masked_fill(~mask[:, :, None], fill)
    values, indices = filled.max(dim=1) if largest else filled.min(dim=1)
    empty = ~mask.any(dim=1)
    return values.masked_fill(empty[:, None], 0), indices


def masked_extreme(x: Tensor, mask: Tensor, largest: bool, with_index: bool = False):
    """Masked max (``largest``) or min over the real tokens: (B, T, D) -> values (B, D) [, index (B, D)].

    The values, index and gradient of :func:`masked_fill_reduce` (``max(dim=1)``'s: the first real token
    that holds the value wins, and takes the whole gradient), without its filled (B, T, D) copy of x in
    eager CPU mode, where a fresh tensor that size costs page faults worth several passes over x: one
    ``index_reduce`` pass reduces every token into its row's slot (padded tokens into an extra slot that
    is dropped). The winner is looked up only when the index is asked for, and by the backward pass, in
    the gradient's own buffer. Elsewhere (GPU caching allocators make the temporary cheap,
    ``torch.compile`` fuses it, ONNX export needs plain ops) this is ``masked_fill_reduce``. Rows with no
    real token give 0 (and index 0).
    """
    if not eager_cpu(x):
        values, index = masked_fill_reduce(x, mask, largest)
        return (values, index) if with_index else values
    if torch.is_grad_enabled() and x.requires_grad:
        values = _MaskedExtreme.apply(x, mask, largest)
    else:
        values = _reduce_into_rows(x, mask, largest)
    index = None
    if with_index:
        with torch.no_grad():
            index = _first_holder(x, values, mask, largest)
    values = values.masked_fill(~mask.any(dim=1)[:, None], 0)
    return (values, index) if with_index else values


def _reduce_into_rows(x: Tensor, mask: Tensor, largest: bool) -> Tensor:
    """Masked max / min in one ``index_reduce`` pass: (B, T, D) -> (B, D); empty rows hold the dtype's extreme."""
    batch, length, dim = x.shape
    info = torch.finfo(x.dtype)
    rows = torch.arange(batch, device=x.device)[:, None].expand(batch, length)
    slots = torch.where(mask, rows, batch).reshape(-1)
    start = torch.full((batch + 1, dim), info.min if largest else info.max, dtype=x.dtype, device=x.device)
    return start.index_reduce(0, slots, x.reshape(-1, dim), "amax" if largest else "amin")[:batch]


class _MaskedExtreme(torch.autograd.Function):
    """:func:`_reduce_into_rows` with ``max(dim=1)``'s gradient: all of it to the first real holder of the value.

    The holder is found in the backward pass, with the (B, T, D) gradient tensor as the scratch buffer of
    :func:`_first_holder` (one fresh tensor that size instead of two: on CPU each costs page faults).
    """

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor, largest: bool) -> Tensor:
        values = _reduce_into_rows(x, mask, largest)
        ctx.largest = largest
        ctx.save_for_backward(x, mask, values)
        return values

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        x, mask, values = ctx.saved_tensors
        batch, length, dim = x.shape
        grad_x = torch.empty_like(x, memory_format=torch.contiguous_format)
        index = _first_holder(x, values, mask, ctx.largest, scratch=grad_x)
        flat = (torch.arange(batch, device=x.device)[:, None] * (length * dim)
                + index * dim + torch.arange(dim, device=x.device))
        return grad_x.zero_().put_(flat, grad.to(x.dtype)), None, None


def _first_holder(x: Tensor, values: Tensor, mask: Tensor, largest: bool, scratch: Tensor | None = None) -> Tensor:
    """Index of the first real token whose value equals ``values`` (the masked max or min), per feature.

    On CPU, comparisons that write a bool tensor and reductions that return indices over dim 1 are
    several times slower than float arithmetic and a plain ``amax``, so the index is read off a float
    code instead: with d = values - x (max; x - values for min), d >= 0 at every real token and 0 where
    it holds the value, so (T - t) * (1 - sign(d)) on real tokens (0 on padding) peaks at the first
    holder: four passes over x and an amax, ~3x faster than ``(x == values) & mask`` then ``max(dim=1)``.
    ``scratch`` (x's shape and dtype) holds the code when given. Ranks must be exact in x's dtype, so the
    tokens go in blocks of at most 256 (bf16; 2048 fp16), the last block first, an earlier holder
    replacing a later one. The code needs finite values (inf - inf is NaN); otherwise the comparison
    form answers.
    """
    length = x.shape[1]
    if bool(values.isfinite().all()):
        scratch = torch.empty_like(x) if scratch is None else scratch
        block = min(length, int(2 / torch.finfo(x.dtype).eps))
        index = None
        for start in reversed(range(0, length, block)):
            stop = min(start + block, length)
            rank = (mask[:, start:stop] * torch.arange(stop - start, 0, -1, device=x.device))[:, :, None].to(x.dtype)
            code = torch.sub(values[:, None, :], x[:, start:stop], out=scratch[:, start:stop])
            if not largest:
                code.neg_()
            best = code.sign_().mul_(rank.neg()).add_(rank).amax(dim=1)  # stop - start - local index; 0: none here
            found = stop - best.long()
            index = found if index is None else torch.where(best > 0, found, index)
        return index.clamp_(max=length - 1)
    hit = (x == values[:, None, :]).view(torch.uint8)
    hit.mul_(mask.view(torch.uint8)[:, :, None])  # a uint8 product: ~10x cheaper than a broadcast bool &
    return hit.max(dim=1).indices


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax in float32 over the real positions; padded positions and empty rows get weight 0.

    scores: (..., T) with ``mask`` broadcastable to it (True = real). Returns float32 weights.
    """
    scores = scores.float().masked_fill(~mask, float("-inf"))
    # A row of only -inf would give NaN: shift it to 0 first, then zero its weights.
    any_real = mask.any(dim=dim, keepdim=True)
    scores = torch.where(any_real, scores, torch.zeros_like(scores))
    weights = torch.softmax(scores, dim=dim)
    return weights * mask


def masked_logsumexp(x: Tensor, mask: Tensor) -> Tensor:
    """log sum_t exp(x[b, t, d]) over real tokens in float32: (B, T, D) -> (B, D).

    Empty rows are given a finite value (their output must be zeroed by the caller) so that neither
    the forward nor the backward pass sees -inf - -inf.
    """
    keep = mask | ~mask.any(dim=1, keepdim=True)
    return torch.logsumexp(x.float().masked_fill(~keep[:, :, None], float("-inf")), dim=1)


def first_real_index(mask: Tensor) -> Tensor:
    """Index of the first real token per row (left or right padding): (B, T) bool -> (B,); empty rows 0."""
    return mask.view(torch.uint8).argmax(dim=1)  # argmax gives the first maximum; the view is free


def last_real_index(mask: Tensor) -> Tensor:
    """Index of the last real token per row (left or right padding): (B, T) bool -> (B,); empty rows 0."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    return (mask * positions).argmax(dim=1)  # the largest position held by a real token (all 0: index 0)


def real_token_index(mask: Tensor, position: int) -> Tensor:
    """Index of the ``position``-th real token per row (negative counts from the last real token).

    Positions beyond a row's length are clamped to its last (or first) real token. (B, T) -> (B,).
    """
    counts = real_counts(mask)
    rank = mask.long().cumsum(dim=1) - 1  # rank of each real token among the real ones
    wanted = position if position >= 0 else counts + position
    wanted = torch.as_tensor(wanted, device=mask.device).clamp(min=0)
    wanted = torch.minimum(wanted.expand_as(counts), (counts - 1).clamp(min=0))
    hit = mask & (rank == wanted[:, None])
    return hit.to(torch.uint8).argmax(dim=1)


def edge_rows(x: Tensor, mask: Tensor, last: bool) -> Tensor:
    """x at each row's first (``last``: last) real token: (B, T, D) -> (B, D); rows with no real token give 0.

    When every row's first (last) position is real (right (left) padding, no empty row: the usual batch),
    that is a copy of the slice x[:, 0] (x[:, -1]), after one look at B mask values: as cheap as the
    snippets' ``[:, 0]``. (Eager CPU only: on a GPU the look would be a host sync; the gather is async.)
    """
    edge = -1 if last else 0
    if eager_cpu(x) and bool(mask[:, edge].all()):
        return x[:, edge].clone()
    index = last_real_index(mask) if last else first_real_index(mask)
    return gather_rows(x, index) * mask.gather(1, index[:, None])  # the token's own flag: 0 for an empty row


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """x[b, index[b], :] for every row: (B, T, D), (B,) -> (B, D)."""
    batch, length = x.shape[:2]
    if x.stride(0) != length * x.stride(1):  # (B, T) cannot be flattened into one axis without a copy
        return x[torch.arange(batch, device=x.device), index]
    # One index_select over the flattened tokens: a third of advanced indexing's cost at B = 32.
    return x.flatten(0, 1).index_select(0, index + torch.arange(0, batch * length, length, device=x.device))


def one_hot_weights(index: Tensor, mask: Tensor) -> Tensor:
    """Weights that put all mass on ``index`` per row (zero for empty rows): -> (B, T) float32."""
    weights = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    weights[torch.arange(mask.shape[0], device=mask.device), index] = 1.0
    return weights * mask.any(dim=1, keepdim=True)


def uniform_weights(mask: Tensor) -> Tensor:
    """1/n on each of a row's n real tokens (zero for empty rows): (B, T) -> (B, T) float32."""
    weights = mask.float()
    return weights.div_(weights.sum(dim=1, keepdim=True).clamp_(min=1))


def argmax_share(indices: Tensor, mask: Tensor) -> Tensor:
    """Share of feature dimensions each token wins in a max/min reduction: (B, D) indices -> (B, T)."""
    batch, length = mask.shape
    counts = torch.zeros(batch, length, dtype=torch.float32, device=mask.device)
    counts.scatter_add_(1, indices, torch.ones_like(indices, dtype=torch.float32))
    return counts / indices.shape[1] * mask
