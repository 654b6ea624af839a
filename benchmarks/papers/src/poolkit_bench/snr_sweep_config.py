"""The settings of ``poolkit bench snr-sweep`` (:mod:`.snr_sweep`): its config (stages, budgets, the base SNR
config), presets, result files and ``--extend``. Free of torch, so that the command's options are read without it."""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, option

from .snr_config import QUICK, SNRConfig, resolve_snr_name

PLOT = "budget_sweep.png"
RESULT_FILES = ("results.csv", "results.json", PLOT, "report.html")


def _budget(text: str) -> tuple[int, int]:
    samples, _, epochs = text.lower().partition("x")
    try:
        return int(samples), int(epochs)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget {text!r} is not SAMPLESxEPOCHS, e.g. 4000x8") from None


def _budgets(budgets) -> str:
    return " ".join(f"{s}x{e}" for s, e in budgets)


@dataclass(frozen=True)
class SweepConfig:
    """Every setting of a sweep. ``base`` holds the encoder, batch size, folds, seeds and execution; its
    ``num_samples``, ``epochs``, ``lr``, ``layers``, ``poolers``, ``ks`` and ``seeds`` are set per run.
    ``reference`` indexes the budget of stages 1 and 3 (None: the one closest to quick mode's)."""

    base: SNRConfig = option(QUICK, "", nested=("workers", "threads"))
    poolers: tuple[str, ...] = option(("mean", "max", "cls", "adapool", "attention", "latent"), "token poolers",
                                      metavar="NAME", names=True)
    ks: tuple[int, ...] = option((4, 16, 64), "neighbour counts", metavar="K")
    budgets: tuple[tuple[int, int], ...] = option(((1000, 2), (2000, 4), (4000, 8)), "training budgets",
                                                  metavar="SAMPLESxEPOCHS", parse=_budget, show=_budgets)
    reference: int | None = option(None, "index of the budget where the learning rate is chosen and depth is swept",
                                   none="the one closest to --quick's 4000x8")
    seeds: int = option(3, "runs per cell")
    largest_seeds: int = option(5, "runs per cell at the largest budget")
    lrs: tuple[float, ...] = option((3e-3, 1e-2), "Adam rates chosen from on validation rows", metavar="LR")
    lr_k: int = option(16, "K of the rate choice")
    depths: tuple[int, ...] = option((1, 2, 4), "encoder depths at the reference budget; none: no depth stage",
                                     metavar="LAYERS", empty=True)
    depth_poolers: tuple[str, ...] = option(("mean", "adapool"), "poolers of the depth stage", metavar="NAME",
                                            names=True)
    depth_k: int = option(16, "K of the depth stage")

    def validated(self) -> SweepConfig:
        """This sweep with pooler names resolved; bad values raise (every run's config is validated too)."""
        budgets = tuple((int(s), int(e)) for s, e in self.budgets)
        if not budgets or len(set(budgets)) != len(budgets):
            raise PoolkitError(f"budgets must be distinct (samples, epochs) pairs, got {list(self.budgets)!r}")
        reference = self.reference
        if reference is None:
            quick = QUICK.num_samples * QUICK.epochs
            reference = min(range(len(budgets)), key=lambda i: abs(math.log(budgets[i][0] * budgets[i][1] / quick)))
        if not 0 <= reference < len(budgets):
            raise PoolkitError(f"reference must index one of the {len(budgets)} budgets, got {reference!r}")
        if not self.lrs or any(not lr > 0 for lr in self.lrs):
            raise PoolkitError(f"lrs must be positive learning rates, got {list(self.lrs)!r}")
        if any(not isinstance(d, int) or d < 0 for d in self.depths):
            raise PoolkitError(f"depths must be layer counts >= 0, got {list(self.depths)!r}")
        poolers = tuple(dict.fromkeys(resolve_snr_name(p) for p in self.poolers))
        depth_poolers = tuple(dict.fromkeys(resolve_snr_name(p) for p in self.depth_poolers))
        if not set(depth_poolers) <= set(poolers) or (self.depths and not depth_poolers):
            raise PoolkitError(f"depth_poolers {list(depth_poolers)} must be some of the poolers {list(poolers)}")
        sweep = dataclasses.replace(self, poolers=poolers, depth_poolers=depth_poolers, budgets=budgets,
                                    reference=reference,
                                    base=dataclasses.replace(self.base, poolers=poolers, ks=tuple(self.ks)))
        for stage, config in sweep.configs({p: self.lrs[0] for p in poolers}):
            config.validated()
        for k in (self.lr_k, self.depth_k):
            dataclasses.replace(sweep.base, ks=(k,)).validated()
        return sweep

    def configs(self, lrs: dict[str, float]) -> list[tuple[str, SNRConfig]]:
        """(stage, one pooler's run config) of stages 2 and 3, each pooler at its rate ``lrs[pooler]``."""
        largest = max(self.budgets, key=lambda b: b[0] * b[1])
        out = []
        for samples, epochs in self.budgets:
            seeds = self.largest_seeds if (samples, epochs) == largest else self.seeds
            out += [("budget", self._config(p, lrs[p], samples, epochs, self.base.layers, self.ks, seeds))
                    for p in self.poolers]
        samples, epochs = self.budgets[self.reference]
        out += [("depth", self._config(p, lrs[p], samples, epochs, layers, (self.depth_k,), self.seeds))
                for layers in self.depths if layers != self.base.layers for p in self.depth_poolers]
        return out

    def lr_configs(self) -> list[tuple[str, SNRConfig]]:
        """(stage, config) of stage 1: every pooler at every rate, one run, the reference budget."""
        samples, epochs = self.budgets[self.reference]
        return [("lr", self._config(p, lr, samples, epochs, self.base.layers, (self.lr_k,), 1))
                for lr in self.lrs for p in self.poolers]

    def _config(self, pooler, lr, samples, epochs, layers, ks, seeds) -> SNRConfig:
        return dataclasses.replace(self.base, poolers=(pooler,), lr=lr, num_samples=samples, epochs=epochs,
                                   layers=layers, ks=tuple(ks), seeds=seeds)


#: The committed CPU sweep: 1/16, 1/4 and 1 times quick mode's budget, sized to the CPU time it was given
#: (its results.json has each run's CPU seconds).
CPU_SWEEP = SweepConfig()
PRESETS = Presets("default", {"default": Preset(CPU_SWEEP)})


def add_extra_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extend", metavar="DIR", help="add --budgets (for --poolers and --ks, default all) to the "
                        "sweep in DIR with its own protocol (its results.json), after re-running one of its runs to "
                        "check that it reproduces; no other option is taken")
