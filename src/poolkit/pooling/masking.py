"""The only place that knows how to mask.

Rules (the bugs of the snippets in the wild): masked logits are filled with ``finfo(dtype).min`` or
handled with boolean masks, never a literal like ``-1e9`` (it overflows fp16); softmax and sums run in
float32 for half-precision inputs; a row with no real token gives zeros and zero weights, never NaN;
CLS / last mean the first / last *real* token under left or right padding. The product forms here (a
weighted sum with zero weights at padding) let a NaN / inf at a padded position through (0 * inf):
``Pooler.forward`` is what guarantees that padding never changes an output, whatever it holds.

Where the fast forms run, padding is not zeroed first, so the guarantee rests on two rules. Forward: whatever
is computed from a padded token (a score, a gate, a power) reaches the output only through a selection that
drops it (``masked_fill`` before a softmax) or a product with a weight that is exactly 0 there: its term is 0,
or NaN, which ``Pooler.forward`` sees and pools again from zeroed padding. Backward: the gradient at a padded
position is dropped by a *selection* (``where``, ``masked_fill``, a gather, :func:`per_real_token` for a
scalar parameter applied to every token), never by a product with 0: a backward pass multiplies padded
values by incoming gradients, which overflow float32 at huge finite values (3e38 * 4) whatever the forward
gave, and 0 * inf is NaN. Summation order (CPU family, threads, BLAS kernel) then cannot decide the result.

Every function here is written in plain, composable operations (autograd of any order, ``torch.func``,
``torch.compile``, export); where :func:`fast.active` allows, a faster form from :mod:`fast` that gives
the same values and gradients runs instead (a half-precision sum: float32 sums in another order).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn import functional as F

from . import compiled, fast


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs (reductions and softmax), the dtype itself otherwise."""
    return torch.float32 if dtype in fast.HALF_DTYPES else dtype


def widen(t: Tensor) -> Tensor:
    """``t`` in its compute dtype: half precision goes to float32, float32 and float64 stay as they are."""
    return t.to(compute_dtype(t.dtype))


def project_tokens(x: Tensor, mask: Tensor, weight: Tensor, bias: Tensor | None,
                   head: Callable[..., Tensor], activations: tuple[str | None, ...] = (None,)) -> Tensor:
    """``head(*fast.activate(F.linear(token, weight, bias), activations))`` for every token: (B, T, D) -> (B, T, K);
    ``activations``: one per equal column block of the projection, 'tanh', 'sigmoid' or None (:func:`fast.activate`),
    ``head``: the blocks, (N, A / len(activations)) each, -> (N, K).

    The plain form projects all B*T tokens. Where :func:`fast.active` (and without autocast),
    :class:`fast.GatheredLinear` projects instead: only the real tokens when there is padding (padded positions
    get 0, which callers mask: a scoring matmul then skips the padding, often a third of the positions of a batch
    padded to its longest text, with the training memory of the plain form), and every token, a block at a time in
    float32, where this CPU emulates x's half-precision matmuls (:func:`fast.emulated_half`). Where no gradient is taken
    in bf16 (:func:`fast.fuses_activation`), the activations run inside the product (:func:`fast.activated_linear`).
    ``head`` may work in place on its inputs.
    """
    batch, length, dim = x.shape
    tokens = x.reshape(batch * length, dim)
    if fast.active(x) and not torch.is_autocast_enabled("cpu"):
        index = None if bool(mask.all()) else mask.reshape(-1).nonzero().squeeze(1)
        fused = any(activations) and fast.fuses_activation(tokens, weight, bias)
        if fused or index is not None or fast.emulated_half(x.dtype):
            real = head(*(fast.activated_linear(tokens, index, weight, bias, activations) if fused
                          else fast.activate(fast.GatheredLinear.apply(tokens, index, weight, bias), activations)))
            if index is None:
                return real.view(batch, length, -1)
            return real.new_zeros(batch * length, real.shape[-1]).index_copy(0, index, real).view(batch, length, -1)
    return head(*fast.activate(F.linear(tokens, weight, bias), activations)).view(batch, length, -1)


def zero_padding(x: Tensor, mask: Tensor) -> Tensor:
    """x with every padded position set to 0 (a select, so NaN / inf there are gone too): (B, T, D) -> (B, T, D)."""
    return torch.where(mask[:, :, None], x, torch.zeros((), dtype=x.dtype, device=x.device))


