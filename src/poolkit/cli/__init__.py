"""The ``poolkit`` command: train, predict, embed, merge, compare, data, cache, bench, zoo. One small module per
command: each parses its arguments, calls the Python API (:mod:`poolkit.training.api`) and prints.

Bad input ends with ``error: <one line>`` and exit code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import PoolkitError

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Commands that need the [hf] extra as well as [cli] (they load models, or poolkit.training, which does).
NEEDS_HF = ("train", "predict", "embed", "merge", "compare", "cache", "zoo", "explain")


#: ``poolkit bench NAME``: (NAME, the module of poolkit.bench with add_<module>_arguments and run_<module>_command,
#: the help line).
BENCHMARKS = (
    ("snr", "snr", "noise robustness (SNR) of poolers, Brothers (ICML 2025)"),
    ("snr-sweep", "snr_sweep", "the SNR benchmark over training budgets, depths and seeds (learning rate chosen on "
     "validation rows)"),
    ("vision", "vision", "spatial poolers after a small CNN on Fashion-MNIST (FlexPooling, Ali et al. 2023)"),
    ("channel-spatial", "channel_spatial", "channel-spatial attention blocks in a small CNN on Fashion-MNIST "
     "(Liu & Jiang 2026)"),
    ("spurious", "spurious", "attention reweighting vs DFR on a spurious cue (Fashion-MNIST garments + stripes)"),
    ("mil", "mil", "poolers as MIL pooling on MUSK1/MUSK2/ELEPHANT bags (Ilse et al. 2018)"),
    ("sets", "sets", "zonotope vs stacked attention on synthetic set tasks; quadrature pooling"),
    ("task-arithmetic", "task_arithmetic", "merging task vectors of full vs attention-only fine-tuning on built-in "
     "text tasks (Jin et al. 2024)"),
)


def run_zoo(args: argparse.Namespace) -> int:
    from ..demo import main as zoo_main

    zoo_main()
    return 0


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``error: <message> (see <command> --help)``, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import cache, compare, data, embed, explain, merge, predict, train

    parser = Parser(prog="poolkit", description="Pooling that is correct under padding and dtypes: "
                    "fine-tune, predict and compare poolers on your own data.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in (("train", train), ("predict", predict), ("embed", embed), ("merge", merge),
                         ("compare", compare), ("explain", explain)):
        command = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(command)
        command.set_defaults(func=module.run)

    data_parser = sub.add_parser("data", help="built-in datasets")
    data_sub = data_parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="list the built-in datasets").set_defaults(func=data.run_list)
    cache.add_parser(sub)

    bench = sub.add_parser("bench", help="benchmarks that reproduce the research")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for name, module, what in BENCHMARKS:
        bench_module = importlib.import_module(f"..bench.{module}", __package__)
        command = bench_sub.add_parser(name, help=what)
        getattr(bench_module, f"add_{module}_arguments")(command)
        command.set_defaults(func=getattr(bench_module, f"run_{module}_command"))

    sub.add_parser("zoo", help="every pooler on the packaged MiniLM's hidden states: dims, params, time"
                   ).set_defaults(func=run_zoo)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ..extras import require

    try:
        require("cli")
    except PoolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        if args.command in NEEDS_HF:
            require("hf")
        return int(args.func(args) or 0)
    except PoolkitError as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
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
