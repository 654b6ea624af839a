"""The block contract and its registry (register_block / get_block / list_blocks / block_options), on the
conventions of the pooler registry: names from a decorator, options read from the constructor's signature,
unknown names and options fail in one line with close suggestions."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from ..errors import PoolkitError, suggest
from ..pooling.base import check_positive_int

#: The families of Liu & Jiang's study, plus the single attentions they combine.
FAMILIES = ("reference", "sequential", "parallel", "residual", "multiscale")


class Block(nn.Module):
    """A channel-spatial attention block: (B, C, H, W) -> (B, C, H, W), same dtype, with ``C = channels``.

    Subclasses implement :meth:`attend` on a checked input. Every constructor argument is kept as the attribute of
    the same name (the block's options), so :meth:`get_config` can read them back."""

    name: str = ""
    family: str = ""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = check_positive_int(channels, "channels")

    def get_config(self) -> dict[str, Any]:
        """``{"name", "channels", **options}``: ``get_block(**block.get_config())`` builds the same block."""
        names = list(inspect.signature(type(self).__init__).parameters)[1:]
        return {"name": self.name, **{key: copy.deepcopy(getattr(self, key)) for key in names}}

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[1] != self.channels:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise PoolkitError(f"{self.name}: expects a map (B, {self.channels}, H, W), got {shape}; build the block "
                               f"with channels=<the map's channels>")
        return self.attend(x)

    def attend(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value!r}" for key, value in self.get_config().items() if key != "name")


_REGISTRY: dict[str, type[Block]] = {}
#: Every name and alias -> its canonical name.
_NAMES: dict[str, str] = {}


def register_block(name: str, family: str, *aliases: str) -> Callable[[type[Block]], type[Block]]:
    """Class decorator: make a Block buildable by ``name`` (and its aliases) with get_block."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")

    def decorate(cls: type[Block]) -> type[Block]:
        taken = [key for key in (name, *aliases) if key in _NAMES]
        if taken:
            raise ValueError(f"block names {taken} are already registered")
        cls.name, cls.family = name, family
        _REGISTRY[name] = cls
        _NAMES.update(dict.fromkeys((name, *aliases), name))
        return cls

    return decorate


def resolve_block(name: str) -> str:
    """Canonical name for a block name or alias (case, '-' or '_' alike); unknown names raise with close ones."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in _NAMES:
        raise PoolkitError(f"unknown block {name!r}.{suggest(key, _NAMES)} Known: {', '.join(_REGISTRY)}")
    return _NAMES[key]


def block_class(name: str) -> type[Block]:
    return _REGISTRY[resolve_block(name)]


def block_options(name: str) -> dict[str, Any]:
    """{option: default} a block accepts, from its constructor's signature (channels excluded)."""
    parameters = list(inspect.signature(block_class(name).__init__).parameters.values())[1:]
    return {p.name: p.default for p in parameters if p.name != "channels"}


def get_block(name: str, channels: int, **options: Any) -> Block:
    """Build a registered block: ``get_block("cbam", channels=64, reduction=8)``; ``get_block(**block.get_config())``
    rebuilds one."""
    canonical = resolve_block(name)
    accepted = block_options(canonical)
    for key in options:
        if key not in accepted:
            raise PoolkitError(f"block {canonical!r} has no option {key!r}.{suggest(key, accepted)} "
                               f"Its options: {', '.join(accepted) or 'none'}")
    try:
        return _REGISTRY[canonical](channels, **options)
    except (TypeError, ValueError) as err:  # a value of the wrong kind (PoolkitError, a ValueError, passes through)
        if isinstance(err, PoolkitError):
            raise
        raise PoolkitError(f"block {canonical!r}: options do not fit ({err}); see "
                           f"poolkit.blocks.block_options({canonical!r})") from None


def list_blocks(family: str | None = None) -> list[str]:
    """Registered block names in registration order, optionally of one family (see :data:`FAMILIES`)."""
    if family is not None and family not in FAMILIES:
        raise PoolkitError(f"family must be one of {', '.join(FAMILIES)} or None, got {family!r}")
    return [name for name, cls in _REGISTRY.items() if family is None or cls.family == family]
