"""docs/leaderboards.md, rendered whole from the runs under docs/leaderboards/ (written by
scripts/make_leaderboards.sh).

Every number on the page comes from a leaderboard.json (and, for fine-tuned runs, finetuned/*/metrics.json) next
to it; each section names its files, commit and machine. Runs made before poolkit 0.2's protocol (epoch chosen
on the fold it is scored on) live in docs/leaderboards/before-0.2/ and appear only in the old-vs-new table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rendering import ROOT, Page, machine, read_json, table

from poolkit.errors import PoolkitError
from poolkit.models.encoders import model_label
from poolkit.training.baseline import baseline_label
from poolkit.training.curves import LearningCurve
from poolkit.training.cv import finetuned_row
from poolkit.training.leaderboard import Leaderboard, rank_key, test_over_train
from poolkit.training.significance import TIE_LEVEL, corrected_t_test, holm_tested

BOARDS = ROOT / "docs" / "leaderboards"
OLD = BOARDS / "before-0.2"
SCORERS = BOARDS / "scorers"


def load(folder: Path) -> dict:
    return read_json(folder / "leaderboard.json")


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def how_chosen(row: dict) -> str:
    """Per fold: the epoch an inner split chose (of the epochs run), or the baseline's regularisation."""
    details = row.get("fold_detail") or []
    parts = []
    for d in details:
        if "best_epoch" in d:
            parts.append(f"{d['best_epoch']:g}/{d['epochs_run']:g}")
        else:
            key = next(k for k in ("C", "alpha") if k in d)
            parts.append(f"{key}={d[key]:g}")
    return ", ".join(parts)


def provenance(settings: dict) -> str:
    p = settings.get("provenance")
    if not p:
        return "no provenance recorded"
    commit = (p["commit"] or "unknown commit")[:7] + (" (uncommitted changes)" if (p["commit"] or "").endswith("+dirty")
                                                       else "")
    return (f"commit {commit}, poolkit {p['poolkit']}, torch {p['torch']}, {machine(p['cpu'], p['cores'])}, "
            f"{p['date'][:10]}")


def finished_finetuning(folder: Path, s: dict, rows: list[dict]) -> list[dict]:
    """Fine-tuned rows of runs that finished (finetuned/*/metrics.json) when the compare run that started them was
    stopped before it could write them into leaderboard.json; ranked after the rows it did write."""
    listed = {r["pooler"] for r in rows if r["mode"] == "finetuned"}
    found = []
    for path in sorted((folder / "finetuned").glob("*/metrics.json")):
        run = read_json(path)
        if path.parent.name in listed or "std_ddof1" not in run:  # listed already, or the old protocol
            continue
        found.append(finetuned_row(path.parent.name, run["config"]["pooler"], run, run["seconds"]))
    found.sort(key=lambda r: rank_key(r["mean"], s["higher_is_better"]))
    return [{"rank": len(listed) + k + 1, **r} for k, r in enumerate(found)]


