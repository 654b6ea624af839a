"""The settings of ``poolkit bench mil`` (:mod:`.mil`): its config, presets, result files, ``--extend`` and the names
of the datasets (:mod:`.mil_data` reads them). Free of torch, so that the command's options are read without it: the
pooler registry is imported where a config is validated."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

#: name -> CSV file in mil/data/datasets/csv (all eight the package bundles).
DATASETS = {"musk1": "musk1.csv", "musk2": "musk2.csv", "elephant": "elephant.csv",
            "birds_brown_creeper": "birds_brown_creeper.csv", "corel_dogs": "corel_dogs.csv", "protein": "protein.csv",
            "ucsb_breast_cancer": "ucsb_breast_cancer.csv", "web_recommendation_1": "web_recommendation_1.csv"}
#: The token poolers of the issue, and the scorer ablation on gated_attention (the same width and init as its
#: default abmil scorer, so that only the scoring function differs).
DEFAULT_POOLERS = ("mean", "max", "gem", "lse", "attention", "gated_attention", "multihead_attention", "latent",
                   "adapool", "zonotope_attention", "gated_attention:scorer=glu", "gated_attention:scorer=bilinear")
RESULT_FILES = ("results.csv", "results.json", "accuracy.png", "report.html")


@dataclass(frozen=True)
class MILConfig:
    """Every setting of a run. The defaults are the CPU-sized default; :data:`FULL` and :data:`QUICK` the others."""

    datasets: tuple[str, ...] = option(("musk1", "musk2", "elephant"), f"datasets (known: {', '.join(DATASETS)})",
                                       metavar="NAME", names=True)
    poolers: tuple[str, ...] = option(DEFAULT_POOLERS, "poolers, options as gated_attention:scorer=glu",
                                      metavar="NAME[:KEY=VALUE]", names=True)
    folds: int = option(10, "outer cross-validation folds")
    repeats: int = option(1, "repetitions of the cross-validation (new split each)")
    lrs: tuple[float, ...] = option((5e-4, 2e-3), "learning-rate grid", metavar="LR")
    weight_decay: float = option(5e-3, "Adam L2 decay")
    epochs: int = option(30, "most epochs (the number is chosen on inner splits)")
    eval_every: int = option(10, "epochs between inner-validation checkpoints")
    batch_size: int = option(8, "bags per minibatch")
    inner_splits: int = option(1, "inner stratified hold-outs of each training fold")
    inner_fraction: float = 0.25
    widths: tuple[int, ...] = (256, 128)
    seed: int = option(0, "seed of the splits and weights")
    workers: int = option(2, "CPU processes running folds in parallel")
    threads: int = option(1, "torch threads per worker")
    preset: str = "default"

    def validated(self) -> MILConfig:
        """This config with the pooler labels checked (``NAME`` or ``NAME:KEY=VALUE[:KEY=VALUE]``); bad values raise."""
        from poolkit.cli.common import pooler_from_label
        from poolkit.pooling.spec import pooler_class

        check_counts(self, ("folds", "repeats", "epochs", "eval_every", "batch_size", "inner_splits", "workers",
                            "threads"))
        if self.folds < 2:
            raise PoolkitError(f"folds must be at least 2, got {self.folds}")
        unknown = [d for d in self.datasets if d not in DATASETS]
        if not self.datasets or unknown:
            raise PoolkitError(f"datasets must be among {', '.join(DATASETS)}, got {list(self.datasets)!r}")
        if not self.lrs or not all(lr > 0 for lr in self.lrs) or not self.weight_decay >= 0:
            raise PoolkitError(f"lrs must be > 0 and weight_decay >= 0, got {list(self.lrs)!r}, {self.weight_decay!r}")
        if not 0 < self.inner_fraction < 1:
            raise PoolkitError(f"inner_fraction must be in (0, 1), got {self.inner_fraction!r}")
        if not self.widths or any(not isinstance(w, int) or w < 1 for w in self.widths):
            raise PoolkitError(f"widths must be positive ints, got {list(self.widths)!r}")
        if not self.poolers or len(set(self.poolers)) != len(self.poolers):
            raise PoolkitError(f"poolers must be distinct and at least one, got {list(self.poolers)!r}")
        for label in self.poolers:
            if pooler_class(pooler_from_label(label)["name"]).kind != "token":
                raise PoolkitError(f"pooler {label!r} pools over layers; MIL needs a pooler of set elements")
        return dataclasses.replace(self, datasets=tuple(self.datasets), poolers=tuple(self.poolers),
                                   lrs=tuple(self.lrs), widths=tuple(self.widths))


DEFAULT = MILConfig()
#: The paper's protocol size: 10-fold cross-validation repeated 5 times.
FULL = MILConfig(repeats=5, preset="full")
#: MUSK1, 3 folds, 3 poolers, a few epochs: seconds.
QUICK = MILConfig(datasets=("musk1",), poolers=("mean", "gated_attention", "gated_attention:scorer=glu"), folds=3,
                  lrs=(2e-3,), epochs=4, eval_every=2, workers=1, preset="quick")
PRESETS = Presets("default", {
    "default": Preset(DEFAULT),
    "quick": Preset(QUICK, "MUSK1, 3 folds, 3 poolers, 4 epochs, 1 worker (seconds)"),
    "full": Preset(FULL, "the paper's 10-fold cross-validation repeated 5 times")})


def add_extra_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--extend", metavar="DIR", help="add --poolers to the run in DIR with its own protocol (its "
                        "results.json), re-running one fold of each earlier pooler to check that it reproduces")
