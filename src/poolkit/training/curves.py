"""Learning curves of ``compare --sizes``: which pooler wins at which amount of training data. For each size, each
fold's training rows are subsampled to that size (stratified by class, or by target bin for regression; queries or
pairs for the embedding tasks), drawn with the fold's seed, while the fold's test rows stay the same; every pooler is
trained again on the cached states (the encoding is done once). The leaderboard's own rows are the curve's last
point, at the folds' full training size."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data.tables import stratified_rows
from ..errors import PoolkitError
from ..io import atomic_write
from .significance import TIE_LEVEL, sample_std, tested_against_best

OUTPUTS = ("learning_curve.csv", "learning_curve.png")


def subsampled_splits(data: Any, splits: list[tuple[np.ndarray, np.ndarray]], size: int, seed: int
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``splits`` with each fold's training rows cut to ``size``, the test rows kept: a stratified sample of a
    table's rows (:func:`poolkit.data.tables.stratified_rows`), a random one of a table of pairs' units (queries,
    or similarity pairs), drawn with seed ``seed + fold``."""
    pairs = not hasattr(data, "subset")
    unit = {"retrieval": "queries", "similarity": "pairs"}.get(data.task, "rows") if pairs else "rows"
    cut = []
    for k, (train, test) in enumerate(splits):
        if size >= len(train):
            raise PoolkitError(f"`sizes` {size} is not below the {len(train)} training {unit} of fold {k}: give "
                               f"sizes below {min(len(t) for t, _ in splits)}")
        keep = (np.sort(np.random.default_rng(seed + k).permutation(len(train))[:size]) if pairs
                else stratified_rows(data.subset(train), size, seed + k))
        cut.append((train[keep], test))
    return cut


@dataclass
class LearningCurve:
    """Each pooler's fold metrics at each training size (``points``: pooler, size, subsampled, fold_metrics: the
    primary metric per fold, in the leaderboard's fold order) and n_test / n_train at each size (``ratios``, for the
    test of each row against the best at that size)."""

    points: list[dict[str, Any]]
    metric: str
    higher_is_better: bool
    ratios: dict[int, float]

    @property
    def sizes(self) -> list[int]:
        return sorted({p["size"] for p in self.points})

    @property
    def frame(self) -> pd.DataFrame:
        """One line per (pooler, size): mean, sample std and the fold values (``fold_0``, ...)."""
        lines = []
        for p in sorted(self.points, key=lambda p: (p["pooler"], p["size"])):
            values = np.array(p["fold_metrics"], dtype=np.float64)
            lines.append({"pooler": p["pooler"], "size": p["size"], "subsampled": p["subsampled"],
                          "mean": float(values.mean()),
                          "std": sample_std(values),
                          **{f"fold_{k}": float(v) for k, v in enumerate(values)}})
        return pd.DataFrame(lines)

    def leaders(self) -> list[dict[str, Any]]:
        """Per size, smallest first: the best pooler, its mean and the poolers tied with it (Holm-adjusted corrected
        t-test over that size's rows; empty with one fold)."""
        sign = 1.0 if self.higher_is_better else -1.0
        found = []
        for size in self.sizes:
            here = [p for p in self.points if p["size"] == size and np.isfinite(np.mean(p["fold_metrics"]))]
            if not here:
                continue
            here.sort(key=lambda p: -sign * float(np.mean(p["fold_metrics"])))
            best, others = here[0], here[1:]
            adjusted = tested_against_best(best["fold_metrics"], [p["fold_metrics"] for p in others],
                                           self.ratios[size])
            found.append({"size": size, "best": best["pooler"], "mean": float(np.mean(best["fold_metrics"])),
                          "tied": [p["pooler"] for p, q in zip(others, adjusted) if q is not None and q >= TIE_LEVEL],
                          "tested": any(q is not None for q in adjusted)})
        return found

    def reading(self) -> str:
        """The winner at each size and where the lead changes, in one paragraph."""
        leaders = self.leaders()
        parts = []
        for lead in leaders:
            tie = (f" (tied: {', '.join(lead['tied'])})" if lead["tied"] else " (no other row tied)") \
                if lead["tested"] else ""
            parts.append(f"{lead['size']}: {lead['best']} {lead['mean']:.4f}{tie}")
        changes = [f"from {a['best']} to {b['best']} between {a['size']} and {b['size']}"
                   for a, b in zip(leaders, leaders[1:]) if a["best"] != b["best"]]
        return (f"Best {self.metric} by training rows per fold, {'; '.join(parts)}. "
                + (f"The lead changes {'; '.join(changes)}." if changes else "The lead never changes."))

    def plot(self, path: str | Path | None = None):
        """Each pooler's mean (± sample std band) against the training size (log scale); the Figure, also saved as
        PNG when ``path`` is given."""
        from matplotlib.figure import Figure

        frame = self.frame
        fig = Figure(figsize=(8, 5))
        ax = fig.subplots()
        for name, part in frame.groupby("pooler", sort=False):
            part = part.sort_values("size")
            ax.plot(part["size"], part["mean"], marker="o", markersize=3, label=name)
            spread = part["std"].astype(float).fillna(0.0)
            ax.fill_between(part["size"], part["mean"] - spread, part["mean"] + spread, alpha=0.12)
        ax.set_xscale("log")
        ax.set_xticks(self.sizes, labels=[str(size) for size in self.sizes])
        ax.minorticks_off()
        ax.set_xlabel("training rows per fold (log; the last point: all of them)")
        ax.set_ylabel(f"{self.metric} on the fold's test rows")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="best")
        fig.tight_layout()
        if path is not None:
            atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
        return fig

    def to_csv(self, path: str | Path) -> None:
        atomic_write(path, lambda tmp: self.frame.to_csv(tmp, index=False))

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "higher_is_better": self.higher_is_better, "points": self.points,
                "ratios": {str(k): v for k, v in self.ratios.items()}}

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> LearningCurve:
        return cls(saved["points"], saved["metric"], saved["higher_is_better"],
                   {int(k): v for k, v in saved["ratios"].items()})
