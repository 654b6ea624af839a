"""The leaderboard of ``poolkit compare``: ranked rows with each pooler's spec, per-fold detail, which rows are
tied with the best (:mod:`poolkit.training.significance`), what each costs and the Pareto front of metric against
cost, a plain-text table that fits the terminal, CSV + JSON + a plot, written atomically."""

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
from .curves import OUTPUTS as CURVE_OUTPUTS
from .significance import TIE_LEVEL, pareto_front, sample_std, tested_against_best

COLUMNS = ["rank", "pooler", "mode", "metric", "mean", "std", "p_vs_best", "tied_with_best", "infer_ms_per_1k",
           "pareto", "dim", "params", "seconds"]
#: The linear baseline's row label (poolkit.training.baseline): a linear model on mean-pooled features, not a pooler
BASELINE_LABELS = {"regression": "mean+ridge", "classification": "mean+logistic"}
OUTPUTS = ("leaderboard.csv", "leaderboard.json", "leaderboard.png", "report.html", *CURVE_OUTPUTS)


def leaderboard_row(label: str, spec: dict[str, Any], mode: str, metric: str, fold_metrics: list[dict[str, float]],
                    params: int, seconds: float, fold_detail: list[dict[str, Any]] | None = None,
                    flat: bool = False, infer_ms_per_1k: float | None = None, dim: int | None = None
                    ) -> dict[str, Any]:
    """One pooler's row: the primary metric's mean and sample std (ddof = 1; None for one fold) over folds, every
    other metric's mean (as ``<name>_mean``; ``flat``: every metric's, the primary one's too, under its own name, as
    the embedding tasks give them), the pooler's spec (``config``), the per-fold test metrics (``fold_metrics``, in
    the order of the folds, repeat by repeat) and, when given, how each fold chose its model (``fold_detail``:
    best_epoch, epochs_run, inner validation and test metric), its cost (``infer_ms_per_1k``: ms per 1,000 texts
    on the cached states) and the size of its vector (``dim``)."""
    values = np.array([m[metric] for m in fold_metrics])
    row = {"pooler": label, "mode": mode, "metric": metric, "mean": float(values.mean()),
           "std": sample_std(values), "infer_ms_per_1k": infer_ms_per_1k, "dim": dim, "params": int(params),
           "seconds": round(float(seconds), 2), "folds": len(values)}
    for name in fold_metrics[0]:
        if flat or name != metric:
            row[name if flat else f"{name}_mean"] = float(np.mean([m[name] for m in fold_metrics]))
    return {**row, "config": spec, "fold_metrics": fold_metrics, **({"fold_detail": fold_detail} if fold_detail else {})}


