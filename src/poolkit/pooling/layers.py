"""Layer poolers: mix an encoder's hidden layers, composed with a token pooler.

Input: all hidden states (embeddings first, as Hugging Face returns them with
``output_hidden_states=True``). Positions are selected *before* layers are mixed whenever the token
pooler allows it (it is linear: cls, last, mean, ...): the L x B x T x D stack that the common
snippets build is never made. Layers are converted to the pooler's parameter dtype only after that
selection (a float32 pooler given bf16 states converts B x D rows, not 13 full layers); a non-linear
token pooler gets one mixed (B, T, D) tensor, accumulated in place, and in inference the rows are mixed
and pooled in chunks so that this tensor never exceeds an eighth of a layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..errors import PoolkitError

from . import fast, hooks, masking
from .base import Pooler
from .registry import check_positive_int
from .spec import build_pooler, pooler_class, pooler_spec, register_pooler

#: Inference mixes and pools a non-linear token pooler's rows in this many chunks (see LayerPooler.mix).
MIX_CHUNKS = 8


class LayerPooler(Pooler):
    """Base of the layer family: checks the number of layers, owns the token pooler and the two ways of
    mixing layers.

    Every layer pooler takes ``num_layers``, the encoder's number of transformer layers
    (``config.num_hidden_layers``; ``build_pooler`` fills it in), and is called with its ``num_layers + 1``
    hidden states (embeddings first). ``token_pooler`` is a token pooler's name or spec dict, e.g.
    ``{"name": "attention", "attn_size": 64}``.
    """
    option_docs = {
        "num_layers": "the encoder's transformer layers (config.num_hidden_layers); build_pooler fills it in",
        "token_pooler": "the token pooler applied to the layers (a name or spec dict)",
    }

    kind = "layer"

    def __init__(self, hidden_size: int, *, num_layers: int | None = None, token_pooler: str | dict[str, Any] = "cls",
                 token_hidden_size: int | None = None, on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
            raise PoolkitError(f"{self.name} needs num_layers, the encoder's number of transformer layers "
                               f"(config.num_hidden_layers), got {num_layers!r}")
        self.num_layers = num_layers
        spec = pooler_spec(token_pooler)
        if pooler_class(spec["name"]).kind != "token":
            raise PoolkitError(f"{self.name}: token_pooler must be a token pooler, got layer pooler {spec['name']!r}")
        self.token = build_pooler(spec, token_hidden_size or hidden_size)
        self.reads_padding = self.token.reads_padding
        self.output_dim = self.token.output_dim

    def check_layer_start(self, layer_start: int) -> int:
        """``layer_start`` (an index into the num_layers + 1 hidden states; negative counts from the end) as
        a non-negative index, or a one-line error when it is out of range."""
        states = self.num_layers + 1
        if not isinstance(layer_start, int) or isinstance(layer_start, bool) or not -states <= layer_start < states:
            raise PoolkitError(f"{self.name}: layer_start must index the {states} hidden states (0 = embeddings, "
                               f"{self.num_layers} = last layer, negative from the end), got {layer_start!r}")
        return layer_start % states

    def _check_input(self, hidden_states, attention_mask):
        layers, mask = super()._check_input(hidden_states, attention_mask)
        if len(layers) != self.num_layers + 1:
            raise PoolkitError(f"{self.name} was built for num_layers={self.num_layers} (+ embeddings = "
                               f"{self.num_layers + 1} hidden states) but got {len(layers)}")
        return layers, mask

    def compute_dtype(self, layers: list[Tensor]) -> torch.dtype:
        """The parameters' dtype (as token poolers convert their input to), else the layers' own."""
        return self.parameter_dtype() or layers[0].dtype

    def token_pool(self, h: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The token pooler on one (B, T, D') tensor, converted to its dtype. Where the fast forms do not apply
        (transforms, other devices) or it has hooks (hooks.py), a token pooler that reads padding gets it zeroed
        here, one selected or mixed tensor at a time (see Pooler.forward), never all the layers at once."""
        h = self.token.to_parameter_dtype(h)
        if self.token.reads_padding and (not fast.active(h) or hooks.hooked(self.token)):
            h = masking.zero_padding(h, mask)
        return self.token.pool_as_part(h, mask)

    def pool_each(self, layers: list[Tensor], mask: Tensor) -> tuple[Tensor, Tensor]:
        """The token pooler applied to every layer: -> vectors (B, L, D') and token weights (B, L, T).

        A parameter-free token pooler selects from each layer as it is; a learned one gets it converted.
        """
        results = [self.token_pool(h, mask) for h in layers]
        vectors = torch.stack([pooled for pooled, _ in results], dim=1).to(self.compute_dtype(layers))
        token_weights = torch.stack([weights for _, weights in results], dim=1)
        return vectors, token_weights

    def mix(self, layers: list[Tensor], weights: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """sum_l weights[l] * layer_l, then the token pooler: -> pooled (B, D'), token weights (B, T).

        A linear token pooler pools every layer first (for cls: B x D rows), then mixes. Otherwise the mixed
        layer is made; without autograd (inference), in ``MIX_CHUNKS`` chunks of rows, which bounds the
        memory the mix and the token pooler's own activations add (not under a transform: a loop over the batch
        would fix an exported graph's batch size). A token pooler with hooks of its own (hooks.py) is called once,
        on the whole mixed layer.
        """
        hooked = hooks.hooked_itself(self.token)
        if self.token.linear and not hooked:
            vectors, token_weights = self.pool_each(layers, mask)
            return torch.einsum("bld,l->bd", vectors, weights.to(vectors.dtype)), token_weights[:, 0]
        batch = mask.shape[0]
        if torch.is_grad_enabled() or batch < 2 or fast.transformed() or hooked:
            return self._mix_then_pool(layers, weights, mask)
        step = -(-batch // MIX_CHUNKS)
        parts = [self._mix_then_pool([h[start:start + step] for h in layers], weights, mask[start:start + step])
                 for start in range(0, batch, step)]
        return torch.cat([pooled for pooled, _ in parts]), torch.cat([token for _, token in parts])

    def _mix_then_pool(self, layers: list[Tensor], weights: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        dtype = self.compute_dtype(layers)
        weights = weights.to(dtype)
        # Accumulated in place: one (B, T, D) tensor whatever the number of layers (``mixed + w * layer``
        # would hold three at a time); each layer is converted inside the product, never as a whole copy.
        # Autograd allows it: no backward needs mixed's earlier values. Under autograd the weights' gradient
        # is read at the real tokens only (masking.per_real_token), whatever the padding of the layers holds.
        weights = [masking.per_real_token(weight, mask) for weight in weights]
        mixed = layers[0].to(dtype) * weights[0]
        for layer, weight in zip(layers[1:], weights[1:]):
            mixed.addcmul_(layer, weight)
        return self.token_pool(mixed, mask)


@register_pooler("weighted_layer", "weighted_layers", "weighted_layer_pooling")
class WeightedLayerPooler(LayerPooler):
    """One learnable weight per layer from ``layer_start`` to the last, weighted mean, then a token pooler.

    The "Weighted Layer Pooling" recipe (Kaggle CommonLit; sentence-transformers'
    WeightedLayerPooling): weights start uniform and are normalised by their sum (``weighting="sum"``)
    or by a softmax (``"softmax"``, ELMo's scalar mix, Peters et al. 2018). ``layer_start`` indexes the
    hidden states (0 = embeddings) and defaults to the recipe's 4, or the last layer on shallower models.
    """
    option_docs = {
        "layer_start": "first hidden state used (0 = embeddings, negative from the end)",
        "weighting": "normalise the layer weights by their 'sum' or a 'softmax'",
    }

    def __init__(self, hidden_size: int, *, num_layers: int | None = None, layer_start: int | None = None,
                 weighting: str = "sum", token_pooler: str | dict[str, Any] = "cls",
                 on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, num_layers=num_layers, token_pooler=token_pooler, on_empty=on_empty)
        self.layer_start = self.check_layer_start(min(4, num_layers) if layer_start is None else layer_start)
        if weighting not in ("sum", "softmax"):
            raise PoolkitError(f"{self.name}: weighting must be 'sum' or 'softmax', got {weighting!r}")
        self.weighting = weighting
        count = num_layers + 1 - self.layer_start
        self.layer_weights = nn.Parameter(torch.ones(count) if weighting == "sum" else torch.zeros(count))

    def normalized_weights(self) -> Tensor:
        weights = masking.widen(self.layer_weights)
        return weights / weights.sum() if self.weighting == "sum" else torch.softmax(weights, dim=0)

    def pool(self, layers: list[Tensor], mask: Tensor):
        weights = self.normalized_weights()
        pooled, token_weights = self.mix(layers[self.layer_start:], weights, mask)
        return pooled, {"layer": weights.expand(mask.shape[0], -1), "token": token_weights}


class _LastLayersPooler(LayerPooler):
    """The last ``last_n`` hidden states (default 4, or all of them on a shallower encoder), combined, then a token
    pooler."""
    option_docs = {
        "last_n": "how many of the last hidden states are used (default: 4, or all on a shallower encoder)",
    }

    #: True when the layers are concatenated feature-wise: the token pooler then sees last_n * D features.
    concatenates = False

    def __init__(self, hidden_size: int, *, num_layers: int | None = None, last_n: int | None = None,
                 token_pooler: str | dict[str, Any] = "cls", on_empty: str = "zeros") -> None:
        if last_n is None:
            last_n = min(4, num_layers + 1) if isinstance(num_layers, int) and num_layers > 0 else 4
        check_positive_int(last_n, f"{self.name}: last_n")
        super().__init__(hidden_size, num_layers=num_layers, token_pooler=token_pooler,
                         token_hidden_size=last_n * hidden_size if self.concatenates else None, on_empty=on_empty)
        if last_n > self.num_layers + 1:
            raise PoolkitError(f"{self.name}: last_n={last_n} but there are only {self.num_layers + 1} hidden states "
                               "(num_layers + embeddings)")
        self.last_n = last_n

    def last_layers(self, layers: list[Tensor]) -> list[Tensor]:
        return layers[-self.last_n:]


@register_pooler("mean_layers", "mean_last_layers")
class MeanLayersPooler(_LastLayersPooler):
    """The mean of the last ``last_n`` layers, then a token pooler: -> (B, D')."""

    def pool(self, layers: list[Tensor], mask: Tensor):
        selected = self.last_layers(layers)
        weights = torch.full((len(selected),), 1 / len(selected), device=mask.device)
        pooled, token_weights = self.mix(selected, weights, mask)
        return pooled, {"layer": weights.expand(mask.shape[0], -1), "token": token_weights}


@register_pooler("concat_layers", "concat_last_layers")
class ConcatLayersPooler(_LastLayersPooler):
    """The last ``last_n`` layers concatenated feature-wise, then a token pooler: -> (B, last_n * D').

    The "concatenate the last 4 layers" recipe (Devlin et al., 2019, feature-based NER). A linear token
    pooler pools each layer first (unless it has hooks of its own, hooks.py: it is then called on the concatenation,
    the same value); others see the (B, T, last_n * D) concatenation.
    """

    concatenates = True

    def pool(self, layers: list[Tensor], mask: Tensor):
        selected = self.last_layers(layers)
        if self.token.linear and not hooks.hooked_itself(self.token):
            vectors, token_weights = self.pool_each(selected, mask)
            pooled, token_weights = vectors.flatten(1), token_weights[:, 0]
        else:
            pooled, token_weights = self.token_pool(torch.cat(selected, dim=-1), mask)
        uniform = torch.full((mask.shape[0], len(selected)), 1 / len(selected), device=mask.device)
        return pooled, {"layer": uniform, "token": token_weights}


class _RecurrentLayersPooler(LayerPooler):
    """Each layer's pooled vector (layers ``layer_start``..L) as a sequence into a (Bi)RNN.

    The output is every direction's *final state*: the backward direction's final state has read the
    whole sequence down to the first layer, unlike the ``out[:, -1]`` of the snippets, whose backward
    half has seen one step.
    """
    option_docs = {
        "layer_start": "first hidden state used (0 = embeddings, negative from the end)",
        "rnn_hidden": "hidden size of the recurrence over layers (per direction)",
        "bidirectional": "run the recurrence in both directions (final states concatenated)",
        "dropout": "dropout on the recurrence's output (training only)",
    }

    rnn_type: type[nn.RNNBase] = nn.LSTM

    def __init__(self, hidden_size: int, *, num_layers: int | None = None, rnn_hidden: int = 256,
                 bidirectional: bool = True, dropout: float = 0.1, layer_start: int = 1,
                 token_pooler: str | dict[str, Any] = "cls", on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, num_layers=num_layers, token_pooler=token_pooler, on_empty=on_empty)
        check_positive_int(rnn_hidden, f"{self.name}: rnn_hidden")
        if not 0 <= dropout < 1:
            raise PoolkitError(f"{self.name}: dropout must be in [0, 1), got {dropout!r}")
        self.layer_start = self.check_layer_start(layer_start)
        self.rnn = self.rnn_type(self.token.output_dim, rnn_hidden, batch_first=True,
                                 bidirectional=bidirectional)
        self.dropout = nn.Dropout(dropout)
        self.output_dim = rnn_hidden * (2 if bidirectional else 1)

    def pool(self, layers: list[Tensor], mask: Tensor):
        vectors, token_weights = self.pool_each(layers[self.layer_start:], mask)
        vectors = vectors.to(self.rnn.weight_ih_l0.dtype)
        if fast.transformed():  # no vmap rule for aten::gru, and dynamo does not trace nn.RNNBase
            directions = range(2 if self.rnn.bidirectional else 1)
            pooled = torch.cat([final_state(self.rnn, vectors, reverse=d == 1) for d in directions], dim=-1)
        else:
            _, final = self.rnn(vectors)
            final = final[0] if isinstance(final, tuple) else final  # LSTM returns (h_n, c_n)
            pooled = final.transpose(0, 1).flatten(1)  # (directions, B, H) -> (B, directions * H)
        return self.dropout(pooled), {"token": token_weights.mean(dim=1)}


def final_state(rnn: nn.RNNBase, x: Tensor, reverse: bool) -> Tensor:
    """The final hidden state of one direction of a one-layer ``nn.LSTM`` / ``nn.GRU`` (its own weights),
    unrolled in plain operations that every PyTorch transform can trace: (B, L, D) -> (B, H).
    The cell equations are those of the ``torch.nn.LSTM`` / ``torch.nn.GRU`` documentation."""
    suffix = "_l0_reverse" if reverse else "_l0"
    w_ih, w_hh = getattr(rnn, "weight_ih" + suffix), getattr(rnn, "weight_hh" + suffix)
    b_ih, b_hh = getattr(rnn, "bias_ih" + suffix), getattr(rnn, "bias_hh" + suffix)
    h = c = x.new_zeros(x.shape[0], rnn.hidden_size)
    steps = x.unbind(1)
    for step in reversed(steps) if reverse else steps:
        from_x, from_h = F.linear(step, w_ih, b_ih), F.linear(h, w_hh, b_hh)
        if isinstance(rnn, nn.LSTM):
            i, f, g, o = (from_x + from_h).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        else:
            r_x, z_x, n_x = from_x.chunk(3, dim=-1)
            r_h, z_h, n_h = from_h.chunk(3, dim=-1)
            r, z = torch.sigmoid(r_x + r_h), torch.sigmoid(z_x + z_h)
            h = (1 - z) * torch.tanh(n_x + r * n_h) + z * h
    return h


@register_pooler("lstm_layers", "lstm")
class LSTMLayersPooler(_RecurrentLayersPooler):
    """LSTM over the layers' pooled vectors, final states of both directions: -> (B, 2 * rnn_hidden).

    The "LSTM Over Transformer Layers" recipe (Kaggle), hidden 256, dropout 0.1.
    """


@register_pooler("gru_layers", "gru")
class GRULayersPooler(_RecurrentLayersPooler):
    """GRU over the layers' pooled vectors, final states of both directions: -> (B, 2 * rnn_hidden)."""

    rnn_type = nn.GRU


@register_pooler("attention_layers", "layer_attention")
class AttentionLayersPooler(LayerPooler):
    """Attention over the layers' pooled vectors with a learned query: -> (B, D').

    score_l = q . W_k v_l / sqrt(D'), softmax over layers ``layer_start``..L, weighted sum of the v_l.
    Per-example layer weights, in the spirit of ELMo's scalar mix (Peters et al., 2018) made
    input-dependent.
    """
    option_docs = {
        "layer_start": "first hidden state used (0 = embeddings, negative from the end)",
    }

    def __init__(self, hidden_size: int, *, num_layers: int | None = None, layer_start: int = 1,
                 token_pooler: str | dict[str, Any] = "cls", on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, num_layers=num_layers, token_pooler=token_pooler, on_empty=on_empty)
        dim = self.token.output_dim
        self.layer_start = self.check_layer_start(layer_start)
        self.key = nn.Linear(dim, dim, bias=False)  # a bias would only shift the softmax
        self.query = nn.Parameter(torch.randn(dim) * dim ** -0.5)

    def pool(self, layers: list[Tensor], mask: Tensor):
        vectors, token_weights = self.pool_each(layers[self.layer_start:], mask)
        vectors = vectors.to(self.key.weight.dtype)
        scores = self.key(vectors) @ self.query * vectors.shape[-1] ** -0.5  # (B, L)
        weights = torch.softmax(masking.widen(scores), dim=-1)
        pooled = torch.einsum("bl,bld->bd", weights.to(vectors.dtype), vectors)
        token = torch.einsum("bl,blt->bt", weights, token_weights.to(weights.dtype))
        return pooled, {"layer": weights, "token": token}
