"""``poolkit bench vision``: spatial poolers as the last step of a small CNN trained on real images.

For each training-set size and seed, the CNN of :mod:`.vision_model` is trained from scratch with each pooler on
its last map (``gap`` the baseline; ``NAME+sac`` adds Simple Auxiliary Classifiers on the earlier stages), with
the same seeds, schedule and augmentation for all. The epoch is chosen on a validation split of the training
images; the test set is scored once. The frozen-backbone variant takes each seed's GAP-trained CNN, freezes it,
and trains only a fresh pooler + head per pooler on its last maps (post hoc; no augmentation, the maps are
computed once). Reported: test accuracy mean and sample std over seeds, and the paired per-seed difference
to GAP.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from poolkit.cli.options import config_from_args
from poolkit.nn import AuxiliaryClassifiers
from poolkit.pooling import get_pooler
from poolkit.pooling.spec import resolve_name

from .execution import torch_device
from .harness import Stopwatch, restored_threads, results_folder, run_tasks
from .reporting import (draw_map, paired_difference, print_table, pyplot, run_record, save_figure, versus_baseline,
                        write_outputs)
from .vision_config import BASELINE, DEFAULT, NAMED_POOLERS, PRESETS, RESULT_FILES, SAC, VisionConfig
from .vision_data import Images, augment, load_images, split_pool
from .vision_model import Backbone, PooledHead, VisionModel, encode, fit, map_sizes, map_weights

#: The first test images, drawn in attention.png with each pooler's weights over them.
EXAMPLES = 4
COLUMNS = ["variant", "pooler", "size", "seed", "accuracy", "best_epoch"]
VARIANTS = ("scratch", "frozen")
#: FlexPooling's reported gains over GAP (Ali, Alsuwaidi & Khan, VISAPP 2023): the paper's numbers, not ours.
PAPER = {"tiny_imagenet": {"gap": 46.5, "flex": 48.64}, "cifar100_gain": {"flex": 0.75, "flex_l2_dropout": 1.1}}


def run_vision(config: VisionConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *, force: bool = False,
               progress: bool = True) -> pd.DataFrame:
    """Run the benchmark; return one row per run (:data:`COLUMNS`). With ``out_dir``, also write results.csv,
    results.json (settings, provenance, summary, per-epoch curves) and accuracy.png there; existing results are
    kept unless ``force``. ``workers > 1`` spawns processes: a calling script needs the ``__main__`` guard."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        clock = Stopwatch()
        with restored_threads():  # the runner sets config.threads
            runs = run_all(_Runner(config), progress, "vision")
        frame = pd.DataFrame([{key: run[key] for key in COLUMNS} for run in runs], columns=COLUMNS)
        order = {"variant": VARIANTS.index, "pooler": config.poolers.index}
        frame = frame.sort_values(["variant", "pooler", "size", "seed"], key=lambda c: c.map(order.get(c.name, int)),
                                  ignore_index=True)
        if out is not None:
            _write_outputs(out, config, frame, runs, clock)
    return frame


