"""The ``poolkit`` command: train, predict, embed, compare, data, cache, bench, zoo. One small module per command: each
parses its arguments, calls the Python API (:mod:`poolkit.training.api`) and prints.

Bad input ends with ``error: <one line>`` and exit code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import PoolkitError

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Commands that need the [hf] extra as well as [cli] (they load models, or poolkit.training, which does).
NEEDS_HF = ("train", "predict", "embed", "compare", "cache", "zoo", "explain")


def run_zoo(args: argparse.Namespace) -> int:
    from ..demo import main as zoo_main

    zoo_main()
    return 0


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``error: <message> (see <command> --help)``, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from ..bench.channel_spatial import add_channel_spatial_arguments, run_channel_spatial_command
    from ..bench.snr import add_snr_arguments, run_snr_command
    from ..bench.spurious import add_spurious_arguments, run_spurious_command
    from ..bench.vision import add_vision_arguments, run_vision_command
    from . import cache, compare, data, embed, explain, predict, train

    parser = Parser(prog="poolkit", description="Pooling that is correct under padding and dtypes: "
                    "fine-tune, predict and compare poolers on your own data.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in (("train", train), ("predict", predict), ("embed", embed), ("compare", compare),
                         ("explain", explain)):
        command = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(command)
        command.set_defaults(func=module.run)

    data_parser = sub.add_parser("data", help="built-in datasets")
    data_sub = data_parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="list the built-in datasets").set_defaults(func=data.run_list)
    cache.add_parser(sub)

    bench = sub.add_parser("bench", help="benchmarks that reproduce the research")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    snr = bench_sub.add_parser("snr", help="noise robustness (SNR) of poolers, Brothers (ICML 2025)")
    add_snr_arguments(snr)
    snr.set_defaults(func=run_snr_command)
    vision = bench_sub.add_parser("vision", help="spatial poolers after a small CNN on Fashion-MNIST (FlexPooling, "
                                  "Ali et al. 2023)")
    add_vision_arguments(vision)
    vision.set_defaults(func=run_vision_command)
    channel_spatial = bench_sub.add_parser("channel-spatial", help="channel-spatial attention blocks in a small CNN on "
                                           "Fashion-MNIST (Liu & Jiang 2026)")
    add_channel_spatial_arguments(channel_spatial)
    channel_spatial.set_defaults(func=run_channel_spatial_command)
    spurious = bench_sub.add_parser("spurious", help="attention reweighting vs DFR on a spurious cue (Fashion-MNIST "
                                    "garments + stripes)")
    add_spurious_arguments(spurious)
    spurious.set_defaults(func=run_spurious_command)
    from ..bench.mil import add_mil_arguments, run_mil_command

    mil = bench_sub.add_parser("mil", help="poolers as MIL pooling on MUSK1/MUSK2/ELEPHANT bags (Ilse et al. 2018)")
    add_mil_arguments(mil)
    mil.set_defaults(func=run_mil_command)
    from ..bench.sets import add_sets_arguments, run_sets_command

    sets = bench_sub.add_parser("sets", help="zonotope vs stacked attention on synthetic set tasks; quadrature pooling")
    add_sets_arguments(sets)
    sets.set_defaults(func=run_sets_command)

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
