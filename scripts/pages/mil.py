"""docs/mil.md's numbers, rendered from the committed run in docs/mil/ (``poolkit bench mil --out docs/mil``) and the
presets in ``poolkit_bench.mil``.
"""

from __future__ import annotations

import pandas as pd
from rendering import ROOT, Page, changed_settings, presets_table, run_files, table

from poolkit_bench.mil import ABLATION_BASE, PAPER, PRESETS, paired_differences, summarize

FOLDER = ROOT / "docs" / "mil"
SCORER = f"{ABLATION_BASE}:scorer="


def render_presets() -> str:
    def column(c) -> list[str]:
        return [", ".join(c.datasets), f"{c.folds}-fold × {c.repeats}", f"{len(c.poolers)}",
                "fc " + "-".join(map(str, c.widths)) + " + ReLU", ", ".join(f"{lr:g}" for lr in c.lrs),
                f"{c.epochs} (checkpoints every {c.eval_every})", f"{c.inner_splits} × {c.inner_fraction:.0%}",
                f"Adam, weight decay {c.weight_decay:g}, {c.batch_size} bags per step",
                f"{c.workers} worker(s) × {c.threads} torch thread"]
    names = ["datasets", "cross-validation", "poolers", "instance MLP", "learning-rate grid", "most epochs",
             "inner hold-outs of the training fold", "optimiser", "execution"]
    return presets_table("poolkit_bench.mil", PRESETS, column, names)


def render_data(results: dict) -> str:
    return table(["dataset", "bags", "positive", "instances", "largest bag", "features"],
                 [[name, d["bags"], d["positive"], f"{d['instances']:,}", f"{d['largest_bag']:,}", d["features"]]
                  for name, d in results["data"].items()], align="lrrrrr")


def render_accuracy(summary: pd.DataFrame, results: dict) -> str:
    repeats = results["settings"]["repeats"]
    spread = "sem_repeats" if repeats > 1 else "sem_folds"
    what = ("± the standard error over the repetitions' cross-validated accuracies, as the paper" if repeats > 1 else
            f"± the standard error over the {results['settings']['folds']} test folds (one repetition: the paper's "
            "± over repetitions cannot be formed; this one is larger, as single folds vary more than whole "
            "cross-validations)")
    datasets = list(dict.fromkeys(summary["dataset"]))
    lines = [f"Test accuracy, mean {what}; AUC in brackets. Rows marked *paper* are Ilse et al.'s Table 1 (mean ± "
             "standard error over five repetitions of 10-fold cross-validation), not ours.", ""]
    rows = []
    for label in dict.fromkeys(summary["pooler"]):
        cells = []
        for dataset in datasets:
            row = summary[(summary["pooler"] == label) & (summary["dataset"] == dataset)].iloc[0]
            cells.append(f"{row['accuracy']:.3f} ± {row[spread]:.3f} ({row['auc']:.3f})")
        rows.append([label, *cells])
        if label in PAPER:
            paper = [PAPER[label].get(d) for d in datasets]
            rows.append([f"*{label}, paper*", *(f"*{p[0]:.3f} ± {p[1]:.3f}*" if p else "—" for p in paper)])
    return "\n".join([*lines, table(["pooler", *datasets], rows, align="l" + "r" * len(datasets))])


def difference_cell(r) -> str:
    """A row of paired_differences in points: mean ± its 95% half-interval (wins/losses), *noise* when it holds 0."""
    noise = " *noise*" if r.inside_noise else ""
    return f"{100 * r.diff_mean:+.1f} ± {100 * r.ci95:.1f} ({r.wins}/{r.losses}){noise}"


def render_ablation(frame: pd.DataFrame, results: dict) -> str:
    diffs = paired_differences(frame, folds=results["settings"]["folds"])
    part = diffs[diffs["pooler"].str.startswith(SCORER) | (diffs["pooler"] == "attention")]
    lines = [f"Accuracy of each scorer minus abmil's (`{ABLATION_BASE}`, tanh and sigmoid) on the same test folds, in "
             "points: mean, its 95% interval (corrected resampled t, Nadeau & Bengio 2003), folds won / lost; *noise* "
             "when the interval holds 0.", ""]
    datasets = list(dict.fromkeys(part["dataset"]))
    rows = [[label.removeprefix(SCORER) if label.startswith(SCORER) else "attention (tanh; a = 512, Xavier init)",
             *(difference_cell(r) for r in part[part["pooler"] == label].itertuples())]
            for label in dict.fromkeys(part["pooler"])]
    lines.append(table(["scorer", *datasets], rows, align="l" + "r" * len(datasets)))
    overall = part[(part["dataset"] == "all") & part["pooler"].str.startswith(SCORER)].set_index("pooler")
    glu = overall.loc[f"{SCORER}glu"] if f"{SCORER}glu" in overall.index else None
    if glu is not None:
        verdict = ("inside the noise: this run gives no evidence that the one-sided form wins (or loses)"
                   if glu["inside_noise"] else
                   ("beyond the noise: the one-sided form wins here" if glu["diff_mean"] > 0 else
                    "beyond the noise: the one-sided form loses here"))
        lines += ["", "**Does the one-sided glu win?** Over all datasets, glu − abmil = "
                      f"{100 * glu['diff_mean']:+.1f} "
                      f"± {100 * glu['ci95']:.1f} points ({glu['wins']} folds won, {glu['losses']} lost, the rest "
                      f"tied): {verdict}."]
    return "\n".join(lines)


