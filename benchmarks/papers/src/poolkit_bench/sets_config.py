"""The settings of ``poolkit bench sets`` (:mod:`.sets`): its config, presets, result files, and the names of its
tasks and models. Free of torch, so that the command's options are read without it."""

from __future__ import annotations

from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

TASKS = ("statistics", "typed", "pairs")
#: model name -> (kind, depth = attention layers: set layers + an attention pooler)
MODELS = {"attention x1": ("attention", 1), "attention x2": ("attention", 2), "attention x3": ("attention", 3),
          "zonotope x1": ("zonotope", 1), "zonotope x2": ("zonotope", 2), "set_transformer": ("set_transformer", 2),
          "deepsets": ("deepsets", 0)}
RESULT_FILES = ("results.csv", "results.json", "error_vs_params.png", "quadrature.png", "report.html")


@dataclass(frozen=True)
class SetsConfig:
    """Every setting of a run; the defaults are the committed CPU-sized run, :data:`QUICK` a smoke test."""

    tasks: tuple[str, ...] = option(TASKS, "tasks to run", choices=TASKS)
    models: tuple[str, ...] = tuple(MODELS)
    train: int = option(2000, "training sets")
    val: int = 500
    test: int = 1000
    min_size: int = 8
    max_size: int = 32
    features: int = 4
    types: int = 4
    pair_types: int = 16
    width: int = option(32, "model width")
    generators: int = option(4, "zonotope generators K")
    epochs: int = option(40, "epochs per run")
    batch_size: int = 64
    lr: float = 3e-3
    seeds: int = option(3, "seeds per (task, model)")
    #: test sets whose elements the TDOF is measured on (a few thousand elements; the rank is at most K + 1)
    tdof_sets: int = 200
    data_seed: int = 0
    seed: int = 1
    #: one: these small ops ran 3-6x slower on two threads when other jobs shared the 2 cores (OpenMP spinning)
    threads: int | None = option(1, "torch threads", none="torch's default")
    quadrature_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
    preset: str = "default"

    def validated(self) -> SetsConfig:
        check_counts(self, ("train", "val", "test", "min_size", "max_size", "features", "types", "pair_types",
                            "width", "epochs", "batch_size", "seeds", "tdof_sets"))
        if self.min_size > self.max_size:
            raise PoolkitError(f"min_size {self.min_size} is larger than max_size {self.max_size}")
        for what, given, known in (("task", self.tasks, TASKS), ("model", self.models, tuple(MODELS))):
            unknown = [g for g in given if g not in known]
            if unknown or not given:
                raise PoolkitError(f"unknown {what}s {unknown or given}: choose from {', '.join(known)}")
        if not self.lr > 0:
            raise PoolkitError(f"lr must be positive, got {self.lr!r}")
        return self


DEFAULT = SetsConfig()
QUICK = SetsConfig(train=48, val=16, test=16, min_size=4, max_size=8, width=8, epochs=2, seeds=1, batch_size=16,
                   quadrature_sizes=(8, 16, 32), preset="quick")
PRESETS = Presets("default", {"default": Preset(DEFAULT),
                              "quick": Preset(QUICK, "a smoke test: tiny sets, 2 epochs, 1 seed")})
