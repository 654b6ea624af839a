"""The settings of ``poolkit bench spurious`` (:mod:`.spurious`): its config, presets and result files, and the kinds
of cue (:mod:`.spurious_data` draws them). Free of torch, so that the command's options are read without it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import check_execution

#: Each kind of cue: the names of cue 0 and cue 1.
CUES = {"stripes": ("horizontal stripes", "vertical stripes"), "colour": ("red patch", "green patch")}
RESULT_FILES = ("results.csv", "results.json", "accuracy.png", "attention.png", "report.html")


@dataclass(frozen=True)
class SpuriousConfig:
    """Every setting of a run; the defaults are the CPU-sized default, :data:`QUICK` and :data:`FULL` the others."""

    agreements: tuple[float, ...] = option((0.95, 0.99), "training P(cue agrees with the label), one run set each",
                                           metavar="P")
    train_per_label: int = option(800, "training images of each core label")
    val_per_label: int = option(250, "validation images of each label (ERM's epoch)")
    reweight_per_group: int = option(100, "reweighting images of each of the four groups")
    test_per_group: int = option(500, "test images of each group")
    canvas: int = 56
    patch: int = 14
    cue: str = option("stripes", "the spurious cue: stripes (horizontal or vertical, grey canvas) or colour (a red or "
                      "green patch beside a grey garment, RGB canvas)", choices=tuple(CUES))
    widths: tuple[int, ...] = option((16, 32, 64), "channels per conv stage", metavar="C")
    epochs: int = option(8, "ERM epochs")
    batch_size: int = 64
    lr: float = 5e-3
    weight_decay: float = 0.05
    #: DFR's grid of inverse L1 strengths (its code's C_OPTIONS), its retrains, and the share of the smallest group
    #: each retrain draws per group (our reweighting set is balanced, so a full draw would repeat one fit).
    dfr_cs: tuple[float, ...] = (1.0, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01)
    dfr_retrains: int = option(20, "DFR fits averaged")
    dfr_subsample: float = 0.8
    head_epochs: int = option(20, "epochs of each retrained pooler + head")
    head_batch_size: int = 32
    head_lrs: tuple[float, ...] = (1e-3, 1e-2)
    head_weight_decays: tuple[float, ...] = (0.01, 0.3)
    seeds: int = option(3, "runs per agreement")
    data_seed: int = option(0, "seed of the generated images")
    seed: int = option(1, "seed of run 0 (run i uses seed + i)")
    threads: int | None = option(2, "torch threads", none="torch's default")
    root: str | None = option(None, "folder of the Fashion-MNIST files")
    preset: str = "default"

    def validated(self) -> SpuriousConfig:
        """This config with tuples for lists; bad values raise :class:`PoolkitError` naming the setting."""
        check_counts(self, ("train_per_label", "val_per_label", "reweight_per_group", "test_per_group", "epochs",
                            "batch_size", "dfr_retrains", "head_epochs", "head_batch_size", "seeds"))
        if self.reweight_per_group < 2:
            raise PoolkitError("reweight_per_group must be >= 2: the reweighting set is split in halves to tune on")
        if not self.agreements or any(not 0.5 < a <= 1 for a in self.agreements):
            raise PoolkitError(f"agreements are P(cue agrees with the label) in training, in (0.5, 1]; got "
                               f"{list(self.agreements)!r}")
        for name in ("dfr_cs", "head_lrs", "head_weight_decays"):
            values = getattr(self, name)
            if not values or any(not v > 0 for v in values):
                raise PoolkitError(f"{name} must be positive numbers, got {list(values)!r}")
        if not 0 < self.dfr_subsample <= 1 or not self.lr > 0 or not self.weight_decay >= 0:
            raise PoolkitError(f"dfr_subsample must be in (0, 1], lr > 0 and weight_decay >= 0; got "
                               f"{self.dfr_subsample!r}, {self.lr!r}, {self.weight_decay!r}")
        if not self.widths or any(not isinstance(w, int) or w < 1 for w in self.widths):
            raise PoolkitError(f"widths must be positive ints (channels per stage), got {list(self.widths)!r}")
        check_cue(self.cue)
        check_execution(threads=self.threads)
        return dataclasses.replace(self, agreements=tuple(self.agreements), widths=tuple(self.widths),
                                   dfr_cs=tuple(self.dfr_cs), head_lrs=tuple(self.head_lrs),
                                   head_weight_decays=tuple(self.head_weight_decays))


DEFAULT = SpuriousConfig()
#: Four times the images, a wider CNN, longer training, five seeds: sized for a GPU or a long CPU run.
FULL = SpuriousConfig(train_per_label=4000, val_per_label=1000, reweight_per_group=250, test_per_group=1000,
                      widths=(32, 64, 128), epochs=20, seeds=5, threads=None, preset="full")
#: A minute on one core: too small for the sanity check to mean much.
QUICK = SpuriousConfig(agreements=(0.95,), train_per_label=300, val_per_label=60, reweight_per_group=25,
                       test_per_group=50, epochs=3, dfr_retrains=5, head_epochs=10, seeds=2, preset="quick")
PRESETS = Presets("default", {
    "default": Preset(DEFAULT),
    "quick": Preset(QUICK, "600 training images, 3 epochs, agreement 0.95, 2 seeds: about a minute"),
    "full": Preset(FULL, "8,000 training images, a 32-64-128 CNN, 20 epochs, 5 seeds")})


def check_cue(kind: str) -> str:
    """``kind`` if it names one of :data:`CUES`, else a :class:`PoolkitError` listing them."""
    if kind not in CUES:
        raise PoolkitError(f"cue must be one of {', '.join(CUES)}; got {kind!r}")
    return kind
