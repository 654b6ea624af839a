"""Argument helpers shared by the commands: data and text inputs, pooler specs, output tables."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ..tasks import EMBEDDING_TASKS as PAIR_TASKS
from ..errors import PoolkitError

#: --pooler / --poolers auto: the pooling the model folder declares (poolkit.models.declared.AUTO; a literal
#: here, so that building the parsers imports no torch)
AUTO = "auto"

POOLER_OPT_HELP = ("pooler option KEY=VALUE (VALUE read as JSON when it parses), repeatable; with several poolers it "
                   "applies to every one that has KEY, and POOLER:KEY=VALUE to that pooler only")


def positive(kind: type):
    """An argparse type: a finite number > 0 (``nan`` and ``inf`` refused)."""
    def parse(text: str):
        value = kind(text)
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names it in "invalid int value: 'x'"
    return parse


class Renamed(argparse.Action):
    """A removed flag: fails naming its replacement (hidden from --help)."""

    def __init__(self, option_strings, dest, use: str, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)
        self.use = use

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed: use {self.use}")


def split_names(tokens: list[str]) -> list[str]:
    """``["mean,max", "attention"]`` -> ["mean", "max", "attention"]: --poolers takes commas and/or spaces."""
    return [name for token in tokens for name in token.replace(",", " ").split()]


def parse_options(pairs: list[str] | None) -> list[tuple[str | None, str, Any]]:
    """``["attn_size=256", "weighted_layer:token_pooler=mean"]`` -> [(None, "attn_size", 256),
    ("weighted_layer", "token_pooler", "mean")]: (pooler or None, key, JSON value or the text)."""
    parsed = []
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        target, _, key = key.strip().rpartition(":")
        if not sep or not key:
            raise PoolkitError(f"--pooler-opt takes [POOLER:]KEY=VALUE, got {pair!r} (e.g. --pooler-opt attn_size=256)")
        parsed.append((target or None, key, option_value(value)))
    return parsed


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
    from ..pooling import pooler_spec

    return pooler_spec(name, **options)


def option_value(text: str) -> Any:
    """An option's value as typed on a command line: JSON where it parses (256, 0.5, true, [1, 2]), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def single_pooler_spec(name: str, pairs: list[str] | None) -> dict[str, Any] | str:
    """The one pooler of --pooler (train, embed) with its --pooler-opt options (``auto``: as it is)."""
    names = split_names([name])
    if len(names) != 1 or names[0] in ("default", "all"):
        raise PoolkitError(f"--pooler takes one pooler name, got {name!r}: compare several with "
                           "`poolkit compare --poolers`")
    return pooler_specs(names, pairs)[0]


def encoder_pooler(args: argparse.Namespace) -> str | dict[str, Any] | None:
    """The pooler of embed / evaluate: None (the model's own or declared pooling, else mean), ``auto`` (the
    declared pooling), or the --pooler spec with its --pooler-opt options."""
    if args.pooler == AUTO:
        if args.pooler_opt:
            raise PoolkitError("--pooler auto is the pooling the model folder declares: it takes no --pooler-opt")
        return AUTO
    return single_pooler_spec(args.pooler or "mean", args.pooler_opt) if args.pooler or args.pooler_opt else None


def pooler_specs(poolers: list[str], pairs: list[str] | None) -> list[dict[str, Any] | str]:
    """Specs from --poolers / --pooler names (commas and/or spaces, 'default', 'all', NAME:KEY=VALUE for a pooler
    with options, e.g. attention:scorer=glu) and --pooler-opt options; ``auto`` (the pooling the model folder
    declares, resolved by compare / train once the model is known) stays as it is and takes no options."""
    from ..pooling import pooler_options, pooler_spec
    from ..pooling.spec import resolve_name
    from ..training.api import resolve_poolers

    names = split_names(poolers)
    named = [n for n in names if n != AUTO]
    specs = resolve_poolers([pooler_from_label(n) if ":" in n else n for n in named]) if named else []
    for target, key, value in parse_options(pairs):
        if target is not None:
            name = resolve_name(target)
            chosen = [i for i, s in enumerate(specs) if s["name"] == name]
            if not chosen:
                raise PoolkitError(f"--pooler-opt {target}:{key}: {name} is not one of the poolers given "
                                   f"({', '.join(s['name'] for s in specs)}); name it in --pooler / --poolers")
        else:  # every pooler that has the option; when none has it, all (so the error names the known options)
            if not specs:
                raise PoolkitError("--pooler auto is the pooling the model folder declares: it takes no --pooler-opt")
            chosen = [i for i, s in enumerate(specs) if key in pooler_options(s["name"])] or range(len(specs))
        for i in chosen:
            specs[i] = pooler_spec(specs[i], **{key: value})
    return ([AUTO] if AUTO in names else []) + specs


