"""``poolkit bench channel-spatial``: the data-regime guidance of Liu & Jiang ("Revisiting the Ordering of Channel and
Spatial Attention", arXiv 2601.07310) tested on Fashion-MNIST.

Each attention block of :mod:`poolkit.blocks` is inserted after the same conv stages (``stages``; by default the last
two, where the maps are 14x14 and 7x7, which keeps a CPU run short) of the small CNN of :mod:`.vision_model`, pooled
by GAP; for each training-set size and seed the CNN is trained from scratch with the same seeds, schedule and
augmentation for every block (``none``: no attention, the baseline).
The epoch is chosen on a validation split of the training pool, the test set is scored once. A fine-grained case
repeats the study on four look-alike classes (T-shirt, pullover, coat, shirt) for the paper's ordering claim.
Reported: test accuracy mean and std over seeds, the paired per-seed difference to ``none`` with its noise flag
(:func:`.vision.summarize`), and each block's parameters and forward time, measured side by side in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from poolkit.blocks import block_options, get_block, list_blocks
from poolkit.blocks.registry import resolve_block
from poolkit.cli.options import config_from_args
from poolkit.errors import PoolkitError
from poolkit.pooling import get_pooler
from poolkit.settings import Preset, Presets, check_counts, option

from .harness import Execution, Stopwatch, restored_threads, results_folder, torch_device
from .reporting import print_table, pyplot, run_record, save_figure, versus_baseline, write_outputs
from .vision import VisionConfig, run_all, summarize
from .vision_data import Images, augment, load_images, split_pool
from .vision_model import Backbone, PooledHead, VisionModel, fit

BASELINE = "none"
#: The tasks: all ten classes, and the fine-grained subset.
TASKS = ("all", "fine")
#: none, the two references, and one topology of each family.
DEFAULT_BLOCKS = ("none", "ca", "sa", "ca_sa", "parallel_learnable", "residual", "ca_msa")
#: The ordering claim: spatial before channel on fine-grained classes.
FINE_BLOCKS = ("none", "ca_sa", "sa_ca")
#: Fashion-MNIST's T-shirt/top, pullover, coat and shirt.
FINE_CLASSES = (0, 2, 4, 6)
RESULT_FILES = ("results.csv", "results.json", "accuracy.png", "report.html")
COLUMNS = ["task", "block", "size", "epochs", "seed", "accuracy", "best_epoch"]
#: The paper's guidance (its abstract), by training-set size: the block of poolkit that implements each pick.
PAPER = {"small": {"below": 1000, "block": "ca_msa", "words": "the \"Channel-Multi-scale Spatial\" cascaded structure"},
         "medium": {"below": 50000, "block": "parallel_learnable", "words": "parallel learnable fusion"},
         "large": {"below": None, "block": "parallel_gated", "words": "parallel structures with dynamic gating"},
         "fine": {"better": "sa_ca", "than": "ca_sa"}}


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


def run_channel_spatial(config: ChannelSpatialConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *,
                        force: bool = False, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the benchmark; return (one row per run (:data:`COLUMNS`), one row per block with its parameters and
    forward time). With ``out_dir``, also write results.csv, results.json and accuracy.png there (existing results
    are kept unless ``force``). ``workers > 1`` spawns processes: a calling script needs the ``__main__`` guard."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        clock = Stopwatch()
        with restored_threads():  # the runner sets config.threads
            runner = _Runner(config)
            speed = runner.speed()  # before the workers start: timed on an otherwise idle process
            runs = run_all(runner, progress, "channel-spatial")
        frame = pd.DataFrame([{key: run[key] for key in COLUMNS} for run in runs], columns=COLUMNS)
        order = {"task": TASKS.index, "block": list(dict.fromkeys(config.blocks + config.fine_blocks)).index}
        frame = frame.sort_values(["task", "block", "size", "seed"], key=lambda c: c.map(order.get(c.name, int)),
                                  ignore_index=True)
        if out is not None:
            _write_outputs(out, config, frame, speed, runs, clock)
    return frame, speed


def class_subset(images: Images, classes: tuple[int, ...]) -> Images:
    """The images of ``classes`` only, relabelled 0..len(classes)-1 in the order given."""
    if max(classes) >= images.num_classes:
        raise PoolkitError(f"fine_classes {list(classes)!r}: {images.name} has classes 0..{images.num_classes - 1}")
    relabel = torch.full((images.num_classes,), -1, dtype=torch.long)
    relabel[list(classes)] = torch.arange(len(classes))
    keep_train, keep_test = relabel[images.train_y] >= 0, relabel[images.test_y] >= 0
    return dataclasses.replace(images, train_x=images.train_x[keep_train],
                               train_y=relabel[images.train_y[keep_train]], test_x=images.test_x[keep_test],
                               test_y=relabel[images.test_y[keep_test]], num_classes=len(classes))


class _Runner:
    """The images, loaded once, and single runs on them: one (task, size, seed, block) trains that CNN from scratch."""

    def __init__(self, config: ChannelSpatialConfig) -> None:
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.config = config
        self.device = torch_device(config.device)
        images = load_images(config.dataset, config.root)
        self.images = {"all": images}
        if config.fine_blocks:
            self.images["fine"] = class_subset(images, config.fine_classes)
        pool = images.train_x
        self.mean, self.std = float(pool.mean()), float(pool.std())  # the whole pool's, for both tasks
        for task, size in self._sizes():  # every size fits its pool, before any run starts
            split_pool(len(self.images[task].train_y), size, config.val_size, config.data_seed, 0)

    def _sizes(self) -> list[tuple[str, int]]:
        config = self.config
        return [("all", size) for size in config.sizes] + ([("fine", config.fine_size)] if config.fine_blocks else [])

    def tasks(self) -> list[tuple[str, int, int, str]]:
        """Largest runs first (they set the wall time when workers share them out)."""
        config = self.config
        tasks = [("all", size, config.seed + run, name) for name in config.blocks for size in config.sizes
                 for run in range(config.seeds)]
        tasks += [("fine", config.fine_size, config.seed + run, name) for name in config.fine_blocks
                  for run in range(config.seeds)]
        return sorted(tasks, key=lambda task: -task[1] * self._epochs(task[0], task[1]))

    def _epochs(self, task: str, size: int) -> int:
        config = self.config
        return config.fine_epochs if task == "fine" else config.epochs[config.sizes.index(size)]

    def __call__(self, task: tuple[str, int, int, str]) -> list[dict]:
        kind, size, seed, name = task
        config, images, device = self.config, self.images[kind], self.device
        val, train = split_pool(len(images.train_y), size, config.val_size, config.data_seed, seed)
        splits = [(x.to(device), y.to(device)) for x, y in
                  ((images.train_x[train], images.train_y[train]), (images.train_x[val], images.train_y[val]),
                   (images.test_x, images.test_y))]
        model = self.build(name, seed, images.num_classes).to(device)
        epochs = self._epochs(kind, size)
        tic, cpu = time.perf_counter(), time.process_time()
        result = fit(model, *splits, epochs=epochs, batch_size=config.batch_size, lr=config.lr,
                     weight_decay=config.weight_decay, seed=seed,
                     augment=partial(augment, pad=config.pad, flip=images.flip))
        return [{"task": kind, "block": name, "size": size, "epochs": epochs, "seed": seed,
                 "accuracy": result.test_accuracy, "best_epoch": result.best_epoch, "train_loss": result.train_loss,
                 "val_accuracy": result.val_accuracy, "seconds": round(time.perf_counter() - tic, 3),
                 "cpu_seconds": round(time.process_time() - cpu, 3)}]

    def build(self, name: str, seed: int, num_classes: int) -> VisionModel:
        """Seeded: the backbone first (the same whatever the block), then the GAP head, then the blocks, each appended
        to its stage (conv -> BN -> ReLU -> block, before the next stage's max-pool)."""
        config = self.config
        torch.manual_seed(seed)
        backbone = Backbone(config.widths, self.mean, self.std)
        torch.manual_seed(seed + 1)
        head = PooledHead(get_pooler("gap", hidden_size=config.widths[-1]), num_classes)
        if name != BASELINE:
            torch.manual_seed(seed + 2)
            for stage in config.stages:
                backbone.stages[stage].append(self.block(name, config.widths[stage]))
        return VisionModel(backbone, head)

    def block(self, name: str, channels: int) -> torch.nn.Module:
        """The block with the run's reduction where it takes one (other options their defaults)."""
        options = {"reduction": self.config.reduction} if "reduction" in block_options(name) else {}
        return get_block(name, channels=channels, **options)

    def speed(self) -> pd.DataFrame:
        """Per block: its parameters (all inserted copies) and the CNN's forward time on ``timing_batch`` test images
        (eval mode, no gradients), median over ``timing_rounds`` rounds that visit every block in turn, so that a
        busy moment of the machine hits every block alike; ``vs_none`` is the ratio to the CNN without attention."""
        config = self.config
        names = list(dict.fromkeys(config.blocks + config.fine_blocks))
        images = self.images["all"]
        x = images.test_x[:config.timing_batch].to(self.device)
        models = {name: self.build(name, config.seed, images.num_classes).to(self.device).eval() for name in names}
        times: dict[str, list[float]] = {name: [] for name in names}
        with torch.no_grad():
            for _ in range(config.timing_rounds + 1):  # the first round warms up and is dropped
                for name, model in models.items():
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    tic = time.perf_counter()
                    model(x)
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                    times[name].append(time.perf_counter() - tic)
        base = sum(p.numel() for p in models[BASELINE].parameters())
        rows = [{"block": name, "block_params": sum(p.numel() for p in model.parameters()) - base,
                 "model_params": sum(p.numel() for p in model.parameters()),
                 "forward_ms": 1000 * float(np.median(times[name][1:]))} for name, model in models.items()]
        speed = pd.DataFrame(rows)
        speed["vs_none"] = speed["forward_ms"] / speed.loc[speed["block"] == BASELINE, "forward_ms"].iloc[0]
        return speed


# -- summary ------------------------------------------------------------------------------------------
def summarize_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`.vision.summarize` per (task, block, size): accuracy mean / std over seeds, paired difference to
    ``none`` and its noise flag."""
    return summarize(frame, columns=("task", "block"), baseline=BASELINE)


def ordering(frame: pd.DataFrame) -> dict | None:
    """The fine-grained ordering claim: sa_ca's paired per-seed difference to ca_sa (None when either is missing)."""
    better, than = PAPER["fine"]["better"], PAPER["fine"]["than"]
    fine = frame[(frame["task"] == "fine") & frame["block"].isin([better, than])]
    if set(fine["block"]) != {better, than}:
        return None
    row = summarize(fine, columns=("task", "block"), baseline=than).set_index("block").loc[better]
    return {"better": better, "than": than, "size": int(row["size"]), "inside_noise": bool(row["inside_noise"]),
            **{key: float(row[key]) for key in ("mean", "diff_mean", "diff_std", "diff_ci95")}}


# -- outputs ------------------------------------------------------------------------------------------
def _write_outputs(out: Path, config: ChannelSpatialConfig, frame: pd.DataFrame, speed: pd.DataFrame,
                   runs: list[dict], clock: Stopwatch) -> None:
    summary = summarize_runs(frame)
    meta = run_record("channel-spatial attention blocks in a small CNN (Liu & Jiang, arXiv 2601.07310)", config,
                      clock.record(), published=PAPER, speed=speed.to_dict(orient="records"),
                      summary=summary.to_dict(orient="records"), ordering=ordering(frame), runs=runs)
    write_outputs(out, frame, meta, {"accuracy": ("accuracy.png", lambda tmp: plot_results(
        summary, tmp, title=_title(config)))}, title=_title(config), tables={"summary": summary, "speed": speed})


def _title(config: ChannelSpatialConfig) -> str:
    return (f"{config.dataset} ({config.preset}): CNN {'-'.join(map(str, config.widths))}, blocks after stages "
            f"{', '.join(map(str, config.stages))}, {config.seeds} seeds, validation {config.val_size}")


def plot_results(summary: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Left: each block's paired difference to ``none`` (mean +- std over seeds) per training-set size; right: the
    fine-grained task's accuracy per block."""
    plt = pyplot()

    tasks = [task for task in TASKS if (summary["task"] == task).any()]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.0 * len(tasks), 4.0), dpi=150, squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1][:len(tasks)]})
    for ax, task in zip(axes[0], tasks):
        part = summary[summary["task"] == task]
        names = list(dict.fromkeys(part["block"]))
        sizes = sorted(part["size"].unique())
        for j, size in enumerate(sizes):
            cell = part[part["size"] == size].set_index("block").reindex(names)
            offset = (j - (len(sizes) - 1) / 2) * 0.2
            value, error = (cell["diff_mean"], cell["diff_std"]) if task == "all" else (cell["mean"], cell["std"])
            ax.errorbar(np.arange(len(names)) + offset, 100 * value, yerr=100 * error.fillna(0), fmt="o", ms=4,
                        capsize=3, label=f"{size:,} training images")
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        if task == "all":
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_ylabel("test accuracy − none (points)")
            ax.set_title("all ten classes: paired difference to no attention", fontsize=9)
        else:
            ax.set_ylabel("test accuracy (%)")
            ax.set_title("fine-grained subset", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


# -- CLI ----------------------------------------------------------------------------------------------
def run_channel_spatial_command(args: argparse.Namespace) -> int:
    """``poolkit bench channel-spatial``: run, print the summary, write --out. Bad input raises PoolkitError."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    frame, speed = run_channel_spatial(config, args.out, force=args.force, progress=not args.no_progress)
    speed = speed.set_index("block")
    print_table(f"channel-spatial attention ({config.dataset}, {config.preset}): test accuracy, mean ± std over "
                f"{config.seeds} seeds; paired difference to none",
                ["task", "block", "size", "accuracy %", "vs none (points)", "params", "forward ×none"],
                [[row.task, row.block, str(row.size), f"{100 * row.mean:.2f} ± {100 * row.std:.2f}",
                  versus_baseline(row, BASELINE, "block"), f"{speed.loc[row.block, 'block_params']:,}",
                  f"{speed.loc[row.block, 'vs_none']:.2f}"] for row in summarize_runs(frame).itertuples(index=False)],
                clock, args.out)
    return 0
