"""The pooler contract, its input checks, and the registry (register / get_pooler / list_poolers)."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Union

import torch
from torch import Tensor, nn

from ..errors import PoolkitError, suggest
from . import fast, masking, quadrature

Weights = Union[Tensor, dict[str, Tensor]]
HiddenStates = Union[Tensor, Sequence[Tensor]]

EMPTY_POLICIES = ("zeros", "raise")
#: Layouts of an image map: channels first (B, C, H, W) or channels last (B, H, W, C).
MAP_FORMATS = ("NCHW", "NHWC")


class Pooler(nn.Module):
    """Base class: turns hidden states (B, T, D) -- or all layers -- into one vector per row (B, output_dim).

    Token poolers also take an image map (B, C, H, W), or (B, H, W, C) with ``input_format="NHWC"``, with an
    optional validity mask (B, H, W): it is pooled as the H*W positions (B, H*W, C), weights come back as
    (B, H, W).

    Subclasses implement :meth:`pool` on a checked input: ``x`` (B, T, D) (token poolers) or a list of
    them (layer poolers) and a boolean ``mask`` (B, T) with True at real tokens. They return the pooled
    tensor and the weights that explain it: token weights (B, T), or for layer poolers a dict with
    ``"layer"`` (B, L) and, when the token pooler has them, ``"token"`` (B, T). Multi-head and multi-query
    poolers (``headed``) return the mean of their rows, and the rows (B, R, T) themselves, heads outermost,
    when called with ``return_weights="heads"`` (maps: (B, R, H, W)). Poolers whose weights
    cost extra work (max / min: the winning token of every feature) also implement
    :meth:`pool_without_weights`, which ``forward`` calls when no weights are asked for.
    """

    name: str = ""
    #: "token" poolers reduce one (B, T, D) tensor; "layer" poolers need all hidden states.
    kind: str = "token"
    #: True when the output is linear in the hidden states (cls, mean, ...): layer poolers then pool
    #: every layer first and mix the (B, D) results, instead of mixing (B, T, D) tensors.
    linear: bool = False
    #: True when ``pool`` itself gives exact zeros for a row with no real token (a weighted sum whose
    #: weights are all zero there): ``forward`` then skips its own empty-row guard.
    zero_when_empty: bool = False
    #: False when no value at a padded position can reach the output or a gradient (a selection of real tokens:
    #: cls, last, max, min): ``forward`` then skips its check for non-finite padding.
    reads_padding: bool = True
    #: True when ``pool`` needs the map's size: it is called with ``grid=(H, W)`` for maps, ``grid=None`` for
    #: tokens (B, T, D), read as a 1 x T map (flex).
    positional: bool = False
    #: True when ``pool`` takes ``quadrature_weights`` (B, T) > 0 at real tokens (see quadrature.py).
    quadrature: bool = False
    #: True when the weights are the mean of several softmax rows (heads, queries): ``pool`` then takes
    #: ``heads=True`` and returns the rows themselves, (B, R, T), for ``return_weights="heads"``.
    headed: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _record_arguments(cls)

    def __init__(self, hidden_size: int, *, on_empty: str = "zeros") -> None:
        super().__init__()
        check_positive_int(hidden_size, "hidden_size")
        if on_empty not in EMPTY_POLICIES:
            raise PoolkitError(f"on_empty must be one of {EMPTY_POLICIES}, got {on_empty!r}")
        self.hidden_size = hidden_size
        self.on_empty = on_empty
        self.output_dim = hidden_size

    def get_config(self) -> dict[str, Any]:
        """The pooler's spec, a plain dict: ``get_pooler(**pooler.get_config())`` builds the same pooler (the same
        output for the same weights). Holds the name, hidden_size and every constructor option."""
        return {"name": self.name, **copy.deepcopy(self._spec)}

    # -- the contract -------------------------------------------------------------------------
    def forward(
        self,
        hidden_states: HiddenStates,
        attention_mask: Tensor | None = None,
        return_weights: bool | str = False,
        input_format: str = "NCHW",
        quadrature_weights: Tensor | None = None,
    ) -> Tensor | tuple[Tensor, Weights]:
        grid = None
        if input_format != "NCHW" or (isinstance(hidden_states, Tensor) and hidden_states.dim() == 4):
            hidden_states, attention_mask, grid = self._read_map(hidden_states, attention_mask, input_format)
        x, mask = self._check_input(hidden_states, attention_mask)
        reference = x[0] if isinstance(x, list) else x
        if quadrature_weights is not None:  # zero weights become padding
            if not type(self).quadrature:
                raise PoolkitError(f"{self.name} does not take quadrature_weights; the poolers that do: "
                                   f"{', '.join(quadrature_poolers())}")
            quadrature_weights, mask = quadrature.checked_weights(self, quadrature_weights, mask)
        if self.on_empty == "raise" and not bool(mask.any(dim=1).all()):
            rows = (~mask.any(dim=1)).nonzero().flatten().tolist()
            raise PoolkitError(f"{self.name}: rows {rows[:5]} have no real token (all padding); "
                               "drop them or build the pooler with on_empty='zeros'")
        batch, length = mask.shape
        degenerate = (batch == 0 or length == 0) and not fast.transformed()
        if degenerate:  # no row or no token: pooled as one all-padding row / position, cut away again after
            x, mask = _all_padding(x, max(batch, 1), max(length, 1)), mask.new_zeros(max(batch, 1), max(length, 1))
        where = {"grid": None if degenerate else grid} if self.positional else {}
        if isinstance(return_weights, str):
            where["heads"] = self._check_heads(return_weights)
        if quadrature_weights is not None:
            where["quadrature_weights"] = mask.to(quadrature_weights.dtype) if degenerate else quadrature_weights
        x = self.to_parameter_dtype(x)
        checked = fast.active(reference)
        if not checked and self.reads_padding and self.kind == "token":
            x = _zero_padding(x, mask)  # transforms, other devices: zeroed before it is read (layers: LayerPooler)
        pooled, weights = self._pool_and_guard(x, mask, return_weights, where)
        # One float32 sum (cheaper than isfinite().all(); float32 so that large half values do not overflow it).
        if checked and self.reads_padding and not math.isfinite(pooled.sum(dtype=torch.float32).item()):
            # Eager CPU keeps the cheap product forms, under which a NaN / inf at a padded position would
            # reach the output (0 * inf): rows are pooled again from inputs whose padding is zeroed, so
            # padding never changes an output whatever it holds. Non-finite values at real tokens stay.
            pooled, weights = self._pool_and_guard(_zero_padding(x, mask), mask, return_weights, where)
        pooled = pooled.to(reference.dtype)
        if degenerate:
            pooled = pooled[:batch]
            if return_weights:
                weights = _map_weights(weights, lambda w, token: w[:batch, ..., :length] if token else w[:batch])
        if grid is not None and return_weights:
            weights = weights.reshape(*weights.shape[:-1], *grid)
        return (pooled, weights) if return_weights else pooled

    def _pool_and_guard(self, x: Any, mask: Tensor, return_weights: bool,
                        where: dict[str, Any]) -> tuple[Tensor, Weights | None]:
        if return_weights:
            pooled, weights = self.pool(x, mask, **where)
        else:
            pooled, weights = self.pool_without_weights(x, mask, **where), None
        if not self.zero_when_empty:
            # Rows with no real token give zeros. A product, not masked_fill / where (several times dearer on
            # a (B, D) tensor): pooled values are finite there unless the padding is not (then see forward).
            pooled = pooled * mask.any(dim=1, keepdim=True)
        return pooled, weights

    def pool(self, x: Any, mask: Tensor) -> tuple[Tensor, Weights]:
        raise NotImplementedError

    def _check_heads(self, return_weights: str) -> bool:
        """``return_weights="heads"`` is for poolers with several softmax rows; any other string is a mistake."""
        if return_weights != "heads":
            raise PoolkitError(f"return_weights must be True, False or 'heads', got {return_weights!r}")
        if not self.headed:
            raise PoolkitError(f"{self.name} has one row of weights, not one per head or query: use "
                               "return_weights=True ('heads' is for multihead_attention, latent and adapool)")
        return True

    def pool_without_weights(self, x: Any, mask: Tensor, **where: Any) -> Tensor:
        """The pooled tensor alone (the same values as ``pool``); override where the weights cost extra."""
        return self.pool(x, mask, **where)[0]

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value!r}" for key, value in self._spec.items()) + f", output_dim={self.output_dim}"

    # -- input checks -------------------------------------------------------------------------
    def _read_map(self, hidden_states: Any, attention_mask: Any, input_format: str):
        """An image map as positions: (B, C, H, W) or NHWC (B, H, W, C) -> (B, H*W, C), its mask (B, H, W) ->
        (B, H*W), and (H, W)."""
        if input_format not in MAP_FORMATS:
            raise PoolkitError(f"{self.name}: input_format must be one of {MAP_FORMATS}, got {input_format!r}")
        shape = _shape_of(hidden_states)
        if not isinstance(hidden_states, Tensor) or hidden_states.dim() != 4:
            raise PoolkitError(f"{self.name}: input_format={input_format!r} is for an image map, one 4-D tensor, "
                               f"got {shape}; token states (B, T, D) need no input_format")
        if self.kind == "layer":
            raise PoolkitError(f"{self.name} pools over the layers of token states (B, T, D) and cannot take an image "
                               f"map {shape}; pool the map with a token pooler such as 'gap'")
        if input_format == "NCHW":
            batch, channels, height, width = shape
            positions = hidden_states.flatten(2).transpose(1, 2)
        else:
            batch, height, width, channels = shape
            positions = hidden_states.flatten(1, 2)
        if channels != self.hidden_size:
            raise PoolkitError(f"{self.name}: the {input_format} map {shape} has {channels} channels but the pooler "
                               f"was built with hidden_size={self.hidden_size}"
                               + ("; a channels-last map needs input_format='NHWC'" if shape[-1] == self.hidden_size
                                  and input_format == "NCHW" else ""))
        if attention_mask is not None:
            if not isinstance(attention_mask, Tensor) or tuple(attention_mask.shape) != (batch, height, width):
                raise PoolkitError(f"{self.name}: the mask of a map must be a (B, H, W) = {(batch, height, width)} "
                                   f"tensor (1 = valid position), got {_shape_of(attention_mask)}")
            attention_mask = attention_mask.flatten(1)
        return positions, attention_mask, (height, width)

    def _check_input(self, hidden_states: HiddenStates, attention_mask: Tensor | None):
        if isinstance(hidden_states, Tensor):
            if self.kind == "layer":
                raise PoolkitError(
                    f"{self.name} pools over layers and needs all hidden states (a sequence of (B, T, D) "
                    "tensors, embeddings first): call the encoder with output_hidden_states=True")
            layers = [hidden_states]
        elif isinstance(hidden_states, (list, tuple)) and hidden_states:
            layers = list(hidden_states)
            if not all(isinstance(h, Tensor) for h in layers):
                raise PoolkitError(f"{self.name}: hidden_states must be a tensor or a sequence of tensors")
            if self.kind == "token":
                layers = layers[-1:]  # token poolers given all layers use the last one
        else:
            raise PoolkitError(f"{self.name}: hidden_states must be a (B, T, D) tensor or a non-empty "
                               f"sequence of them, got {type(hidden_states).__name__}")
        first = layers[0]
        if first.dim() != 3:
            maps = "" if self.kind == "layer" else " or be one image map (B, C, H, W)"
            raise PoolkitError(f"{self.name}: hidden_states must have 3 dims (B, T, D){maps}, got shape "
                               f"{tuple(first.shape)}")
        if not first.is_floating_point():
            raise PoolkitError(f"{self.name}: hidden_states must be floating point, got {first.dtype}")
        if first.shape[-1] != self.hidden_size:
            raise PoolkitError(f"{self.name}: hidden_states last dim is {first.shape[-1]} but the pooler "
                               f"was built with hidden_size={self.hidden_size}")
        if any(h.shape != first.shape for h in layers):
            raise PoolkitError(f"{self.name}: all hidden-state layers must have the same shape")
        batch, length = first.shape[:2]
        if attention_mask is None:
            mask = torch.ones(batch, length, dtype=torch.bool, device=first.device)
        else:
            if not isinstance(attention_mask, Tensor):
                raise PoolkitError(f"{self.name}: attention_mask must be a tensor (B, T), got "
                                   f"{type(attention_mask).__name__}; pass torch.as_tensor(mask)")
            if tuple(attention_mask.shape) != (batch, length):
                raise PoolkitError(f"{self.name}: attention_mask shape {tuple(attention_mask.shape)} does "
                                   f"not match hidden_states (B, T) = {(batch, length)}")
            mask = attention_mask.bool()  # nonzero = real token
        return (layers if self.kind == "layer" else first), mask

    def parameter_dtype(self) -> torch.dtype | None:
        """The dtype learned poolers compute in: their parameters' (None without parameters or under autocast,
        which then decides)."""
        param = next((p for p in self.parameters() if p.is_floating_point()), None)
        if param is None or torch.is_autocast_enabled(param.device.type):
            return None
        return param.dtype

    def to_parameter_dtype(self, x):
        """Token poolers get their input in the parameters' dtype; layer poolers convert each layer they use
        after selecting positions (see layers.LayerPooler), so nothing is done for them here."""
        dtype = self.parameter_dtype()
        if dtype is None or isinstance(x, list):
            return x
        return x.to(dtype)


def check_positive_int(value: Any, what: str) -> int:
    """``value`` when it is a positive int (not a bool), else a one-line PoolkitError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PoolkitError(f"{what} must be a positive int, got {value!r}")
    return value


