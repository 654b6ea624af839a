"""docs/vision.md's numbers, rendered from the committed run in docs/vision/ (``poolkit bench vision --out
docs/vision``) and the presets in ``poolkit_bench.vision``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from rendering import (ROOT, Page, changed_settings, difference, load_and_machine, points, presets_table, run_files,
                       table)

from poolkit_bench.vision import BASELINE, PAPER, PRESETS, summarize

FOLDER = ROOT / "docs" / "vision"
TITLES = {"scratch": "Trained from scratch", "frozen": "Frozen GAP backbone: pooler + head retrained (post hoc)"}


def render_presets() -> str:
    """The three presets side by side."""
    def column(c) -> list[str]:
        threads = "default threads" if c.threads is None else f"{c.threads} torch thread each"
        return [c.dataset, ", ".join(f"{s:,}" for s in c.sizes), f"{c.val_size:,}", "-".join(map(str, c.widths)),
                f"AdamW lr {c.lr:g} (one-cycle), weight decay {c.weight_decay:g}, batch {c.batch_size}", str(c.epochs),
                str(c.seeds), f"shift <= {c.pad} px" + (" + horizontal flip (Fashion-MNIST)" if c.dataset != "digits"
                                                        else ""),
                f"{c.workers} worker(s), `--device {c.device}`, {threads}"]
    names = ["data", "training images per run", "validation images", "CNN widths", "optimiser", "epochs", "seeds",
             "augmentation", "execution"]
    return presets_table("poolkit_bench.vision", PRESETS, column, names)


def default_estimate(results: dict) -> float:
    """CPU-seconds the default preset would take, from this run's: each (variant, pooler)'s mean CPU-seconds per run
    fitted as a line in the training-set size, summed over the default's sizes and seeds, scaled to its epochs and by
    this run's overhead (all CPU-seconds / the runs' own)."""
    default, runs = PRESETS["default"], pd.DataFrame(results["runs"])
    total = 0.0
    for _, group in runs.groupby(["variant", "pooler"]):
        cost = group.groupby("size")["cpu_seconds"].mean()
        if len(cost) > 1:
            slope, intercept = np.polyfit(cost.index.to_numpy(float), cost.to_numpy(), 1)
        else:
            slope, intercept = cost.iloc[0] / cost.index[0], 0.0
        total += sum(intercept + slope * size for size in default.sizes) * default.seeds
    epochs = default.epochs / results["settings"]["epochs"]
    return total * epochs * results["cpu_seconds"] / runs["cpu_seconds"].sum()


def render_cost(results: dict) -> str:
    s, runs, prov = results["settings"], results["runs"], results["provenance"]
    fits = sum(r["cpu_seconds"] for r in runs)
    default = PRESETS["default"]
    changed = changed_settings(s, default)
    estimate = default_estimate(results) if changed != "none" else 0.0
    return (f"The committed run (`docs/vision/results.json`; settings that differ from the default preset: "
            f"{changed}): {len(s['poolers'])} poolers × {len(s['sizes'])} sizes × "
            f"{s['seeds']} seeds from scratch, plus the post-hoc poolers on each frozen backbone ({len(runs)} runs of "
            f"{s['epochs']} epochs). It took {results['runtime_seconds'] / 60:.1f} minutes of wall time and "
            f"{results['cpu_seconds'] / 60:.1f} CPU-minutes ({fits / 60:.1f} of them in the runs' training and "
            f"scoring) with {s['workers']} worker process(es) of {s['threads']} torch thread each, on {prov['cores']} "
            f"cores that other jobs shared; CPU-minutes / 2 = {results['cpu_seconds'] / 2 / 60:.1f} minutes is the "
            "wall time to expect on 2 idle cores. "
            + load_and_machine(results)
            + ("" if changed == "none" else
               f"\n\nThe default preset ({', '.join(f'{n:,}' for n in default.sizes)} images, {default.seeds} seeds) "
               f"would take about {estimate / 60:.0f} CPU-minutes, {estimate / 2 / 60:.0f} minutes on 2 idle cores: "
               "extrapolated linearly in the training-set size (and in the epochs) from this run's CPU-seconds per run "
               "(`default_estimate` in the renderer), not measured."))


def render_table(summary: pd.DataFrame, variant: str) -> str:
    part = summary[summary["variant"] == variant]
    sizes = list(dict.fromkeys(part["size"]))
    rows = []
    for name in dict.fromkeys(part["pooler"]):
        cells = [name]
        for size in sizes:
            row = part[(part["pooler"] == name) & (part["size"] == size)].iloc[0]
            cells += [f"{points(row['mean'])} ± {points(row['std'])}",
                      "—" if name == BASELINE else difference(row["diff_mean"], row["diff_std"], row["inside_noise"])]
        rows.append(cells)
    header = ["pooler", *(part for n in sizes for part in (f"{n:,} images: accuracy %", "vs gap (points)"))]
    return "\n".join([f"**{TITLES[variant]}.** Test accuracy, mean ± sample std over seeds; vs gap: the mean ± sample "
                      "std of the per-seed differences, *(noise)* when their 95% t-interval contains 0.", "",
                      table(header, rows, align="l" + "r" * (len(header) - 1))])


def render_paper(summary: pd.DataFrame, dataset: str) -> str:
    tiny = PAPER["tiny_imagenet"]
    rows = [["Tiny ImageNet, the paper's (Ali et al. 2023)", tiny["gap"], tiny["flex"], f"{tiny['flex'] - tiny['gap']:+.2f}"],
            ["CIFAR-100, the paper's", "", "", f"{PAPER['cifar100_gain']['flex']:+.2f}; "
             f"{PAPER['cifar100_gain']['flex_l2_dropout']:+.2f} with L2 and dropout on the weights"]]
    for variant in ("scratch", "frozen"):
        part = summary[summary["variant"] == variant]
        for size in dict.fromkeys(part["size"]):
            cell = part[part["size"] == size].set_index("pooler")
            for name in ("flex", "flex_reg", "flex+sac"):
                if name in cell.index:
                    rows.append([f"{dataset}, {size:,} images, {variant}, ours: {name}",
                                 points(cell.loc[BASELINE, "mean"]), points(cell.loc[name, "mean"]),
                                 difference(cell.loc[name, "diff_mean"], cell.loc[name, "diff_std"], False)])
    return table(["setting", "GAP", "flex", "flex − GAP (points)"], rows, align="lrrr")


def render_readings(summary: pd.DataFrame, frame: pd.DataFrame) -> str:
    """Which poolers differ from gap beyond seed noise, per variant and size, and the largest gap in points; then
    flex_reg against plain flex, paired per seed (does the paper's regularised setting add to flex here?)."""
    lines = []
    for variant in ("scratch", "frozen"):
        part = summary[(summary["variant"] == variant) & (summary["pooler"] != BASELINE)]
        for size in dict.fromkeys(part["size"]):
            cell = part[part["size"] == size]
            better = cell[~cell["inside_noise"] & (cell["diff_mean"] > 0)]["pooler"].tolist()
            worse = cell[~cell["inside_noise"] & (cell["diff_mean"] < 0)]["pooler"].tolist()
            top = cell.loc[cell["diff_mean"].idxmax()]
            lines.append(f"- **{variant}, {size:,} images:** above gap beyond seed noise: "
                         f"{', '.join(better) or 'none'}; below it: {', '.join(worse) or 'none'}; every other "
                         f"difference sits inside seed noise. Largest mean difference: {top['pooler']} "
                         f"{100 * top['diff_mean']:+.2f} points.")
    both = summarize(frame[frame["pooler"].isin(["flex", "flex_reg"])], baseline="flex")
    for row in both[both["pooler"] == "flex_reg"].itertuples(index=False):
        lines.append(f"- **flex_reg − flex, {row.variant}, {row.size:,} images:** "
                     f"{difference(row.diff_mean, row.diff_std, False)} points" + (", inside seed noise." if row.inside_noise else
                                                         ", beyond seed noise."))
    return "\n".join(lines)


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    summary = summarize(frame)
    return {"presets": render_presets(), "cost": render_cost(results), "scratch": render_table(summary, "scratch"),
            "frozen": render_table(summary, "frozen"), "paper": render_paper(summary, results["settings"]["dataset"]),
            "readings": render_readings(summary, frame)}


PAGE = Page("docs/vision.md", render)