def add_pooler_arguments(parser: argparse.ArgumentParser, default: str | None) -> None:
    """--pooler NAME (alias --pooling) and --pooler-opt (alias --pooling-opt) of train and embed."""
    parser.add_argument("--pooler", "--pooling", dest="pooler", default=default,
                        help="pooler name (see `poolkit zoo`), or auto: what a sentence-transformers folder declares "
                             f"(default: {default or 'a trained model’s own pooler, else auto, else mean'})")
    parser.add_argument("--pooler-opt", "--pooling-opt", dest="pooler_opt", action="append", metavar="KEY=VALUE",
                        help="an option of the --pooler, KEY=VALUE (VALUE read as JSON when it parses), repeatable "
                             "(e.g. attn_size=256; a layer pooler's token_pooler=mean)")


def add_trust_remote_code_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run Python code shipped in a model folder (its auto_map classes); without it such "
                        "folders are refused")


def add_data_arguments(parser: argparse.ArgumentParser, pairs: bool = False) -> None:
    """--data, --text-col, --target-col, --task, --limit of the commands that learn (train, compare); ``pairs``: also
    the embedding tasks (retrieval, similarity) and their --pair-col, --negative-col, --corpus."""
    group = parser.add_argument_group("data")
    group.add_argument("--data", help="CSV/TSV/JSONL/Parquet file, or builtin:NAME (see `poolkit data list`)")
    group.add_argument("--text-col", default="text", help="column holding the texts" + (
        "; retrieval: the query" if pairs else "") + " (default: text)")
    group.add_argument("--target-col", "--target", dest="target_col", nargs="+", metavar="COL",
                       help="target column(s); several = multi-target regression (default: label" + (
                           "; similarity: score" if pairs else "") + ")")
    tasks = ["regression", "classification", "multilabel"] + (list(PAIR_TASKS) if pairs else [])
    group.add_argument("--task", choices=tasks, help="default: inferred from the target column(s)" + (
        "; retrieval and similarity read a table of pairs" if pairs else ""))
    if pairs:
        group.add_argument("--pair-col", default="pair", help="retrieval: the relevant document; similarity: the "
                           "second text (default: pair)")
        group.add_argument("--negative-col", help="retrieval: a hard negative document per row (joins the corpus)")
        group.add_argument("--corpus", help="retrieval: a table of more documents, in a column named as --pair-col")
    group.add_argument("--limit", type=int, help="use a stratified sample of this many rows" + (
        " (pairs: a random sample)" if pairs else ""))


def data_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {name: getattr(args, name) for name in ("pair_col", "negative_col", "corpus") if hasattr(args, name)}
    target = args.target_col or (None if pairs else ["label"])  # compare's default depends on the task
    return {"text_col": args.text_col, "target_col": target, "task": args.task, "limit": args.limit, **pairs}


def add_text_input_arguments(parser: argparse.ArgumentParser) -> None:
    """--data and --text-col of the commands that read texts only (predict, embed)."""
    parser.add_argument("--data", required=True, help="CSV/TSV/JSONL/Parquet file with a text column, or builtin:NAME")
    parser.add_argument("--text-col", default="text", help="column holding the texts (default: text)")


def said(args: argparse.Namespace):
    """A ``report`` callable for the library: each line printed in the command's terms (its flags), by the first
    process of a launch only."""
    from ..training.processes import process_rank
    from . import in_flags

    if process_rank()[0]:
        return lambda line: None
    return lambda line: print(in_flags(line, getattr(args, "command_parser", None)), flush=True)
