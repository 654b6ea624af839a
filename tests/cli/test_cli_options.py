"""Command-line options generated from settings dataclasses (poolkit.settings, poolkit.cli.options): nested
configs, booleans, empty lists, aliases, positive numbers, presets in the help."""

from __future__ import annotations

import argparse
import dataclasses
import typing

import pytest

from poolkit.cli.options import add_config_arguments, config_from_args, given_settings
from poolkit.settings import Preset, Presets, option


@dataclasses.dataclass(frozen=True)
class _Inner:
    workers: int = option(2, "processes")
    hidden: int = option(5, "not asked for")


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner = option(_Inner(), "", nested=("workers",))
    fast: bool = option(False, "go fast")
    slow: bool = option(True, "skip the slow part", flag="--no-slow")
    sizes: tuple[int, ...] = option((1, 2), "sizes", empty=True)


def test_nested_options_booleans_and_empty_lists():
    # catches nested options set on the outer config, nested fields exposed that were not asked for, booleans that
    # do not invert their default, and a tuple option that cannot be emptied
    presets = Presets("plain", {"plain": Preset(_Outer()), "big": Preset(_Outer(sizes=(9,)), "bigger")})
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, presets)
    assert {f for a in parser._actions for f in a.option_strings} == {"-h", "--help", "--big", "--workers", "--fast",
                                                                     "--no-slow", "--sizes"}
    config = config_from_args(parser.parse_args(["--workers", "7", "--fast", "--no-slow", "--sizes"]), presets)
    assert config == _Outer(inner=_Inner(workers=7), fast=True, slow=False, sizes=())
    assert config_from_args(parser.parse_args(["--big"]), presets).sizes == (9,)
    assert "(default: 1 2; --big: 9)" in " ".join(parser.format_help().split())
    assert typing.get_type_hints(_Outer)["sizes"] == tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _Rates:
    lr: float = option(1e-3, "learning rate", positive=True, aliases=("--learning-rate",))
    steps: int = option(10, "steps", positive=True)
    name: str = "unflagged"


