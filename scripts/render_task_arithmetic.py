"""docs/task-arithmetic.md's numbers, rendered from the committed run in docs/task-arithmetic/ (``poolkit bench
task-arithmetic --out docs/task-arithmetic``) and the presets in ``poolkit.bench.task_arithmetic``.

    .venv/bin/python scripts/render_task_arithmetic.py --check     # exit 1 when the page differs from the files
    .venv/bin/python scripts/render_task_arithmetic.py --write     # update the page's marked blocks
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import markers  # noqa: E402

from poolkit.bench.task_arithmetic import MODES, PAPER, PRESETS, mode_summary, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "task-arithmetic.md"
FOLDER = ROOT / "docs" / "task-arithmetic"
DESCRIBE = {"all": "all parameters", "attention": "attention only (W_q, W_k, W_v, W_o)",
            "attention_frozen_head": "attention only, head trained first then frozen"}


def pm(mean: float, std: float, fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(mean)} ± {fmt.format(std)}" if std == std else fmt.format(mean)


def render_presets() -> str:
    """The three presets side by side."""
    def column(c) -> list[str]:
        return [", ".join(n.removeprefix("builtin:") for n in c.tasks), str(c.rows), f"{c.epochs}",
                str(c.batch_size), str(c.max_length), f"{c.encoder_lr:g} / {c.pooler_lr:g}", str(c.head_epochs),
                ", ".join(f"{a:g}" for a in c.grid), str(c.seeds), "all" if c.threads is None else str(c.threads)]
    names = ["tasks", "rows per task (64% fit, 16% validation, 20% test)", "epochs", "batch size", "max length",
             "encoder / pooler + head learning rate", "frozen-head epochs (first stage)", "alpha grid", "seeds",
             "torch threads"]
    rows = ["Rendered from `poolkit.bench.task_arithmetic.PRESETS`:", "", "| setting | default | `--full` | `--quick` |",
            "|---|---|---|---|"]
    cols = [column(PRESETS[p]) for p in ("default", "full", "quick")]
    rows += [f"| {n} | " + " | ".join(c[i] for c in cols) + " |" for i, n in enumerate(names)]
    return "\n".join(rows)


def render_data(results: dict) -> str:
    lines = ["| task | kind | rows used | source |", "|---|---|---:|---|"]
    for name, info in results["data"].items():
        lines.append(f"| {name} | {info['task']} | {info['rows']:,} | {info['source']} |")
    return "\n".join(lines)


def render_results(summary: pd.DataFrame) -> str:
    lines = []
    for mode in [m for m in MODES if m in set(summary["mode"])]:
        part = summary[summary["mode"] == mode]
        lines += [f"**{DESCRIBE[mode]}** (`{mode}`; {int(part['seeds'].iloc[0])} seeds, mean ± sample std):", "",
                  "| task | metric | single task | merged | own vector alone | single-task skill | merged skill | "
                  "normalised skill | interference | alpha |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in part.itertuples(index=False):
            lines.append(f"| {row.task} | {row.metric} | {pm(row.finetuned_mean, row.finetuned_std)} | "
                         f"{pm(row.merged_mean, row.merged_std)} | {pm(row.own_mean, row.own_std)} | "
                         f"{pm(row.finetuned_skill_mean, row.finetuned_skill_std)} | "
                         f"{pm(row.merged_skill_mean, row.merged_skill_std)} | "
                         f"{pm(row.normalised_mean, row.normalised_std)} | "
                         f"{pm(row.interference_mean, row.interference_std)} | {pm(row.alpha_mean, row.alpha_std, '{:.2f}')} |")
        lines.append("")
    return "\n".join(lines)


def render_modes(modes: pd.DataFrame) -> str:
    lines = ["| mode | single-task skill | merged skill | normalised skill | normalised − `all`'s (paired by seed) |",
             "|---|---:|---:|---:|---:|"]
    for row in modes.itertuples(index=False):
        diff = "—" if row.mode == "all" else pm(row.normalised_vs_all_mean, row.normalised_vs_all_std, "{:+.3f}")
        lines.append(f"| {row.mode} | {pm(row.finetuned_skill_mean, row.finetuned_skill_std)} | "
                     f"{pm(row.merged_skill_mean, row.merged_skill_std)} | {pm(row.normalised_mean, row.normalised_std)}"
                     f" | {diff} |")
    return "\n".join(lines)


def verdict(diff_mean: float, diff_std: float, seeds: int) -> str:
    """Whether a paired difference over seeds stands out of its seed spread."""
    if seeds < 2 or diff_std != diff_std:
        return "one seed: no spread to judge it by"
    if abs(diff_mean) <= diff_std:
        return f"within the seed spread (|mean| <= sample std over {seeds} seeds)"
    return f"larger than the seed spread over {seeds} seeds (a small sample)"


def render_paper(frame: pd.DataFrame, summary: pd.DataFrame, modes: pd.DataFrame) -> str:
    by_mode = modes.set_index("mode")
    lines = ["| claim (Jin et al.) | ours |", "|---|---|"]
    if {"all", "attention"} <= set(by_mode.index):
        row = by_mode.loc["attention"]
        direction = "higher" if row["normalised_vs_all_mean"] > 0 else "not higher"
        lines.append(f"| {PAPER['attention_vs_all']} | attention-only's normalised skill is {direction} than full "
                     f"fine-tuning's: {pm(row['normalised_mean'], row['normalised_std'])} vs "
                     f"{pm(by_mode.loc['all', 'normalised_mean'], by_mode.loc['all', 'normalised_std'])}, paired "
                     f"difference {pm(row['normalised_vs_all_mean'], row['normalised_vs_all_std'], '{:+.3f}')}: "
                     f"{verdict(row['normalised_vs_all_mean'], row['normalised_vs_all_std'], int(row['seeds']))} |")
    if {"attention", "attention_frozen_head"} <= set(by_mode.index):
        cell = frame.groupby(["mode", "seed"])["normalised"].mean()
        diff = (cell.loc["attention_frozen_head"] - cell.loc["attention"]).dropna()
        std = diff.std(ddof=1) if len(diff) > 1 else float("nan")
        inter = summary.groupby("mode")["interference_mean"].mean()
        direction = "higher" if diff.mean() > 0 else "not higher"
        lines.append(f"| {PAPER['heads']} | with the head trained first and frozen, attention-only's normalised skill "
                     f"is {direction}: paired difference {pm(diff.mean(), std, '{:+.3f}')} "
                     f"({verdict(diff.mean(), std, len(diff))}); mean interference over tasks "
                     f"{inter['attention_frozen_head']:.3f} frozen vs {inter['attention']:.3f} trained with the "
                     "encoder |")
    return "\n".join(lines)


def render_cost(results: dict) -> str:
    s, prov = results["settings"], results["provenance"]
    default = PRESETS["default"]
    changed = [f"{key} {value}" for key, value in s.items()
               if key != "preset" and json.loads(json.dumps(getattr(default, key))) != value]
    return (f"The committed run (`docs/task-arithmetic/results.json`; preset {s['preset']}, settings that differ from "
            f"the default preset: {'; '.join(changed) or 'none'}): {len(s['modes'])} modes × {s['seeds']} seeds × "
            f"{len(s['tasks'])} tasks. It took {results['runtime_seconds'] / 60:.1f} minutes of wall time and "
            f"{results['cpu_seconds'] / 60:.1f} CPU-minutes with {s['threads']} torch threads on {prov['cores']} "
            f"cores. Load average (1 min) {results['load_average_start_end'][0][0]:.1f} at the start, "
            f"{results['load_average_start_end'][1][0]:.1f} at the end. Commit "
            f"{prov['commit'][:10] if prov.get('commit') else 'unknown'}, torch {prov['torch']}, {prov['cpu']}.")


def render(folder: Path = FOLDER) -> dict[str, str]:
    results = json.loads((folder / "results.json").read_text())
    frame = pd.read_csv(folder / "results.csv")
    summary, modes = summarize(frame), mode_summary(frame)
    return {"presets": render_presets(), "data": render_data(results), "results": render_results(summary),
            "modes": render_modes(modes), "paper": render_paper(frame, summary, modes), "cost": render_cost(results)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, lambda _: render(), __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