def per_real_token(value: Tensor, mask: Tensor) -> Tensor:
    """A scalar parameter ``value`` (a layer weight, a temperature, a power) applied to every position of (B, T, D)
    tokens, as (B, T, 1) whose gradient is summed over the real tokens only, by a selection. Its gradient at a
    padded position, dL/dy . dy/dvalue, is 0 times a product with the padded value: NaN where that is inf or NaN,
    or overflows. Returned as it is where no gradient is taken."""
    if not (torch.is_grad_enabled() and value.requires_grad):
        return value
    return torch.where(mask[:, :, None], value, value.detach())


def real_counts(mask: Tensor) -> Tensor:
    """Number of real tokens per row: (B, T) bool -> (B,) int64."""
    return mask.sum(dim=1)


def masked_weighted_sum(x: Tensor, weights: Tensor, mask: Tensor | None = None) -> Tensor:
    """sum_t weights[b, t] * x[b, t, :] as a batched matmul, in the compute dtype (float32 for half inputs).

    x: (B, T, D); weights: (B, T) or (B, H, T) already zero at padding. Returns (B, D) or (B, H, D). Half-precision
    x and its weights are reduced in float32, so a mean rounded once to x's precision afterwards is the correctly
    rounded mean (sentence-transformers' and timm's): weights cast to bf16 first (1/n rounded) put a bf16 mean one
    ulp off in about a fifth of its elements. Where :func:`fast.active`, :class:`fast.HalfWeightedSum` makes the
    float32 copy of x a block of tokens at a time, and runs the backward pass in x's precision.

    ``mask`` (B, T) bool, for learned weights that may be 0 at a real token (gated weights): their gradient
    is then dropped at the padded positions only. Without it, it is dropped wherever a weight is 0, which
    suits softmax weights (their backward multiplies by the weight itself).
    """
    squeeze = weights.dim() == 2
    dtype = compute_dtype(x.dtype)
    w = (weights.unsqueeze(1) if squeeze else weights).to(dtype)
    if x.dtype == dtype:
        out = _weighted_sum(w, x, mask)
    elif fast.active(x):
        out = fast.HalfWeightedSum.apply(w, x, None if mask is None else mask[:, None, :])
    else:
        out = _weighted_sum(w, x.to(dtype), mask)
    return out.squeeze(1) if squeeze else out


def _weighted_sum(w: Tensor, x: Tensor, mask: Tensor | None) -> Tensor:
    """``torch.bmm(w, x)`` (w (B, H, T), x (B, T, D), one dtype), through :class:`fast.WeightedSum` where its
    backward is the cheaper: for learned weights (its weight gradient ignores padded values), and for one weight
    row (its x gradient is a broadcast multiply)."""
    custom = w.requires_grad or (w.shape[1] == 1 and x.requires_grad)
    if custom and torch.is_grad_enabled() and fast.active(x):
        return fast.WeightedSum.apply(w, x, None if mask is None else mask[:, None, :])
    return torch.bmm(w, x)


def masked_mean(x: Tensor, mask: Tensor, root: bool = False, derived: bool = False) -> Tensor:
    """Mean over the real tokens: (B, T, D), (B, T) bool -> (B, D) in the compute dtype; empty rows 0 (``root``:
    the sum over the square root of the count, sentence-transformers' mean_sqrt_len). ``derived``: x is computed by
    the pooler from its input, padding included (gem's powers), so in training it takes the product forms, whose
    output a non-finite value at the padding makes non-finite: Pooler.forward then pools again from zeroed padding.
    (The loops never read the padding, and their gradient there, 0, would meet the non-finite derivative of the
    operations that made it.)

    Half-precision x: the float32 sum divided by the count, so the result rounded once to x's precision is the
    correctly rounded mean. float32 / float64 x: one product with the weights (:func:`uniform_weights`, the ones a
    uniform softmax takes, so that FlexPooling at zero logits agrees bit for bit where both take it); where the fast
    forms are active and :func:`compiled.takes`, the same two forms in one pass over the real tokens, the count taken
    in it (:func:`fast.masked_sums`; in training with these forms' gradient); where x needs no gradient and
    :func:`fast.bag_sums_pay`, :func:`masked_sum` 's sum divided by the count: the product's value to float32 rounding
    (the bag's sum of huge values can overflow where the product's terms do not)."""
    if _loops_take(x, mask, derived):
        return fast.masked_sums(x, mask, mean=True, root=root)
    dtype = compute_dtype(x.dtype)
    bag = _fast_without_gradient(x) and fast.bag_sums_pay(x, mask)  # float32 x only
    if x.dtype == dtype and not bag:
        weights = mask.float()
        scale = weights.sum(dim=1, keepdim=True).clamp_(min=1)
        return masked_weighted_sum(x, weights.div_(scale.sqrt_() if root else scale))
    counts = real_counts(mask).clamp(min=1).to(dtype)
    scale = counts.sqrt() if root else counts
    total = fast.bag_sum(x, mask) if bag else masked_sum(x, mask, derived)
    return total / scale[:, None]