class _Runner:
    """The images, loaded once, and single runs on them: one (size, seed, pooler) task trains that pooler from
    scratch; the baseline's task then also trains every post-hoc pooler on its frozen backbone."""

    def __init__(self, config: VisionConfig) -> None:
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.config = config
        self.device = torch_device(config.device)
        self.images: Images = load_images(config.dataset, config.root)
        pool = self.images.train_x
        self.mean, self.std = float(pool.mean()), float(pool.std())
        self.sizes = map_sizes(pool.shape[2], pool.shape[3], len(config.widths))
        split_pool(len(pool), max(config.sizes), config.val_size, config.data_seed, 0)  # sizes fit the pool

    def tasks(self) -> list[tuple[int, int, str]]:
        """The baseline's tasks first: they are the longest (they also run the frozen variant)."""
        config = self.config
        return [(size, config.seed + run, name) for name in config.poolers for size in config.sizes
                for run in range(config.seeds)]

    def __call__(self, task: tuple[int, int, str]) -> list[dict]:
        size, seed, name = task
        config, images, device = self.config, self.images, self.device
        val, train = split_pool(len(images.train_y), size, config.val_size, config.data_seed, seed)
        splits = [(x.to(device), y.to(device)) for x, y in
                  ((images.train_x[train], images.train_y[train]), (images.train_x[val], images.train_y[val]),
                   (images.test_x, images.test_y))]
        model = self.build(name, seed).to(device)
        shift = partial(augment, pad=config.pad, flip=images.flip)
        runs = [self._fit("scratch", name, size, seed, model, splits, shift)]
        if seed == config.seed and size == max(config.sizes):  # attention.png: the first seed's largest runs
            examples = encode(model.backbone, images.test_x[:EXAMPLES].to(device))
            runs[0]["maps"] = map_weights(model.head.pooler, examples).cpu().numpy().round(5).tolist()
        if name == BASELINE and config.frozen:
            model.backbone.requires_grad_(False)
            maps = [(encode(model.backbone, x), y) for x, y in splits]
            for other in config.poolers:
                if not other.endswith(SAC):
                    torch.manual_seed(seed + 1)
                    head = PooledHead(self.pooler(other), images.num_classes).to(device)
                    runs.append(self._fit("frozen", other, size, seed, head, maps, None))
        return runs

    def _fit(self, variant, name, size, seed, model, splits, shift) -> dict:
        config = self.config
        tic, cpu = time.perf_counter(), time.process_time()
        result = fit(model, *splits, epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                     weight_decay=config.weight_decay, seed=seed, augment=shift)
        return {"variant": variant, "pooler": name, "size": size, "seed": seed, "accuracy": result.test_accuracy,
                "best_epoch": result.best_epoch, "train_loss": result.train_loss, "val_accuracy": result.val_accuracy,
                "seconds": round(time.perf_counter() - tic, 3), "cpu_seconds": round(time.process_time() - cpu, 3)}

    def pooler(self, name: str) -> torch.nn.Module:
        """A poolkit pooler for the last map (flex sized to it; other options their defaults, or those of a
        :data:`NAMED_POOLERS` name)."""
        name, options = NAMED_POOLERS.get(name, (name, {}))
        if resolve_name(name) == "flex":
            options = {**options, "height": self.sizes[-1][0], "width": self.sizes[-1][1]}
        return get_pooler(name, hidden_size=self.config.widths[-1], **options)

    def build(self, name: str, seed: int) -> VisionModel:
        """Seeded: the backbone first (the same whatever the pooler), then the pooler and head, then SAC."""
        config = self.config
        torch.manual_seed(seed)
        backbone = Backbone(config.widths, self.mean, self.std)
        torch.manual_seed(seed + 1)
        head = PooledHead(self.pooler(name.removesuffix(SAC)), self.images.num_classes)
        aux = None
        if name.endswith(SAC):
            torch.manual_seed(seed + 2)
            aux = AuxiliaryClassifiers(config.widths[:-1], self.sizes[:-1], self.images.num_classes,
                                       weights=config.sac_weight, schedule=config.sac_schedule)
        return VisionModel(backbone, head, aux)


_WORKER: _Runner | None = None


def run_all(runner, progress: bool, desc: str) -> list[dict]:
    """Every task of ``runner`` (a runner class of this module's shape: built from its config, called on one task,
    returning that task's runs), here or in the config's ``workers`` spawned processes (each building a runner of
    its class once); runs in task order."""
    build = partial(type(runner), runner.config)
    per_task = run_tasks(runner, runner.tasks(), workers=runner.config.workers, progress=progress, desc=desc,
                         build_in_worker=build)
    return [run for task_runs in per_task for run in task_runs]


# -- summary ------------------------------------------------------------------------------------------
def summarize(frame: pd.DataFrame, *, columns: tuple[str, str] = ("variant", "pooler"),
              baseline: str = BASELINE) -> pd.DataFrame:
    """Per (variant, pooler, size): accuracy mean and sample std over seeds, and the paired per-seed difference to
    ``baseline`` (mean, sample std, and whether it sits inside seed noise: its 95% t-interval contains 0). Other
    benchmarks give their own two grouping ``columns``."""
    kind_column, item_column = columns
    rows = []
    for (variant, name, size), group in frame.groupby([*columns, "size"], sort=False):
        acc = group.set_index("seed")["accuracy"]
        base = frame[(frame[kind_column] == variant) & (frame[item_column] == baseline) & (frame["size"] == size)]
        diff_mean, diff_std, half, inside = paired_difference((acc - base.set_index("seed")["accuracy"]).dropna())
        rows.append({kind_column: variant, item_column: name, "size": int(size), "seeds": len(acc),
                     "mean": float(acc.mean()), "std": float(acc.std(ddof=1)) if len(acc) > 1 else float("nan"),
                     "diff_mean": diff_mean, "diff_std": diff_std, "diff_ci95": half,
                     "inside_noise": bool(name != baseline and inside)})
    return pd.DataFrame(rows)