def render_zonotope(frame: pd.DataFrame, results: dict) -> str:
    """zonotope_attention against attention (the same scorer; only the value maps differ) on the same folds."""
    if not {"zonotope_attention", "attention"} <= set(frame["pooler"]):
        return "This run has no `zonotope_attention` and `attention` rows to compare."
    diffs = paired_differences(frame, base="attention", folds=results["settings"]["folds"])
    rows = diffs[diffs["pooler"] == "zonotope_attention"]
    cells = [difference_cell(r) for r in rows.itertuples()]
    overall = rows[rows["dataset"] == "all"].iloc[0]
    verdict = ("inside the noise: no evidence here that the input-dependent value maps help (or hurt) on these bags"
               if overall["inside_noise"] else
               f"beyond the noise: the value maps {'help' if overall['diff_mean'] > 0 else 'hurt'} here")
    return "\n".join([
        "Accuracy of `zonotope_attention` minus `attention`'s on the same test folds, in points: mean, its 95% "
        "interval (corrected resampled t), folds won / lost; *noise* when the interval holds 0.", "",
        table(["", *rows["dataset"]], [["zonotope_attention − attention", *cells]], align="l" + "r" * len(rows)), "",
        f"Over all datasets: {100 * overall['diff_mean']:+.1f} ± {100 * overall['ci95']:.1f} points, {verdict}."])


def render_cost(results: dict) -> str:
    s, prov, runs = results["settings"], results["provenance"], results["runs"]
    default = PRESETS["default"]
    changed = changed_settings(s, default)
    fits = sum(r["cpu_seconds"] for r in runs)
    return (f"The committed run (`docs/mil/results.json`; settings that differ from the default preset: "
            f"{changed}): {len(s['datasets'])} datasets × {len(s['poolers'])} poolers × "
            f"{s['folds']} folds × {s['repeats']} repetition(s) = {len(runs)} outer folds, each with "
            f"{len(s['lrs']) * s['inner_splits']} inner fits and one final fit. It took "
            f"{results['runtime_seconds'] / 60:.1f} minutes of wall time and {results['cpu_seconds'] / 60:.1f} "
            f"CPU-minutes ({fits / 60:.1f} of them inside the folds) with {s['workers']} worker process(es) of "
            f"{s['threads']} torch thread each, on {prov['cores']} cores that other jobs shared (load average, 1 min: "
            f"{results['load_average_start_end'][0][0]:.1f} at the start, {results['load_average_start_end'][1][0]:.1f}"
            f" at the end). Commit {prov['commit'][:10] if prov.get('commit') else 'unknown'}, torch {prov['torch']}, "
            f"{prov['cpu']}, {prov['date']}.") if "extended" not in results else render_extended(results)


def render_extended(results: dict) -> str:
    """The cost of a run extended with ``--extend``: the earlier run's and the extension's, and the reproduction
    check of the earlier rows."""
    s, ext, runs = results["settings"], results["extended"], results["runs"]
    earlier, added = ext["earlier"], ext["poolers_added"]

    def part(what: dict, poolers: list[str], rows: int) -> str:
        p = what["provenance"]
        return (f"{', '.join(f'`{x}`' for x in poolers)}: {rows} outer folds in {what['runtime_seconds'] / 60:.1f} "
                f"minutes of wall time and {what['cpu_seconds'] / 60:.1f} CPU-minutes (load average, 1 min: "
                f"{what['load_average_start_end'][0][0]:.1f} at the start, {what['load_average_start_end'][1][0]:.1f} "
                f"at the end), commit {(p.get('commit') or 'unknown')[:10]}, torch {p['torch']}, {p['cpu']}, "
                f"{p['date']}")

    checks = ext["reproduced"]
    same = [c for c in checks if c["same"]]
    differ = [f"`{c['pooler']}` (accuracy {c['then']['accuracy']:.3f} then, {c['now']['accuracy']:.3f} now)"
              for c in checks if not c["same"]]
    checked = ""
    if checks:
        first = checks[0]
        checked = (f"Before the extension ran, fold {first['fold']} of repetition {first['repeat']} of "
                   f"{first['dataset']} was re-run at the extension's commit for each of the {len(checks)} earlier "
                   f"poolers: {len(same)} gave the same accuracy, AUC, learning rate, epochs and inner accuracy"
                   + (f"; {len(differ)} did not: {', '.join(differ)}, so the rows of the two commits are not "
                      "strictly comparable." if differ else ": the earlier rows agree with this code where checked."))
    return (f"The committed run (`docs/mil/results.json`) was made in two parts with one protocol (the settings "
            f"recorded in the file; the folds, seeds and grids are the same, so every row is paired fold for fold; "
            f"each row records its commit in `results.csv`): {len(s['datasets'])} datasets × {len(s['poolers'])} "
            f"poolers × {s['folds']} folds × {s['repeats']} repetition(s) = {len(runs)} outer folds, each with "
            f"{len(s['lrs']) * s['inner_splits']} inner fits and one final fit, with {s['workers']} worker process(es) "
            f"of {s['threads']} torch thread each on 2 cores that other jobs shared. "
            f"{part(earlier, earlier['poolers'], sum(r['pooler'] in earlier['poolers'] for r in runs))}. Then "
            f"`poolkit bench mil --extend docs/mil --poolers {' '.join(added)}` added "
            f"{part(results, added, sum(r['pooler'] in added for r in runs))} (its wall time includes the "
            f"re-run folds). {checked}")


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    summary = summarize(frame)
    return {"presets": render_presets(), "data": render_data(results), "accuracy": render_accuracy(summary, results),
            "ablation": render_ablation(frame, results), "zonotope": render_zonotope(frame, results),
            "cost": render_cost(results)}


PAGE = Page("docs/mil.md", render)
