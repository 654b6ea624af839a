"""docs/vision.md's numbers, rendered from the committed run in docs/vision/ (``poolkit bench vision --out
docs/vision``) and the presets in ``poolkit_bench.vision``.

    .venv/bin/python scripts/render_vision.py --check     # exit 1 when the page differs from the files
    .venv/bin/python scripts/render_vision.py --write     # update the page's marked blocks
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import markers  # noqa: E402

from poolkit_bench.vision import BASELINE, PAPER, PRESETS, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "vision.md"
FOLDER = ROOT / "docs" / "vision"
TITLES = {"scratch": "Trained from scratch", "frozen": "Frozen GAP backbone: pooler + head retrained (post hoc)"}


def points(value: float) -> str:
    return f"{100 * value:.2f}"


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
    rows = ["Rendered from `poolkit_bench.vision.PRESETS`:", "", "| setting | default | `--full` | `--quick` |",
            "|---|---|---|---|"]
    cols = [column(PRESETS[p]) for p in ("default", "full", "quick")]
    rows += [f"| {n} | " + " | ".join(c[i] for c in cols) + " |" for i, n in enumerate(names)]
    return "\n".join(rows)


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
    changed = [f"{key} {value}" for key, value in s.items()
               if key != "preset" and json.loads(json.dumps(getattr(default, key))) != value]
    estimate = default_estimate(results) if changed else 0.0
    return (f"The committed run (`docs/vision/results.json`; settings that differ from the default preset: "
            f"{'; '.join(changed) or 'none'}): {len(s['poolers'])} poolers × {len(s['sizes'])} sizes × "
            f"{s['seeds']} seeds from scratch, plus the post-hoc poolers on each frozen backbone ({len(runs)} runs of "
            f"{s['epochs']} epochs). It took {results['runtime_seconds'] / 60:.1f} minutes of wall time and "
            f"{results['cpu_seconds'] / 60:.1f} CPU-minutes ({fits / 60:.1f} of them in the runs' training and "
            f"scoring) with {s['workers']} worker process(es) of {s['threads']} torch thread each, on {prov['cores']} "
            f"cores that other jobs shared; CPU-minutes / 2 = {results['cpu_seconds'] / 2 / 60:.1f} minutes is the "
            "wall time to expect on 2 idle cores. "
            f"Load average (1 min) {results['load_average_start_end'][0][0]:.1f} at the start, "
            f"{results['load_average_start_end'][1][0]:.1f} at the end. Commit "
            f"{prov['commit'][:10] if prov.get('commit') else 'unknown'}, torch {prov['torch']}, {prov['cpu']}."
            + ("" if not changed else
               f"\n\nThe default preset ({', '.join(f'{n:,}' for n in default.sizes)} images, {default.seeds} seeds) "
               f"would take about {estimate / 60:.0f} CPU-minutes, {estimate / 2 / 60:.0f} minutes on 2 idle cores: "
               "extrapolated linearly in the training-set size (and in the epochs) from this run's CPU-seconds per run "
               "(`default_estimate` in the renderer), not measured."))


def render_table(summary: pd.DataFrame, variant: str) -> str:
    part = summary[summary["variant"] == variant]
    sizes = list(dict.fromkeys(part["size"]))
    head = "| pooler | " + " | ".join(f"{n:,} images: accuracy % | vs gap (points)" for n in sizes) + " |"
    lines = [f"**{TITLES[variant]}.** Test accuracy, mean ± sample std over seeds; vs gap: the mean ± sample std of "
             "the per-seed differences, *(noise)* when their 95% t-interval contains 0.", "", head,
             "|---|" + "---:|---:|" * len(sizes)]
    for name in dict.fromkeys(part["pooler"]):
        cells = []
        for size in sizes:
            row = part[(part["pooler"] == name) & (part["size"] == size)].iloc[0]
            diff = "—" if name == BASELINE else (f"{100 * row['diff_mean']:+.2f} ± {points(row['diff_std'])}"
                                                 + (" *(noise)*" if row["inside_noise"] else ""))
            cells += [f"{points(row['mean'])} ± {points(row['std'])}", diff]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_paper(summary: pd.DataFrame, dataset: str) -> str:
    tiny = PAPER["tiny_imagenet"]
    lines = ["| setting | GAP | flex | flex − GAP (points) |", "|---|---:|---:|---:|",
             f"| Tiny ImageNet, the paper's (Ali et al. 2023) | {tiny['gap']} | {tiny['flex']} | "
             f"{tiny['flex'] - tiny['gap']:+.2f} |",
             f"| CIFAR-100, the paper's | | | {PAPER['cifar100_gain']['flex']:+.2f}; "
             f"{PAPER['cifar100_gain']['flex_l2_dropout']:+.2f} with L2 and dropout on the weights |"]
    for variant in ("scratch", "frozen"):
        part = summary[summary["variant"] == variant]
        for size in dict.fromkeys(part["size"]):
            cell = part[part["size"] == size].set_index("pooler")
            for name in ("flex", "flex_reg", "flex+sac"):
                if name in cell.index:
                    lines.append(f"| {dataset}, {size:,} images, {variant}, ours: {name} | "
                                 f"{points(cell.loc[BASELINE, 'mean'])} | {points(cell.loc[name, 'mean'])} | "
                                 f"{100 * cell.loc[name, 'diff_mean']:+.2f} ± {points(cell.loc[name, 'diff_std'])} |")
    return "\n".join(lines)


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
        lines.append(f"- **flex_reg − flex, {row.variant}, {row.size:,} images:** {100 * row.diff_mean:+.2f} ± "
                     f"{points(row.diff_std)} points" + (", inside seed noise." if row.inside_noise else
                                                         ", beyond seed noise."))
    return "\n".join(lines)


def render(folder: Path = FOLDER) -> dict[str, str]:
    results = json.loads((folder / "results.json").read_text())
    frame = pd.read_csv(folder / "results.csv")
    summary = summarize(frame)
    return {"presets": render_presets(), "cost": render_cost(results), "scratch": render_table(summary, "scratch"),
            "frozen": render_table(summary, "frozen"), "paper": render_paper(summary, results["settings"]["dataset"]),
            "readings": render_readings(summary, frame)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, lambda _: render(), __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