def test_aliases_positive_numbers_and_given_settings():
    # catches an alias that does not reach its field, a positive option taking 0 / nan, and given_settings reporting
    # options that were not given (they would override the Python API's own defaults)
    presets = Presets("plain", {"plain": Preset(_Rates())})
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, presets)
    assert given_settings(parser.parse_args(["--learning-rate", "0.5"]), presets) == {"lr": 0.5}
    assert given_settings(parser.parse_args([]), presets) == {}
    for bad in (["--steps", "0"], ["--lr", "nan"], ["--name", "x"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_train_flags_come_from_train_config():
    # catches a TrainConfig default the help does not show (or shows stale), a flag whose value does not reach the
    # API under its field's name, an alias that is lost, and an unset flag overriding the API's own default
    from poolkit.cli import build_parser
    from poolkit.training.config import TRAIN_PRESETS, TrainConfig

    parser = build_parser()
    base = ["train", "--data", "x.csv", "--out", "o"]
    assert given_settings(parser.parse_args(base), TRAIN_PRESETS) == {}
    args = parser.parse_args([*base, "--epochs", "5", "--mixed-precision", "bf16", "--train-only", "attention"])
    assert given_settings(args, TRAIN_PRESETS) == {"epochs": 5, "precision": "bf16", "train_only": "attention"}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    helps = {action.dest: action.help for action in sub._actions}
    flagged = [f for f in dataclasses.fields(TrainConfig) if "option" in f.metadata]
    assert len(flagged) == 19
    for field in flagged:
        assert helps[field.name].endswith(f"(default: {getattr(TrainConfig(), field.name)})"), field.name


def test_compare_flags_come_from_compare_config():
    # the same for poolkit compare: catches a --no-cache / --no-baseline that does not reach its field inverted, an
    # alias lost (--finetune-lr), a note for a None default missing, and unset flags overriding the API
    from poolkit.cli import build_parser
    from poolkit.training.config import COMPARE_PRESETS, CompareConfig

    parser = build_parser()
    assert given_settings(parser.parse_args(["compare"]), COMPARE_PRESETS) == {}
    args = parser.parse_args(["compare", "--no-cache", "--no-baseline", "--finetune-lr", "1e-4", "--folds", "4"])
    assert given_settings(args, COMPARE_PRESETS) == {"cache": False, "baseline": False, "encoder_lr": 1e-4,
                                                     "folds": 4}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["compare"]
    helps = {action.dest: action.help for action in sub._actions}
    assert helps["folds"].endswith("(default: 5; 3 on the embedded default data)")
    for field in dataclasses.fields(CompareConfig):
        default = getattr(CompareConfig(), field.name)
        if "option" in field.metadata and field.type not in ("bool",) and default is not None:
            assert helps[field.name].endswith(f"(default: {default if default != () else 'none'})"), field.name
    # --sizes takes commas and/or spaces, each piece an int > 0, refused by argparse otherwise
    args = parser.parse_args(["compare", "--sizes", "250,500", "1000", "--repeats", "3"])
    assert given_settings(args, COMPARE_PRESETS) == {"sizes": (250, 500, 1000), "repeats": 3}
    for bad in ("250,x", "0"):
        with pytest.raises(SystemExit):
            parser.parse_args(["compare", "--sizes", bad])


@pytest.mark.parametrize("base, presets, given, settings", [
    (["embed", "--data", "x.csv", "--out", "o.npy"], "EMBED_PRESETS",
     ["--normalize", "--batch-size", "8", "--mixed-precision", "no"], {"normalize": True, "batch_size": 8,
                                                                       "precision": "no"}),
    (["predict", "--model", "run", "--data", "x.csv", "--out", "o.csv"], "PREDICT_PRESETS",
     ["--allow-incomplete", "--max-length", "64"], {"allow_incomplete": True, "max_length": 64}),
    (["merge", "--runs", "a", "b", "--alpha", "0.5", "--out", "m"], "MERGE_PRESETS",
     ["--fold-pairing", "average", "--grid", "0.5", "1"], {"fold_pairing": "average", "grid": (0.5, 1.0)}),
])
def test_embed_predict_and_merge_flags_come_from_their_configs(base, presets, given, settings):
    # catches a flag whose value does not reach the API under its field's name, a default the help does not show
    # (or shows stale) and an unset flag overriding the API's own default
    from poolkit.cli import build_parser
    from poolkit.training import config as configs

    presets, command = getattr(configs, presets), base[0]
    parser = build_parser()
    assert given_settings(parser.parse_args(base), presets) == {}
    assert given_settings(parser.parse_args([*base, *given]), presets) == settings
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    helps = {action.dest: action.help for action in sub._actions}
    for field in dataclasses.fields(presets.base):
        default = getattr(presets.base, field.name)
        if not isinstance(default, bool):
            note = field.metadata["option"].none if default is None else (
                " ".join(map(str, default)) if isinstance(default, tuple) else default)
            assert helps[field.name].endswith(f"(default: {note})"), field.name


def test_embed_and_predict_refuse_an_unknown_setting_naming_the_close_one(tmp_path):
    from poolkit import PoolkitError
    from poolkit.training import api

    with pytest.raises(PoolkitError, match="unknown embed setting 'batch_sise'. Did you mean 'batch_size'"):
        api.embed(["a text"], batch_sise=4)
    with pytest.raises(PoolkitError, match="unknown predict setting 'allow_incomplet'"):
        api.predict(tmp_path, ["a text"], allow_incomplet=True)
    with pytest.raises(PoolkitError, match="`batch_size` must be an int >= 1, got 0"):
        api.embed(["a text"], batch_size=0)


def test_library_messages_name_parameters_and_the_cli_shows_its_flags():
    # catches a mapping that misses a switch (force=True -> --force), an inverted switch (cache=False -> --no-cache),
    # a value flag, an alias chosen over the long name, or a name the command does not have left in backticks
    from poolkit.cli import build_parser, in_flags

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["compare"]
    message = ("`out` /x already holds a.csv: pass `force=True`; `cache=False` needs one process; `max_length` 512 "
               "is too many; `target_col` 'y'; `resume=True` means nothing here")
    assert in_flags(message, sub) == ("--out /x already holds a.csv: pass --force; --no-cache needs one process; "
                                      "--max-length 512 is too many; --target-col 'y'; resume=True means nothing "
                                      "here")
    assert in_flags("`encoder_lr` must be > 0", sub) == "--encoder-lr must be > 0"
    assert in_flags("`epochs=3`", sub) == "--epochs 3"
