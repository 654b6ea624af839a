"""docs/task-arithmetic.md's numbers and readings, rendered from the committed run in docs/task-arithmetic/
(``poolkit bench task-arithmetic --out docs/task-arithmetic``) and the presets in ``poolkit_bench.task_arithmetic``.
Every comparison is a paired t-test over seeds on the mean over tasks (scripts/verdicts.py), Holm-adjusted over the
page.
"""

from __future__ import annotations

import pandas as pd
from rendering import ROOT, Page, changed_settings, load_and_machine, presets_table, run_files, span, table
from verdicts import Comparison, Verdict, Verdicts, counted

from poolkit_bench.task_arithmetic import MODES, PAPER, PRESETS, mode_summary, summarize

FOLDER = ROOT / "docs" / "task-arithmetic"
DESCRIBE = {"all": "all parameters", "attention": "attention only (W_q, W_k, W_v, W_o)",
            "attention_frozen_head": "attention only, head trained first then frozen"}
#: the measures two modes are compared on (per seed, the mean over tasks): column -> (name, higher is better)
MEASURES = {"finetuned_skill": ("single-task skill", True), "merged_skill": ("merged skill", True),
            "change": ("skill change by merging", True),
            "interference": ("interference (raw, not normalised by task-vector size)", False)}
#: Jin et al.'s claims: the text, the mode the claim favours, the mode it sets it against
CLAIMS = ((PAPER["attention_vs_all"], "attention", "all"), (PAPER["heads"], "attention_frozen_head", "attention"))
#: what each measure is to a claim: the measures it predicts a winner on, and what the others show beside it
PREDICTED = ("change", "interference")
ROLE = {"finetuned_skill": "nothing: what the mode gives before merging",
        "merged_skill": "nothing: what the merged model gives"}
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
    single-task skill, and for each claim whose modes ran, its two modes on every :data:`MEASURES`."""
    cells = frame.groupby(["mode", "seed"])[list(MEASURES)].mean()

    def paired(a: tuple[str, str], b: tuple[str, str]) -> tuple[list[float], list[float]]:
        both = pd.concat([cells.loc[a[0], a[1]], cells.loc[b[0], b[1]]], axis=1, keys=["a", "b"]).dropna()
        return both["a"].tolist(), both["b"].tolist()

    modes = modes_in(frame)
    found = [Comparison(f"cost:{mode}", f"`{mode}` merged", f"`{mode}` single-task",
                        *paired((mode, "merged_skill"), (mode, "finetuned_skill")), "skill", **NUMBERS)
             for mode in modes]
    for _, a, b in CLAIMS:
        if {a, b} <= set(modes):
            found += [Comparison(f"{column}:{a}-{b}", f"`{a}`", f"`{b}`", *paired((a, column), (b, column)), what,
                                 higher_is_better=higher, **NUMBERS)
                      for column, (what, higher) in MEASURES.items()]
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
    return presets_table("poolkit_bench.task_arithmetic", PRESETS, column, names)


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
                 pm(row.interference_mean, row.interference_std), pm(row.alpha_mean, row.alpha_std, "{:.2f}")]
                for row in part.itertuples(index=False)]
        lines += [f"**{DESCRIBE[mode]}** (`{mode}`; {int(part['seeds'].iloc[0])} seeds, mean ± sample std):", "",
                  table(["task", "metric", "single task", "merged", "own vector alone", "single-task skill",
                         "merged skill", "skill change by merging", "interference", "alpha"], rows,
                        align="llrrrrrrrr"), ""]
    return "\n".join(lines)


def render_modes(frame: pd.DataFrame, modes: pd.DataFrame, verdicts: Verdicts) -> str:
    """Per mode, the mean over tasks: the trainable parameters of a task's run, the skills and the interference
    (mean ± sample std over seeds), and what merging changed, tested (merged − single-task, 95% interval)."""
    params = frame.groupby("mode")["trainable_params"]
    rows = [[f"`{row.mode}`", span(params.get_group(row.mode).unique() / 1e6, unit="M"),
             pm(row.finetuned_skill_mean, row.finetuned_skill_std), pm(row.merged_skill_mean, row.merged_skill_std),
             verdicts[f"cost:{row.mode}"].difference() + verdicts[f"cost:{row.mode}"].mark,
             pm(row.interference_mean, row.interference_std)] for row in modes.itertuples(index=False)]
    return table(["mode", "trainable parameters per task's run", "single-task skill", "merged skill",
                  "skill change by merging (95% interval)", "interference (raw)"], rows, align="lrrrrr")


def beside(verdict: Verdict, favoured: str) -> str:
    """How a verdict reads beside a claim that predicts ``favoured`` to win it."""
    if not verdict.detected:
        return "not shown: inside the noise" if verdict.tested else "not tested"
    return "as the claim predicts" if verdict.winner == favoured else "against the claim"


def render_paper(frame: pd.DataFrame, verdicts: Verdicts) -> str:
    """Each claim of the paper whose modes ran: its two modes on every measure, the verdict, and how it reads beside
    what the claim predicts (a winner on the skill change by merging and on the interference; nothing on the
    skills themselves, which show what the favoured mode gives or costs)."""
    lines = []
    for claim, a, b in CLAIMS:
        if not {a, b} <= set(modes_in(frame)):
            continue
        rows = []
        for column, (what, _) in MEASURES.items():
            verdict = verdicts[f"{column}:{a}-{b}"]
            predicts = f"`{a}` wins" if column in PREDICTED else ROLE[column]
            rows.append([what, predicts, verdict.sentence(), beside(verdict, f"`{a}`") if column in PREDICTED
                         else "—"])
        lines += [f"**{claim}** (Jin et al.): `{a}` against `{b}`", "",
                  table(["measure (mean over tasks)", "the claim predicts", "verdict here", "beside the claim"], rows),
                  ""]
    return "\n".join(lines)


def render_budget(results: dict) -> str:
    """Per mode, the fine-tuning runs (seed × task) whose best epoch is the last of the budget, read as
    under-trained when most are, and the merges whose alpha is the grid's lowest."""
    settings, runs = results["settings"], results["runs"]
    epochs, lowest = settings["epochs"], min(settings["grid"])
    rows = []
    for mode in [m for m in MODES if m in settings["modes"]]:
        merges = [run for run in runs if run["mode"] == mode]
        last = [best == epochs for run in merges for best in run["best_epochs"].values()]
        rows.append([f"`{mode}`", counted(last), "under-trained" if 2 * sum(last) > len(last) else "—",
                     counted(run["alpha"] <= lowest for run in merges)])
    return table(["mode", f"fine-tuning runs whose best epoch is the last (epoch {epochs} of {epochs})", "reading",
                  f"merges at the grid's lowest alpha ({lowest:g})"], rows, align="lrlr")


def render_cost(results: dict) -> str:
    s, prov = results["settings"], results["provenance"]
    default = PRESETS["default"]
    changed = changed_settings(s, default)
    return (f"The committed run (`docs/task-arithmetic/results.json`; preset {s['preset']}, settings that differ from "
            f"the default preset: {changed}): {len(s['modes'])} modes × {s['seeds']} seeds × "
            f"{len(s['tasks'])} tasks. It took {results['runtime_seconds'] / 60:.1f} minutes of wall time and "
            f"{results['cpu_seconds'] / 60:.1f} CPU-minutes with {s['threads']} torch threads on {prov['cores']} "
            "cores. " + load_and_machine(results))


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    verdicts = Verdicts(comparisons(frame))
    return {"presets": render_presets(), "data": render_data(results), "results": render_results(summarize(frame)),
            "modes": render_modes(frame, mode_summary(frame), verdicts), "budget": render_budget(results),
            "paper": render_paper(frame, verdicts), "verdicts": verdicts.block(), "cost": render_cost(results)}


PAGE = Page("docs/task-arithmetic.md", render, readings=True)