# -- outputs ------------------------------------------------------------------------------------------
def _write_outputs(out: Path, config: VisionConfig, frame: pd.DataFrame, runs: list[dict], clock: Stopwatch) -> None:
    summary = summarize(frame)
    maps = {run["pooler"]: run.pop("maps") for run in runs if "maps" in run}
    meta = run_record("vision (spatial poolers after a small CNN; FlexPooling, Ali et al. VISAPP 2023)", config,
                      clock.record(), published=PAPER, summary=summary.to_dict(orient="records"),
                      attention_maps={"images": f"the first {EXAMPLES} test images", "size": max(config.sizes),
                                      "seed": config.seed, "variant": "scratch", "maps": maps}, runs=runs)
    write_outputs(out, frame, meta, {
        "accuracy": ("accuracy.png", lambda tmp: plot_results(summary, tmp, title=_title(config))),
        "where each pooler looks (its weights over the last map, on test images)": (
            "attention.png", lambda tmp: plot_maps(config, maps, tmp))},
        title=_title(config), tables={"summary": summary, "runs": frame})


def _title(config: VisionConfig) -> str:
    return (f"{config.dataset} ({config.preset}): CNN {'-'.join(map(str, config.widths))}, {config.epochs} epochs, "
            f"{config.seeds} seeds, validation {config.val_size}")


def plot_results(summary: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Test accuracy per pooler, mean with +-std error bars over seeds, one marker per training-set size; one panel
    per variant (from scratch, frozen backbone)."""
    plt = pyplot()

    variants = [v for v in VARIANTS if (summary["variant"] == v).any()]
    fig, axes = plt.subplots(1, len(variants), figsize=(5.2 * len(variants), 4.0), dpi=150, squeeze=False)
    sizes = sorted(summary["size"].unique())
    for ax, variant in zip(axes[0], variants):
        part = summary[summary["variant"] == variant]
        names = list(dict.fromkeys(part["pooler"]))
        for j, size in enumerate(sizes):
            cell = part[part["size"] == size].set_index("pooler").reindex(names)
            offset = (j - (len(sizes) - 1) / 2) * 0.25
            ax.errorbar(np.arange(len(names)) + offset, 100 * cell["mean"], yerr=100 * cell["std"].fillna(0),
                        fmt="o", ms=4, capsize=3, label=f"{size} training images")
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("trained from scratch" if variant == "scratch" else "frozen GAP backbone, pooler + head retrained",
                     fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


def plot_maps(config: VisionConfig, maps: dict[str, list], path: str | os.PathLike) -> None:
    """The first test images (rows) with each pooler's weights over its last map laid over them (columns), from
    the first seed's models trained from scratch on the most images."""
    plt = pyplot()

    images = load_images(config.dataset, config.root).test_x[:EXAMPLES, 0].numpy()
    fig, axes = plt.subplots(len(images), 1 + len(maps), figsize=(1.5 * (1 + len(maps)), 1.5 * len(images)),
                             dpi=120, squeeze=False)
    for i, image in enumerate(images):
        axes[i][0].imshow(image, cmap="gray", interpolation="nearest")
        axes[i][0].set_xticks([])
        axes[i][0].set_yticks([])
        for ax, (name, weights) in zip(axes[i][1:], maps.items()):
            draw_map(ax, image, np.asarray(weights[i]))
            if i == 0:
                ax.set_title(name, fontsize=7)
    axes[0][0].set_title("image", fontsize=7)
    save_figure(fig, path, f"{config.dataset}: pooling weights over the last map ({max(config.sizes)} training "
                f"images, seed {config.seed}, trained from scratch)")


# -- CLI ----------------------------------------------------------------------------------------------
def run_vision_command(args: argparse.Namespace) -> int:
    """``poolkit bench vision``: run, print the summary, write --out. Bad input raises PoolkitError."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    frame = run_vision(config, args.out, force=args.force, progress=not args.no_progress)
    print_table(f"vision benchmark ({config.dataset}, {config.preset}): test accuracy, mean ± std over "
                f"{config.seeds} seeds; paired difference to gap", ["variant", "pooler", "size", "accuracy %",
                                                                    "vs gap (points)"],
                [[row.variant, row.pooler, str(row.size), f"{100 * row.mean:.2f} ± {100 * row.std:.2f}",
                  versus_baseline(row, BASELINE)] for row in summarize(frame).itertuples(index=False)],
                clock, args.out)
    return 0

