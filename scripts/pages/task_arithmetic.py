"""docs/task-arithmetic.md's numbers and readings, rendered from the committed run in docs/task-arithmetic/
(``poolkit bench task-arithmetic --out docs/task-arithmetic``) and the presets in
``poolkit_bench.task_arithmetic_config``. Every comparison is a paired t-test over seeds on the mean over tasks
(scripts/verdicts.py), Holm-adjusted over the page.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from rendering import ROOT, Page, changed_settings, load_and_machine, presets_table, run_files, span, table
from verdicts import Comparison, Verdict, Verdicts, counted

from poolkit_bench.task_arithmetic import PAPER, XI_ALPHAS, mode_summary, summarize
from poolkit_bench.task_arithmetic_config import MODES, PRESETS

FOLDER = ROOT / "docs" / "task-arithmetic"
DESCRIBE = {"all": "all parameters", "attention": "attention only (W_q, W_k, W_v, W_o)",
            "attention_frozen_head": "attention only, head trained first then frozen",
            "linearized": "all parameters of the encoder linearised at the base (tangent space)"}
#: the measures two modes are compared on (per seed, the mean over tasks): column -> (name, higher is better)
MEASURES = {"finetuned_skill": ("single-task skill", True), "merged_skill": ("merged skill", True),
            "change": ("skill change by merging", True),
            "interference_per_norm": ("interference per unit L2 norm added", False),
            "disentanglement_error": ("disentanglement error", False)}
#: what a measure shows beside a claim that predicts no winner on it
BEFORE, AFTER, CLOSE = ("nothing: what the mode gives before merging", "nothing: what the merged model gives",
                        "nothing: the two close")


@dataclass(frozen=True)
class Claim:
    """A paper's claim: its text and source, the mode it is about (``a``) and the one it sets it against (``b``),
    and per measure it is read on (:data:`MEASURES`' columns) the mode it predicts the winner, or what the measure
    shows beside it."""

    text: str
    source: str
    a: str
    b: str
    predicts: dict[str, str]


JIN, ORTIZ = "Jin et al.", "Ortiz-Jimenez et al."
CLAIMS = (
    Claim(PAPER["attention_vs_all"], JIN, "attention", "all",
          {"finetuned_skill": BEFORE, "merged_skill": AFTER, "change": "attention",
           "interference_per_norm": "attention", "disentanglement_error": "attention"}),
    Claim(PAPER["heads"], JIN, "attention_frozen_head", "attention",
          {"finetuned_skill": BEFORE, "merged_skill": AFTER, "change": "attention_frozen_head",
           "interference_per_norm": "attention_frozen_head", "disentanglement_error": "attention_frozen_head"}),
    Claim(PAPER["linearized_vs_all"], ORTIZ, "linearized", "all",
          {"finetuned_skill": "all", "merged_skill": "linearized", "interference_per_norm": "linearized",
           "disentanglement_error": "linearized"}),
    Claim(PAPER["linearized_vs_attention"], JIN, "linearized", "attention",
          {"finetuned_skill": "attention", "merged_skill": "attention", "interference_per_norm": CLOSE,
           "disentanglement_error": CLOSE}))
#: skills and interference print as the tables do: 3 decimals, no unit
NUMBERS = {"scale": 1.0, "unit": "", "digits": 3}


def pm(mean: float, std: float, fmt: str = "{:.3f}") -> str:
    """``mean ± std`` (the std unsigned; the mean alone when there is no std)."""
    return f"{fmt.format(mean)} ± {fmt.replace('+', '').format(std)}" if std == std else fmt.format(mean)


def modes_in(frame: pd.DataFrame) -> list[str]:
    """The run's modes, in :data:`MODES` order."""
    return [m for m in MODES if m in set(frame["mode"])]


def comparisons(frame: pd.DataFrame) -> list[Comparison]:
    """Every comparison the page reads, paired by seed on the mean over tasks: each mode's merged against its
    single-task skill, and for each claim whose modes ran, its two modes on each measure it is read on."""
    cells = frame.groupby(["mode", "seed"])[list(MEASURES)].mean(skipna=False)  # a task missing: no test

    def paired(a: tuple[str, str], b: tuple[str, str]) -> tuple[list[float], list[float]]:
        both = pd.concat([cells.loc[a[0], a[1]], cells.loc[b[0], b[1]]], axis=1, keys=["a", "b"])
        return both["a"].tolist(), both["b"].tolist()

    modes = modes_in(frame)
    found = [Comparison(f"cost:{mode}", f"`{mode}` merged", f"`{mode}` single-task",
                        *paired((mode, "merged_skill"), (mode, "finetuned_skill")), "skill", **NUMBERS)
             for mode in modes]
    for claim in CLAIMS:
        a, b = claim.a, claim.b
        if {a, b} <= set(modes):
            found += [Comparison(f"{column}:{a}-{b}", f"`{a}`", f"`{b}`", *paired((a, column), (b, column)), what,
                                 higher_is_better=higher, **NUMBERS)
                      for column, (what, higher) in MEASURES.items() if column in claim.predicts]
    return found


def render_presets() -> str:
    """The three presets side by side."""
    def column(c) -> list[str]:
        return [", ".join(n.removeprefix("builtin:") for n in c.tasks), str(c.rows), f"{c.epochs}",
                str(c.batch_size), str(c.max_length), f"{c.encoder_lr:g} / {c.pooler_lr:g}", str(c.head_epochs),
                ", ".join(f"{a:g}" for a in c.grid), str(c.seeds), "all" if c.threads is None else str(c.threads)]
    names = ["tasks", "rows per task (64% fit, 16% validation, 20% test)", "epochs", "batch size", "max length",
             "encoder / pooler + head learning rate", "frozen-head epochs (first stage)", "alpha grid", "seeds",
             "torch threads"]
    return (presets_table("poolkit_bench.task_arithmetic_config", PRESETS, column, names) + "\n\nIn every preset the "
            "disentanglement error is averaged over the shared alphas "
            f"{' and '.join(f'{a:g}' for a in XI_ALPHAS)} (`poolkit_bench.task_arithmetic.XI_ALPHAS`).")


def render_data(results: dict) -> str:
    return table(["task", "kind", "rows used", "source"],
                 [[name, info["task"], f"{info['rows']:,}", info["source"]] for name, info in results["data"].items()],
                 align="llrl")


def render_results(summary: pd.DataFrame) -> str:
    """Per mode, a row per task: every score's mean ± sample std over seeds (descriptive: the tests are on the
    means over tasks)."""
    lines = []
    for mode in [m for m in MODES if m in set(summary["mode"])]:
        part = summary[summary["mode"] == mode]
        rows = [[row.task, row.metric, pm(row.finetuned_mean, row.finetuned_std), pm(row.merged_mean, row.merged_std),
                 pm(row.own_mean, row.own_std), pm(row.finetuned_skill_mean, row.finetuned_skill_std),
                 pm(row.merged_skill_mean, row.merged_skill_std), pm(row.change_mean, row.change_std, "{:+.3f}"),
                 pm(row.interference_mean, row.interference_std), pm(row.tau_norm_mean, row.tau_norm_std, "{:.2f}"),
                 pm(row.interference_per_norm_mean, row.interference_per_norm_std),
                 pm(row.disentanglement_error_mean, row.disentanglement_error_std),
                 pm(row.alpha_mean, row.alpha_std, "{:.2f}")]
                for row in part.itertuples(index=False)]
        lines += [f"**{DESCRIBE[mode]}** (`{mode}`; {int(part['seeds'].iloc[0])} seeds, mean ± sample std):", "",
                  table(["task", "metric", "single task", "merged", "own vector alone", "single-task skill",
                         "merged skill", "skill change by merging", "interference", "task-vector norm",
                         "interference per unit norm added", "disentanglement error", "alpha"], rows,
                        align="llrrrrrrrrrrr"), ""]
    return "\n".join(lines)


def render_modes(frame: pd.DataFrame, modes: pd.DataFrame, verdicts: Verdicts) -> str:
    """Per mode, the mean over tasks: the trainable parameters of a task's run, the skills, the interference, the
    task vectors' norm and the disentanglement error (mean ± sample std over seeds), and what merging changed,
    tested (merged − single-task, 95% interval)."""
    params = frame.groupby("mode")["trainable_params"]
    norms = frame.groupby(["mode", "seed"])["tau_norm"].mean(skipna=False).groupby(level="mode").agg(["mean", "std"])
    rows = [[f"`{row.mode}`", span(params.get_group(row.mode).unique() / 1e6, unit="M"),
             pm(row.finetuned_skill_mean, row.finetuned_skill_std), pm(row.merged_skill_mean, row.merged_skill_std),
             verdicts[f"cost:{row.mode}"].difference() + verdicts[f"cost:{row.mode}"].mark,
             pm(row.interference_mean, row.interference_std), pm(*norms.loc[row.mode], "{:.2f}"),
             pm(row.interference_per_norm_mean, row.interference_per_norm_std),
             pm(row.disentanglement_error_mean, row.disentanglement_error_std)]
            for row in modes.itertuples(index=False)]
    return table(["mode", "trainable parameters per task's run", "single-task skill", "merged skill",
                  "skill change by merging (95% interval)", "interference (raw)", "task-vector norm",
                  "interference per unit norm added", "disentanglement error"], rows, align="lrrrrrrrr")


def beside(verdict: Verdict, favoured: str) -> str:
    """How a verdict reads beside a claim that predicts ``favoured`` to win it."""
    if not verdict.detected:
        return "not shown: inside the noise" if verdict.tested else "not tested"
    return "as the claim predicts" if verdict.winner == favoured else "against the claim"


def render_paper(frame: pd.DataFrame, verdicts: Verdicts) -> str:
    """Each claim whose modes ran: its two modes on each measure it is read on, the verdict, and how it reads beside
    what the claim predicts there (a winner, or nothing: what the measure shows beside it)."""
    lines = []
    for claim in CLAIMS:
        a, b = claim.a, claim.b
        if not {a, b} <= set(modes_in(frame)):
            continue
        rows = []
        for column, (what, _) in MEASURES.items():
            if column not in claim.predicts:
                continue
            verdict, winner = verdicts[f"{column}:{a}-{b}"], claim.predicts[column]
            rows.append([what, f"`{winner}` wins" if winner in MODES else winner, verdict.sentence(),
                         beside(verdict, f"`{winner}`") if winner in MODES else "—"])
        lines += [f"**{claim.text}** ({claim.source}): `{a}` against `{b}`", "",
                  table(["measure (mean over tasks)", "the claim predicts", "verdict here", "beside the claim"], rows),
                  ""]
    return "\n".join(lines)


def render_budget(results: dict) -> str:
    """Per mode, the fine-tuning runs (seed × task) whose best epoch is the last of the budget, read as
    under-trained when most are (with one epoch there is no choice to read), and the merges whose alpha is the grid's
    lowest."""
    settings, runs = results["settings"], results["runs"]
    epochs, lowest = settings["epochs"], min(settings["grid"])
    rows = []
    for mode in [m for m in MODES if m in settings["modes"]]:
        merges = [run for run in runs if run["mode"] == mode]
        last = [best == epochs for run in merges for best in run["best_epochs"].values()]
        reading = "no choice (one epoch)" if epochs == 1 else "under-trained" if 2 * sum(last) > len(last) else "—"
        rows.append([f"`{mode}`", counted(last), reading,
                     counted(run["alpha"] <= lowest for run in merges)])
    return table(["mode", f"fine-tuning runs whose best epoch is the last (epoch {epochs} of {epochs})", "reading",
                  f"merges at the grid's lowest alpha ({lowest:g})"], rows, align="lrlr")


def render_cost(results: dict, frame: pd.DataFrame) -> str:
    s, prov = results["settings"], results["provenance"]
    mean = frame.groupby("mode")["train_seconds"].mean()
    seconds = ", ".join(f"`{mode}` {mean[mode]:.0f} s" for mode in modes_in(frame))
    default = PRESETS["default"]
    changed = changed_settings(s, default)
    return (f"The committed run (`docs/task-arithmetic/results.json`; preset {s['preset']}, settings that differ from "
            f"the default preset: {changed}): {len(s['modes'])} modes × {s['seeds']} seeds × "
            f"{len(s['tasks'])} tasks. It took {results['runtime_seconds'] / 60:.1f} minutes of wall time and "
            f"{results['cpu_seconds'] / 60:.1f} CPU-minutes with {s['threads']} torch threads on {prov['cores']} "
            f"cores. Fine-tuning one task took, on average over its runs: {seconds}. " + load_and_machine(results))


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    verdicts = Verdicts(comparisons(frame))
    return {"presets": render_presets(), "data": render_data(results), "results": render_results(summarize(frame)),
            "modes": render_modes(frame, mode_summary(frame), verdicts), "budget": render_budget(results),
            "paper": render_paper(frame, verdicts), "verdicts": verdicts.block(), "cost": render_cost(results, frame)}


PAGE = Page("docs/task-arithmetic.md", render, readings=True)
