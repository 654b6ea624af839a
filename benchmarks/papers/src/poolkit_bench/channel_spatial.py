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
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from poolkit.blocks import block_options, get_block
from poolkit.cli.options import config_from_args
from poolkit.errors import PoolkitError
from poolkit.pooling import get_pooler

from .channel_spatial_config import BASELINE, DEFAULT, PRESETS, RESULT_FILES, ChannelSpatialConfig
from .execution import torch_device
from .harness import Stopwatch, restored_threads, results_folder
from .reporting import print_table, pyplot, run_record, save_figure, versus_baseline, write_outputs
from .vision import run_all, summarize
from .vision_data import Images, augment, load_images, split_pool
from .vision_model import Backbone, PooledHead, VisionModel, fit

#: The tasks: all ten classes, and the fine-grained subset.
TASKS = ("all", "fine")
COLUMNS = ["task", "block", "size", "epochs", "seed", "accuracy", "best_epoch"]
#: The paper's guidance (its abstract), by training-set size: the block of poolkit that implements each pick.
PAPER = {"small": {"below": 1000, "block": "ca_msa", "words": "the \"Channel-Multi-scale Spatial\" cascaded structure"},
         "medium": {"below": 50000, "block": "parallel_learnable", "words": "parallel learnable fusion"},
         "large": {"below": None, "block": "parallel_gated", "words": "parallel structures with dynamic gating"},
         "fine": {"better": "sa_ca", "than": "ca_sa"}}


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