def _shape_of(value: Any) -> tuple[int, ...] | str:
    """A tensor's shape, or the type name of anything else (for error messages)."""
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def _per_layer(x: Tensor | list[Tensor], change: Callable[[Tensor], Tensor]) -> Tensor | list[Tensor]:
    """``change`` applied to x, or to each layer of a layer pooler's list."""
    return [change(h) for h in x] if isinstance(x, list) else change(x)


def _zero_padding(x: Tensor | list[Tensor], mask: Tensor) -> Tensor | list[Tensor]:
    """x (or each layer) with every padded position set to 0: (B, T, D) -> (B, T, D)."""
    return _per_layer(x, lambda h: masking.zero_padding(h, mask))


def _all_padding(x: Tensor | list[Tensor], batch: int, length: int) -> Tensor | list[Tensor]:
    """Zeros (batch, length, D) in x's dtype and device (for each layer of a list)."""
    return _per_layer(x, lambda h: h.new_zeros(batch, length, h.shape[2]))


def _map_weights(weights: Weights, change: Callable[[Tensor, bool], Tensor]) -> Weights:
    """``change(w, is_token_weights)`` applied to the weights, or to each entry of a layer pooler's dict."""
    if isinstance(weights, dict):
        return {key: change(value, key == "token") for key, value in weights.items()}
    return change(weights, True)


