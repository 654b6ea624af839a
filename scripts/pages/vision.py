"""docs/vision.md's numbers, rendered from the committed run in docs/vision/ (``poolkit bench vision --out
docs/vision``) and the presets in ``poolkit_bench.vision_config``. Every reading comes from one ``Verdicts`` over the
page: each pooler against gap, and flex_reg against flex, per variant and size, paired per seed and Holm-adjusted
together.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from rendering import (ROOT, Page, accuracy_cells, changed_settings, difference, load_and_machine, points,
                       presets_table, run_files, table)
from verdicts import Comparison, Verdicts, counted, grouped_readings, last_epochs

from poolkit_bench.vision import PAPER, summarize
from poolkit_bench.vision_config import BASELINE, PRESETS

FOLDER = ROOT / "docs" / "vision"
TITLES = {"scratch": "Trained from scratch", "frozen": "Frozen GAP backbone: pooler + head retrained (post hoc)"}
SETTINGS = {"scratch": "from scratch", "frozen": "frozen backbone"}
#: the pooler families the page reads together against gap; gem is a power mean (p learned from 3), between the mean
#: and the maximum, grouped with the maxima as the page always has
FAMILIES = {"the poolers that take a maximum (gmp, avgmax) or lean towards one (gem)": ("gmp", "gem", "avgmax"),
            "FlexPooling's poolers (flex, flex_reg, flex+sac)": ("flex", "flex_reg", "flex+sac")}


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
    return presets_table("poolkit_bench.vision_config", PRESETS, column, names)


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


def key(variant: str, size: int, a: str, b: str) -> str:
    """The key of comparison ``a`` against ``b`` in one variant and size."""
    return f"{variant} {size} {a} - {b}"


def settings(frame: pd.DataFrame):
    """(variant, size, the poolers run there, in the run's order) per setting of ``frame``, in the run's order."""
    for (variant, size), part in frame.groupby(["variant", "size"], sort=False):
        yield variant, int(size), list(dict.fromkeys(part["pooler"]))


def comparisons(frame: pd.DataFrame) -> list[Comparison]:
    """The page's comparisons on test accuracy, paired per seed, per variant and size: each pooler against gap, then
    flex_reg against flex (does the paper's regularised setting add to flex here?)."""
    found, wide = [], frame.pivot(index=["variant", "size", "seed"], columns="pooler", values="accuracy")
    for variant, size, poolers in settings(frame):
        accuracy = wide.loc[(variant, size)]
        pairs = [(name, BASELINE) for name in poolers if name != BASELINE]
        pairs += [("flex_reg", "flex")] if {"flex", "flex_reg"} <= set(poolers) else []
        for a, b in pairs:
            both = accuracy[[a, b]].dropna()
            found.append(Comparison(key(variant, size, a, b), a, b, both[a].tolist(), both[b].tolist(),
                                    f"test accuracy, {SETTINGS[variant]}, {size:,} images", digits=2))
    return found


def render_table(summary: pd.DataFrame, variant: str, verdicts: Verdicts) -> str:
    part = summary[summary["variant"] == variant]
    sizes = list(dict.fromkeys(part["size"]))
    rows = []
    for name in dict.fromkeys(part["pooler"]):
        cells = [name]
        for size in sizes:
            row = part[(part["pooler"] == name) & (part["size"] == size)].iloc[0]
            cells += accuracy_cells(row, name == BASELINE, verdicts[key(variant, size, name, BASELINE)].mark
                                    if name != BASELINE else "")
        rows.append(cells)
    header = ["pooler", *(part for n in sizes for part in (f"{n:,} images: accuracy %", "vs gap (points)"))]
    return "\n".join([f"**{TITLES[variant]}.** Test accuracy, mean ± sample std over seeds; vs gap: the mean ± "
                      "sample std of the per-seed differences, *(noise)* when its paired t-test, Holm-adjusted over "
                      "the page (the verdicts block), leaves it inside the noise.", "",
                      table(header, rows, align="l" + "r" * (len(header) - 1))])


def render_paper(summary: pd.DataFrame, dataset: str, verdicts: Verdicts) -> str:
    tiny = PAPER["tiny_imagenet"]
    rows = [["Tiny ImageNet, the paper's (Ali et al. 2023)", tiny["gap"], tiny["flex"],
             f"{tiny['flex'] - tiny['gap']:+.2f}"],
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
                                 difference(cell.loc[name, "diff_mean"], cell.loc[name, "diff_std"])
                                 + verdicts[key(variant, size, name, BASELINE)].mark])
    return table(["setting", "GAP", "flex", "flex − GAP (points)"], rows, align="lrrr")


def render_readings(frame: pd.DataFrame, verdicts: Verdicts) -> str:
    """Per variant and size, the poolers' readings against gap; flex_reg against flex; then per variant, how many of
    each family's comparisons against gap leave the noise, and whom they favour."""
    lines, found = [], list(settings(frame))
    for variant, size, poolers in found:
        against = [verdicts[key(variant, size, name, BASELINE)] for name in poolers if name != BASELINE]
        lines.append(f"- **{SETTINGS[variant]}, {size:,} images, against gap:** "
                     f"{grouped_readings(against, BASELINE)}.")
    for variant, size, poolers in found:
        if {"flex", "flex_reg"} <= set(poolers):
            lines.append(f"- **flex_reg against flex, {SETTINGS[variant]}, {size:,} images:** "
                         f"{verdicts[key(variant, size, 'flex_reg', 'flex')].sentence()}.")
    for variant in dict.fromkeys(v for v, _, _ in found):
        for label, family in FAMILIES.items():
            family_verdicts = [verdicts[key(variant, size, name, BASELINE)] for v, size, poolers in found
                               if v == variant for name in family if name in poolers]
            if family_verdicts:
                won = sum(v.winner == v.comparison.a for v in family_verdicts)
                lost = sum(v.winner == BASELINE for v in family_verdicts)
                lines.append(f"- **{SETTINGS[variant]}, {label} against gap, over the sizes:** "
                             f"{counted(v.detected for v in family_verdicts)} comparisons leave the noise"
                             + (f": {won} won by the pooler, {lost} by gap." if won + lost else "."))
    return "\n".join(lines)


def render_epochs(results: dict) -> str:
    """Per variant, pooler and size, the runs whose chosen (best-validation) epoch is the last of their budget;
    'under-trained' where most are."""
    runs = pd.DataFrame(results["runs"])
    runs["last"] = [best == len(curve) - 1 for best, curve in zip(runs["best_epoch"], runs["val_accuracy"])]
    columns = [(v, n) for v in SETTINGS for n in results["settings"]["sizes"]
               if ((runs["variant"] == v) & (runs["size"] == n)).any()]

    groups = dict(list(runs.groupby(["pooler", "variant", "size"])["last"]))
    rows = [[name, *(last_epochs(groups[name, v, n]) if (name, v, n) in groups else "—" for v, n in columns)]
            for name in results["settings"]["poolers"]]
    totals = "; ".join(f"{SETTINGS[v]} {last_epochs(runs[runs['variant'] == v]['last'])}"
                       for v in dict.fromkeys(v for v, _ in columns))
    return "\n".join([f"Runs whose chosen epoch is the last of their {results['settings']['epochs']}: "
                      f"{counted(runs['last'])} in all; {totals}.", "",
                      table(["pooler", *(f"{SETTINGS[v]}, {n:,} images" for v, n in columns)], rows,
                            align="l" + "r" * len(columns))])


def page_verdicts(frame: pd.DataFrame) -> Verdicts:
    """The page's one family: every setting's (variant and size) comparisons, tested and Holm-adjusted together."""
    return Verdicts(comparisons(frame))


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    summary, verdicts = summarize(frame), page_verdicts(frame)
    return {"presets": render_presets(), "cost": render_cost(results),
            "scratch": render_table(summary, "scratch", verdicts), "frozen": render_table(summary, "frozen", verdicts),
            "paper": render_paper(summary, results["settings"]["dataset"], verdicts),
            "readings": render_readings(frame, verdicts), "epochs": render_epochs(results),
            "verdicts": verdicts.block()}


PAGE = Page("docs/vision.md", render, readings=True)
