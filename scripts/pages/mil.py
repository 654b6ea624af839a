"""docs/mil.md's numbers, rendered from the committed run in docs/mil/ (``poolkit bench mil --out docs/mil``) and the
presets in ``poolkit_bench.mil_config``, and its readings, each from a declared test (:func:`comparisons`: the corrected
resampled t over the folds, Holm-adjusted over the page).
"""

from __future__ import annotations

import pandas as pd
from rendering import ROOT, Page, changed_settings, presets_table, run_files, table
from verdicts import Comparison, Verdicts, last_epochs, paired

from poolkit_bench.mil import ABLATION_BASE, PAPER, summarize
from poolkit_bench.mil_config import PRESETS

FOLDER = ROOT / "docs" / "mil"
SCORER = f"{ABLATION_BASE}:scorer="
GLU, BILINEAR = f"{SCORER}glu", f"{SCORER}bilinear"
#: the scorer ablation's comparisons (a, b): each scorer against abmil, and the one-sided gate against no
#: non-linearity
ABLATION = (("attention", ABLATION_BASE), (GLU, ABLATION_BASE), (BILINEAR, ABLATION_BASE), (GLU, BILINEAR))
ZONOTOPE = ("zonotope_attention", "attention")
#: the names the readings use
NAMES = {ABLATION_BASE: "abmil", GLU: "glu", BILINEAR: "bilinear"}
ALL = "all"


def render_presets() -> str:
    def column(c) -> list[str]:
        return [", ".join(c.datasets), f"{c.folds}-fold × {c.repeats}", f"{len(c.poolers)}",
                "fc " + "-".join(map(str, c.widths)) + " + ReLU", ", ".join(f"{lr:g}" for lr in c.lrs),
                f"{c.epochs} (checkpoints every {c.eval_every})", f"{c.inner_splits} × {c.inner_fraction:.0%}",
                f"Adam, weight decay {c.weight_decay:g}, {c.batch_size} bags per step",
                f"{c.workers} worker(s) × {c.threads} torch thread"]
    names = ["datasets", "cross-validation", "poolers", "instance MLP", "learning-rate grid", "most epochs",
             "inner hold-outs of the training fold", "optimiser", "execution"]
    return presets_table("poolkit_bench.mil_config", PRESETS, column, names)


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


def key(a: str, b: str, dataset: str) -> str:
    return f"{dataset}: {a} vs {b}"


def comparisons(frame: pd.DataFrame, folds: int) -> list[Comparison]:
    """:data:`ABLATION` and :data:`ZONOTOPE`, where the run has both poolers, on each dataset: test-fold accuracy,
    the corrected resampled t of a ``folds``-fold cross-validation (n_test / n_train = 1 / (folds - 1)). Not over
    the datasets pooled: three cross-validations are not one, and their folds' spreads differ."""
    datasets = list(dict.fromkeys(frame["dataset"]))
    return [Comparison(key(a, b, dataset), NAMES.get(a, a), NAMES.get(b, b),
                       *paired(frame[frame["dataset"] == dataset], ["repeat", "fold"], "pooler", "accuracy", a, b),
                       f"accuracy, {dataset}", test_over_train=1 / (folds - 1))
            for a, b in [*ABLATION, ZONOTOPE] if {a, b} <= set(frame["pooler"]) for dataset in datasets]


def difference_cell(verdict) -> str:
    """A comparison's difference in points with its adjusted interval, folds won / lost, and *(noise)* from its
    Holm-adjusted test."""
    c = verdict.comparison
    wins = sum(a > b for a, b in zip(c.a_values, c.b_values))
    losses = sum(a < b for a, b in zip(c.a_values, c.b_values))
    return f"{verdict.difference()}, {wins}/{losses}{verdict.mark}"


def differences_table(verdicts: Verdicts, pairs, datasets: list[str], label) -> str:
    """One row per declared (a, b) of ``pairs`` (named ``label(a, b)``), one column per dataset."""
    rows = [[label(a, b), *(difference_cell(verdicts[key(a, b, d)]) for d in datasets)]
            for a, b in pairs if key(a, b, datasets[0]) in verdicts]
    return table(["", *datasets], rows, align="l" + "r" * len(datasets))


def render_ablation(verdicts: Verdicts, datasets: list[str]) -> str:
    def label(a: str, b: str) -> str:
        shown = "attention (tanh; a = 512, Xavier init)" if a == "attention" else NAMES[a]
        return f"{shown} − {NAMES[b]}"

    lines = [f"Accuracy differences between scorers (abmil: `{ABLATION_BASE}`, tanh and sigmoid) on the same test "
             "folds, in points: mean, its adjusted interval (corrected resampled t, Nadeau & Bengio 2003), folds won / "
             "lost; *(noise)* when the Holm-adjusted test of the page's verdicts keeps it inside the noise.", "",
             differences_table(verdicts, ABLATION, datasets, label)]
    against = [f"{d}: {verdicts[key(GLU, b, d)].sentence()}" for b in (ABLATION_BASE, BILINEAR) for d in datasets
               if key(GLU, b, d) in verdicts]
    if against:
        lines += ["", f"**Does the one-sided glu win?** Per dataset: {'; '.join(against)}."]
    return "\n".join(lines)


def render_zonotope(verdicts: Verdicts, datasets: list[str]) -> str:
    """zonotope_attention against attention (the same scorer; only the value maps differ) on the same folds."""
    a, b = ZONOTOPE
    if key(a, b, datasets[0]) not in verdicts:
        return "This run has no `zonotope_attention` and `attention` rows to compare."
    return "\n".join([
        "Accuracy of `zonotope_attention` minus `attention`'s on the same test folds, in points: mean, its adjusted "
        "interval (corrected resampled t), folds won / lost; *(noise)* when the Holm-adjusted test keeps it inside "
        "the noise.", "",
        differences_table(verdicts, [ZONOTOPE], datasets, lambda a, b: f"{a} − {b}"), "",
        "Per dataset: " + "; ".join(f"{d}: {verdicts[key(a, b, d)].sentence()}" for d in datasets) + "."])


def render_budget(frame: pd.DataFrame, results: dict) -> str:
    """Per pooler and dataset: the outer folds whose selected epochs were the budget's last checkpoint."""
    epochs = results["settings"]["epochs"]
    datasets = list(dict.fromkeys(frame["dataset"]))

    def shown(part: pd.DataFrame) -> str:
        return last_epochs(part["epochs"] == epochs)

    rows = [[label, *(shown(frame[(frame["pooler"] == label) & (frame["dataset"] == d)]) for d in datasets),
             shown(frame[frame["pooler"] == label])] for label in dict.fromkeys(frame["pooler"])]
    return "\n".join([
        f"Outer folds whose number of epochs, chosen on the inner hold-outs, was the budget's last checkpoint "
        f"({epochs} epochs; `results.csv`, `epochs`), per pooler; *under-trained* where most of its folds are:", "",
        table(["pooler", *datasets, ALL], rows, align="l" + "r" * (len(datasets) + 1))])


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
    verdicts = Verdicts(comparisons(frame, results["settings"]["folds"]))
    datasets = list(dict.fromkeys(frame["dataset"]))
    return {"presets": render_presets(), "data": render_data(results), "accuracy": render_accuracy(summary, results),
            "budget": render_budget(frame, results), "ablation": render_ablation(verdicts, datasets),
            "zonotope": render_zonotope(verdicts, datasets), "verdicts": verdicts.block(),
            "cost": render_cost(results)}


PAGE = Page("docs/mil.md", render, readings=True)
