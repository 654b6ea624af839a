"""Render docs/leaderboards/*/leaderboard.csv (written by scripts/make_leaderboards.sh) as markdown tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from poolkit.models.encoders import model_label

ROOT = Path(__file__).resolve().parent.parent / "docs" / "leaderboards"
HEADER = """# Leaderboards on real data

Made by `scripts/make_leaderboards.sh` (then `python scripts/render_leaderboards.py > docs/leaderboards.md`):
`poolkit compare` on two real datasets that ship with poolkit (WordNet 3.0 glosses), 15 poolers on a
frozen all-MiniLM-L6-v2 with the same 3 folds, seeds, optimiser and early stopping for every pooler.
Numbers are whatever came out; nothing is tuned per pooler (every pooler runs with its defaults).

"""


def render(folder: Path) -> str:
    frame = pd.read_csv(folder / "leaderboard.csv")
    saved = json.loads((folder / "leaderboard.json").read_text())
    settings = saved["settings"]
    # Runs that record how each fold chose its epoch used an inner split of its training rows; older ones chose
    # the epoch on the fold they report (a small optimistic bias): say which, from the file itself.
    inner = all("fold_detail" in row for row in saved.get("rows", [])) and saved.get("rows")
    protocol = ("the epoch chosen on an inner split of each fold's training rows" if inner else
                "**the epoch chosen on the same fold it is scored on** (the protocol before poolkit 0.2: "
                "slightly optimistic; `scripts/make_leaderboards.sh` reruns it without that)")
    lines = [f"### {folder.name}: {settings['data']}", "",
             f"{settings['rows']} rows, {settings['task']}, encoder {model_label(settings['model'])}, "
             f"{settings['folds']}-fold CV, ranked by {settings['metric']} "
             f"({'higher' if settings['higher_is_better'] else 'lower'} is better); frozen rows: pooler + head "
             f"trained on cached features (up to {settings['probe']['epochs']} epochs, early stopping, {protocol}); "
             f"encoding took {settings['encode_seconds']:.0f} s (0 when the feature cache was reused), the whole run "
             f"{settings['total_seconds'] / 60:.0f} min on a shared 2-core CPU.",
             "", f"![leaderboard](leaderboards/{folder.name}/leaderboard.png)", "",
             "| # | pooler | mode | " + settings["metric"] + " (mean ± sample std) | params | seconds |",
             "|---:|---|---|---:|---:|---:|"]
    for row in frame.itertuples():
        lines.append(f"| {row.rank} | `{row.pooler}` | {row.mode} | {row.mean:.4f} ± {row.std:.4f} | "
                     f"{row.params:,} | {row.seconds:.0f} |")
    lines += render_finetuned(folder, frame, settings["metric"])
    return "\n".join(lines) + "\n"


def render_finetuned(folder: Path, frame: pd.DataFrame, metric: str) -> list[str]:
    """Fine-tuned runs found under finetuned/*/metrics.json that the leaderboard has no row for (a run
    whose --finetune-top phase was stopped before it could rewrite the leaderboard)."""
    runs = sorted((folder / "finetuned").glob("*/metrics.json"))
    listed = set(frame.loc[frame["mode"] == "finetuned", "pooler"])
    runs = [r for r in runs if r.parent.name not in listed]
    if not runs:
        return []
    lines = ["", "Fine-tuned end to end (encoder + pooler + head, same folds), from each run's metrics.json:", "",
             f"| pooler | {metric} (mean ± std over folds) | frozen {metric} | params | seconds |",
             "|---|---:|---:|---:|---:|"]
    for path in runs:
        run = json.loads(path.read_text())
        values = [f["metrics"][metric] for f in run["folds"]]
        frozen = frame.loc[(frame["pooler"] == path.parent.name) & (frame["mode"] == "frozen"), "mean"]
        lines.append(f"| `{path.parent.name}` | {pd.Series(values).mean():.4f} ± {pd.Series(values).std():.4f} | "
                     f"{frozen.iloc[0]:.4f} | {run['total_params']:,} | {run['seconds']:.0f} |")
    return lines


if __name__ == "__main__":
    folders = sorted(p for p in ROOT.iterdir() if (p / "leaderboard.csv").exists())
    if not folders:
        sys.exit("no leaderboards yet: run scripts/make_leaderboards.sh")
    print(HEADER + "\n".join(render(f) for f in folders))
