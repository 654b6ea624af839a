"""docs/task-arithmetic.md's numbers, rendered from the committed run in docs/task-arithmetic/ (``poolkit bench
task-arithmetic --out docs/task-arithmetic``) and the presets in ``poolkit_bench.task_arithmetic``.
"""

from __future__ import annotations

import pandas as pd
from rendering import ROOT, Page, changed_settings, load_and_machine, presets_table, run_files, table



from poolkit_bench.task_arithmetic import MODES, PAPER, PRESETS, mode_summary, summarize

FOLDER = ROOT / "docs" / "task-arithmetic"
DESCRIBE = {"all": "all parameters", "attention": "attention only (W_q, W_k, W_v, W_o)",
            "attention_frozen_head": "attention only, head trained first then frozen"}


def pm(mean: float, std: float, fmt: str = "{:.3f}") -> str:
    """``mean ± std`` (the std unsigned; the mean alone when there is no std)."""
    return f"{fmt.format(mean)} ± {fmt.replace('+', '').format(std)}" if std == std else fmt.format(mean)


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


def render_modes(modes: pd.DataFrame) -> str:
    rows = [[row.mode, pm(row.finetuned_skill_mean, row.finetuned_skill_std),
             pm(row.merged_skill_mean, row.merged_skill_std), pm(row.change_mean, row.change_std, "{:+.3f}"),
             "—" if row.mode == "all" else pm(row.change_vs_all_mean, row.change_vs_all_std, "{:+.3f}"),
             pm(row.interference_mean, row.interference_std)] for row in modes.itertuples(index=False)]
    return table(["mode", "single-task skill", "merged skill", "skill change by merging",
                  "change − `all`'s (paired by seed)", "interference"], rows, align="lrrrrr")


def verdict(diff_mean: float, diff_std: float, seeds: int) -> str:
    """Whether a paired difference over seeds stands out of its seed spread."""
    if seeds < 2 or diff_std != diff_std:
        return "one seed: no spread to judge it by"
    if abs(diff_mean) <= diff_std:
        return f"within the seed spread: the mean is within one sample std over {seeds} seeds"
    return f"larger than the seed spread over {seeds} seeds (a small sample)"


def paired(frame: pd.DataFrame, mode: str, other: str, column: str) -> tuple[float, float, int]:
    """``mode``'s per-seed mean over tasks of ``column`` minus ``other``'s: mean, sample std, seeds."""
    cell = frame.groupby(["mode", "seed"])[column].mean()
    diff = (cell.loc[mode] - cell.loc[other]).dropna()
    return float(diff.mean()), float(diff.std(ddof=1)) if len(diff) > 1 else float("nan"), len(diff)


def render_paper(frame: pd.DataFrame, modes: pd.DataFrame) -> str:
    """Each claim of the paper beside the paired differences it predicts: merging costs attention-only less skill
    than full fine-tuning, and less again with a head that did not train with the encoder."""
    by_mode = modes.set_index("mode")
    rows = []
    for claim, mode, other in ((PAPER["attention_vs_all"], "attention", "all"),
                               (PAPER["heads"], "attention_frozen_head", "attention")):
        if not {mode, other} <= set(by_mode.index):
            continue
        mean, std, seeds = paired(frame, mode, other, "change")
        better = "costs less" if mean > 0 else "does not cost less"
        inter = paired(frame, mode, other, "interference")
        rows.append([claim, f"merging `{mode}` {better} than `{other}`: "
                     f"{pm(by_mode.loc[mode, 'change_mean'], by_mode.loc[mode, 'change_std'], '{:+.3f}')} vs "
                     f"{pm(by_mode.loc[other, 'change_mean'], by_mode.loc[other, 'change_std'], '{:+.3f}')}, "
                     f"difference {pm(mean, std, '{:+.3f}')}: {verdict(mean, std, seeds)}",
                     f"`{mode}` − `{other}`: {pm(inter[0], inter[1], '{:+.3f}')} "
                     f"({'lower' if inter[0] < 0 else 'not lower'}; {verdict(*inter)})"])
    return table(["claim (Jin et al.)", "ours: skill change by merging, paired by seed", "ours: interference"], rows)


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
    summary, modes = summarize(frame), mode_summary(frame)
    return {"presets": render_presets(), "data": render_data(results), "results": render_results(summary),
            "modes": render_modes(modes), "paper": render_paper(frame, modes), "cost": render_cost(results)}



PAGE = Page("docs/task-arithmetic.md", render)
