"""The leaderboard of ``poolkit compare``: ranked rows with each pooler's spec, per-fold detail, a plain-text
table that fits the terminal, CSV + JSON + a plot, written atomically."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PoolkitError
from ..explain.report import write_compare_report
from ..io import atomic_write, atomic_write_json, file_digest

COLUMNS = ["rank", "pooler", "mode", "metric", "mean", "std", "params", "seconds"]
#: The linear baseline's row label (poolkit.training.baseline): a linear model on mean-pooled features, not a pooler
BASELINE_LABELS = {"regression": "mean+ridge", "classification": "mean+logistic"}
OUTPUTS = ("leaderboard.csv", "leaderboard.json", "leaderboard.png", "report.html")


def leaderboard_row(label: str, spec: dict[str, Any], mode: str, metric: str, fold_metrics: list[dict[str, float]],
                    params: int, seconds: float, fold_detail: list[dict[str, Any]] | None = None,
                    flat: bool = False) -> dict[str, Any]:
    """One pooler's row: the primary metric's mean and sample std (ddof = 1; None for one fold) over folds, every
    other metric's mean (as ``<name>_mean``; ``flat``: every metric's, the primary one's too, under its own name, as
    the embedding tasks give them), the pooler's spec (``config``), the per-fold test metrics (``fold_metrics``) and,
    when given, how each fold chose its model (``fold_detail``: best_epoch, epochs_run, inner validation and test
    metric)."""
    values = np.array([m[metric] for m in fold_metrics])
    row = {"pooler": label, "mode": mode, "metric": metric, "mean": float(values.mean()),
           "std": sample_std(values), "params": int(params),
           "seconds": round(float(seconds), 2), "folds": len(values)}
    for name in fold_metrics[0]:
        if flat or name != metric:
            row[name if flat else f"{name}_mean"] = float(np.mean([m[name] for m in fold_metrics]))
    return {**row, "config": spec, "fold_metrics": fold_metrics, **({"fold_detail": fold_detail} if fold_detail else {})}


class Leaderboard:
    """Poolers ranked by the primary metric (frozen rows first, then fine-tuned rows; each ranked in its mode).

    ``rows``: list of dicts (spec under ``config``, per-fold metrics under ``fold_metrics``); ``frame``: the same
    as a DataFrame without the per-fold detail; ``folds``: one line per (pooler, mode, fold) and metric values;
    ``settings``: the run's settings; ``explanation``: the best learned pooler's explained texts, shown in the
    report (:func:`poolkit.training.compare.explain_best`; None: none). ``str(board)`` is the table; ``to_csv`` /
    ``to_json`` / ``plot`` / ``save``.
    """

    def __init__(self, rows: list[dict[str, Any]], settings: dict[str, Any], explanation: Any = None) -> None:
        self.settings = settings
        self.explanation = explanation
        best = settings["higher_is_better"]
        order = sorted(range(len(rows)), key=lambda i: (rows[i]["mode"] != "frozen", rank_key(rows[i]["mean"], best)))
        ranks: dict[str, int] = {}
        self.rows = []
        for i in order:
            ranks[rows[i]["mode"]] = ranks.get(rows[i]["mode"], 0) + 1
            self.rows.append({"rank": ranks[rows[i]["mode"]], **rows[i]})

    def best(self, mode: str | None = None) -> dict[str, Any]:
        """The best row with a pooler of its own, the linear baseline left out: ``board.best()["config"]`` is the
        spec to train (``api.train(..., pooler=...)``); ``mode``: ``"frozen"`` (poolers trained on the cached
        states) or ``"finetuned"`` only (default: either, by the metric)."""
        if mode not in (None, "frozen", "finetuned"):
            raise PoolkitError(f"`mode` must be 'frozen' or 'finetuned' (or left out), got {mode!r}")
        rows = [row for row in self.rows if row["pooler"] not in BASELINE_LABELS.values()
                and (mode is None or row["mode"] == mode)]
        if not rows:
            which = f"{mode} pooler row" if mode else "pooler row"
            raise PoolkitError(f"the leaderboard has no {which} besides the baseline: leave `mode` out, or compare "
                               "more poolers")
        return min(rows, key=lambda row: rank_key(row["mean"], self.settings["higher_is_better"]))

    @property
    def title(self) -> str:
        s = self.settings
        return (f"{s['data']}: {s['rows']} rows, {s['task']}, {s['folds']}-fold {s['metric']} "
                f"({'higher' if s['higher_is_better'] else 'lower'} is better), encoder {s['model_label']}")

    @property
    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame([{k: v for k, v in row.items() if k not in ("fold_metrics", "fold_detail")}
                              for row in self.rows])
        return frame[COLUMNS + [c for c in frame.columns if c not in COLUMNS]]

    @property
    def folds(self) -> pd.DataFrame:
        return pd.DataFrame([{"pooler": row["pooler"], "mode": row["mode"], "fold": k, **metrics,
                              **(row["fold_detail"][k] if "fold_detail" in row else {})}
                             for row in self.rows for k, metrics in enumerate(row["fold_metrics"])])

    def to_text(self, width: int = 80) -> str:
        """The table in ``width`` columns: numbers never cut, long pooler names wrapped inside their column."""
        finetuned = any(row["mode"] != "frozen" for row in self.rows)
        header = ["#", "pooler", "mean ± std", "params", "sec"] + (["mode"] if finetuned else [])
        cells = [[str(row["rank"]), row["pooler"], mean_std(row["mean"], row["std"]), _compact(row["params"]),
                  f"{row['seconds']:.0f}"] + ([row["mode"]] if finetuned else []) for row in self.rows]
        widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(header)]
        room = width - (sum(widths) - widths[1]) - 2 * (len(header) - 1)
        widths[1] = max(10, min(widths[1], room))
        lines = textwrap.wrap(self.title, width) + [""]
        for k, row in enumerate([header, None, *cells]):
            if row is None:
                lines.append("  ".join("-" * w for w in widths))
                continue
            names = textwrap.wrap(row[1], widths[1], break_on_hyphens=False) or [""]
            for part, name in enumerate(names):
                values = row if part == 0 else [""] * len(row)
                line = [values[0].rjust(widths[0]), name.ljust(widths[1]),
                        *(v.rjust(w) for v, w in zip(values[2:], widths[2:]))]
                lines.append("  ".join(line).rstrip())
        lines += [""] + textwrap.wrap("mean ± std over the folds' test rows (sample std, ddof = 1); each fold's "
                                      "epoch chosen on an inner split of its training rows", width)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()

    def to_csv(self, path: str | Path) -> None:
        """One line per row; the spec as a JSON string in the ``config`` column."""
        frame = self.frame.assign(config=[json.dumps(row["config"]) for row in self.rows])
        atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))

    def to_json(self, path: str | Path, files: dict[str, str] | None = None) -> None:
        """{"settings": ..., "rows": [... each with its spec and per-fold metrics]}, plus ``files`` (name -> sha256)
        when written by :meth:`save`."""
        atomic_write_json(path, {"settings": self.settings, "rows": self.rows, **({"files": files} if files else {})})

    def plot(self, path: str | Path | None = None):
        """Horizontal bars of the primary metric with ±std error bars, best on top, fine-tuned rows coloured; the
        matplotlib Figure, also saved as PNG when ``path`` is given."""
        from matplotlib.figure import Figure  # no pyplot: no backend switch, no global figure state

        frame = self.frame.iloc[::-1]
        colors = ["#d95f02" if mode == "finetuned" else "#1b9e77" for mode in frame["mode"]]
        labels = [f"{p} (fine-tuned)" if m == "finetuned" else p for p, m in zip(frame["pooler"], frame["mode"])]
        fig = Figure(figsize=(7, 0.32 * len(frame) + 1.4))
        ax = fig.subplots()
        spread = frame["std"].astype(float).fillna(0.0)  # one fold: no error bar
        ax.barh(labels, frame["mean"], xerr=spread, color=colors, capsize=3)
        shown = frame["mean"].astype(float).notna()  # a diverged row (NaN) draws no bar and sets no limit
        if shown.any():
            low, high = (frame["mean"] - spread)[shown].min(), (frame["mean"] + spread)[shown].max()
            margin = (high - low) * 0.15 + 1e-9
            ax.set_xlim(max(0.0, low - margin) if low >= 0 else low - margin, high + margin)
        ax.set_xlabel(f"{self.settings['metric']} (mean ± sample std over folds)")
        ax.set_title(self.title, fontsize=9, wrap=True)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        if path is not None:
            atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
        return fig

    def save(self, out: str | Path) -> None:
        """leaderboard.csv and .png, then leaderboard.json in the folder ``out``: the JSON goes first and comes back
        last, with the sha256 of the CSV and PNG it belongs with (``files``), so a JSON means a complete set."""
        out = Path(out)
        (out / "leaderboard.json").unlink(missing_ok=True)
        self.to_csv(out / "leaderboard.csv")
        self.plot(out / "leaderboard.png")
        write_compare_report(self, out / "report.html", bars=out / "leaderboard.png")
        parts = ("leaderboard.csv", "leaderboard.png", "report.html")
        self.to_json(out / "leaderboard.json", {name: file_digest(out / name) for name in parts})


def sample_std(values: np.ndarray) -> float | None:
    """The sample std (ddof = 1) of per-fold values; None for one fold, where there is no spread to estimate (a
    0.0 would read as a perfectly stable score)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def mean_std(mean: float, std: float | None) -> str:
    """"0.5870 ± 0.0123", or "0.5870 (one fold)" when there is no std."""
    return f"{mean:.4f} ± {std:.4f}" if std is not None else f"{mean:.4f} (one fold)"


def rank_key(mean: float, higher_is_better: bool) -> float:
    """Sort key of a metric mean: best first; a NaN mean (a diverged pooler) last."""
    if mean != mean:
        return float("inf")
    return -mean if higher_is_better else mean


def _compact(n: int) -> str:
    """1234 -> 1.2k, 22_700_000 -> 22.7M: parameter counts in a few columns."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{suffix}"
    return str(n)
