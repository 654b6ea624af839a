"""Statistic poolers: cls, last, mean, max, min, sum, mean_sqrt_len, mean_max, gem, lse.

Every one of them also returns token weights that explain it: one-hot for cls/last, 1/n for the
means, the share of feature dimensions a token wins for max/min, each token's share of the power or
exponential sum for gem/lse.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from . import masking
from .base import Pooler
from .spec import register_pooler


@register_pooler("cls", "first")
class ClsPooler(Pooler):
    """The first *real* token (B, T, D) -> (B, D), under left or right padding (BERT's [CLS])."""
    summarises = True
    weight_meaning = "one-hot: the pooled vector is the first token's ([CLS]) hidden state"

    linear = True
    zero_when_empty = True
    reads_padding = False

    def pool(self, x: Tensor, mask: Tensor):
        return self.pool_without_weights(x, mask), masking.one_hot_weights(masking.first_real_index(mask), mask)

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return masking.edge_rows(x, mask, last=False)


@register_pooler("last", "eos")
class LastPooler(Pooler):
    """The last *real* token (B, T, D) -> (B, D) (decoder models' EOS), under left or right padding."""
    summarises = True
    weight_meaning = "one-hot: the pooled vector is the last real token's hidden state"

    linear = True
    zero_when_empty = True
    reads_padding = False

    def pool(self, x: Tensor, mask: Tensor):
        return self.pool_without_weights(x, mask), masking.one_hot_weights(masking.last_real_index(mask), mask)

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return masking.edge_rows(x, mask, last=True)


@register_pooler("mean", "avg", "average")
class MeanPooler(Pooler):
    """Mean over the real tokens (B, T, D) -> (B, D) (sentence-transformers' default)."""
    summarises = True
    order_invariant = True
    weight_meaning = "uniform: every real token counts the same (mean pooling has no weights of its own)"

    linear = True
    zero_when_empty = True
    quadrature = True  # sum w x / sum w: a quadrature rule's mean of a sampled function

    def pool(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None):
        if quadrature_weights is None:
            return masking.masked_mean(x, mask), masking.uniform_weights(mask)
        weights = masking.quadrature_mean_weights(mask, quadrature_weights)
        return masking.masked_weighted_sum(x, weights), weights

    def pool_without_weights(self, x: Tensor, mask: Tensor, quadrature_weights: Tensor | None = None) -> Tensor:
        if quadrature_weights is None:
            return masking.masked_mean(x, mask)
        return self.pool(x, mask, quadrature_weights)[0]


@register_pooler("sum")
class SumPooler(Pooler):
    """Sum over the real tokens (B, T, D) -> (B, D)."""
    summarises = True
    order_invariant = True
    weight_meaning = "uniform: every real token counts the same (sum pooling has no weights of its own)"

    linear = True
    zero_when_empty = True

    def pool(self, x: Tensor, mask: Tensor):
        return self.pool_without_weights(x, mask), masking.uniform_weights(mask)

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return masking.masked_sum(x, mask)

    def pool_for_output(self, x: Tensor, mask: Tensor) -> Tensor:
        if type(self).pool_without_weights is not SumPooler.pool_without_weights:  # a subclass's own sum
            return self.pool_without_weights(x, mask)
        return masking.masked_sum_for_output(x, mask)


@register_pooler("mean_sqrt_len", "mean_sqrt_len_tokens")
class MeanSqrtLenPooler(Pooler):
    """Sum over the real tokens divided by sqrt(n) (sentence-transformers' mean_sqrt_len_tokens)."""
    summarises = True
    order_invariant = True
    weight_meaning = "uniform: every real token counts the same (the sum is scaled by 1/sqrt(length))"

    linear = True
    zero_when_empty = True

    def pool(self, x: Tensor, mask: Tensor):
        return self.pool_without_weights(x, mask), masking.uniform_weights(mask)

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return masking.masked_mean(x, mask, root=True)


@register_pooler("weighted_mean", "weightedmean", "position_weighted_mean")
class WeightedMeanPooler(Pooler):
    """Position-weighted mean (B, T, D) -> (B, D): the k-th real token weighs k (SGPT, Muennighoff 2022,
    arXiv 2202.08904), so later tokens, which a causal decoder has let see more of the text, count more.

    Equal to sentence-transformers' ``weightedmean`` under left or right padding. Positions count the tokens
    of the mask given, so with a prompt kept out of the pool (a pool mask) the first pooled token weighs 1,
    where sentence-transformers keeps the weights of the full sequence.
    """
    summarises = True
    weight_meaning = "k / (1 + ... + n) on the k-th of a row's n real tokens"

    linear = True
    zero_when_empty = True

    def pool(self, x: Tensor, mask: Tensor):
        weights = masking.position_weights(mask)
        return masking.masked_weighted_sum(x, weights), weights

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return masking.masked_weighted_sum(x, masking.position_weights(mask))


class _ExtremePooler(Pooler):
    """Masked max or min over the real tokens, padding filled with -inf (min: +inf; no -1e9)."""
    order_invariant = True

    largest = True
    zero_when_empty = True
    reads_padding = False

    def pool(self, x: Tensor, mask: Tensor):
        values, indices = masking.masked_extreme(x, mask, largest=self.largest, with_index=True)
        return values, masking.argmax_share(indices, mask)

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        # Without weights (and in inference) no winner needs finding: one pass over x.
        return masking.masked_extreme(x, mask, largest=self.largest)


@register_pooler("max")
class MaxPooler(_ExtremePooler):
    """Feature-wise max over the real tokens (B, T, D) -> (B, D)."""
    weight_meaning = "the share of the feature dimensions whose maximum this token holds"


@register_pooler("min")
class MinPooler(_ExtremePooler):
    """Feature-wise min over the real tokens (B, T, D) -> (B, D)."""
    weight_meaning = "the share of the feature dimensions whose minimum this token holds"

    largest = False


@register_pooler("mean_max", "mean_and_max")
class MeanMaxPooler(Pooler):
    """Mean and max side by side (B, T, D) -> (B, 2D), the Kaggle "mean-max" head."""
    order_invariant = True
    weight_meaning = "half uniform (the mean part), half the share of feature maxima each token holds (the max part)"

    zero_when_empty = True

    def __init__(self, hidden_size: int, *, on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        self.output_dim = 2 * hidden_size

    def pool(self, x: Tensor, mask: Tensor):
        mean_weights = masking.uniform_weights(mask)
        mean = masking.masked_mean(x, mask)
        maximum, indices = masking.masked_extreme(x, mask, largest=True, with_index=True)
        pooled = torch.cat([mean, maximum.to(mean.dtype)], dim=-1)
        return pooled, (mean_weights + masking.argmax_share(indices, mask)) / 2

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        mean = masking.masked_mean(x, mask)
        return torch.cat([mean, masking.masked_extreme(x, mask, largest=True).to(mean.dtype)], dim=-1)


#: lse's temperature never falls below this while it learns (softplus(raw) + the floor)
TEMPERATURE_FLOOR = 1e-4


def _positive_parameter(value: float, what: str) -> nn.Parameter:
    """A learnable positive scalar stored as the inverse softplus of ``value``."""
    if not value > 0:
        raise PoolkitError(f"{what} must be > 0, got {value!r}")
    return nn.Parameter(torch.tensor(value + math.log(-math.expm1(-value)), dtype=torch.float32))


@register_pooler("gem", "generalized_mean")
class GeMPooler(Pooler):
    """Generalised mean with a learnable power p >= 1 over the real tokens (B, T, D) -> (B, D).

    Radenovic et al., "Fine-tuning CNN Image Retrieval with No Human Annotation" (TPAMI 2018). The
    classic form clamps inputs to eps (fine after a ReLU); transformer features are signed, so the
    default ``signed=True`` uses the odd power sign(x)|x|^p and returns sign(m)|m|^(1/p): p = 1 is
    the mean and large p tends to the largest-magnitude value. Computed in float32 at least, and without
    overflow at any p (powers of values scaled by each feature's largest).
    """
    option_docs = {
        "p": "the starting power p >= 1 (1: mean; large: max of magnitudes)",
        "learn_p": "learn p with the rest (True) or keep it fixed",
        "signed": "odd power sign(x)|x|^p for signed features (True) or the classic clamp to eps",
        "eps": "the clamp floor of the classic form (signed=False), and of its weights' denominators",
    }
    order_invariant = True
    weight_meaning = "each token's share of the generalised-mean power sum, averaged over the features"

    def __init__(self, hidden_size: int, *, p: float = 3.0, learn_p: bool = True, signed: bool = True,
                 eps: float = 1e-6, on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        if not p >= 1:
            raise PoolkitError(f"gem: p must be >= 1, got {p!r}")
        # p = 1 + softplus(raw) keeps p >= 1 while learning; a fixed p = 1 is raw = -inf, exactly the mean (a learned
        # p = 1 starts at 1.001, where softplus has a gradient).
        self.raw_p = (_positive_parameter(p - 1 if p > 1 else 1e-3, "gem p - 1") if p > 1 or learn_p
                      else nn.Parameter(torch.tensor(-math.inf)))
        self.raw_p.requires_grad_(learn_p)
        self.signed = signed
        self.eps = eps

    @property
    def p(self) -> Tensor:
        return 1 + nn.functional.softplus(masking.widen(self.raw_p))

    def _pooled_and_powers(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The pooled (B, D) and the scaled powers (B, T, D) that the weights are read from."""
        p = self.p
        x = masking.widen(x)
        base = x.abs() if self.signed else x.clamp(min=self.eps)
        # Powers are taken of base / s, s = each feature's largest real base value (a constant: the result
        # s * gem(base / s) equals gem(base) for any s > 0), so that |x|^p never overflows at large p. A row with
        # no real token has s = 0: floored at eps where the bases are (unsigned), which keeps eps / s at 1.
        tiny = torch.finfo(x.dtype).tiny
        scale = masking.masked_extreme(base.detach(), mask, largest=True).clamp(
            min=tiny if self.signed else max(self.eps, tiny))
        # p per token: the power's gradient for p, base^p log base, overflows at a huge padded base where the power
        # does not, and is taken at the real tokens only (masking's rules).
        scaled = (base / scale[:, None, :]).pow(masking.per_real_token(p, mask))
        mean = masking.masked_mean(torch.sign(x) * scaled if self.signed else scaled, mask, derived=True)
        # A NaN mean (padding's 0 * inf in the fast forms) must stay NaN, so that Pooler.forward pools the row again
        # from zeroed padding: sign(NaN) is 0 and NaN ** (1 / p) is 1 at p = inf, a finite wrong answer.
        sign = torch.where(mean.isnan(), mean, torch.sign(mean))
        return scale * sign * mean.abs().clamp(min=1e-30).pow(1 / p), scaled

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return self._pooled_and_powers(x, mask)[0]

    def pool(self, x: Tensor, mask: Tensor):
        pooled, scaled = self._pooled_and_powers(x, mask)
        share = scaled.masked_fill(~mask[:, :, None], 0)
        weights = (share / share.sum(dim=1, keepdim=True).clamp(min=self.eps)).mean(dim=-1)
        return pooled, weights


@register_pooler("lse", "logsumexp", "softmax")
class LSEPooler(Pooler):
    """Log-sum-exp pooling with a learnable temperature t: t * log(mean_t exp(x / t)) per feature.

    Small t tends to max pooling, large t to mean pooling (Pinheiro & Collobert, CVPR 2015; the
    "softmax pooling" of sound event detection). Computed in float32.
    """
    option_docs = {
        "temperature": "the starting temperature t > 0 (small: max; large: mean)",
        "learn_temperature": "learn t with the rest (True) or keep it fixed",
    }
    order_invariant = True
    weight_meaning = "each token's softmax share per feature at the learned temperature, averaged over the features"

    def __init__(self, hidden_size: int, *, temperature: float = 1.0, learn_temperature: bool = True,
                 on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        # stored above the floor, so that the temperature it starts at is the one given (timm's LsePlus2d at r = 1/t)
        if not float(temperature) > TEMPERATURE_FLOOR:
            raise PoolkitError(f"lse temperature must be > 0 and above its floor {TEMPERATURE_FLOOR}, got {temperature!r}")
        self.raw_temperature = _positive_parameter(float(temperature) - TEMPERATURE_FLOOR, "lse temperature")
        self.raw_temperature.requires_grad_(learn_temperature)

    @property
    def temperature(self) -> Tensor:
        return nn.functional.softplus(masking.widen(self.raw_temperature)) + TEMPERATURE_FLOOR

    def _pooled_and_scaled(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The pooled (B, D) and x / t (B, T, D), whose softmax over tokens gives the weights."""
        t = self.temperature
        # x times 1 / t per token: the gradient for t, -x / t^2, is NaN at an infinite padded value even where the
        # logsumexp drops it (0 * inf), and is taken at the real tokens only (masking's rules).
        scaled = masking.widen(x) * masking.per_real_token(1 / t, mask)
        counts = masking.real_counts(mask).clamp(min=1).to(scaled.dtype)
        return t * (masking.masked_logsumexp(scaled, mask) - counts.log()[:, None]), scaled

    def pool_without_weights(self, x: Tensor, mask: Tensor) -> Tensor:
        return self._pooled_and_scaled(x, mask)[0]

    def pool(self, x: Tensor, mask: Tensor):
        pooled, scaled = self._pooled_and_scaled(x, mask)
        weights = masking.masked_softmax(scaled.transpose(1, 2), mask[:, None, :]).mean(dim=1)
        return pooled, weights