def masked_sum(x: Tensor, mask: Tensor, derived: bool = False) -> Tensor:
    """Sum over the real tokens: (B, T, D), (B, T) bool -> (B, D) in the compute dtype, a half-precision x summed in
    float32 (:func:`masked_weighted_sum` with the mask as weights). Where :func:`fast.active` and
    :func:`compiled.takes`, one pass over the real tokens (:func:`fast.masked_sums`; in training with this form's
    gradient). Otherwise, where :func:`fast.active` and x needs no gradient: float32 x where :func:`fast.bag_sums_pay`,
    one embedding bag over the real tokens (:func:`fast.bag_sum`); half-precision x whose rows' real tokens are each one
    run, where :func:`fast.row_sums_pay`, one float32 sum per row's slice (:func:`fast.sum_row_slices`) instead of a
    float32 copy of x and a product. The rules read the whole batch, and the forms sum in different orders, so a row's
    float32 sum can differ in its last bits with the batch it comes in (as a product's can with its kernel's blocking);
    rounded to x's precision, the half-precision forms agree but for a sum on the rounding's edge. ``derived``: as
    :func:`masked_mean` 's."""
    if _loops_take(x, mask, derived):
        return fast.masked_sums(x, mask, mean=False)
    if _fast_without_gradient(x):
        if fast.bag_sums_pay(x, mask):
            return fast.bag_sum(x, mask)
        if fast.row_sums_pay(x, mask) and (runs := fast.single_runs(mask)) is not None:
            return fast.sum_row_slices(x, runs)
    return masked_weighted_sum(x, mask)


def masked_sum_for_output(x: Tensor, mask: Tensor) -> Tensor:
    """:func:`masked_sum` for a caller that rounds it to x's dtype (sum pooling's output): (B, T, D), (B, T) bool ->
    (B, D). Where :func:`fast.active`, x needs no gradient and :func:`fast.half_bag_sums_pay`, half-precision x is
    summed as one embedding bag over the real tokens (:func:`fast.bag_sum`), whose float32 sum is rounded once in the
    bag, to a nearest value of x's dtype: the same value but for a sum on the rounding's edge (float32 sums in another
    order; the bag's bf16 kernel takes a tie away from zero, where torch rounds it to even, one unit in the last place
    apart); the compiled loops' float32 sum rounded afterwards was slower on a quiet machine and faster in no cell in
    every run beside busy processes (docs/performance.md, the masked statistics in one pass), so the bag stays.
    Otherwise :func:`masked_sum`, in the compute dtype."""
    if _fast_without_gradient(x) and fast.half_bag_sums_pay(x, mask):
        return fast.bag_sum(x, mask)
    return masked_sum(x, mask)


def _loops_take(x: Tensor, mask: Tensor, derived: bool) -> bool:
    """Whether the compiled loops sum x (:func:`fast.active` and :func:`compiled.takes`), in training only where x is
    not ``derived`` from the padding (:func:`masked_mean`)."""
    return fast.active(x) and compiled.takes(x, mask) and not (derived and torch.is_grad_enabled() and x.requires_grad)


def _fast_without_gradient(x: Tensor) -> bool:
    """Whether the fast forms are active on x (:func:`fast.active`) and no gradient of x is taken."""
    return fast.active(x) and not (torch.is_grad_enabled() and x.requires_grad)


