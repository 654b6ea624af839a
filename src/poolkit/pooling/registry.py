"""One registry and one config mechanism for everything poolkit builds by name: poolers (``POOLERS``) and
channel-spatial blocks (``poolkit.blocks``' ``BLOCKS``).

A registered class is built as ``registry.build(name, size, **options)``; its options are its own constructor's
keyword arguments (read from the signature, so nothing lists them twice), documented by the ``option_docs`` class
attributes along its bases. Every instance records the arguments it was built with (``Configurable``), so
``get_config()`` returns a plain dict that builds the same module again. Unknown names and options fail in one
line with close suggestions.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from ..errors import PoolkitError, suggest


class Configurable(nn.Module):
    """A module that records its constructor's arguments (defaults filled in) as its spec: ``get_config()``
    returns ``{"name": ..., **arguments}``, and the registry rebuilds the same module from it. Modules given as
    arguments (a composite pooler's parts) are recorded as their own configs."""

    name: str = ""
    #: {option: one line} for the options this class's constructor adds (merged along the bases: see docs_of).
    option_docs: dict[str, str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _record_arguments(cls)

    def get_config(self) -> dict[str, Any]:
        """The module's spec, a plain dict: the registry's ``build(**module.get_config())`` makes the same module
        (the same output for the same weights)."""
        return {"name": self.name, **copy.deepcopy(self._spec)}


def _plain(value: Any) -> Any:
    """A constructor argument as spec data: a module given as an argument becomes its own spec; the rest is copied."""
    if isinstance(value, Configurable):
        return value.get_config()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return copy.deepcopy(value)


def _record_arguments(cls: type[Configurable]) -> None:
    """Make ``cls``'s own constructor (if it has one) record the arguments it is called with as the spec. The most
    derived constructor, the outermost call, records; the base constructors it calls do not."""
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


class Registry:
    """Classes built by name. ``kind`` names them in messages ("pooler", "block"); ``size`` is the first
    constructor argument every one of them takes ("hidden_size", "channels"), which is not an option; ``describe``:
    the public function that lists a class's options, for messages."""

    def __init__(self, kind: str, size: str, describe: str) -> None:
        self.kind, self.size, self.describe_with = kind, size, describe
        self.classes: dict[str, type[Configurable]] = {}
        self.aliases: dict[str, str] = {}

    def register(self, name: str, *aliases: str) -> Callable[[type[Configurable]], type[Configurable]]:
        """Class decorator: make a class buildable by ``name`` (and its aliases)."""

        def decorate(cls: type[Configurable]) -> type[Configurable]:
            self._check_free(name)
            cls.name = name
            self.classes[name] = cls
            self.add_aliases(name, *aliases)
            return cls

        return decorate

    def add_aliases(self, name: str, *aliases: str) -> None:
        """More names for the registered ``name`` (e.g. ``gap`` for the pooler ``mean``, its name on image maps)."""
        if name not in self.classes:
            raise ValueError(f"{self.kind} {name!r} is not registered")
        for alias in aliases:
            self._check_free(alias)
            self.aliases[alias] = name

    def _check_free(self, name: str) -> None:
        if name in self.classes or name in self.aliases:
            raise ValueError(f"{self.kind} name {name!r} is already registered")

    def resolve(self, name: str) -> str:
        """The canonical name of a name or alias (case, '-' or '_' alike); unknown names raise with close ones."""
        key = str(name).strip().lower().replace("-", "_")
        if key in self.classes:
            return key
        if key in self.aliases:
            return self.aliases[key]
        known = [*self.classes, *self.aliases]
        raise PoolkitError(f"unknown {self.kind} {name!r}.{suggest(key, known)} Known: {', '.join(self.names())}")

    def get(self, name: str) -> type[Configurable]:
        return self.classes[self.resolve(name)]

    def options(self, name: str) -> dict[str, Any]:
        """{option: default} the class accepts, read from its own constructor's signature (``size`` excluded;
        options without a default map to ``inspect.Parameter.empty``)."""
        parameters = list(inspect.signature(self.get(name).__init__).parameters.values())[1:]
        return {p.name: p.default for p in parameters if p.name != self.size}

    def check_options(self, name: str, options: dict[str, Any]) -> str:
        """The canonical name, after checking that every option is one the class accepts (values are checked when
        it is built)."""
        canonical = self.resolve(name)
        accepted = self.options(canonical)
        for key in options:
            if key not in accepted:
                raise PoolkitError(f"{self.kind} {canonical!r} has no option {key!r}.{suggest(key, accepted)} "
                                   f"Its options: {', '.join(accepted) or 'none'}")
        return canonical

    def build(self, name: str, size: int, **options: Any) -> Configurable:
        canonical = self.check_options(name, options)
        try:
            return self.classes[canonical](size, **options)
        except (TypeError, ValueError) as err:  # a value of the wrong kind (PoolkitError, a ValueError, passes)
            if isinstance(err, PoolkitError):
                raise
            raise PoolkitError(f"{self.kind} {canonical!r}: options do not fit ({err}); see "
                               f"{self.describe_with}({canonical!r})") from None
        except (RuntimeError, MemoryError) as err:  # sizes whose weights cannot be allocated (attn_size=1e9)
            if not isinstance(err, MemoryError) and "allocate" not in str(err):
                raise
            sizes = ", ".join(f"{key}={value!r}" for key, value in options.items()) or f"hidden size {size}"
            raise PoolkitError(f"{self.kind} {canonical!r}: its weights do not fit in memory with {sizes}: use "
                               "smaller sizes") from None

    def describe(self, name: str) -> dict[str, tuple[Any, str]]:
        """{option: (default, one-line doc)}: what ``options`` lists, explained by the classes' ``option_docs``."""
        docs = docs_of(self.get(name))
        return {key: (default, docs.get(key, "")) for key, default in self.options(name).items()}

    def names(self, keep: Callable[[type[Configurable]], bool] | None = None) -> list[str]:
        """Registered names in registration order, only those whose class ``keep`` accepts when given."""
        return [name for name, cls in self.classes.items() if keep is None or keep(cls)]


def docs_of(cls: type) -> dict[str, str]:
    """The option docs of ``cls`` and its bases, the most derived class's line winning."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        docs.update(base.__dict__.get("option_docs", {}))
    return docs


def check_positive_int(value: Any, what: str) -> int:
    """``value`` when it is a positive int (not a bool), else a one-line PoolkitError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PoolkitError(f"{what} must be a positive int, got {value!r}")
    return value


#: The poolers (poolkit.pooling.spec builds them from names and specs).
POOLERS = Registry("pooler", "hidden_size", "poolkit.pooling.describe_options")
