"""The ``poolkit bench`` commands this distribution provides, found by the core CLI through the
``poolkit.benchmarks`` entry point (see :func:`poolkit.cli.bench_commands`)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from poolkit.cli.options import add_config_arguments


@dataclass(frozen=True)
class BenchCommand:
    """``poolkit bench NAME``: its help line and the module of this package that runs it (its
    ``run_<module>_command(args)``). Its settings are in ``<module>_config``, which imports no torch, so that the
    parser is built without it: ``PRESETS`` (:class:`~poolkit.settings.Presets`: the options come from their config's
    fields), ``RESULT_FILES`` and, for arguments of its own, ``add_extra_arguments(parser)``."""

    name: str
    module: str
    help: str

    def config_module(self) -> ModuleType:
        return importlib.import_module(f"{__package__}.{self.module}_config")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        settings = self.config_module()
        add_config_arguments(parser, settings.PRESETS)
        add_output_arguments(parser, settings.RESULT_FILES)
        if hasattr(settings, "add_extra_arguments"):
            settings.add_extra_arguments(parser)

    def run(self) -> Callable[[argparse.Namespace], int]:
        """The command's function; it loads the module that runs the benchmark (torch) when called."""
        return self._run

    def _run(self, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"{__package__}.{self.module}"), f"run_{self.module}_command")(args)


BENCHMARKS = (
    BenchCommand("snr", "snr", "noise robustness (SNR) of poolers, Brothers (ICML 2025)"),
    BenchCommand("snr-sweep", "snr_sweep", "the SNR benchmark over training budgets, depths and seeds (learning rate "
                 "chosen on validation rows)"),
    BenchCommand("vision", "vision", "spatial poolers after a small CNN on Fashion-MNIST (FlexPooling, Ali et al. "
                 "2023)"),
    BenchCommand("channel-spatial", "channel_spatial", "channel-spatial attention blocks in a small CNN on "
                 "Fashion-MNIST (Liu & Jiang 2026)"),
    BenchCommand("spurious", "spurious", "attention reweighting vs DFR on a spurious cue (Fashion-MNIST garments + "
                 "stripes)"),
    BenchCommand("mil", "mil", "poolers as MIL pooling on MUSK1/MUSK2/ELEPHANT bags (Ilse et al. 2018)"),
    BenchCommand("sets", "sets", "zonotope vs stacked attention on synthetic set tasks; quadrature pooling"),
    BenchCommand("operator", "neural_operator", "continuum attention vs a Fourier neural operator on 1-D Burgers, "
                 "trained at one resolution and tested at others (Calvello et al. 2024)"),
    BenchCommand("gated-mlp", "gated_mlp", "feed-forward variants of a small text transformer: GELU MLP, GLU, "
                 "bilinear, both factors activated, bilinear attention (Breslow 2026)"),
    BenchCommand("task-arithmetic", "task_arithmetic", "merging task vectors of full vs attention-only fine-tuning "
                 "on built-in text tasks (Jin et al. 2024)"),
)


def add_output_arguments(parser: argparse.ArgumentParser, result_files: tuple[str, ...]) -> None:
    """--out DIR (naming the files the run writes there), --force and --no-progress."""
    parser.add_argument("--out", metavar="DIR", help=f"write {', '.join(result_files)} here")
    parser.add_argument("--force", action="store_true", help="overwrite existing results in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def command(name: str) -> BenchCommand:
    """The command called ``name``."""
    return next(bench for bench in BENCHMARKS if bench.name == name)


def parser_for(name: str) -> argparse.ArgumentParser:
    """The argument parser of ``poolkit bench NAME`` alone (for tests and scripts)."""
    parser = argparse.ArgumentParser(prog=f"poolkit bench {name}")
    command(name).add_arguments(parser)
    return parser