def masked_fill_reduce(x: Tensor, mask: Tensor, largest: bool) -> tuple[Tensor, Tensor]:
    """Masked max (``largest``) or min over tokens, padding filled with -inf (min: +inf).

    Returns (values (B, D), indices (B, D)): for each feature the first real token holding the value (a NaN wins, as
    ``max`` propagates it), and the value read there, so that the gradient goes to that token. A feature that holds
    the fill at every real token ties with the padding, which may come first (left padding): the first real token is
    taken instead, so that padding never changes an output, a winner or a gradient. Rows with no real token give 0
    (and index 0).
    """
    filled = x.masked_fill(~mask[:, :, None], float("-inf") if largest else float("inf"))
    indices = filled.argmax(dim=1) if largest else filled.argmin(dim=1)
    indices = torch.where(mask.gather(1, indices), indices, first_real_index(mask)[:, None])
    values = x.gather(1, indices[:, None, :]).squeeze(1)
    return values.masked_fill(~mask.any(dim=1)[:, None], 0), indices


def masked_extreme(x: Tensor, mask: Tensor, largest: bool, with_index: bool = False):
    """Masked max (``largest``) or min over the real tokens: (B, T, D) -> values (B, D) [, index (B, D)].

    The values, index and gradient of :func:`masked_fill_reduce` (the first real token that holds the value
    wins, and takes the whole gradient). Where :func:`fast.active`, without its
    filled (B, T, D) copy of x (:func:`fast.reduce_into_rows`), the winner looked up only when the index
    is asked for, and by the backward pass; where :func:`compiled.takes`, the values and their holders in one pass
    over the real tokens (:func:`compiled.masked_extreme`). Rows with no real token give 0 (and index 0).
    """
    if not fast.active(x):
        values, index = masked_fill_reduce(x, mask, largest)
        return (values, index) if with_index else values
    if torch.is_grad_enabled() and x.requires_grad:
        values, index = fast.MaskedExtreme.apply(x, mask, largest)
    elif compiled.takes(x, mask):
        return compiled.masked_extreme(x, mask, largest, with_index)
    else:
        values, index = fast.reduce_into_rows(x, mask, largest), None
    if with_index and index is None:
        with torch.no_grad():
            index = fast.first_holder(x, values, mask, largest)
    return (values, index) if with_index else values


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1, quadrature_weights: Tensor | None = None) -> Tensor:
    """Softmax over the real positions in float32 at least; padded positions and empty rows get weight 0.

    scores: (..., T) with ``mask`` broadcastable to it (True = real). Returns weights in the compute dtype.
    ``quadrature_weights`` (shaped like ``mask``, > 0 at every real position): softmax_j(s_j + log w_j), continuum
    attention's discretisation of a softmax over a function's domain (Calvello et al., arXiv 2406.06486).
    """
    scores = widen(scores)
    if quadrature_weights is not None:
        # log of 1 at padding, never log 0 = -inf (whose gradient would be NaN): padding is filled just below.
        scores = scores + torch.where(mask, quadrature_weights, 1).log()
    scores = scores.masked_fill(~mask, float("-inf"))
    # A row of only -inf would give NaN: shift it to 0 first, then zero its weights.
    any_real = mask.any(dim=dim, keepdim=True)
    scores = torch.where(any_real, scores, torch.zeros_like(scores))
    # A selection, not ``* mask``: a backward product with 0 would turn an overflowed gradient at padding into NaN.
    return torch.where(mask, torch.softmax(scores, dim=dim), 0)


def masked_logsumexp(x: Tensor, mask: Tensor) -> Tensor:
    """log sum_t exp(x[b, t, d]) over real tokens in float32 at least: (B, T, D) -> (B, D).

    Empty rows are given a finite value (their output must be zeroed by the caller) so that neither
    the forward nor the backward pass sees -inf - -inf.
    """
    keep = mask | ~mask.any(dim=1, keepdim=True)
    return torch.logsumexp(widen(x).masked_fill(~keep[:, :, None], float("-inf")), dim=1)


