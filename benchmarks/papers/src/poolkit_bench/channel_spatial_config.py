"""The settings of ``poolkit bench channel-spatial`` (:mod:`.channel_spatial`): its config, presets and result files.
Free of torch, so that the command's options are read without it: the block registry is imported where a config is
validated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poolkit.errors import PoolkitError
from poolkit.settings import Preset, Presets, check_counts, option

from .execution import Execution
from .vision_config import VisionConfig

BASELINE = "none"
#: none, the two references, and one topology of each family.
DEFAULT_BLOCKS = ("none", "ca", "sa", "ca_sa", "parallel_learnable", "residual", "ca_msa")
#: The ordering claim: spatial before channel on fine-grained classes.
FINE_BLOCKS = ("none", "ca_sa", "sa_ca")
#: Fashion-MNIST's T-shirt/top, pullover, coat and shirt.
FINE_CLASSES = (0, 2, 4, 6)
RESULT_FILES = ("results.csv", "results.json", "accuracy.png", "report.html")


@dataclass(frozen=True)
class ChannelSpatialConfig(Execution):
    """Every setting of a run; ``epochs`` is one count for every size or one per size. The defaults are the
    CPU-sized default preset; :data:`FULL` and :data:`QUICK` the others."""

    dataset: str = option("fashion-mnist", "fashion-mnist or digits")
    root: str | None = option(None, "folder of the Fashion-MNIST IDX files")
    sizes: tuple[int, ...] = option((500, 2000), "training-set sizes", metavar="N")
    epochs: tuple[int, ...] = option((20, 8), "epochs: one count, or one per size", metavar="N")
    val_size: int = option(500, "validation images (epoch selection), held out of the training pool")
    blocks: tuple[str, ...] = option(DEFAULT_BLOCKS, "blocks separated by commas and/or spaces, 'all' for every one; "
                                     "none is always run", metavar="NAME", names=True)
    fine_blocks: tuple[str, ...] = option(FINE_BLOCKS, "blocks of the fine-grained task; 'skip' to skip it",
                                          metavar="NAME", names=True, drop=("skip",))
    fine_classes: tuple[int, ...] = option(FINE_CLASSES, "class ids of the fine-grained task", metavar="N")
    fine_size: int = option(1000, "training images of the fine-grained task")
    fine_epochs: int = option(10, "epochs of the fine-grained task")
    stages: tuple[int, ...] = option((1, 2), "stages followed by a block, 0-based", metavar="N")
    reduction: int = option(8, "the blocks' channel reduction r")
    seeds: int = option(3, "runs per (block, size)")
    batch_size: int = option(32, "minibatch size")
    lr: float = option(5e-3, "AdamW peak learning rate")
    weight_decay: float = option(0.05, "AdamW weight decay")
    widths: tuple[int, ...] = option((16, 32, 64), "channels per conv stage", metavar="N")
    pad: int = option(2, "random-crop padding in pixels (0: no shifts)")
    data_seed: int = option(0, "seed of the validation split")
    seed: int = option(1, "seed of run 0 (run i uses seed + i)")
    timing_batch: int = 256
    timing_rounds: int = 7
    preset: str = "default"

    def validated(self) -> ChannelSpatialConfig:
        """This config with ``none`` first in each block list, canonical block names and one epoch count per size;
        bad values raise. The settings it shares with ``bench vision`` are checked by :class:`VisionConfig`."""
        epochs = tuple(self.epochs) if isinstance(self.epochs, (list, tuple)) else (self.epochs,)
        VisionConfig(dataset=self.dataset, root=self.root, sizes=tuple(self.sizes), val_size=self.val_size,
                     poolers=("gap",), frozen=False, seeds=self.seeds, epochs=min(epochs, default=0),
                     batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay, widths=tuple(self.widths),
                     pad=self.pad, data_seed=self.data_seed, seed=self.seed, workers=self.workers,
                     threads=self.threads, device=self.device).validated()
        if any(not isinstance(e, int) or isinstance(e, bool) or e < 1 for e in epochs):
            raise PoolkitError(f"epochs must be ints >= 1, got {list(epochs)!r}")
        if len(epochs) == 1:
            epochs = epochs * len(self.sizes)
        if len(epochs) != len(self.sizes):
            raise PoolkitError(f"epochs: give one count, or one per size ({len(self.sizes)}), got {list(epochs)!r}")
        check_counts(self, ("fine_size", "fine_epochs", "reduction", "timing_batch", "timing_rounds"))
        stages = tuple(self.stages)
        if not stages or len(set(stages)) != len(stages) or any(s not in range(len(self.widths)) for s in stages):
            raise PoolkitError(f"stages must be distinct stage indices 0..{len(self.widths) - 1} (a block after "
                               f"each), got {list(stages)!r}")
        if self.fine_blocks and (len(set(self.fine_classes)) < 2 or any(
                not isinstance(c, int) or isinstance(c, bool) or c < 0 for c in self.fine_classes)):
            raise PoolkitError(f"fine_classes must be two or more distinct class ids, got {list(self.fine_classes)!r}")
        return dataclasses.replace(self, epochs=epochs, stages=stages, sizes=tuple(self.sizes),
                                   widths=tuple(self.widths), fine_classes=tuple(self.fine_classes),
                                   blocks=_block_list(self.blocks, "blocks"),
                                   fine_blocks=_block_list(self.fine_blocks, "fine_blocks") if self.fine_blocks else ())


def _block_list(names, what: str) -> tuple[str, ...]:
    """``none`` first, then the canonical name of every other block (``all``: every registered block); unknown or
    repeated names raise."""
    from poolkit.blocks import list_blocks
    from poolkit.blocks.registry import resolve_block

    if "all" in names:
        names = list_blocks()
    names = [BASELINE] + [resolve_block(n) for n in names if n != BASELINE]
    if len(set(names)) != len(names):
        raise PoolkitError(f"{what} must be distinct, got {names!r}")
    return tuple(names)


DEFAULT = ChannelSpatialConfig()
#: Every topology at three sizes up to the whole training set (54,000 + 6,000 validation), sized for a GPU.
FULL = ChannelSpatialConfig(sizes=(500, 5000, 54000), epochs=(40, 20, 10), val_size=6000, blocks=("none", "all"),
                            fine_blocks=("none", "ca", "sa", "ca_sa", "sa_ca", "ca_sa_ca", "sa_ca_sa"), fine_size=5000,
                            fine_epochs=20, seeds=5, widths=(32, 64, 128), stages=(0, 1, 2), reduction=16, workers=1,
                            threads=None, device="auto", preset="full")
#: sklearn's 8x8 digits (fine-grained: the look-alike 3, 5, 8, 9): about a minute on one core.
QUICK = ChannelSpatialConfig(dataset="digits", sizes=(300,), epochs=(10,), val_size=200, blocks=("none", "ca", "ca_sa"),
                             fine_classes=(3, 5, 8, 9), fine_size=150, fine_epochs=10, pad=1, timing_rounds=3,
                             workers=1, preset="quick")
PRESETS = Presets("default", {
    "default": Preset(DEFAULT),
    "quick": Preset(QUICK, "sklearn's 8x8 digits, 300 training images, 3 blocks: a smoke test"),
    "full": Preset(FULL, "every block at 500, 5,000 and 54,000 images, 5 seeds, a wider CNN; GPU")})