def p_value(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_text(p: float) -> str:
    """"p = 0.012", "p < 0.001": a p-value in a sentence."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def p_cell(row: dict) -> str:
    """The page's p column: the Holm-adjusted p against the best row of its mode, "tied" when p >= TIE_LEVEL."""
    if row.get("p_vs_best") is None:
        return "best" if row.get("tied_with_best") else ""
    return p_value(row["p_vs_best"]) + (" (tied)" if row["tied_with_best"] else "")


def cost_cell(row: dict) -> str:
    ms = row.get("infer_ms_per_1k")
    return "" if ms is None else f"{ms:.3g}" + (" (front)" if row.get("pareto") else "")


def render_board(folder: Path) -> list[str]:
    saved = load(folder)
    s = saved["settings"]
    late = finished_finetuning(folder, s, saved["rows"])
    rows = Leaderboard(saved["rows"] + late, s).rows  # each row tested against the best of its mode
    direction = "higher" if s["higher_is_better"] else "lower"
    tuned = [r for r in rows if r["mode"] == "finetuned"]
    costed = any(r.get("infer_ms_per_1k") is not None for r in rows)
    repeats = s.get("repeats", 1)
    cv = f"{s['folds']}-fold CV" + (f" repeated {repeats} times ({repeats * s['folds']} folds)" if repeats > 1 else "")
    lines = [f"### {folder.name}: {s['data']}", "",
             f"{s['rows']} rows, {s['task']}, encoder {model_label(s['model'])}, {cv}, ranked by "
             f"{s['metric']} ({direction} is better). Frozen rows: pooler + head trained on the cached layers, up to "
             f"{s['probe']['epochs']} epochs with patience {s['probe']['patience']}, each fold's epoch chosen on an "
             f"inner {s['probe']['val_fraction']:.0%} split of its training rows and its test rows scored once. "
             f"Encoding took {s['encode_seconds']:.0f} s (0 when the feature cache was reused), the whole run "
             f"{s['total_seconds'] / 60:.0f} min. From `{relative(folder / 'leaderboard.json')}`: "
             f"{provenance(s)}.", "",
             f"![leaderboard](leaderboards/{folder.name}/leaderboard.png)", "",
             table(["#", "pooler", "mode", f"{s['metric']} (mean ± sample std over folds)", "p vs best (Holm)",
                    *(["ms / 1k texts (Pareto front)"] if costed else []), "params", "seconds",
                    "chosen per fold (best epoch / epochs run; baseline: regularisation)"],
                   [[r["rank"], f"`{r['pooler']}`", r["mode"], f"{r['mean']:.4f} ± {r['std']:.4f}", p_cell(r),
                     *([cost_cell(r)] if costed else []), f"{r['params']:,}", f"{r['seconds']:.0f}",
                     how_chosen(r) if repeats == 1 else f"median: {median_epoch(r)}"] for r in rows],
                   align="rllrr" + ("r" if costed else "") + "rrl"),
             "", test_note(s, costed)]
    if tuned:
        settings = {r["pooler"]: read_json(folder / "finetuned" / r["pooler"] / "metrics.json")["config"]
                    for r in tuned}
        described = sorted({f"{c['epochs']} epochs, encoder learning rate {c['encoder_lr']:g}, pooler + head "
                            f"{c['pooler_lr']:g}" for c in settings.values()})
        lines += ["", f"Fine-tuned rows: encoder + pooler + head trained end to end on the same {s['folds']} folds "
                      f"({'; '.join(described)}; from each run's `finetuned/<pooler>/metrics.json`), each fold's "
                      "checkpoint chosen on the same inner split; `seconds` is the wall time of all its folds on the "
                      "shared 2-core machine; `params` counts the parameters trained (all of the model here; the frozen "
                      "rows count pooler + head)."]
    if s.get("finetune_top", 0) > len(tuned):
        names = ", ".join(f"`{r['pooler']}`" for r in late)
        lines += ["", f"`--finetune-top {s['finetune_top']}` was asked for; the run was stopped for time after "
                      f"{len(tuned)} fine-tuned pooler(s)"
                      + (f" (from `finetuned/*/metrics.json`: {names})" if late else "") + "."]
    lines += reading(s, rows, folder)
    if "learning_curve" in saved:
        lines += render_curve(folder, LearningCurve.from_dict(saved["learning_curve"]))
    return lines


def median_epoch(row: dict) -> str:
    """The median over the folds of the epoch each chose (the baseline: of its regularisation strength)."""
    details = row.get("fold_detail") or []
    key = next((k for k in ("best_epoch", "C", "alpha") if details and k in details[0]), None)
    if key is None:
        return "not recorded"
    value = float(np.median([d[key] for d in details]))
    return f"epoch {value:g}" if key == "best_epoch" else f"{key} = {value:g}"


def test_note(s: dict, costed: bool) -> str:
    """What the p and cost columns are, from the settings the run recorded."""
    ratio = s.get("test_over_train")
    source = (f"n_test / n_train = {ratio:.3f}, as the run recorded it" if ratio is not None
              else f"n_test / n_train = 1 / (K - 1) = {1 / (s['folds'] - 1):.3f} for K = {s['folds']} folds (the run "
                   "predates its record)")
    note = ("`p vs best`: the corrected resampled t-test (Nadeau & Bengio 2003) of each row's fold metrics against "
            f"the best row of its mode ({source}), Holm-adjusted over the other rows of that mode; a row with p >= "
            f"{TIE_LEVEL} is *tied* with the best: the folds do not tell them apart.")
    if costed:
        encode = s.get("encode_ms_per_1k")
        threads = s["probe"].get("threads", 1)
        note += (" `ms / 1k texts`: the pooler + head (baseline: mean pooling + the linear model) on the cached "
                 f"states, milliseconds per 1,000 texts at {threads} torch thread{'s' if threads > 1 else ''}, the "
                 "median of timed passes on the shared machine; *front*: on the Pareto front of the metric against "
                 "that cost."
                 + (f" The encoder itself took {encode:.0f} ms per 1,000 texts ({s.get('encode_device')}), so "
                    "the pooler is a small part of an embedding's cost." if encode is not None else ""))
    return note


def render_curve(folder: Path, curve: LearningCurve) -> list[str]:
    """The learning curve: each pooler's mean at each training size, and the reading of who leads where."""
    frame = curve.frame
    sizes = curve.sizes
    means = {(r.pooler, r.size): (r.mean, r.std) for r in frame.itertuples()}
    poolers = sorted({p for p, _ in means}, key=lambda p: -means[p, sizes[-1]][0] * (1 if curve.higher_is_better
                                                                                        else -1))
    return ["", f"Learning curve (`{relative(folder / 'learning_curve.csv')}`): each fold's training rows subsampled "
                "to each size (stratified by class, drawn with the fold's seed), its test rows kept, every pooler "
                f"trained again on the cached states; the last column is the board above. {curve.metric}, mean ± "
                "sample std over the folds:", "",
            f"![learning curve](leaderboards/{folder.name}/learning_curve.png)", "",
            table(["pooler", *(f"{size:,} rows" for size in sizes)],
                  [[f"`{p}`", *(f"{means[p, size][0]:.4f} ± {means[p, size][1]:.4f}" for size in sizes)]
                   for p in poolers], align="l" + "r" * len(sizes)),
            "", f"- {curve.reading()}"]


def reading(s: dict, rows: list[dict], folder: Path) -> list[str]:
    """Sentences computed from the rows: the best frozen pooler against the tuned linear baseline and mean."""
    sign = 1 if s["higher_is_better"] else -1
    frozen = [r for r in rows if r["mode"] == "frozen"]
    baseline = next((r for r in frozen if r["pooler"] == baseline_label(s["task"])), None)
    learned = [r for r in frozen if r is not baseline]
    best = learned[0]
    lines = ["", "Reading (computed from the rows above):", ""]
    if baseline is not None:
        if "fit_rows" not in baseline["fold_detail"][0]:
            lines.append(f"- This run's `{baseline['pooler']}` row comes from a poolkit that refitted the baseline on "
                         "all of each fold's training rows after choosing its strength, a quarter more rows than "
                         "the poolers were fit on: it favours the baseline (fixed since; the rerun records "
                         "`fit_rows` per fold).")
        margin = sign * (best["mean"] - baseline["mean"])
        tested = baseline if frozen[0] is best else best  # the one of the two that was tested against the other
        p = tested.get("p_vs_best")
        if p is None:
            verdict = f"scores {'better' if margin > 0 else 'worse'} by {abs(margin):.4f} (no test: one fold)"
        elif p < TIE_LEVEL:
            verdict = f"{'beats' if margin > 0 else 'trails'} it by {abs(margin):.4f} ({p_text(p)})"
        else:
            verdict = (f"is tied with it: {abs(margin):.4f} {'better' if margin > 0 else 'worse'} on the mean, a gap "
                       f"the folds do not tell from noise ({p_text(p)})")
        above = [r["pooler"] for r in learned if sign * (r["mean"] - baseline["mean"]) > 0]
        lines.append(f"- The tuned linear baseline `{baseline['pooler']}` scores {baseline['mean']:.4f}; the best "
                     f"pooler `{best['pooler']}` {verdict}. {len(above)} of {len(learned)} poolers score better on "
                     "the mean" + (f": {', '.join(f'`{b}`' for b in above)}." if above else "."))
    tied = [r["pooler"] for r in frozen[1:] if r.get("tied_with_best")]
    if any(r.get("p_vs_best") is not None for r in frozen):
        lines.append(f"- Tied with the best frozen row `{frozen[0]['pooler']}`: "
                     + (", ".join(f"`{t}`" for t in tied) if tied else "none") + f" ({len(tied)} of "
                     f"{len(frozen) - 1}; Holm-adjusted p >= {TIE_LEVEL}).")
    mean = next((r for r in learned if r["pooler"] == "mean"), None)
    if mean is not None and best is not mean:
        p = corrected_t_test([m[s["metric"]] for m in best["fold_metrics"]],
                             [m[s["metric"]] for m in mean["fold_metrics"]], test_over_train(s))
        told = "" if p is None else (f"; told apart ({p_text(p)}, one test)" if p < TIE_LEVEL
                                     else f"; not told apart ({p_text(p)}, one test)")
        lines.append(f"- `{best['pooler']}` against `mean` with the same AdamW-trained head: "
                     f"{best['mean']:.4f} vs {mean['mean']:.4f}{told}.")
    capped = [r["pooler"] for r in frozen if r.get("fold_detail") and "best_epoch" in r["fold_detail"][0]
              and all(d["best_epoch"] == d["epochs_run"] == s["probe"]["epochs"] for d in r["fold_detail"])]
    if capped:
        lines.append(f"- {len(capped)} frozen pooler(s) chose the last of {s['probe']['epochs']} epochs in every fold "
                     f"({', '.join(f'`{c}`' for c in capped)}): still improving on the inner split when the budget "
                     "ran out, so more epochs may help them.")
    for tuned in (r for r in rows if r["mode"] == "finetuned"):
        same = next(r for r in learned if r["pooler"] == tuned["pooler"])
        lines.append(f"- Fine-tuning `{tuned['pooler']}` end to end: {tuned['mean']:.4f} against {same['mean']:.4f} "
                     f"frozen, in {tuned['seconds'] / 60:.0f} min against {same['seconds']:.0f} s.")
    last = [r["pooler"] for r in rows if r["mode"] == "finetuned"
            and all(d["best_epoch"] == d["epochs_run"] for d in r.get("fold_detail") or [{"best_epoch": 0}])]
    if last:
        lines.append(f"- Fine-tuned with their checkpoint at the last epoch in every fold ({', '.join(f'`{p}`' for p in last)}):"
                     " still improving when training stopped, so these rows say little about what fine-tuning "
                     "can reach with a larger budget.")
    return lines


def render_old_vs_new(names: list[str]) -> list[str]:
    """Per pooler: the frozen score under the old protocol (epoch chosen on the scored fold) and the new one."""
    lines = []
    for name in names:
        if not (OLD / name / "leaderboard.json").exists():
            continue
        old, new = load(OLD / name), load(BOARDS / name)
        old_rows = {r["pooler"]: r for r in old["rows"] if r["mode"] == "frozen"}
        pairs = [(r, old_rows[r["pooler"]]) for r in new["rows"] if r["mode"] == "frozen" and r["pooler"] in old_rows]
        metric = new["settings"]["metric"]
        diffs = np.array([n["mean"] - o["mean"] for n, o in pairs])
        lines += [f"#### {name} ({metric}; old: `{relative(OLD / name / 'leaderboard.json')}`, "
                  f"{old['settings']['probe']['epochs']} epochs)", "",
                  table(["pooler", "old protocol", "new protocol", "new - old"],
                        [[f"`{n['pooler']}`", f"{o['mean']:.4f}", f"{n['mean']:.4f}", f"{n['mean'] - o['mean']:+.4f}"]
                         for n, o in pairs], align="lrrr")]
        lines += ["", f"Median change {np.median(diffs):+.4f}, range {diffs.min():+.4f} to {diffs.max():+.4f} over "
                      f"{len(pairs)} poolers ({'lower' if new['settings']['higher_is_better'] else 'higher'} is worse). The "
                      "runs differ in more than where the epoch is chosen: the new one fits on the rows its inner "
                      f"split leaves ({1 - new['settings']['probe']['val_fraction']:.0%} of each fold's training "
                      "rows), and the code changed between the two "
                      "commits. So the change mixes the old protocol's optimism with a smaller training set; it "
                      "is not a measure of the selection bias alone.", ""]
    return lines


def render_scorers(folder: Path) -> list[str]:
    """The attention pooler with each ``scorer=`` on one board: each against tanh (its default) on the same folds,
    and the one-sided glu against abmil (both factors non-linear) and bilinear (neither)."""
    saved = load(folder)
    s = saved["settings"]
    sign = 1 if s["higher_is_better"] else -1
    rows = {r["config"].get("scorer", "tanh"): r for r in saved["rows"] if r["mode"] == "frozen"}
    per_fold = {name: np.array([m[s["metric"]] for m in r["fold_metrics"]]) for name, r in rows.items()}

    def against(name: str, base: str) -> float:
        """The mean paired difference over the folds, signed so that > 0 is better."""
        return float((sign * (per_fold[name] - per_fold[base])).mean())

    pairs = [(n, b) for n, b in (("glu", "abmil"), ("glu", "bilinear"), *((n, "tanh") for n in rows if n != "tanh"))
             if n in rows and b in rows]
    raw = [corrected_t_test(per_fold[n], per_fold[b], test_over_train(s)) for n, b in pairs]
    adjusted = holm_tested(raw)

    lines = [f"### {folder.name}: {s['data']}", "",
             f"`attention` (scoring width {rows['tanh']['config']['attn_size']}, Xavier init) with each `scorer=` on "
             f"{s['rows']} rows, {s['task']}, encoder {model_label(s['model'])}, the same {s['folds']} folds, budget "
             f"and epoch selection as the boards above (up to {s['probe']['epochs']} epochs, patience "
             f"{s['probe']['patience']}); the whole run {s['total_seconds'] / 60:.0f} min. From "
             f"`{relative(folder / 'leaderboard.json')}`: {provenance(s)}.", "",
             table(["scorer", f"{s['metric']} (mean ± sample std over folds)", "per fold", "− tanh, mean over folds",
                    "params", "seconds"],
                   [[f"`{name}`", f"{r['mean']:.4f} ± {r['std']:.4f}", ", ".join(f"{v:.3f}" for v in per_fold[name]),
                     "" if name == "tanh" else f"{against(name, 'tanh'):+.4f}", f"{r['params']:,}",
                     f"{r['seconds']:.0f}"] for name, r in rows.items()], align="lrrrrr")]
    lines += ["", "Reading (computed from the rows above; each comparison is the corrected resampled t-test of the "
                  f"two scorers' {s['folds']} fold metrics, Holm-adjusted over the {len(pairs)} comparisons listed; "
                  f"p >= {TIE_LEVEL}: not told apart from fold-to-fold noise):", ""]
    main = BOARDS / folder.name / "leaderboard.json"
    same = next((r for r in load(main.parent)["rows"] if r["mode"] == "frozen" and r["pooler"] == "attention"),
                None) if main.exists() else None
    if same is not None:
        lines.append(f"- The `tanh` row is plain `attention`, the same pooler and protocol as its row in the "
                     f"{folder.name} board above ({provenance(load(main.parent)['settings']).split(',')[0]}): "
                     f"{same['mean']:.4f} ± {same['std']:.4f} there, {rows['tanh']['mean']:.4f} ± "
                     f"{rows['tanh']['std']:.4f} here.")
    for (name, base), p in zip(pairs, adjusted):
        mean = against(name, base)
        told = ("no test" if p is None else f"told apart, {p_text(p)}" if p < TIE_LEVEL
                else f"not told apart, {p_text(p)}")
        lines.append(f"- `{name}` against `{base}`: {'better' if mean > 0 else 'worse'} by {abs(mean):.4f} "
                     f"{s['metric']} on average over the folds ({told}).")
    return lines


def render() -> str:
    folders = sorted(p for p in BOARDS.iterdir() if (p / "leaderboard.json").exists())
    if not folders:
        raise PoolkitError("no leaderboards yet: run scripts/make_leaderboards.sh")
    datasets = ", ".join(f"`{load(f)['settings']['data'].split(' ')[0]}`" for f in folders)
    lines = ["# Leaderboards on real data", "",
             "Rendered by `scripts/docs.py --write leaderboards` from the runs that `scripts/make_leaderboards.sh` writes "
             f"under `docs/leaderboards/` ({datasets}). Every pooler runs with its defaults on the same folds, seeds, "
             "optimiser and early stopping; nothing is tuned per pooler. The `mean+logistic` / `mean+ridge` row is "
             "the strongest cheap baseline: scikit-learn's logistic / ridge regression on mean-pooled features, its "
             "regularisation chosen on each fold's inner split. Each run records the commit it ran at: rerunning "
             "the script there gives the same numbers up to thread scheduling (timings vary with the machine's "
             "load); later commits can move them where the code changed.", ""]
    for folder in folders:
        lines += render_board(folder) + [""]
    scorers = sorted(p for p in SCORERS.glob("*") if (p / "leaderboard.json").exists())
    if scorers:
        lines += ["## Scorer ablation: attention's `scorer=`", "",
                  "The attention pooler's scoring function, swapped with `scorer=` (the formulas are in "
                  "`poolkit.pooling.attention.SCORERS` and [docs/mil.md](mil.md#scorer-ablation-is-the-one-sided-gate-"
                  "better)): `tanh` (additive attention, the default), `linear`, `bilinear` (no non-linearity), `glu` "
                  "(the non-linearity on one factor) and `abmil` (on both). The question of issue 16: does the "
                  "one-sided form win?", ""]
        for folder in scorers:
            lines += render_scorers(folder) + [""]
    old = render_old_vs_new([f.name for f in folders])
    if old:
        lines += ["## Old protocol against new", "",
                  "Before poolkit 0.2, compare chose each fold's epoch on the fold it then scored. The same "
                  "poolers, frozen, under both protocols:", "", *old]
    return "\n".join(lines).rstrip() + "\n"


PAGE = Page("docs/leaderboards.md", render)
