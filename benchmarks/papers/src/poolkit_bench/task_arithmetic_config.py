"""The settings of ``poolkit bench task-arithmetic`` (:mod:`.task_arithmetic`): its config, presets, result files and
fine-tuning modes. Free of torch, so that the command's options are read without it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import check_execution

#: mode -> (train_only, whether the pooler + head are trained first on the frozen encoder and then fixed, whether
#: the encoder is linearised at the base)
MODES = {"all": ("all", False, False), "attention": ("attention", False, False),
         "attention_frozen_head": ("attention", True, False), "linearized": ("all", False, True)}
RESULT_FILES = ("results.csv", "results.json", "task_arithmetic.png")


@dataclass(frozen=True)
class TaskArithmeticConfig:
    """Every setting of a run; the defaults are the CPU-sized default, :data:`QUICK` and :data:`FULL` the others."""

    tasks: tuple[str, ...] = option(("builtin:wordnet-supersense", "builtin:wordnet-depth", "builtin:fortunes"),
                                    "built-in sets or files (text + label columns), one task each", metavar="DATA")
    #: rows drawn (stratified, ``data_seed``) from each task's table; 64% are fit on, 16% choose the checkpoint and
    #: alpha, 20% are the test rows
    rows: int = option(800, "rows drawn from each task")
    modes: tuple[str, ...] = option(tuple(MODES), "fine-tuning modes", choices=tuple(MODES))
    seeds: int = option(3, "runs per mode")
    seed: int = option(0, "seed of run 0 (run i uses seed + i)")
    data_seed: int = 0
    epochs: int = option(1, "fine-tuning epochs")
    batch_size: int = option(16, "fine-tuning batch")
    max_length: int = option(64, "token limit")
    encoder_lr: float = option(2e-4, "encoder learning rate")
    pooler_lr: float = option(1e-2, "pooler + head learning rate")
    #: epochs of the pooler + head on the frozen encoder before an ``attention_frozen_head`` run
    head_epochs: int = option(2, "head epochs on the frozen encoder (attention_frozen_head)")
    grid: tuple[float, ...] = option((0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0), "alphas searched on validation rows",
                                     metavar="ALPHA")
    #: the base encoder (default: the packaged all-MiniLM-L6-v2)
    model: str | None = option(None, "base encoder", none="packaged all-MiniLM-L6-v2")
    threads: int | None = option(2, "torch threads", none="torch's default")
    preset: str = "default"

    def validated(self) -> TaskArithmeticConfig:
        """This config with tuples for lists; bad values raise :class:`PoolkitError` naming the setting."""
        check_counts(self, ("rows", "seeds", "epochs", "batch_size", "max_length", "head_epochs"))
        if len(self.tasks) < 2:
            raise PoolkitError(f"task arithmetic merges at least 2 tasks, got {list(self.tasks)!r}")
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise PoolkitError(f"unknown mode(s) {unknown or list(self.modes)}: use some of {', '.join(MODES)}")
        if not self.grid or any(not a > 0 for a in self.grid) or not self.encoder_lr > 0 or not self.pooler_lr > 0:
            raise PoolkitError(f"grid, encoder_lr and pooler_lr must be positive; got {list(self.grid)!r}, "
                               f"{self.encoder_lr!r}, {self.pooler_lr!r}")
        check_execution(threads=self.threads)
        return dataclasses.replace(self, tasks=tuple(self.tasks), modes=tuple(self.modes), grid=tuple(self.grid))


DEFAULT = TaskArithmeticConfig()
#: More rows, two epochs, longer texts, five seeds and a finer alpha grid: sized for a GPU.
FULL = TaskArithmeticConfig(rows=5000, seeds=5, epochs=2, batch_size=32, max_length=128, encoder_lr=1e-4,
                            head_epochs=3, grid=tuple(round(0.05 * i, 2) for i in range(1, 21)), threads=None,
                            preset="full")
#: A few minutes on 2 cores: too small for the comparison to mean much.
QUICK = TaskArithmeticConfig(rows=120, seeds=2, grid=(0.5, 1.0), preset="quick")
PRESETS = Presets("default", {
    "default": Preset(DEFAULT),
    "quick": Preset(QUICK, "120 rows per task, 2 seeds, 2 alphas: a few minutes on 2 cores"),
    "full": Preset(FULL, "5,000 rows per task, 2 epochs, length 128, 5 seeds, alphas 0.05 ... 1: for a GPU")})
