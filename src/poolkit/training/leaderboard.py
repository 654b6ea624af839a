"""The leaderboard of ``poolkit compare``: rows, a terminal table, CSV + JSON + a plot, written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from ..io import atomic_write, atomic_write_json
from .metrics import Metric

COLUMNS = ["rank", "pooler", "mode", "metric", "mean", "std", "params", "seconds"]
OUTPUTS = ("leaderboard.csv", "leaderboard.json", "leaderboard.png")


def leaderboard_row(pooler: str, mode: str, metric: str, fold_metrics: list[dict[str, float]], params: int,
                    seconds: float) -> dict[str, Any]:
    """One pooler's row: the primary metric's mean and sample std over folds, plus every other metric's mean."""
    values = np.array([m[metric] for m in fold_metrics])
    row = {"pooler": pooler, "mode": mode, "metric": metric, "mean": float(values.mean()),
           "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0, "params": int(params),
           "seconds": round(float(seconds), 2), "folds": len(values)}
    for name in fold_metrics[0]:
        if name != metric:
            row[f"{name}_mean"] = float(np.mean([m[name] for m in fold_metrics]))
    return row


def rank(rows: list[dict[str, Any]], metric: Metric) -> pd.DataFrame:
    """Rows best first (within each mode: frozen rows, then fine-tuned rows), with a rank column."""
    frame = pd.DataFrame(rows)
    frame["_mode"] = frame["mode"].map({"frozen": 0, "finetuned": 1})
    frame = frame.sort_values(["_mode", "mean"], ascending=[True, not metric.higher_is_better], kind="stable")
    frame["rank"] = frame.groupby("mode").cumcount() + 1
    extra = [c for c in frame.columns if c not in COLUMNS and not c.startswith("_")]
    return frame[COLUMNS + extra].reset_index(drop=True)


def print_leaderboard(frame: pd.DataFrame, title: str, console: Console | None = None) -> None:
    table = Table(title=title)
    for column, justify in [("#", "right"), ("pooler", "left"), ("mode", "left"), ("metric", "left"),
                            ("mean ± std", "right"), ("params", "right"), ("seconds", "right")]:
        table.add_column(column, justify=justify)
    for row in frame.itertuples():
        table.add_row(str(row.rank), row.pooler, row.mode, row.metric, f"{row.mean:.4f} ± {row.std:.4f}",
                      f"{row.params:,}", f"{row.seconds:.1f}")
    console = console or Console()
    console.print(table, width=max(console.width, 110))  # no wrapped rows in logs and pipes


def plot_leaderboard(frame: pd.DataFrame, path: str | Path, title: str) -> None:
    """Horizontal bars of the primary metric with ±std error bars, best on top, fine-tuned rows coloured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = frame.iloc[::-1]
    colors = ["#d95f02" if mode == "finetuned" else "#1b9e77" for mode in ordered["mode"]]
    labels = [f"{p} (fine-tuned)" if m == "finetuned" else p for p, m in zip(ordered["pooler"], ordered["mode"])]
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(frame) + 1.4))
    ax.barh(labels, ordered["mean"], xerr=ordered["std"], color=colors, capsize=3)
    low = (ordered["mean"] - ordered["std"]).min()
    high = (ordered["mean"] + ordered["std"]).max()
    margin = (high - low) * 0.15 + 1e-9
    ax.set_xlim(max(0.0, low - margin) if low >= 0 else low - margin, high + margin)
    ax.set_xlabel(f"{frame['metric'].iloc[0]} (mean ± std over folds)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def write_leaderboard(out: Path, frame: pd.DataFrame, settings: dict[str, Any], details: dict[str, Any],
                      title: str) -> None:
    """leaderboard.csv (one row per pooler), leaderboard.json (rows + the run's settings), leaderboard.png."""
    atomic_write(out / "leaderboard.csv", lambda tmp: frame.to_csv(tmp, index=False))
    atomic_write_json(out / "leaderboard.json", {"settings": settings, "rows": frame.to_dict(orient="records"),
                                                 **details})
    atomic_write(out / "leaderboard.png", lambda tmp: plot_leaderboard(frame, tmp, title))
