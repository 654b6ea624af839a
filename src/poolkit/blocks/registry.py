"""The block contract and its registry (register_block / get_block / list_blocks / block_options): the pooling
registry's (``poolkit.pooling.registry``), so names, options read from the constructor's signature, recorded
configs and one-line errors with close suggestions work as they do for poolers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from ..errors import PoolkitError
from ..pooling.registry import Configurable, Registry, check_positive_int

#: The families of Liu & Jiang's study, plus the single attentions they combine.
FAMILIES = ("reference", "sequential", "parallel", "residual", "multiscale")


class Block(Configurable):
    """A channel-spatial attention block: (B, C, H, W) -> (B, C, H, W), same dtype, with ``C = channels``.

    Subclasses implement :meth:`attend` on a checked input; ``get_config()`` (``{"name", "channels", **options}``,
    recorded from the constructor's arguments) builds the same block with ``get_block(**block.get_config())``."""

    family: str = ""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = check_positive_int(channels, "channels")

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


#: The blocks, by name.
BLOCKS = Registry("block", "channels", "poolkit.blocks.block_options")


def register_block(name: str, family: str, *aliases: str) -> Callable[[type[Block]], type[Block]]:
    """Class decorator: make a Block of ``family`` buildable by ``name`` (and its aliases) with get_block."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    register = BLOCKS.register(name, *aliases)

    def decorate(cls: type[Block]) -> type[Block]:
        cls.family = family
        return register(cls)

    return decorate


def resolve_block(name: str) -> str:
    """Canonical name for a block name or alias (case, '-' or '_' alike); unknown names raise with close ones."""
    return BLOCKS.resolve(name)


def block_class(name: str) -> type[Block]:
    return BLOCKS.get(name)


def block_options(name: str) -> dict[str, Any]:
    """{option: default} a block accepts, from its constructor's signature (channels excluded)."""
    return BLOCKS.options(name)


def get_block(name: str, channels: int, **options: Any) -> Block:
    """Build a registered block: ``get_block("cbam", channels=64, reduction=8)``; ``get_block(**block.get_config())``
    rebuilds one."""
    return BLOCKS.build(name, channels, **options)


def list_blocks(family: str | None = None) -> list[str]:
    """Registered block names in registration order, optionally of one family (see :data:`FAMILIES`)."""
    if family is not None and family not in FAMILIES:
        raise PoolkitError(f"family must be one of {', '.join(FAMILIES)} or None, got {family!r}")
    return BLOCKS.names(lambda cls: family is None or cls.family == family)
