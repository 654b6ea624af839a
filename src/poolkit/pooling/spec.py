"""Poolers by name and by spec: the pooler registry's functions (register / get_pooler / list_poolers / ...) and the
spec, a plain ``{"name": ..., **options}`` dict that every consumer carries (``pooler_spec``, ``build_pooler``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..errors import PoolkitError
from .base import Pooler
from .registry import POOLERS


def register_pooler(name: str, *aliases: str) -> Callable[[type[Pooler]], type[Pooler]]:
    """Class decorator: make a Pooler buildable by ``name`` (and its aliases) with get_pooler."""
    return POOLERS.register(name, *aliases)


def register_aliases(name: str, *aliases: str) -> None:
    """More names for the registered pooler ``name`` (e.g. ``gap`` for ``mean``, its name on image maps)."""
    POOLERS.add_aliases(name, *aliases)


def resolve_name(name: str) -> str:
    """Canonical name for a pooler name or alias; unknown names raise with close suggestions."""
    return POOLERS.resolve(name)


def pooler_class(name: str) -> type[Pooler]:
    return POOLERS.get(name)


def pooler_options(name: str) -> dict[str, Any]:
    """The options a pooler accepts, read from its own constructor's signature: {option: default}
    (hidden_size excluded; options without a default map to ``inspect.Parameter.empty``)."""
    return POOLERS.options(name)


def describe_options(name: str) -> dict[str, tuple[Any, str]]:
    """{option: (default, one-line doc)} for a pooler: what ``pooler_options`` lists, explained by the
    ``option_docs`` of its class and their bases."""
    return POOLERS.describe(name)


def get_pooler(name: str, hidden_size: int, **options: Any) -> Pooler:
    """Build a registered pooler: ``get_pooler("attention", hidden_size=384, attn_size=256)``;
    ``get_pooler(**pooler.get_config())`` rebuilds one."""
    return POOLERS.build(name, hidden_size, **options)


def list_poolers(kind: str | None = None) -> list[str]:
    """Registered pooler names, optionally only one kind ("token" or "layer")."""
    if kind not in (None, "token", "layer"):
        raise PoolkitError(f"kind must be 'token', 'layer' or None, got {kind!r}")
    return POOLERS.names(lambda cls: kind is None or cls.kind == kind)


def quadrature_poolers() -> list[str]:
    """Registered poolers that take ``quadrature_weights`` (see :mod:`.quadrature`)."""
    return POOLERS.names(lambda cls: cls.quadrature)


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
    canonical = POOLERS.check_options(spec["name"], {k: v for k, v in rest.items() if k != "hidden_size"})
    return {"name": canonical, **copy.deepcopy(rest)}


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