def first_real_index(mask: Tensor) -> Tensor:
    """Index of the first real token per row (left or right padding): (B, T) bool -> (B,); empty rows 0."""
    flags = mask.view(torch.uint8) if fast.active(mask) else mask.to(torch.uint8)  # the view is free, not exportable
    return flags.argmax(dim=1)  # argmax gives the first maximum


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
    wanted = (counts + position if position < 0 else torch.full_like(counts, position)).clamp(min=0)
    wanted = torch.minimum(wanted, (counts - 1).clamp(min=0))
    hit = mask & (rank == wanted[:, None])
    return hit.to(torch.uint8).argmax(dim=1)


def edge_rows(x: Tensor, mask: Tensor, last: bool) -> Tensor:
    """x at each row's first (``last``: last) real token: (B, T, D) -> (B, D); rows with no real token give 0.

    When every row's first (last) position is real (right (left) padding, no empty row: the usual batch),
    that is a copy of the slice x[:, 0] (x[:, -1]), after one look at B mask values: as cheap as the
    snippets' ``[:, 0]``. Otherwise the rows are gathered, and rows with no real token set to 0 (a select:
    the value gathered there is padding, whatever it holds), a step skipped when no row is empty. (The looks
    at mask values only where :func:`fast.active`: on a GPU each would be a host sync.)
    """
    edge = -1 if last else 0
    active = fast.active(x)
    if active and bool(mask[:, edge].all()):
        return x[:, edge].clone()
    index = last_real_index(mask) if last else first_real_index(mask)
    rows, real = gather_rows(x, index), mask.gather(1, index[:, None])  # the token's own flag: False for empty rows
    return rows if active and bool(real.all()) else torch.where(real, rows, 0)


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """x[b, index[b], :] for every row: (B, T, D), (B,) -> (B, D)."""
    batch, length, dim = x.shape
    if not fast.active(x) or x.stride(0) != length * x.stride(1):  # the plain form (or (B, T) not flat)
        return x.gather(1, index[:, None, None].expand(batch, 1, dim)).squeeze(1)
    # One index_select over the flattened tokens: cheaper than advanced indexing or gather on CPU.
    return x.flatten(0, 1).index_select(0, index + torch.arange(0, batch * length, length, device=x.device))


def one_hot_weights(index: Tensor, mask: Tensor) -> Tensor:
    """Weights that put all mass on ``index`` per row (zero for empty rows): -> (B, T) float32."""
    positions = torch.arange(mask.shape[1], device=mask.device)
    return (positions == index[:, None]).float() * mask.any(dim=1, keepdim=True)


def uniform_weights(mask: Tensor) -> Tensor:
    """1/n on each of a row's n real tokens (zero for empty rows): (B, T) -> (B, T) float32."""
    weights = mask.float()
    return weights.div_(weights.sum(dim=1, keepdim=True).clamp_(min=1))


def skip_first_tokens(mask: Tensor, count: int) -> Tensor:
    """The mask with each row's first ``count`` real tokens made padding, under left or right padding: the pool mask
    that keeps a prompt out of the pool while the encoder attends to it. (B, T) -> (B, T), the mask's dtype."""
    return mask * (mask.cumsum(dim=1) > count).to(mask.dtype)


def position_weights(mask: Tensor) -> Tensor:
    """k / (1 + 2 + ... + n) on the k-th of a row's n real tokens (zero at padding and for empty rows): (B, T) -> (B, T)
    float32."""
    ranks = mask.float().cumsum(dim=1).mul_(mask)
    return ranks.div_(ranks.sum(dim=1, keepdim=True).clamp_(min=1))


def quadrature_mean_weights(mask: Tensor, quadrature_weights: Tensor) -> Tensor:
    """w_t / sum of w over the row's real tokens (zero at padding and for empty rows): the weights of
    sum w x / sum w, a quadrature rule's mean of a sampled function. (B, T), (B, T) -> (B, T) in w's compute dtype."""
    weights = torch.where(mask, widen(quadrature_weights), 0)
    return weights / weights.sum(dim=1, keepdim=True).clamp(min=torch.finfo(weights.dtype).tiny)


def argmax_share(indices: Tensor, mask: Tensor) -> Tensor:
    """Share of feature dimensions each token wins in a max/min reduction: (B, D) indices -> (B, T)."""
    batch, length = mask.shape
    counts = torch.zeros(batch, length, dtype=torch.float32, device=mask.device).scatter_add(
        1, indices, torch.ones_like(indices, dtype=torch.float32))
    return counts / indices.shape[1] * mask
