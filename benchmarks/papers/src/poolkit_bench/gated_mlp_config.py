"""The settings of ``poolkit bench gated-mlp`` (:mod:`.gated_mlp`): its config, presets, result files and the names of
the feed-forward variants (:mod:`.gated_mlp_model` builds them). Free of torch, so that the command's options are read
without it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import Execution

#: The feed-forward variants (:mod:`.gated_mlp_model` builds each).
FFNS = ("gelu_mlp", "glu", "bilinear", "both", "bilinear_attention")
RESULT_FILES = ("results.csv", "results.json", "gated_mlp.png", "report.html")


@dataclass(frozen=True)
class GatedMLPConfig(Execution):
    """Every setting of a run; the defaults are the committed CPU-sized run, :data:`QUICK` a smoke test."""

    data: str = option("builtin:wordnet-supersense", "a built-in classification set or a file (text + label "
                       "columns)", metavar="DATA")
    rows: int = option(16000, "rows drawn (stratified) from the table")
    ffns: tuple[str, ...] = option(FFNS, "feed-forward variants", choices=FFNS)
    dim: int = option(64, "model width")
    heads: int = option(4, "attention heads")
    layers: int = option(2, "transformer blocks")
    mlp_hidden: int = option(256, "the MLP's hidden units (the gated forms get 2/3 as many: matched parameters)")
    max_length: int = option(48, "token limit")
    min_count: int = option(2, "fit-row occurrences a token needs to keep its own id")
    dropout: float = 0.1
    epochs: int = option(12, "epochs per run")
    batch_size: int = option(64, "minibatch size")
    lr: float = option(1e-3, "AdamW learning rate")
    weight_decay: float = option(0.01, "AdamW weight decay")
    seeds: int = option(3, "runs per variant")
    seed: int = option(0, "seed of run 0 (run i uses seed + i)")
    data_seed: int = option(0, "seed of the row draw and the split")
    preset: str = "default"

    def validated(self) -> GatedMLPConfig:
        """This config with tuples for lists; bad values raise :class:`PoolkitError` naming the setting."""
        check_counts(self, ("rows", "dim", "heads", "layers", "mlp_hidden", "max_length", "min_count", "epochs",
                            "batch_size", "seeds"))
        self.check_execution()
        unknown = [f for f in self.ffns if f not in FFNS]
        if unknown or not self.ffns or len(set(self.ffns)) != len(self.ffns):
            raise PoolkitError(f"ffns must be distinct names among {', '.join(FFNS)}, got {list(self.ffns)!r}")
        if self.dim % self.heads:
            raise PoolkitError(f"dim {self.dim} must be a multiple of heads {self.heads}")
        if not self.lr > 0 or not 0 <= self.dropout < 1 or self.weight_decay < 0:
            raise PoolkitError(f"lr must be > 0, dropout in [0, 1) and weight_decay >= 0; got {self.lr!r}, "
                               f"{self.dropout!r}, {self.weight_decay!r}")
        return dataclasses.replace(self, ffns=tuple(self.ffns))


DEFAULT = GatedMLPConfig()
QUICK = GatedMLPConfig(data="builtin:embedded", rows=600, dim=16, heads=2, layers=1, mlp_hidden=24, max_length=24,
                       epochs=2, seeds=2, workers=1, preset="quick")
PRESETS = Presets("default", {"default": Preset(DEFAULT),
                              "quick": Preset(QUICK, "600 embedded glosses, a 1-block model, 2 epochs, 2 seeds")})
