"""Attention poolers: score every real token, softmax over the real ones, take the weighted sum.

attention, attention_head, multihead_attention, gated_attention (ABMIL), latent (learned queries,
PMA / MAP head), latent_dictionary (NV-Embed: the tokens attend over learned latents) and adapool (the query is taken
from the input). attention, attention_head and
gated_attention take one of the token scorers of :data:`SCORERS` (``scorer=``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from . import fast, hooks, masking
from .base import Pooler
from .registry import check_positive_int
from .spec import register_pooler


def _check_heads(hidden_size: int, num_heads: int, who: str) -> int:
    check_positive_int(num_heads, f"{who}: num_heads")
    if hidden_size % num_heads:
        raise PoolkitError(f"{who}: hidden_size {hidden_size} is not divisible by num_heads {num_heads}; "
                           "pick num_heads that divides it")
    return num_heads


def _check_choice(value, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise PoolkitError(f"{what} must be one of {choices}, got {value!r}")
    return value


def sigmoid_for_tanh(dtype: torch.dtype) -> bool:
    """Whether tanh is computed from sigmoid, tanh(z) = 2 sigmoid(2z) - 1 (float32 / float64 only).

    PyTorch's CPU sigmoid is about 5x cheaper than its tanh, which on a 384-wide model costs a third of
    the scoring matmul. In half precision tanh is kept: sigmoid's values near 1/2 carry a rounding
    error that tanh's values near 0 do not.
    """
    return masking.compute_dtype(dtype) == dtype


def tanh_scores(x: Tensor, mask: Tensor, hidden: nn.Linear, score_weight: Tensor) -> Tensor:
    """Additive-attention scores ``score_weight @ tanh(hidden(x))`` up to a per-score constant: -> (B, T, K).

    Real tokens only (:func:`masking.project_tokens`; padded positions score 0 and must be masked). From
    sigmoid (see :func:`sigmoid_for_tanh`), w . tanh(z) = 2w . sigmoid(2z) - sum(w): the constant -sum(w)
    is the same for every token and drops out of the softmax, the factors 2 fold into the (small)
    weights, and the softmax weights are the tanh form's to float rounding.
    """
    # The activation runs in place on the fresh (N, A) matmul output, or inside the product where no gradient is
    # taken in bf16 (masking.project_tokens): a second tensor that size costs the CPU page faults. (Tokens come
    # flattened: on a (B, T, A) view, autograd would copy for in-place.)
    if sigmoid_for_tanh(x.dtype):
        bias = None if hidden.bias is None else 2 * hidden.bias
        return masking.project_tokens(x, mask, 2 * hidden.weight, bias,
                                      lambda z: fast.score_product(z, 2 * score_weight), ("sigmoid",))
    return masking.project_tokens(x, mask, hidden.weight, hidden.bias, lambda z: fast.score_product(z, score_weight),
                                  ("tanh",))


#: The token scorers of the additive-attention poolers, one logit s(h) per real token h (V, U: (a, D) with
#: biases, w: (a,); a = attn_size):
#:   tanh      w . tanh(V h)                      additive attention (Bahdanau), attention's default
#:   linear    w . h                              one linear map, no hidden layer (attn_size unused)
#:   bilinear  sum_k (V h)_k (U h)_k = (V h) . (U h)   rank r = a: no non-linearity, a quadratic form
#:             h^T (V^T U) h plus the biases' linear terms, whose matrix V^T U has rank <= min(a, D)
#:   glu       w . (V h * sigmoid(U h))           the non-linearity on one factor (gated linear unit)
#:   abmil     w . (tanh(V h) * sigmoid(U h))     on both factors: gated_attention's default (Ilse et al. 2018)
#: glu is bilinear with a sigmoid on one factor (a gated MLP is a rank-1 bilinear form per hidden unit:
#: Breslow 2026, arXiv 2606.22172); each unit k of glu / abmil is weighted by w_k, while bilinear sums them.
SCORERS = ("tanh", "linear", "bilinear", "glu", "abmil")


def gated_scores(x: Tensor, mask: Tensor, value: nn.Linear, gate: nn.Linear, score: nn.Linear | None,
                 scorer: str) -> Tensor:
    """The logits of a two-factor scorer of :data:`SCORERS` (bilinear, glu, abmil): (B, T, D) -> (B, T).

    Both factors in one matmul over the real tokens (:func:`masking.project_tokens`; padded positions
    score 0 and must be masked). ``score`` is w (None for bilinear).
    """
    # abmil with tanh from sigmoid (see sigmoid_for_tanh): the 2 of tanh(v) = 2 sigmoid(2v) - 1 folds into the
    # value weights, and w . ((2 s_v - 1) * s_u) = 2w . (s_v * s_u) - w . s_u needs one (B*T, a) product.
    fold = 2 if scorer == "abmil" and sigmoid_for_tanh(x.dtype) else 1
    weight = torch.cat([fold * value.weight, gate.weight])
    bias = torch.cat([fold * value.bias, gate.bias])

    # Each factor's activation, applied to the projections before head (inside the product where no gradient is
    # taken in bf16: masking.project_tokens).
    activations = {"abmil": ("sigmoid",) if fold == 2 else ("tanh", "sigmoid"), "glu": (None, "sigmoid"),
                   "bilinear": (None,)}[scorer]

    def head(*factors: Tensor) -> Tensor:  # the real tokens' factors, activated, (N, a) each -> (N, 1)
        value, gate = factors if len(factors) == 2 else factors[0].chunk(2, dim=-1)
        if fold == 2:
            return fast.score_product(value * gate, 2 * score.weight) - fast.score_product(gate, score.weight)
        if scorer == "bilinear":
            return two_factor_logits(value, gate, score, scorer)
        return fast.score_layer(score, value * gate)

    return masking.project_tokens(x, mask, weight, bias, head, activations).squeeze(-1)


def two_factor_logits(value: Tensor, gate: Tensor, score: nn.Linear | None, scorer: str) -> Tensor:
    """A two-factor scorer's logits from its factors' projections V h and U h (..., a): -> (..., 1)."""
    if scorer == "bilinear":
        # A quadratic form: half-precision products would overflow where the projections are only large.
        wide = masking.compute_dtype(value.dtype)
        return (value.to(wide) * gate.to(wide)).sum(dim=-1, keepdim=True)
    return fast.score_layer(score, (value if scorer == "glu" else torch.tanh(value)) * torch.sigmoid(gate))


@register_pooler("attention", "learned_attention")
class AttentionPooler(Pooler):
    """Learned Attention Pooling: Linear(D, a) -> Tanh -> Linear(a, 1) -> masked softmax -> weighted sum.

    (B, T, D) -> (B, D). The "Learned Attention Pooling" recipe of Kaggle NLP solutions, a = 512 and
    Xavier init by default; in the lineage of Bahdanau et al. (2015) additive attention. The last
    Linear has no bias: a softmax ignores a constant shift, so the recipes' bias never learns.
    ``scorer`` swaps the scoring function for another of :data:`SCORERS` (the softmax and sum stay).
    """
    option_docs = {
        "attn_size": "width of the attention scoring layer",
        "scorer": "token logit 'tanh', 'linear', 'bilinear', 'glu' or 'abmil' (pooling/attention.py SCORERS)",
        "init": "weight init, 'xavier' (Glorot, zero biases) or 'default' (PyTorch's)",
    }
    order_invariant = True

    quadrature = True  # softmax_j(s_j + log w_j): continuum attention

    def __init__(self, hidden_size: int, *, attn_size: int = 512, scorer: str = "tanh", init: str = "xavier",
                 on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        attn_size = check_positive_int(attn_size, f"{self.name}: attn_size")
        self.scorer = _check_choice(scorer, SCORERS, f"{self.name}: scorer")
        if scorer == "tanh":
            self.score = nn.Sequential(nn.Linear(hidden_size, attn_size), nn.Tanh(),
                                       nn.Linear(attn_size, 1, bias=False))
        elif scorer == "linear":
            self.score = nn.Linear(hidden_size, 1, bias=False)  # a bias would only shift the softmax
        else:
            self.value = nn.Linear(hidden_size, attn_size)
            self.gate = nn.Linear(hidden_size, attn_size)
            self.score = None if scorer == "bilinear" else nn.Linear(attn_size, 1, bias=False)
        if _check_choice(init, ("xavier", "default"), f"{self.name}: init") == "xavier":
            for layer in self.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.xavier_uniform_(layer.weight)
                    if layer.bias is not None:
                        nn.init.zeros_(layer.bias)

    def pool(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None):
        weights = masking.masked_softmax(self.logits(x, mask), mask, quadrature_weights=quadrature_weights)
        return masking.masked_weighted_sum(x, weights), weights

    def logits(self, x: Tensor, mask: Tensor) -> Tensor:
        """Every token's logit, up to a constant: (B, T, D) -> (B, T); the softmax masks the padded positions'.
        Scoring layers with hooks are called as modules (hooks.py)."""
        two_factor = self.scorer not in ("tanh", "linear")
        if hooks.hooked(self.score, *((self.value, self.gate) if two_factor else ())):
            if not two_factor:
                return self.score(x).squeeze(-1)
            return two_factor_logits(self.value(x), self.gate(x), self.score, self.scorer).squeeze(-1)
        if self.scorer == "tanh":
            return tanh_scores(x, mask, self.score[0], self.score[2].weight).squeeze(-1)
        if self.scorer == "linear":
            return fast.score_product(x, self.score.weight).squeeze(-1)
        return gated_scores(x, mask, self.value, self.gate, self.score, self.scorer)

    def start_as_mean(self) -> bool:
        """Every token's logit 0 (uniform weights: mean pooling): the logit layer's weights zeroed (bilinear: its
        first factor's), the rest of the scorer as initialised, so that the logit layer's gradient is not zero."""
        final = self.score if self.scorer != "tanh" else self.score[2]
        with torch.no_grad():
            if final is None:  # bilinear: (V h) . (U h) with V h = 0
                self.value.weight.zero_()
                self.value.bias.zero_()
            else:
                final.weight.zero_()
        return True


@register_pooler("attention_head")
class AttentionHeadPooler(AttentionPooler):
    """Attention Head Pooling: Linear(D, D) -> Tanh -> Linear(D, 1), masked softmax, weighted sum.

    (B, T, D) -> (B, D). The "Attention Head" recipe of Kaggle NLP solutions (CommonLit), PyTorch's
    default init; it recommends concatenating it with mean pooling (``concat``).
    """

    def __init__(self, hidden_size: int, *, attn_size: int | None = None, scorer: str = "tanh",
                 init: str = "default", on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, attn_size=attn_size or hidden_size, scorer=scorer, init=init,
                         on_empty=on_empty)


@register_pooler("multihead_attention", "multihead")
class MultiHeadAttentionPooler(Pooler):
    """H independent additive-attention heads, each its own softmax over the tokens.

    (B, T, D) -> (B, H * D) with ``combine="concat"`` or (B, D) with ``combine="project"`` (a
    Linear(H * D, D)). Lin et al., "A Structured Self-attentive Sentence Embedding" (ICLR 2017).
    """
    option_docs = {
        "attn_size": "width of the attention scoring layer",
        "num_heads": "attention heads (must divide hidden_size for latent / adapool)",
        "combine": "how heads / queries are joined: 'concat', or 'project' (multihead) / 'mean' (latent)",
    }
    order_invariant = True

    quadrature = True  # softmax_j(s_j + log w_j): continuum attention
    headed = True

    def __init__(self, hidden_size: int, *, num_heads: int = 4, attn_size: int = 128,
                 combine: str = "concat", on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        self.num_heads = check_positive_int(num_heads, f"{self.name}: num_heads")
        attn_size = check_positive_int(attn_size, f"{self.name}: attn_size")
        self.combine = _check_choice(combine, ("concat", "project"), f"{self.name}: combine")
        self.hidden = nn.Linear(hidden_size, num_heads * attn_size)
        # One score vector per head over that head's own hidden units: heads share nothing.
        self.head_scores = nn.Parameter(torch.empty(num_heads, attn_size))
        nn.init.normal_(self.head_scores, std=attn_size ** -0.5)
        self.project = nn.Linear(num_heads * hidden_size, hidden_size) if combine == "project" else None
        self.output_dim = hidden_size if self.project is not None else num_heads * hidden_size

    def pool(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None, heads: bool = False):
        # Head h scores its own slice of the hidden units: one matmul with a block-diagonal (H, H * a)
        # weight reads the activations in place (an einsum over heads would first copy them per head).
        per_head = torch.block_diag(*self.head_scores.to(x.dtype).unbind(0))
        if hooks.hooked(self.hidden):  # called as a module (hooks.py)
            scores = fast.score_product(torch.tanh(self.hidden(x)), per_head)
        else:
            scores = tanh_scores(x, mask, self.hidden, per_head)
        scores = scores.transpose(1, 2)  # (B, H, T)
        weights = masking.masked_softmax(scores, mask[:, None, :], quadrature_weights=_per_query(quadrature_weights, 1))
        pooled = masking.masked_weighted_sum(x, weights).flatten(1)  # (B, H * D)
        if self.project is not None:
            pooled = fast.dense(self.project, pooled.to(self.project.weight.dtype))
        return pooled, weights if heads else weights.mean(dim=1)

    def start_as_mean(self) -> bool:
        """Every head uniform (its score vector zeroed; the hidden layer's gradient then flows through it) and,
        with ``combine="project"``, the projection the average of the heads: the mean. Concatenated heads (H > 1)
        would give H copies of the mean, not the mean: left as initialised."""
        if self.project is None and self.num_heads > 1:
            return False
        with torch.no_grad():
            self.head_scores.zero_()
            if self.project is not None:
                eye = torch.eye(self.hidden_size, dtype=self.project.weight.dtype)
                self.project.weight.copy_(torch.cat([eye / self.num_heads] * self.num_heads, dim=1))
                self.project.bias.zero_()
        return True


@register_pooler("gated_attention", "gated", "abmil")
class GatedAttentionPooler(AttentionPooler):
    """Gated attention: score = w^T (tanh(V h) * sigmoid(U h)), masked softmax, weighted sum.

    (B, T, D) -> (B, D). Ilse, Tomczak & Welling, "Attention-based Deep Multiple Instance Learning"
    (ICML 2018): attention with ``scorer="abmil"``, a = 128 and PyTorch's default init.
    """

    def __init__(self, hidden_size: int, *, attn_size: int = 128, scorer: str = "abmil", init: str = "default",
                 on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, attn_size=attn_size, scorer=scorer, init=init, on_empty=on_empty)


def _identity(layer: nn.Linear) -> None:
    """A square Linear set to the identity map (its bias, if any, zeroed); under no_grad."""
    layer.weight.copy_(torch.eye(layer.in_features, dtype=layer.weight.dtype))
    if layer.bias is not None:
        layer.bias.zero_()


def _per_query(quadrature_weights: Tensor | None, dims: int) -> Tensor | None:
    """(B, T) quadrature weights with ``dims`` axes inserted after B, shaped like the mask of a (B, ..., T) softmax."""
    return None if quadrature_weights is None else quadrature_weights.view(
        quadrature_weights.shape[0], *[1] * dims, quadrature_weights.shape[1])


def cross_attention(query: Tensor, x: Tensor, key: nn.Linear, value: nn.Linear, mask: Tensor, num_heads: int,
                    scale: float, quadrature_weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Multi-head attention of Q (projected) queries over the T tokens of x, keys and values by ``key`` / ``value``.

    query (B, Q, D), x (B, T, D), mask (B, T) -> output (B, Q, D) in the compute dtype and weights (B, H, Q, T);
    softmax in float32 at least over the real tokens, rows without one get zero weights and zero output. The
    projections are folded into the few queries instead of being applied to all T tokens (K_h, V_h: head
    h's rows of the key / value weight, c_h its value bias; a key bias would only shift the softmax):

        q_h . K_h x_t = (K_h^T q_h) . x_t        sum_t w_t (V_h x_t + c_h) = V_h (sum_t w_t x_t) + c_h sum_t w_t

    so the tokens are read by two (B, H*Q, D) x (B, D, T) matmuls instead of two D x D projections of
    every token: far fewer flops while H * Q is well under D and Q under T, as in every pooling use. Where ``key``
    or ``value`` has hooks they are called as modules instead (:func:`called_cross_attention`). Where the fast forms
    run, the scores, softmax and weighted sum are one read (:func:`fast.query_read`), of half-precision x a block of
    rows at a time where :func:`fast.query_blocks_pay` says so (:func:`fast.half_query_read`: no float32 copy of all
    of x).
    """
    if hooks.hooked(key, value):
        return called_cross_attention(query, x, key, value, mask, num_heads, scale, quadrature_weights)
    batch, length, dim = x.shape
    n_query, head_dim = query.shape[1], dim // num_heads
    # Logits rounded to half precision would put a relative error of 2^-9 on each score, enough to move
    # a peaked softmax: half inputs are read in float32 (still far cheaper than the projections).
    wide = masking.compute_dtype(x.dtype)
    queries = query.to(wide).reshape(batch, n_query, num_heads, head_dim)
    key_weight = key.weight.to(wide).view(num_heads, head_dim, dim)
    folded = (torch.einsum("bqhk,hkd->bhqd", queries, key_weight) * scale).reshape(batch, -1, dim)  # (B, H*Q, D)

    def weigh(scores: Tensor, rows: slice) -> Tensor:  # the scores (b, H*Q, T) of a slice of the rows -> weights
        return masking.masked_softmax(scores.reshape(scores.shape[0], num_heads, n_query, length),
                                      mask[rows, None, None, :], quadrature_weights=_per_query(
                                          None if quadrature_weights is None else quadrature_weights[rows], 2))

    if (fast.active(x) and not torch.is_autocast_enabled("cpu")
            and not (quadrature_weights is not None and quadrature_weights.requires_grad and torch.is_grad_enabled())):
        if fast.query_blocks_pay(x):
            mixed, weights = fast.half_query_read(x, folded, mask[:, None, :], weigh)
        else:
            mixed, weights = fast.query_read(x.to(wide), folded, mask[:, None, :], lambda s: weigh(s, slice(None)))
        weights = weights.view(batch, num_heads, n_query, length)
    else:
        x = x.to(wide)
        weights = weigh(fast.score_product(x, folded).transpose(1, 2), slice(None))  # (B, H, Q, T)
        mixed = masking.masked_weighted_sum(x, weights.view(batch, -1, length))  # (B, H*Q, D), compute dtype
    value_weight = value.weight.to(wide).view(num_heads, head_dim, dim)
    out = torch.einsum("bhqd,hkd->bqhk", mixed.view(batch, num_heads, n_query, dim), value_weight)
    if value.bias is not None:
        out = out + value.bias.to(wide).view(num_heads, head_dim) * weights.sum(-1).transpose(1, 2)[..., None]
    return out.reshape(batch, n_query, dim), weights


def called_cross_attention(query: Tensor, x: Tensor, key: nn.Module, value: nn.Module, mask: Tensor, num_heads: int,
                           scale: float, quadrature_weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:func:`cross_attention` unfolded: ``key`` and ``value`` called as modules on every token, so that their hooks
    run (hooks.py). Their projections are in their own dtype (in half precision the logits then carry the rounding
    that the folded form avoids); scores and sums in float32 at least, as there."""
    batch, length, dim = x.shape
    wide = masking.compute_dtype(x.dtype)

    def per_head(h: Tensor) -> Tensor:  # (B, N, D) -> (B, N, H, D / H)
        return h.to(wide).view(batch, -1, num_heads, dim // num_heads)

    keys, values, queries = per_head(key(x)), per_head(value(x)), per_head(query)
    scores = torch.einsum("bqhk,bthk->bhqt", queries, keys) * scale
    weights = masking.masked_softmax(scores, mask[:, None, None, :],
                                     quadrature_weights=_per_query(quadrature_weights, 2))
    out = torch.einsum("bhqt,bthk->bqhk", weights.to(wide), values)
    return out.reshape(batch, -1, dim), weights


@register_pooler("latent", "pma", "map")
class LatentAttentionPooler(Pooler):
    """k learned queries cross-attend over the tokens (multi-head), then an optional residual MLP.

    (B, T, D) -> (B, k * D) with ``combine="concat"`` or (B, D) with ``combine="mean"``. Set
    Transformer's Pooling by Multihead Attention (Lee et al., ICML 2019) and the attention-pooling
    "MAP" head of SigLIP / timm.
    """
    option_docs = {
        "num_heads": "attention heads (must divide hidden_size for latent / adapool)",
        "combine": "how heads / queries are joined: 'concat', or 'project' (multihead) / 'mean' (latent)",
        "num_queries": "number of learned queries",
        "mlp": "add the residual MLP after attention",
        "mlp_ratio": "the MLP's inner width as a multiple of hidden_size",
    }
    order_invariant = True

    quadrature = True  # softmax_j(s_j + log w_j): continuum attention
    headed = True

    def __init__(self, hidden_size: int, *, num_queries: int = 1, num_heads: int = 1, mlp: bool = True,
                 mlp_ratio: float = 2.0, combine: str = "concat", on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        self.num_queries = check_positive_int(num_queries, f"{self.name}: num_queries")
        self.num_heads = _check_heads(hidden_size, num_heads, self.name)
        self.combine = _check_choice(combine, ("concat", "mean"), f"{self.name}: combine")
        self.queries = nn.Parameter(torch.randn(num_queries, hidden_size) * hidden_size ** -0.5)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)  # a key bias only shifts the softmax
        self.value = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        self.mlp = None
        if mlp:
            inner = max(1, int(hidden_size * mlp_ratio))
            self.mlp = nn.Sequential(nn.LayerNorm(hidden_size), nn.Linear(hidden_size, inner), nn.GELU(),
                                     nn.Linear(inner, hidden_size))
        self.output_dim = hidden_size * (num_queries if combine == "concat" else 1)

    def pool(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None, heads: bool = False):
        query = self.queries.to(x.dtype).expand(x.shape[0], -1, -1)
        scale = (self.hidden_size // self.num_heads) ** -0.5
        attended, weights = cross_attention(query, x, self.key, self.value, mask, self.num_heads, scale,
                                            quadrature_weights)
        pooled = fast.dense(self.out, attended.to(self.out.weight.dtype))
        if self.mlp is not None:
            pooled = pooled + fast.dense(self.mlp, pooled)
        pooled = pooled.flatten(1) if self.combine == "concat" else pooled.mean(dim=1)
        return pooled, weights.flatten(1, 2) if heads else weights.mean(dim=(1, 2))

    def start_as_mean(self) -> bool:
        """Uniform attention (the keys zeroed), the value and output projections at the identity and the MLP's last
        layer zeroed: every query's output is the mean of the tokens. Concatenated queries (k > 1) would give k
        copies of the mean: left as initialised."""
        if self.combine == "concat" and self.num_queries > 1:
            return False
        with torch.no_grad():
            self.key.weight.zero_()
            for layer in (self.value, self.out):
                _identity(layer)
            if self.mlp is not None:
                self.mlp[-1].weight.zero_()
                self.mlp[-1].bias.zero_()
        return True


@register_pooler("latent_dictionary", "nv_embed", "latent_array")
class LatentDictionaryPooler(Pooler):
    """Every token attends over a learned dictionary of latents, then an MLP, then the masked mean (B, T, D) -> (B, D).

    NV-Embed's latent attention layer (Lee et al., arXiv 2405.17428, section 3.2): the tokens are the queries and a
    trainable array of ``num_latents`` vectors the keys and values (O = softmax(Q K^T) V, ``num_heads`` heads; 512
    latents and 8 heads in the paper), a two-layer GELU MLP after it, and mean pooling of the result. Written here
    as pre-norm blocks with residuals (h = x + attention(LN(x)); h = h + MLP(LN(h))), so that the untrained layer is
    close to mean pooling and :meth:`start_as_mean` makes it exactly that. Tokens never attend to each other: each
    is transformed on its own and only the mean mixes them.
    """
    option_docs = {
        "num_latents": "size of the learned latent dictionary (the keys and values every token attends over)",
        "num_heads": "attention heads (must divide hidden_size)",
        "mlp_ratio": "the MLP's inner width as a multiple of hidden_size",
    }
    order_invariant = True
    weight_meaning = "uniform: a mean over the real tokens, each first passed through the latent dictionary"

    def __init__(self, hidden_size: int, *, num_latents: int = 512, num_heads: int = 8, mlp_ratio: float = 2.0,
                 on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        self.num_latents = check_positive_int(num_latents, f"{self.name}: num_latents")
        self.num_heads = _check_heads(hidden_size, num_heads, self.name)
        self.latents = nn.Parameter(torch.randn(num_latents, hidden_size) * hidden_size ** -0.5)
        self.norm = nn.LayerNorm(hidden_size)
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        inner = max(1, int(hidden_size * mlp_ratio))
        self.mlp = nn.Sequential(nn.LayerNorm(hidden_size), nn.Linear(hidden_size, inner), nn.GELU(),
                                 nn.Linear(inner, hidden_size))

    def _tokens(self, x: Tensor) -> Tensor:
        """Each token through the dictionary attention and the MLP, with residuals: (B, T, D) -> (B, T, D)."""
        batch, length, dim = x.shape
        heads, head_dim = self.num_heads, dim // self.num_heads
        query = self.query(self.norm(x)).view(batch, length, heads, head_dim).transpose(1, 2)  # (B, H, T, d)
        key = self.key(self.latents).view(-1, heads, head_dim).transpose(0, 1)  # (H, r, d)
        value = self.value(self.latents).view(-1, heads, head_dim).transpose(0, 1)
        scores = query @ key.transpose(1, 2) * head_dim ** -0.5  # (B, H, T, r); softmax in float32 at least
        weights = torch.softmax(masking.widen(scores), dim=-1).to(x.dtype)
        attended = (weights @ value).transpose(1, 2).reshape(batch, length, dim)
        hidden = x + self.out(attended)
        return hidden + self.mlp(hidden)

    def pool(self, x: Tensor, mask: Tensor):
        weights = masking.uniform_weights(mask)
        return masking.masked_weighted_sum(self._tokens(x), weights), weights

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return masking.masked_weighted_sum(self._tokens(x), masking.uniform_weights(mask))

    def start_as_mean(self) -> bool:
        """The attention's output projection and the MLP's last layer zeroed: every token passes unchanged, so the
        pooler is the mean; their gradients are not zero (they multiply the attended values and the MLP's hidden
        layer)."""
        with torch.no_grad():
            for layer in (self.out, self.mlp[-1]):
                layer.weight.zero_()
                layer.bias.zero_()
        return True


@register_pooler("adapool", "adaptive_attention", "adaptive")
class AdaptiveAttentionPooler(Pooler):
    """Adaptive attention pooling: the query is taken from the input itself.

    The query is one real token (``query_index=i``, negative counts from the end), the mean of several
    (a list), or by default the mean of all real tokens; it is projected by W_Q, the tokens by W_K and
    W_V (no bias), multi-head attention with scores scaled by 1/sqrt(head dim) (= 1/sqrt(D) with one
    head), then an output projection; with a single query token, that token is added back as a
    residual. (B, T, D) -> (B, D). Brothers, "Robust Noise Attenuation via Adaptive Pooling of
    Transformer Outputs" (ICML 2025).
    """
    option_docs = {
        "num_heads": "attention heads (must divide hidden_size for latent / adapool)",
        "query_index": "the query token (int, negative from the end), several (list, averaged) or None (mean)",
        "residual": "add the query token back (default: when the query is one token)",
    }

    quadrature = True  # softmax_j(s_j + log w_j): continuum attention
    headed = True

    def __init__(self, hidden_size: int, *, query_index: int | Sequence[int] | None = None,
                 num_heads: int = 1, residual: bool | None = None, on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        if query_index is not None and not isinstance(query_index, int):
            if (not isinstance(query_index, (list, tuple)) or not query_index
                    or not all(isinstance(i, int) and not isinstance(i, bool) for i in query_index)):
                raise PoolkitError(f"{self.name}: query_index must be None, an int or a non-empty list of "
                                   f"ints, got {query_index!r}")
            query_index = list(query_index)
        self.query_index = query_index
        self.order_invariant = query_index is None  # the mean of the real tokens as the query
        self.num_heads = _check_heads(hidden_size, num_heads, self.name)
        self.residual = isinstance(query_index, int) if residual is None else bool(residual)
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, hidden_size, bias=False)
        self.out = nn.Linear(hidden_size, hidden_size, bias=False)

    def query_tokens(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None) -> Tensor:
        """The query taken from the input, before W_Q: (B, T, D) -> (B, D)."""
        if self.query_index is None and quadrature_weights is not None:
            return masking.masked_weighted_sum(x, masking.quadrature_mean_weights(mask, quadrature_weights)).to(x.dtype)
        if self.query_index is None:
            return masking.masked_mean(x, mask).to(x.dtype)
        indices = [self.query_index] if isinstance(self.query_index, int) else self.query_index
        picked = [masking.gather_rows(x, masking.real_token_index(mask, i)) for i in indices]
        return torch.stack(picked).mean(dim=0)

    def pool(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None, heads: bool = False):
        source = self.query_tokens(x, mask, quadrature_weights)
        scale = (self.hidden_size // self.num_heads) ** -0.5
        attended, weights = cross_attention(fast.dense(self.query, source)[:, None, :], x, self.key, self.value, mask,
                                            self.num_heads, scale, quadrature_weights)
        pooled = fast.dense(self.out, attended[:, 0].to(self.out.weight.dtype))
        if self.residual:
            pooled = pooled + source
        return pooled, weights.flatten(1, 2) if heads else weights.mean(dim=(1, 2))

    def start_as_mean(self) -> bool:
        """Uniform attention (W_Q zeroed: its gradient is not, the keys read the tokens), W_V and the output
        projection at the identity: the mean of the tokens. With the residual the query token would be added to it:
        left as initialised."""
        if self.residual:
            return False
        with torch.no_grad():
            self.query.weight.zero_()
            for layer in (self.value, self.out):
                _identity(layer)
        return True
