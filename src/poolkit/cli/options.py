"""Command-line options generated from a settings dataclass (:mod:`poolkit.settings`): a flag per field made with
``option()``, its type, choices and ``(default: ...)`` note read from the dataclass and its presets, so no default
is written twice; the config a command runs is the preset chosen with the options given on top."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

from ..settings import Option, Presets
from .common import positive, split_names


@dataclass(frozen=True)
class _Flag:
    flag: str
    dest: str
    path: tuple[str, ...]  # field names from the top config down to this option's field
    option: Option
    hint: Any  # the field's type


def _flags(config_type: type, path: tuple[str, ...] = ()) -> list[_Flag]:
    hints = typing.get_type_hints(config_type)
    found = []
    for field in dataclasses.fields(config_type):
        how = field.metadata.get("option")
        if how is None:
            continue
        if how.nested:
            nested = {f.path[-1]: f for f in _flags(hints[field.name], (*path, field.name))}
            found += [nested[name] for name in how.nested]
            continue
        found.append(_Flag(how.flag or "--" + field.name.replace("_", "-"), field.name, (*path, field.name), how,
                           hints[field.name]))
    dests = [f.dest for f in found]
    if len(set(dests)) != len(dests):
        raise TypeError(f"{config_type.__name__}: two options of the same name in {dests}")
    return found


def _parts(hint: Any) -> tuple[Any, bool]:
    """A field's type -> (the type of one value, whether it is a tuple of them); ``X | None`` reads as ``X``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


def _value(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def _shown(flag: _Flag, value: Any) -> str:
    if flag.option.show is not None:
        return flag.option.show(value)
    if value is None:
        return flag.option.none or "none"
    if isinstance(value, tuple):
        return (", " if flag.option.names else " ").join(map(str, value)) or "none"
    return str(value)


def _help(flag: _Flag, presets: Presets) -> str:
    """The option's help with its value in the default preset and, where it differs, in each flagged preset."""
    default = _value(presets.base, flag.path)
    notes = [_shown(flag, default)] + [
        f"--{name}: {_shown(flag, _value(preset.config, flag.path))}" for name, preset in presets.choices.items()
        if preset.help is not None and name != presets.default and _value(preset.config, flag.path) != default]
    if len(notes) == 1 and default is None and flag.option.none is None:
        return flag.option.help
    return f"{flag.option.help} (default: {'; '.join(notes)})"


def _escaped(text: str) -> str:
    return text.replace("%", "%%")  # argparse formats help with %


def add_config_arguments(parser: argparse.ArgumentParser, presets: Presets) -> None:
    """A mutually exclusive flag per preset with help (stored as ``args.preset``), then one option per config field
    made with :func:`option`, unset (None) unless given."""
    flagged = {name: preset for name, preset in presets.choices.items() if preset.help is not None}
    if flagged:
        group = parser.add_mutually_exclusive_group()
        for name, preset in flagged.items():
            group.add_argument(f"--{name}", dest="preset", action="store_const", const=name, help=preset.help)
    parser.set_defaults(preset=presets.default)
    for flag in _flags(type(presets.base)):
        kind, many = _parts(flag.hint)
        how = flag.option
        if kind is bool:
            on = not _value(presets.base, flag.path) and not flag.flag.startswith("--no-")  # --no-X: X False
            parser.add_argument(flag.flag, *how.aliases, dest=flag.dest, action="store_true" if on else "store_false",
                                default=None, help=_escaped(_help(flag, presets) if how.none else how.help))
            continue
        convert = how.parse or (positive(kind) if how.positive else kind)
        parser.add_argument(flag.flag, *how.aliases, dest=flag.dest,
                            type=_each_piece(convert) if how.names else convert, choices=how.choices,
                            nargs=("*" if how.empty else "+") if many else None,
                            metavar=None if how.choices else how.metavar, help=_escaped(_help(flag, presets)))


def _each_piece(convert: Any) -> Any:
    """An argparse type for a ``names`` option: every comma-separated piece of a value must ``convert``; the value
    is kept as text, split (and converted) once all are read (:func:`_given`)."""
    def parse(text: str) -> str:
        for piece in split_names([text]):
            convert(piece)
        return text
    parse.__name__ = getattr(convert, "__name__", "")  # argparse names it in "invalid int value: 'x'"
    return parse


def _given(args: argparse.Namespace, flag: _Flag) -> Any:
    value = getattr(args, flag.dest, None)
    if value is None:
        return None
    if flag.option.names:
        how, kind = flag.option, _parts(flag.hint)[0]
        convert = how.parse or (positive(kind) if how.positive else kind)
        value = [convert(name) for name in split_names(value) if name not in how.drop]
    return tuple(value) if isinstance(value, list) else value


def config_from_args(args: argparse.Namespace, presets: Presets) -> Any:
    """The preset named by ``args.preset`` with every option given on the command line put in."""
    changes: dict[tuple[str, ...], Any] = {}
    for flag in _flags(type(presets.base)):
        value = _given(args, flag)
        if value is not None:
            changes[flag.path] = value
    return _replaced(presets[getattr(args, "preset", presets.default)], changes)


def _replaced(config: Any, changes: dict[tuple[str, ...], Any]) -> Any:
    here = {path[0]: value for path, value in changes.items() if len(path) == 1}
    for name in {path[0] for path in changes if len(path) > 1}:
        here[name] = _replaced(getattr(config, name), {p[1:]: v for p, v in changes.items() if len(p) > 1
                                                        and p[0] == name})
    return dataclasses.replace(config, **here)


def given_settings(args: argparse.Namespace, presets: Presets) -> dict[str, Any]:
    """{field: value} of the options given on the command line (top-level fields; the others keep their
    defaults)."""
    return {flag.path[0]: value for flag in _flags(type(presets.base)) if len(flag.path) == 1
            and (value := _given(args, flag)) is not None}


def given_flags(args: argparse.Namespace, presets: Presets) -> list[str]:
    """The flags given on the command line: the config's options, a preset other than the default, --out, --force."""
    given = [flag.flag for flag in _flags(type(presets.base)) if _given(args, flag) is not None]
    if getattr(args, "preset", presets.default) != presets.default:
        given.append(f"--{args.preset}")
    return given + [name for name, on in (("--out", getattr(args, "out", None)), ("--force", getattr(args, "force",
                                                                                                     False))) if on]