def _plain(value: Any) -> Any:
    """A constructor argument as spec data: a pooler given as an argument becomes its own spec; the rest is copied."""
    if isinstance(value, Pooler):
        return value.get_config()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return copy.deepcopy(value)


def _record_arguments(cls: type[Pooler]) -> None:
    """Make ``cls``'s own constructor (if it has one) record the arguments it is called with, defaults filled
    in, as the pooler's spec (what get_config returns). The most derived constructor, the outermost call,
    records; the base constructors it calls do not."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return
    signature = inspect.signature(init)

    @functools.wraps(init)
    def recording_init(self, *args: Any, **options: Any) -> None:
        if "_spec" not in self.__dict__:
            try:
                bound = signature.bind(self, *args, **options)
            except TypeError as err:  # e.g. an unknown option, given to the class directly
                raise PoolkitError(f"{type(self).name or type(self).__name__}: {err}") from None
            bound.apply_defaults()
            self.__dict__["_spec"] = {key: _plain(value) for key, value in list(bound.arguments.items())[1:]}
        init(self, *args, **options)

    cls.__init__ = recording_init


_record_arguments(Pooler)


# -- registry ---------------------------------------------------------------------------------
_REGISTRY: dict[str, type[Pooler]] = {}
_ALIASES: dict[str, str] = {}


def register_pooler(name: str, *aliases: str) -> Callable[[type[Pooler]], type[Pooler]]:
    """Class decorator: make a Pooler buildable by ``name`` (and its aliases) with get_pooler."""

    def decorate(cls: type[Pooler]) -> type[Pooler]:
        _check_free(name)
        cls.name = name
        _REGISTRY[name] = cls
        register_aliases(name, *aliases)
        return cls

    return decorate


def register_aliases(name: str, *aliases: str) -> None:
    """More names for the registered pooler ``name`` (e.g. ``gap`` for ``mean``, its name on image maps)."""
    if name not in _REGISTRY:
        raise ValueError(f"pooler {name!r} is not registered")
    for alias in aliases:
        _check_free(alias)
        _ALIASES[alias] = name


def _check_free(name: str) -> None:
    if name in _REGISTRY or name in _ALIASES:
        raise ValueError(f"pooler name {name!r} is already registered")


def resolve_name(name: str) -> str:
    """Canonical name for a pooler name or alias; unknown names raise with close suggestions."""
    key = str(name).strip().lower().replace("-", "_")
    if key in _REGISTRY:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    known = sorted(_REGISTRY) + sorted(_ALIASES)
    raise PoolkitError(f"unknown pooler {name!r}.{suggest(key, known)} Known: {', '.join(sorted(_REGISTRY))}")


def pooler_class(name: str) -> type[Pooler]:
    return _REGISTRY[resolve_name(name)]


def pooler_options(name: str) -> dict[str, Any]:
    """The options a pooler accepts, read from its own constructor's signature: {option: default}
    (hidden_size excluded; options without a default map to ``inspect.Parameter.empty``)."""
    cls = pooler_class(name)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {p.name: p.default for p in parameters if p.name != "hidden_size"}


#: One line for every option a registered pooler takes (a test keeps this complete).
OPTION_DOCS = {
    "on_empty": "rows with no real token: 'zeros' (zeros and zero weights) or 'raise'",
    "p": "gem: the starting power p >= 1 (1: mean; large: max of magnitudes)",
    "learn_p": "gem: learn p with the rest (True) or keep it fixed",
    "signed": "gem: odd power sign(x)|x|^p for signed features (True) or the classic clamp to eps",
    "eps": "gem: the clamp floor of the classic form (signed=False), and of its weights' denominators",
    "temperature": "lse: the starting temperature t > 0 (small: max; large: mean)",
    "learn_temperature": "lse: learn t with the rest (True) or keep it fixed",
    "attn_size": "width of the attention scoring layer",
    "init": "attention, attention_head, gated_attention: weight init, 'xavier' (Glorot, zero biases) or 'default' (PyTorch's)",
    "scorer": "attention, attention_head, gated_attention: token logit 'tanh', 'linear', 'bilinear', 'glu' or 'abmil' (pooling/attention.py SCORERS)",
    "num_heads": "attention heads (must divide hidden_size for latent / adapool)",
    "combine": "how heads / queries are joined: 'concat', or 'project' (multihead) / 'mean' (latent)",
    "num_queries": "latent: number of learned queries",
    "mlp": "latent: add the residual MLP after attention",
    "mlp_ratio": "latent: the MLP's inner width as a multiple of hidden_size",
    "query_index": "adapool: the query token (int, negative from the end), several (list, averaged) or None (mean)",
    "residual": "adapool: add the query token back (default: when the query is one token)",
    "poolers": "concat: the token poolers (names or spec dicts) whose outputs are concatenated",
    "num_layers": "the encoder's transformer layers (config.num_hidden_layers); build_pooler fills it in",
    "layer_start": "first hidden state used (0 = embeddings, negative from the end)",
    "weighting": "weighted_layer: normalise the layer weights by their 'sum' or a 'softmax'",
    "token_pooler": "the token pooler applied to the layers (a name or spec dict)",
    "last_n": "how many of the last hidden states are used (default: 4, or all on a shallower encoder)",
    "rnn_hidden": "hidden size of the recurrence over layers (per direction)",
    "bidirectional": "run the recurrence in both directions (final states concatenated)",
    "dropout": "dropout on the recurrence's output (training only)",
    "height": "flex: the height of the learned logit map (maps of another size get it resized bilinearly)",
    "width": "flex: the width of the learned logit map (tokens (B, T, D) are read as a 1 x T map)",
    "per_channel": "flex: one logit map per channel (True) or one shared by all channels",
    "num_generators": "zonotope_attention: K generator matrices of W_V(c) = C + sum_k g_k(c) G_k (0: plain attention)",
    "gate": "zonotope_attention: what gates g_k(c) read: 'element' (x_j), 'context' (the set's mean) or 'both'",
    "rank": "zonotope_attention: rank r of each generator G_k = L_k R_k^T (None: full D x D matrices)",
    "l2": "flex: the coefficient of the L2 penalty on the logits that regularization() returns",
    "weight_dropout": "flex: dropout on the softmax weights (training only)",
}


def describe_options(name: str) -> dict[str, tuple[Any, str]]:
    """{option: (default, one-line doc)} for a pooler: what ``pooler_options`` lists, explained."""
    return {key: (default, OPTION_DOCS.get(key, "")) for key, default in pooler_options(name).items()}


def check_options(name: str, options: dict[str, Any]) -> str:
    """The canonical name, after checking that every option is one the pooler accepts (values are checked
    when the pooler is built)."""
    canonical = resolve_name(name)
    accepted = pooler_options(canonical)
    for key in options:
        if key not in accepted:
            raise PoolkitError(f"pooler {canonical!r} has no option {key!r}.{suggest(key, accepted)} "
                               f"Its options: {', '.join(accepted) or 'none'}")
    return canonical


def get_pooler(name: str, hidden_size: int, **options: Any) -> Pooler:
    """Build a registered pooler: ``get_pooler("attention", hidden_size=384, attn_size=256)``;
    ``get_pooler(**pooler.get_config())`` rebuilds one."""
    canonical = check_options(name, options)
    try:
        return _REGISTRY[canonical](hidden_size, **options)
    except (TypeError, ValueError) as err:  # a value of the wrong kind, e.g. p="3" (PoolkitError passes through)
        if isinstance(err, PoolkitError):
            raise
        raise PoolkitError(f"pooler {canonical!r}: options do not fit ({err}); see "
                           f"poolkit.pooling.describe_options({canonical!r})") from None


def pooler_spec(spec: str | dict[str, Any] | Pooler, **options: Any) -> dict[str, Any]:
    """A checked ``{"name": canonical, **options}`` from a name (plus ``options``), a spec dict or a pooler.

    The one form every consumer (PooledModel, the sentence-transformers module, train, compare, the CLI)
    carries; ``hidden_size`` / ``num_layers`` are kept when the spec has them, else filled by build_pooler.
    """
    if isinstance(spec, Pooler):
        return {**spec.get_config(), **options}
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict) or "name" not in spec:
        raise PoolkitError(f"a pooler spec must be a name or a dict with 'name', got {spec!r}")
    rest = {k: v for k, v in {**spec, **options}.items() if k != "name"}
    canonical = check_options(spec["name"], {k: v for k, v in rest.items() if k != "hidden_size"})
    return {"name": canonical, **copy.deepcopy(rest)}


def pooler_from_label(label: str) -> dict:
    """``"gated_attention:scorer=glu"`` -> the checked spec {"name": "gated_attention", "scorer": "glu"} (values
    read as JSON where they parse, else kept as text)."""
    name, *pairs = label.split(":")
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PoolkitError(f"pooler {label!r}: options go as NAME:KEY=VALUE, e.g. gated_attention:scorer=glu")
        options[key] = option_value(value)
    return pooler_spec(name, **options)


def option_value(text: str) -> Any:
    """An option's value as typed on a command line: JSON where it parses (256, 0.5, true, [1, 2]), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def build_pooler(spec: str | dict[str, Any] | Pooler, hidden_size: int | None = None,
                 num_layers: int | None = None) -> Pooler:
    """A pooler for an encoder of ``hidden_size`` (and ``num_layers`` transformer layers, which every layer
    pooler needs) from a name, a spec dict (``{"name": ..., **options}``, e.g. a ``get_config()``) or an
    already built pooler (returned as it is). Values in the spec win over the encoder's."""
    if isinstance(spec, Pooler):
        return spec
    spec = pooler_spec(spec)
    options = {k: v for k, v in spec.items() if k not in ("name", "hidden_size")}
    if num_layers is not None and "num_layers" in pooler_options(spec["name"]):
        options.setdefault("num_layers", num_layers)
    size = spec.get("hidden_size", hidden_size)
    if size is None:
        raise PoolkitError(f"pooler {spec['name']!r}: hidden_size is needed (the encoder's hidden size)")
    return get_pooler(spec["name"], size, **options)


def quadrature_poolers() -> list[str]:
    """Registered poolers that take ``quadrature_weights`` (see :mod:`.quadrature`)."""
    return [name for name, cls in _REGISTRY.items() if cls.quadrature]


def list_poolers(kind: str | None = None) -> list[str]:
    """Registered pooler names, optionally only one kind ("token" or "layer")."""
    if kind not in (None, "token", "layer"):
        raise PoolkitError(f"kind must be 'token', 'layer' or None, got {kind!r}")
    return [n for n, cls in _REGISTRY.items() if kind is None or cls.kind == kind]
