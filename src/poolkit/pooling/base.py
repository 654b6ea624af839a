"""The pooler contract and its input checks (the registry and specs: registry.py and spec.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Union

import torch
from torch import Tensor

from ..errors import PoolkitError
from . import fast, hooks, masking, quadrature
from .registry import POOLERS, Configurable, check_positive_int

Weights = Union[Tensor, dict[str, Tensor]]
HiddenStates = Union[Tensor, Sequence[Tensor]]

EMPTY_POLICIES = ("zeros", "raise")
#: Layouts of an image map: channels first (B, C, H, W) or channels last (B, H, W, C).
MAP_FORMATS = ("NCHW", "NHWC")
#: The dtypes hidden states can be pooled in.
POOLED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Pooler(Configurable):
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
    :meth:`pool_without_weights`, which ``forward`` calls (through :meth:`pool_for_output`) when no weights are
    asked for.
    """

    option_docs = {"on_empty": "rows with no real token: 'zeros' (zeros and zero weights) or 'raise'"}
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
    #: True when the output ignores the order of the real tokens: a set pooler (mean, max, attention, ...).
    order_invariant: bool = False
    #: True when per-layer summaries (each layer's pooled vector) can stand in for the token states: linear,
    #: parameter-free, and a one-token sequence pools to that token (cls, last, mean, sum, mean_sqrt_len).
    summarises: bool = False
    #: What the weights it returns (``return_weights=True``) mean, as explanations say it.
    weight_meaning: str = "the pooler's attention weights over the tokens (a softmax: they sum to 1)"

    def __init__(self, hidden_size: int, *, on_empty: str = "zeros") -> None:
        super().__init__()
        check_positive_int(hidden_size, "hidden_size")
        if on_empty not in EMPTY_POLICIES:
            raise PoolkitError(f"on_empty must be one of {EMPTY_POLICIES}, got {on_empty!r}")
        self.hidden_size = hidden_size
        self.on_empty = on_empty
        self.output_dim = hidden_size

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
                                   f"{', '.join(POOLERS.names(lambda cls: cls.quadrature))}")
            quadrature_weights, mask = quadrature.checked_weights(self, quadrature_weights, mask)
        self._check_not_empty(mask)
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
        if self.reads_padding and self.kind == "token" and (not checked or hooks.hooked(*self.children())):
            # Transforms, other devices: zeroed before it is read (layers: LayerPooler). With hooks on its layers
            # (hooks.py), so that a hooked layer never reads the padding and the guard below never pools twice.
            x = _zero_padding(x, mask)
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
            pooled, weights = self.pool_for_output(x, mask, **where), None
        if not self.zero_when_empty:
            # Rows with no real token give zeros. A product, not masked_fill / where (several times dearer on
            # a (B, D) tensor): pooled values are finite there unless the padding is not (then see forward).
            pooled = pooled * mask.any(dim=1, keepdim=True)
        return pooled, weights

    def pool(self, x: Any, mask: Tensor) -> tuple[Tensor, Weights]:
        raise NotImplementedError

    def _check_not_empty(self, mask: Tensor) -> None:
        """With ``on_empty="raise"``, a row with no real token is an error."""
        if self.on_empty == "raise" and not bool(mask.any(dim=1).all()):
            rows = (~mask.any(dim=1)).nonzero().flatten().tolist()
            raise PoolkitError(f"{self.name}: rows {rows[:5]} have no real token (all padding); "
                               "drop them or build the pooler with on_empty='zeros'")

    def pool_as_part(self, x: Tensor, mask: Tensor, weights: bool = True, **where: Any):
        """This pooler inside another (a composite's part, a layer pooler's token pooler) on tokens already checked:
        ``pool`` (``weights=False``: ``pool_without_weights``), or a call of this pooler as a module where that would
        run hooks of its own, so that they run (hooks.py); its output is then in the input's dtype. Either way its
        ``on_empty="raise"`` holds. ``where``: a positional part's ``grid`` (the map is then passed channels last)
        or ``quadrature_weights``."""
        if not hooks.hooked_itself(self):
            self._check_not_empty(mask)
            return self.pool(x, mask, **where) if weights else self.pool_without_weights(x, mask, **where)
        grid = where.pop("grid", None)
        if grid is not None:
            x, mask = x.unflatten(1, grid), mask.unflatten(1, grid)
        result = self(x, mask, return_weights=weights, input_format="NHWC" if grid else "NCHW", **where)
        return (result[0], result[1].flatten(-2) if grid else result[1]) if weights else result

    def start_as_mean(self) -> bool:
        """Set the parameters so that the pooler computes mean pooling (uniform attention), where it can; True when
        it now does. Training for embeddings starts here, from the pooling a pretrained embedder was trained for."""
        return False

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

    def pool_for_output(self, x: Any, mask: Tensor, **where: Any) -> Tensor:
        """The pooled tensor as ``forward`` returns it without weights, before its cast to the input's dtype:
        ``pool_without_weights``, unless a pooler has a form that rounds to x's dtype itself (sum: one embedding bag
        of half-precision x). A part of another pooler is pooled by ``pool_without_weights``, whose compute-dtype
        values the outer pooler uses further."""
        return self.pool_without_weights(x, mask, **where)

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
        if first.dtype not in POOLED_DTYPES:  # integers, and float8 (torch has no arithmetic on it)
            raise PoolkitError(f"{self.name}: hidden_states must be floating point (float16, bfloat16, float32 or "
                               f"float64), got {first.dtype}; cast them first, e.g. hidden_states.to(torch.bfloat16)")
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
            if attention_mask.dtype != torch.bool and not fast.transformed():
                _check_binary(self.name, attention_mask)
            mask = attention_mask.bool()
        return (layers if self.kind == "layer" else first), mask

    def parameter_dtype(self) -> torch.dtype | None:
        """The dtype learned poolers compute in: their parameters' (None without parameters or under autocast,
        which then decides)."""
        if not self._parameters and not self._modules:  # parameter-free (mean, max, ...): no module walk per call
            return None
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