class Leaderboard:
    """Poolers ranked by the primary metric (frozen rows first, then fine-tuned rows; each ranked in its mode).

    Each row is tested against the best row of its mode on the same folds (:meth:`test_against_best`:
    ``p_vs_best``, ``tied_with_best``) and flagged on the Pareto front of metric against ``infer_ms_per_1k`` or not
    (``pareto``; None where the row has no cost).

    ``rows``: list of dicts (spec under ``config``, per-fold metrics under ``fold_metrics``); ``frame``: the same
    as a DataFrame without the per-fold detail; ``folds``: one line per (pooler, mode, fold) and metric values;
    ``settings``: the run's settings; ``explanation``: the best learned pooler's explained texts, shown in the
    report (:func:`poolkit.training.compare.explain_best`; None: none); ``curve``: the learning curve of ``sizes``
    (:class:`poolkit.training.curves.LearningCurve`; None: none). ``str(board)`` is the table; ``to_csv`` /
    ``to_json`` / ``plot`` / ``save``.
    """

    def __init__(self, rows: list[dict[str, Any]], settings: dict[str, Any], explanation: Any = None,
                 curve: Any = None) -> None:
        self.settings = settings
        self.explanation = explanation
        self.curve = curve
        best = settings["higher_is_better"]
        order = sorted(range(len(rows)), key=lambda i: (rows[i]["mode"] != "frozen", rank_key(rows[i]["mean"], best)))
        ranks: dict[str, int] = {}
        self.rows = []
        for i in order:
            ranks[rows[i]["mode"]] = ranks.get(rows[i]["mode"], 0) + 1
            self.rows.append({"rank": ranks[rows[i]["mode"]], **{k: v for k, v in rows[i].items() if k != "rank"}})
        for mode in ranks:
            self.test_against_best([row for row in self.rows if row["mode"] == mode])
            self.mark_pareto([row for row in self.rows if row["mode"] == mode])

    @property
    def test_over_train(self) -> float | None:
        return test_over_train(self.settings)

    def test_against_best(self, rows: list[dict[str, Any]]) -> None:
        """Set ``p_vs_best`` on every row after the first (the best of ``rows``, one mode, ranked): the corrected
        resampled t-test of its fold metrics against the best row's, Holm-adjusted over every row so tested; and
        ``tied_with_best``: p >= :data:`~poolkit.training.significance.TIE_LEVEL` (the best row: True). The rows of
        one mode share their folds (one compare run); None where there is no test: one fold, another number of folds
        than the best row's, a metric that is not finite."""
        best, others = rows[0], rows[1:]
        adjusted = tested_against_best(_fold_values(best), [_fold_values(row) for row in others],
                                       self.test_over_train)
        for row, p in zip(others, adjusted):
            row["p_vs_best"] = p
            row["tied_with_best"] = p >= TIE_LEVEL if p is not None else None
        tested = any(p is not None for p in adjusted)
        best["p_vs_best"], best["tied_with_best"] = None, True if tested else None

    def mark_pareto(self, rows: list[dict[str, Any]]) -> None:
        """``pareto``: whether a row (of one mode) is on the front of metric against ``infer_ms_per_1k`` (no other
        row at least as good and as cheap, and better or cheaper); None for a row without a cost."""
        costed = [row for row in rows if row.get("infer_ms_per_1k") is not None]
        front = pareto_front([row["mean"] for row in costed], [row["infer_ms_per_1k"] for row in costed],
                             self.settings["higher_is_better"])
        for row in rows:
            row["pareto"] = None
        for row, on in zip(costed, front):
            row["pareto"] = on

    def tied(self, mode: str = "frozen") -> list[str]:
        """The labels of the rows of ``mode`` tied with its best row (the best row first); empty without a test."""
        return [row["pooler"] for row in self.rows if row["mode"] == mode and row.get("tied_with_best")]

    def best(self, mode: str | None = None) -> dict[str, Any]:
        """The best row with a pooler of its own, the linear baseline left out: ``board.best()["config"]`` is the
        spec to train (``api.train(..., pooler=...)``); ``mode``: ``"frozen"`` (poolers trained on the cached
        states) or ``"finetuned"`` only (default: either, by the metric)."""
        if mode not in (None, "frozen", "finetuned"):
            raise PoolkitError(f"`mode` must be 'frozen' or 'finetuned' (or left out), got {mode!r}")
        rows = learned_rows(self.rows, mode)
        if not rows:
            which = f"{mode} pooler row" if mode else "pooler row"
            raise PoolkitError(f"the leaderboard has no {which} besides the baseline: leave `mode` out, or compare "
                               "more poolers")
        return best_row(rows, self.settings["higher_is_better"])

    @property
    def tested(self) -> bool:
        """Whether any row was tested against the best (there is no test with one fold)."""
        return any(row.get("p_vs_best") is not None for row in self.rows)

    @property
    def title(self) -> str:
        s = self.settings
        repeats = f" x {s['repeats']} repeats" if s.get("repeats", 1) > 1 else ""
        return (f"{s['data']}: {s['rows']} rows, {s['task']}, {s['folds']}-fold{repeats} {s['metric']} "
                f"({'higher' if s['higher_is_better'] else 'lower'} is better), encoder {s['model_label']}")

    @property
    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame([{k: v for k, v in row.items() if k not in ("fold_metrics", "fold_detail")}
                              for row in self.rows])
        first = [c for c in COLUMNS if c in frame.columns]
        return frame[first + [c for c in frame.columns if c not in first]]

    @property
    def folds(self) -> pd.DataFrame:
        return pd.DataFrame([{"pooler": row["pooler"], "mode": row["mode"], "fold": k, **metrics,
                              **(row["fold_detail"][k] if "fold_detail" in row else {})}
                             for row in self.rows for k, metrics in enumerate(row["fold_metrics"])])

    @property
    def costed(self) -> bool:
        """Whether any row has its inference cost measured."""
        return any(row.get("infer_ms_per_1k") is not None for row in self.rows)

    def notes(self) -> list[str]:
        """What the table's columns mean: the spread, the test (or that there is none) and the cost."""
        notes = ["mean ± std over the folds' test rows (sample std, ddof = 1); each fold's epoch chosen on an inner "
                 "split of its training rows"]
        if self.tested:
            notes.append("p: the corrected resampled t-test (Nadeau & Bengio 2003) of a row's fold metrics against "
                         "the best row of its mode, Holm-adjusted over the rows tested; '=': tied with the best "
                         f"(p >= {TIE_LEVEL})")
        else:
            notes.append("no test of the differences: it needs two folds or more (more folds or repeats)")
        if self.costed:
            notes.append("ms/1k: the pooler + head on the cached states, ms per 1,000 texts on this machine (median "
                         "of timed passes); '*': on the Pareto front of the metric against it")
        return notes

    def to_text(self, width: int = 80) -> str:
        """The table in ``width`` columns: numbers never cut, long pooler names wrapped inside their column; the
        fine-tuned rows (ranked among themselves) under a line of their own."""
        columns = [("#", lambda row: str(row["rank"])), ("pooler", lambda row: row["pooler"]),
                   ("mean ± std", lambda row: mean_std(row["mean"], row["std"]))]
        if self.tested:
            columns.append(("p", _p_cell))
        if self.costed:
            columns.append(("ms/1k", _cost_cell))
        columns += [("params", lambda row: _compact(row["params"])), ("sec", lambda row: f"{row['seconds']:.0f}")]
        header = [name for name, _ in columns]
        cells = [[cell(row) for _, cell in columns] for row in self.rows]
        widths = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(header)]
        room = width - (sum(widths) - widths[1]) - 2 * (len(header) - 1)
        widths[1] = max(10, min(widths[1], room))
        lines = textwrap.wrap(self.title, width) + [""]
        modes = [None, None] + [row["mode"] for row in self.rows]
        for k, row in enumerate([header, None, *cells]):
            if row is None:
                lines.append("  ".join("-" * w for w in widths))
                continue
            if modes[k] == "finetuned" and modes[k - 1] != "finetuned":
                lines += textwrap.wrap("fine-tuned (the encoder trained too; ranked among themselves):", width)
            names = textwrap.wrap(row[1], widths[1], break_on_hyphens=False) or [""]
            for part, name in enumerate(names):
                values = row if part == 0 else [""] * len(row)
                line = [values[0].rjust(widths[0]), name.ljust(widths[1]),
                        *(v.rjust(w) for v, w in zip(values[2:], widths[2:]))]
                lines.append("  ".join(line).rstrip())
        lines.append("")
        for note in self.notes():
            lines += textwrap.wrap(note, width)
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
        curve = {"learning_curve": self.curve.to_dict()} if self.curve is not None else {}
        atomic_write_json(path, {"settings": self.settings, "rows": self.rows, **curve,
                                 **({"files": files} if files else {})})

    def plot(self, path: str | Path | None = None):
        """Horizontal bars of the primary metric with ±std error bars, best on top, fine-tuned rows coloured, the
        rows tied with the best marked; beside them (when rows have costs) the metric against the inference cost,
        the Pareto front drawn and named. The matplotlib Figure, also saved as PNG when ``path`` is given."""
        from matplotlib.figure import Figure  # no pyplot: no backend switch, no global figure state

        frame = self.frame.iloc[::-1]
        rows = self.rows[::-1]
        baseline = [row["pooler"] in BASELINE_LABELS.values() for row in rows]
        colors = ["#bdbdbd" if base else "#d95f02" if row["mode"] == "finetuned" else "#1b9e77"
                  for row, base in zip(rows, baseline)]
        labels = [f"{row['pooler']}{' (fine-tuned)' if row['mode'] == 'finetuned' else ''}"
                  f"{' (baseline, not a pooler)' if base else ''}{_tie_mark(row)}" for row, base in zip(rows, baseline)]
        fig = Figure(figsize=(12 if self.costed else 7, 0.32 * len(frame) + 1.6))
        ax, *rest = fig.subplots(1, 2, width_ratios=(3, 2)) if self.costed else [fig.subplots()]
        spread = frame["std"].astype(float).fillna(0.0)  # one fold: no error bar
        bars = ax.barh(labels, frame["mean"], xerr=spread, color=colors, capsize=3)
        for bar, base in zip(bars, baseline):
            bar.set_hatch("//" if base else None)
        shown = frame["mean"].astype(float).notna()  # a diverged row (NaN) draws no bar and sets no limit
        if shown.any():  # from 0 (a metric that can be negative: from its lowest bar), so gaps are not magnified
            low, high = (frame["mean"] - spread)[shown].min(), (frame["mean"] + spread)[shown].max()
            margin = (high - min(low, 0.0)) * 0.05 + 1e-9
            ax.set_xlim(0.0 if low >= 0 else low - margin, high + margin)
        tie = " ([=]: tied with the best)" if self.tested else ""
        ax.set_xlabel(f"{self.settings['metric']} (mean ± sample std over folds){tie}")
        ax.set_title(self.title, fontsize=9, wrap=True)
        ax.grid(axis="x", alpha=0.3)
        if rest:
            self._plot_costs(rest[0])
        fig.tight_layout()
        if path is not None:
            atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
        return fig

    def _plot_costs(self, ax) -> None:
        """The frozen rows' metric against their cost (log scale), the Pareto front joined and named."""
        rows = [row for row in self.rows if row.get("infer_ms_per_1k") is not None and row["mean"] == row["mean"]]
        ax.scatter([r["infer_ms_per_1k"] for r in rows], [r["mean"] for r in rows], color="#7570b3", s=18)
        front = sorted((r for r in rows if r.get("pareto")), key=lambda r: r["infer_ms_per_1k"])
        ax.plot([r["infer_ms_per_1k"] for r in front], [r["mean"] for r in front], color="#e7298a",
                drawstyle="steps-post", label="Pareto front")
        for r in front:
            ax.annotate(r["pooler"], (r["infer_ms_per_1k"], r["mean"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("ms per 1,000 texts, pooler + head (log)")
        ax.set_ylabel(self.settings["metric"])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")

    def save(self, out: str | Path) -> None:
        """leaderboard.csv and .png (and learning_curve.csv / .png), report.html, then leaderboard.json in the folder
        ``out``: the JSON goes first and comes back last, with the sha256 of the files it belongs with (``files``), so
        a JSON means a complete set."""
        out = Path(out)
        (out / "leaderboard.json").unlink(missing_ok=True)
        self.to_csv(out / "leaderboard.csv")
        self.plot(out / "leaderboard.png")
        if self.curve is not None:
            self.curve.to_csv(out / "learning_curve.csv")
            self.curve.plot(out / "learning_curve.png")
        write_compare_report(self, out / "report.html", bars=out / "leaderboard.png")
        parts = ("leaderboard.csv", "leaderboard.png", "report.html",
                 *(CURVE_OUTPUTS if self.curve is not None else ()))
        self.to_json(out / "leaderboard.json", {name: file_digest(out / name) for name in parts})


def test_over_train(settings: dict[str, Any]) -> float | None:
    """n_test / n_train of a board's t-tests: as its run recorded it, else (a board written before it was) K-fold's
    1 / (K - 1); None with one fold and no record."""
    ratio = settings.get("test_over_train")
    folds = settings.get("folds", 1)
    return ratio if ratio is not None else (1.0 / (folds - 1) if folds > 1 else None)


def _fold_values(row: dict[str, Any]) -> list[float]:
    return [m[row["metric"]] for m in row["fold_metrics"]]


def _p_cell(row: dict[str, Any]) -> str:
    """The table's p column: "best", the Holm-adjusted p ("=" when tied with the best), or nothing (no test)."""
    p = row.get("p_vs_best")
    if p is None:
        return "best" if row.get("tied_with_best") else ""
    return ("<0.001" if p < 0.001 else f"{p:.3f}") + (" =" if row.get("tied_with_best") else "")


def _tie_mark(row: dict[str, Any]) -> str:
    return " [=]" if row.get("tied_with_best") and row.get("p_vs_best") is not None else ""


def _cost_cell(row: dict[str, Any]) -> str:
    """The table's ms/1k column, "*" on the Pareto front; nothing for a row without a cost."""
    ms = row.get("infer_ms_per_1k")
    if ms is None:
        return ""
    shown = f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"
    return shown + ("*" if row.get("pareto") else "")


def mean_std(mean: float, std: float | None) -> str:
    """"0.5870 ± 0.0123", or "0.5870 (one fold)" when there is no std."""
    return f"{mean:.4f} ± {std:.4f}" if std is not None else f"{mean:.4f} (one fold)"


def learned_rows(rows: list[dict[str, Any]], mode: str | None = None) -> list[dict[str, Any]]:
    """The rows with a pooler of their own (the linear baseline left out), of ``mode`` only when given."""
    return [row for row in rows if row["pooler"] not in BASELINE_LABELS.values() and mode in (None, row["mode"])]


def best_row(rows: list[dict[str, Any]], higher_is_better: bool) -> dict[str, Any]:
    """The row of ``rows`` with the best metric mean (a NaN mean never)."""
    return min(rows, key=lambda row: rank_key(row["mean"], higher_is_better))


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
