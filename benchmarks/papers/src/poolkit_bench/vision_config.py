"""The settings of ``poolkit bench vision`` (:mod:`.vision`): its config, presets, result files and the benchmark's
pooler names. Free of torch, so that the command's options are read without it: the pooler registry is imported
where a config is validated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import Execution

#: The image sets :mod:`.vision_data` loads.
DATASETS = ("fashion-mnist", "digits")
BASELINE = "gap"
SAC = "+sac"
DEFAULT_POOLERS = ("gap", "gmp", "gem", "avgmax", "flex", "flex_reg", "flex+sac", "attention2d", "adapool2d")
#: Benchmark names for a registered pooler with options. ``flex_reg`` is FlexPooling's regularised setting (the paper's
#: CIFAR-100 +1.1): weight_dropout 0.25 is the rate the paper reports; the paper gives no L2 coefficient, so l2 = 2.5e-4
#: is chosen by us (the penalty whose gradient is 5e-4 * logits, the usual CIFAR SGD weight decay), fixed before any
#: run and not tuned.
NAMED_POOLERS = {"flex_reg": ("flex", {"l2": 2.5e-4, "weight_dropout": 0.25})}
RESULT_FILES = ("results.csv", "results.json", "accuracy.png", "attention.png", "report.html")


@dataclass(frozen=True)
class VisionConfig(Execution):
    """Every setting of a run. The defaults are the CPU-sized default; :data:`FULL` and :data:`QUICK` the others."""

    dataset: str = option("fashion-mnist", f"one of {', '.join(DATASETS)}")
    root: str | None = option(None, "folder of the Fashion-MNIST IDX files")
    sizes: tuple[int, ...] = option((1000, 6000), "training-set sizes", metavar="N")
    val_size: int = option(1000, "validation images (epoch selection), held out of the training pool")
    poolers: tuple[str, ...] = option(DEFAULT_POOLERS, "poolers separated by commas and/or spaces, NAME+sac for "
                                      "auxiliary classifiers, flex_reg for flex with its L2 penalty and weight "
                                      "dropout; gap is always run", metavar="NAME", names=True)
    frozen: bool = option(True, "skip the frozen-backbone variant", flag="--no-frozen")
    seeds: int = option(3, "runs per (pooler, size)")
    epochs: int = option(8, "epochs per run")
    batch_size: int = option(64, "minibatch size")
    lr: float = option(5e-3, "AdamW peak learning rate")
    weight_decay: float = option(0.05, "AdamW weight decay")
    widths: tuple[int, ...] = option((32, 64, 128), "channels per conv stage", metavar="C")
    pad: int = option(2, "random-crop padding in pixels (0: no shifts)")
    sac_weight: float = option(0.3, "weight of each auxiliary classifier's loss")
    sac_schedule: str = "linear"
    data_seed: int = option(0, "seed of the validation split")
    seed: int = option(1, "seed of run 0 (run i uses seed + i)")
    preset: str = "default"

    def validated(self) -> VisionConfig:
        """This config with the baseline ``gap`` first among the poolers; bad values raise."""
        from poolkit.pooling.spec import pooler_class, resolve_name

        check_counts(self, ("seeds", "epochs", "batch_size", "val_size"))
        if self.dataset not in DATASETS:
            raise PoolkitError(f"dataset must be one of {', '.join(DATASETS)}, got {self.dataset!r}")
        if not self.sizes or any(not isinstance(s, int) or s < 1 for s in self.sizes):
            raise PoolkitError(f"sizes must be positive ints (training images per run), got {list(self.sizes)!r}")
        if not self.widths or any(not isinstance(w, int) or w < 1 for w in self.widths):
            raise PoolkitError(f"widths must be positive ints (channels per stage), got {list(self.widths)!r}")
        if not self.lr > 0 or not self.weight_decay >= 0 or not self.sac_weight >= 0 or self.pad < 0:
            raise PoolkitError("lr must be > 0, and weight_decay, sac_weight and pad >= 0; got "
                               f"{self.lr!r}, {self.weight_decay!r}, {self.sac_weight!r}, {self.pad!r}")
        self.check_execution()
        if len(self.widths) < 2 and any(name.endswith(SAC) for name in self.poolers):
            raise PoolkitError("+sac needs an earlier stage to classify: give at least two --widths")
        names = [BASELINE] + [n for n in self.poolers if n != BASELINE]
        for name in names:
            base = NAMED_POOLERS.get(name.removesuffix(SAC), (name.removesuffix(SAC),))[0]
            if pooler_class(resolve_name(base)).kind != "token":  # unknown names raise
                raise PoolkitError(f"pooler {name!r} pools over layers; this benchmark needs a pooler of positions")
        if len(set(names)) != len(names):
            raise PoolkitError(f"poolers must be distinct, got {names!r}")
        return dataclasses.replace(self, poolers=tuple(names), sizes=tuple(self.sizes), widths=tuple(self.widths))


DEFAULT = VisionConfig()
#: The whole 60,000-image training set (54,000 train + 6,000 validation), sized for a GPU.
FULL = VisionConfig(sizes=(6000, 54000), val_size=6000, seeds=5, epochs=30, workers=1, threads=None, device="auto",
                    preset="full")
#: sklearn's 8x8 digits: a minute on one core.
QUICK = VisionConfig(dataset="digits", sizes=(1000,), val_size=200, epochs=6, pad=1, workers=1, preset="quick")
PRESETS = Presets("default", {
    "default": Preset(DEFAULT),
    "quick": Preset(QUICK, "sklearn's 8x8 digits, 1000 training images, 6 epochs, 1 worker"),
    "full": Preset(FULL, "Fashion-MNIST's whole training set (54,000 + 6,000 validation), 30 epochs, 5 seeds; GPU")})
