"""Render docs/leaderboards/*/leaderboard.csv (written by scripts/make_leaderboards.sh) as markdown tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent / "docs" / "leaderboards"


def render(folder: Path) -> str:
    frame = pd.read_csv(folder / "leaderboard.csv")
    settings = json.loads((folder / "leaderboard.json").read_text())["settings"]
    lines = [f"### {folder.name}: {settings['data']}", "",
             f"{settings['rows']} rows, {settings['task']}, encoder {Path(settings['model']).name}, "
             f"{settings['folds']}-fold CV, ranked by {settings['metric']} "
             f"({'higher' if settings['higher_is_better'] else 'lower'} is better); frozen rows: pooler + head "
             f"trained on cached features (up to {settings['probe']['epochs']} epochs, early stopping); "
             f"encoding took {settings['encode_seconds']:.0f} s, the whole run {settings['total_seconds'] / 60:.0f} min.",
             "", f"![leaderboard]({folder.name}/leaderboard.png)", "",
             "| # | pooler | mode | " + settings["metric"] + " (mean ± std) | params | seconds |",
             "|---:|---|---|---:|---:|---:|"]
    for row in frame.itertuples():
        lines.append(f"| {row.rank} | `{row.pooler}` | {row.mode} | {row.mean:.4f} ± {row.std:.4f} | "
                     f"{row.params:,} | {row.seconds:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    folders = sorted(p for p in ROOT.iterdir() if (p / "leaderboard.csv").exists())
    if not folders:
        sys.exit("no leaderboards yet: run scripts/make_leaderboards.sh")
    print("\n".join(render(f) for f in folders))
