"""The ``poolkit`` command: train, predict, embed, evaluate, merge, compare, explain, export-onnx, data, cache, bench,
zoo. One small module per command: each parses its arguments, calls the Python API (:mod:`poolkit.training.api`)
and prints.

Bad input ends with ``error: <one line>`` and exit code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..errors import PoolkitError

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Commands that need the [hf] extra as well as [cli] (they load models, or poolkit.training, which does).
NEEDS_HF = ("train", "predict", "embed", "evaluate", "merge", "compare", "cache", "zoo", "explain", "export-onnx")


#: The entry-point group through which installed distributions add ``poolkit bench`` commands: each entry point
#: names a sequence of objects with ``name``, ``help``, ``add_arguments(parser)`` and ``run()`` (the command's
#: function). The paper benchmarks are one such distribution, ``poolkit-bench`` (benchmarks/papers in the repository).
BENCHMARK_GROUP = "poolkit.benchmarks"
BENCH_MISSING = ("the paper benchmarks are a distribution of their own: pip install -e benchmarks/papers from a "
                 "poolkit checkout (make install does it)")


def bench_commands() -> list:
    """The ``poolkit bench`` commands of every installed distribution, in the order each declares them."""
    from importlib.metadata import entry_points

    return [command for point in entry_points(group=BENCHMARK_GROUP) for command in point.load()]


def run_bench_missing(args: argparse.Namespace) -> int:
    raise PoolkitError(BENCH_MISSING)


def run_zoo(args: argparse.Namespace) -> int:
    from ..demo import main as zoo_main

    zoo_main()
    return 0


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``error: <message> (see <command> --help)``, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line. Given the ``argv`` it will parse, a ``bench`` command's options (another
    distribution's, which may import torch for them) are read only when ``argv`` names that benchmark:
    ``poolkit --help``, ``poolkit bench --help`` and every other command's parser import neither torch nor
    transformers."""
    from . import cache, compare, data, embed, evaluate, explain, export_onnx, merge, predict, train

    parser = Parser(prog="poolkit", description="Pooling that is correct under padding and dtypes: "
                    "fine-tune, predict and compare poolers on your own data.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in (("train", train), ("predict", predict), ("embed", embed), ("evaluate", evaluate),
                         ("merge", merge), ("compare", compare), ("explain", explain), ("export-onnx", export_onnx)):
        command = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(command)
        command.set_defaults(func=module.run, command_parser=command)

    data_parser = sub.add_parser("data", help="built-in datasets")
    data_sub = data_parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="list the built-in datasets").set_defaults(func=data.run_list)
    cache.add_parser(sub)

    bench = sub.add_parser("bench", help="benchmarks that reproduce the research (the poolkit-bench distribution)")
    words = [arg for arg in argv if not arg.startswith("-")] if argv is not None else None
    asked = "bench" if words is None else next(iter(words), None)
    commands = bench_commands() if asked == "bench" else []
    if commands:
        bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
        chosen = words[1] if words and len(words) > 1 else None
        for benchmark in commands:
            command = bench_sub.add_parser(benchmark.name, help=benchmark.help)
            if words is None or benchmark.name == chosen:  # only then its options: `bench --help` lists them
                benchmark.add_arguments(command)
                command.set_defaults(func=benchmark.run(), command_parser=command)
    elif asked == "bench":
        bench.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        bench.set_defaults(func=run_bench_missing)

    sub.add_parser("zoo", help="every pooler on the packaged MiniLM's hidden states: dims, params, time"
                   ).set_defaults(func=run_zoo)
    return parser


#: How the library names a parameter in its messages: `name` or `name=value` (poolkit.errors).
PARAMETER = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)(?:=([^`]*))?`")


def in_flags(message: str, parser: argparse.ArgumentParser | None) -> str:
    """A library message in the command's own terms: each `name` / `name=value` that is an option of ``parser``
    becomes its flag (a switch alone, ``--no-x`` for ``x=False``; a value after its flag), any other loses its
    backticks."""
    options = {action.dest: action for action in (parser._actions if parser is not None else [])
               if action.option_strings}

    def flag(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        action = options.get(name)
        if action is None:
            return match.group(0)[1:-1]
        long = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
        if action.nargs == 0:  # a switch: store_true / store_false / store_const
            return long
        return long if value is None else f"{long} {value.strip(chr(39) + chr(34))}"
    return PARAMETER.sub(flag, message)


def main(argv: list[str] | None = None) -> int:
    # torch's OpenMP threads sleep as soon as they wait, instead of spinning first: beside other busy processes a
    # spinning thread holds a core that the thread it waits for needs (measured on embed's torch backend:
    # benchmarks/perf_wait_policy.py, docs/performance.md section 5). OpenMP reads it when it loads, at ``import
    # torch``, which nothing before this line does; a policy the user set stays.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from ..extras import require

    try:
        require("cli")
    except PoolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    try:
        if args.command in NEEDS_HF:
            require("hf")
            from ..models.encoders import hf_bars_off
            from ..training.processes import check_launch

            check_launch()
            with hf_bars_off():  # transformers' own bars (loading weights, writing shards) off: poolkit's show the run
                return int(args.func(args) or 0)
        return int(args.func(args) or 0)
    except PoolkitError as err:
        if args.debug:
            raise
        print(f"error: {in_flags(str(err), getattr(args, 'command_parser', None))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # anything unexpected: one line, the traceback with --debug
        if args.debug:
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(f"error: {type(err).__name__}: {first} (run with --debug for the traceback)", file=sys.stderr)
        return 1
