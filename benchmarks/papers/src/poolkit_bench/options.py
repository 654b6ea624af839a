"""A benchmark's settings are one frozen dataclass; the fields made with :func:`option` are also the options of its
``poolkit bench`` command. Its presets (``--quick``, ``--full``, ...) are instances of that dataclass. The flags,
their types and their ``(default: ...)`` notes are read from the dataclass and the presets, so no default is written
twice, and the config a command runs is the preset chosen with the options given on top."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from poolkit.cli.common import split_names  # poolkit_bench's commands are a plugin of poolkit's CLI
from poolkit.errors import PoolkitError


@dataclass(frozen=True)
class Option:
    """How a config field reads from the command line: ``help``, the flag (default ``--field-name``), a metavar, a
    ``parse`` function for each value (an argparse ``type``), ``choices``, ``names`` (values split on commas and
    spaces, ``drop`` removed), ``empty`` (a tuple field may be given no values), how a default ``show``s in the help,
    what ``None`` means there, and ``nested`` (this field is a config itself; these of its fields are options)."""

    help: str
    flag: str | None = None
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: tuple | None = None
    names: bool = False
    drop: tuple[str, ...] = ()
    empty: bool = False
    show: Callable[[Any], str] | None = None
    none: str | None = None
    nested: tuple[str, ...] = ()


def option(default: Any, help: str, **how: Any) -> Any:
    """A config field with ``default`` that is also a command-line option (``how``: the fields of :class:`Option`)."""
    return dataclasses.field(default=default, metadata={"option": Option(help, **how)})


@dataclass(frozen=True)
class Preset:
    """A named config; with ``help`` it has a flag ``--NAME`` of its own."""

    config: Any
    help: str | None = None


@dataclass(frozen=True)
class Presets(Mapping):
    """A benchmark's presets (``choices``) and the one run when no preset flag is given; as a mapping, name -> its
    config."""

    default: str
    choices: Mapping[str, Preset]

    @property
    def base(self) -> Any:
        return self[self.default]

    def __getitem__(self, name: str) -> Any:
        return self.choices[name].config

    def __iter__(self):
        return iter(self.choices)

    def __len__(self) -> int:
        return len(self.choices)


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
            on = not _value(presets.base, flag.path)
            parser.add_argument(flag.flag, dest=flag.dest, action="store_true" if on else "store_false", default=None,
                                help=_escaped(how.help))
            continue
        parser.add_argument(flag.flag, dest=flag.dest, type=how.parse or kind, choices=how.choices,
                            nargs=("*" if how.empty else "+") if many else None,
                            metavar=None if how.choices else how.metavar, help=_escaped(_help(flag, presets)))


def _given(args: argparse.Namespace, flag: _Flag) -> Any:
    value = getattr(args, flag.dest, None)
    if value is None:
        return None
    if flag.option.names:
        value = [name for name in split_names(value) if name not in flag.option.drop]
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


def given_flags(args: argparse.Namespace, presets: Presets) -> list[str]:
    """The flags given on the command line: the config's options, a preset other than the default, --out, --force."""
    given = [flag.flag for flag in _flags(type(presets.base)) if _given(args, flag) is not None]
    if getattr(args, "preset", presets.default) != presets.default:
        given.append(f"--{args.preset}")
    return given + [name for name, on in (("--out", getattr(args, "out", None)), ("--force", getattr(args, "force",
                                                                                                     False))) if on]


def add_output_arguments(parser: argparse.ArgumentParser, result_files: tuple[str, ...]) -> None:
    """--out DIR (naming the files the run writes there), --force and --no-progress."""
    parser.add_argument("--out", metavar="DIR", help=f"write {', '.join(result_files)} here")
    parser.add_argument("--force", action="store_true", help="overwrite existing results in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_counts(config: Any, names: tuple[str, ...], least: int = 1) -> None:
    """Each named setting of ``config`` is an int of at least ``least``, else a PoolkitError naming it."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise PoolkitError(f"{name} must be an int >= {least}, got {value!r}")