def _shape_of(value: Any) -> tuple[int, ...] | str:
    """A tensor's shape, or the type name of anything else (for error messages)."""
    return tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__


def _per_layer(x: Tensor | list[Tensor], change: Callable[[Tensor], Tensor]) -> Tensor | list[Tensor]:
    """``change`` applied to x, or to each layer of a layer pooler's list."""
    return [change(h) for h in x] if isinstance(x, list) else change(x)


def _zero_padding(x: Tensor | list[Tensor], mask: Tensor) -> Tensor | list[Tensor]:
    """x (or each layer) with every padded position set to 0: (B, T, D) -> (B, T, D)."""
    return _per_layer(x, lambda h: masking.zero_padding(h, mask))


def _check_binary(name: str, mask: Tensor) -> None:
    """A mask holds 0 and 1 only: anything else (0.5, -1, NaN, a Hugging Face additive mask of 0 and -10000) would be
    read as real tokens. Eager mode only (one reduction over the (B, T) mask; compile, export and torch.func skip
    it)."""
    bad = (mask != 0) & (mask != 1)
    if not bool(bad.any()):
        return
    shown = ", ".join(f"{v:g}" for v in torch.unique(mask[bad].float())[:3].tolist())
    additive = bool((mask <= 0).all()) and bool((mask == 0).any())
    fix = ("it looks additive (0 = real, a large negative number = padding): pass (attention_mask == 0)"
           if additive else "pass 1 for real tokens and 0 for padding")
    raise PoolkitError(f"{name}: attention_mask must hold 0 and 1 only (1 = real token), got {shown}; {fix}")


def _all_padding(x: Tensor | list[Tensor], batch: int, length: int) -> Tensor | list[Tensor]:
    """Zeros (batch, length, D) in x's dtype and device (for each layer of a list)."""
    return _per_layer(x, lambda h: h.new_zeros(batch, length, h.shape[2]))


def _map_weights(weights: Weights, change: Callable[[Tensor, bool], Tensor]) -> Weights:
    """``change(w, is_token_weights)`` applied to the weights, or to each entry of a layer pooler's dict."""
    if isinstance(weights, dict):
        return {key: change(value, key == "token") for key, value in weights.items()}
    return change(weights, True)
