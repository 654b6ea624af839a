"""docs/task-arithmetic.md's numbers, rendered from the committed run in docs/task-arithmetic/ (``poolkit bench
task-arithmetic --out docs/task-arithmetic``) and the presets in ``poolkit_bench.task_arithmetic``.

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

from poolkit_bench.task_arithmetic import MODES, PAPER, PRESETS, mode_summary, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "task-arithmetic.md"
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
    rows = ["Rendered from `poolkit_bench.task_arithmetic.PRESETS`:", "",
            "| setting | default | `--full` | `--quick` |", "|---|---|---|---|"]
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
                  "skill change by merging | interference | alpha |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in part.itertuples(index=False):
            lines.append(f"| {row.task} | {row.metric} | {pm(row.finetuned_mean, row.finetuned_std)} | "
                         f"{pm(row.merged_mean, row.merged_std)} | {pm(row.own_mean, row.own_std)} | "
                         f"{pm(row.finetuned_skill_mean, row.finetuned_skill_std)} | "
                         f"{pm(row.merged_skill_mean, row.merged_skill_std)} | "
                         f"{pm(row.change_mean, row.change_std, '{:+.3f}')} | "
                         f"{pm(row.interference_mean, row.interference_std)} | "
                         f"{pm(row.alpha_mean, row.alpha_std, '{:.2f}')} |")
        lines.append("")
    return "\n".join(lines)


def render_modes(modes: pd.DataFrame) -> str:
    lines = ["| mode | single-task skill | merged skill | skill change by merging | "
             "change − `all`'s (paired by seed) | interference |", "|---|---:|---:|---:|---:|---:|"]
    for row in modes.itertuples(index=False):
        diff = "—" if row.mode == "all" else pm(row.change_vs_all_mean, row.change_vs_all_std, "{:+.3f}")
        lines.append(f"| {row.mode} | {pm(row.finetuned_skill_mean, row.finetuned_skill_std)} | "
                     f"{pm(row.merged_skill_mean, row.merged_skill_std)} | "
                     f"{pm(row.change_mean, row.change_std, '{:+.3f}')} | {diff} | "
                     f"{pm(row.interference_mean, row.interference_std)} |")
    return "\n".join(lines)


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
    lines = ["| claim (Jin et al.) | ours: skill change by merging, paired by seed | ours: interference |",
             "|---|---|---|"]
    for claim, mode, other in ((PAPER["attention_vs_all"], "attention", "all"),
                               (PAPER["heads"], "attention_frozen_head", "attention")):
        if not {mode, other} <= set(by_mode.index):
            continue
        mean, std, seeds = paired(frame, mode, other, "change")
        better = "costs less" if mean > 0 else "does not cost less"
        inter = paired(frame, mode, other, "interference")
        lines.append(f"| {claim} | merging `{mode}` {better} than `{other}`: "
                     f"{pm(by_mode.loc[mode, 'change_mean'], by_mode.loc[mode, 'change_std'], '{:+.3f}')} vs "
                     f"{pm(by_mode.loc[other, 'change_mean'], by_mode.loc[other, 'change_std'], '{:+.3f}')}, "
                     f"difference {pm(mean, std, '{:+.3f}')}: {verdict(mean, std, seeds)} | "
                     f"`{mode}` − `{other}`: {pm(inter[0], inter[1], '{:+.3f}')} "
                     f"({'lower' if inter[0] < 0 else 'not lower'}; {verdict(*inter)}) |")
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
            "modes": render_modes(modes), "paper": render_paper(frame, modes), "cost": render_cost(results)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, lambda _: render(), __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
