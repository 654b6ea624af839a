"""The readings of a research page, each from a declared test, Holm-adjusted over the page.

A reading compares two conditions on paired values (``Comparison``): per seed, the paired t-test; per fold of a
K-fold, Nadeau & Bengio's corrected resampled t-test (``test_over_train`` = n_test / n_train), both
``poolkit.training.significance.corrected_t_test``. A page builds one ``Verdicts`` over all its comparisons, which
Holm-adjusts them together (Holm 1979), and renders every reading from it -- a table's *(noise)* mark, a findings
sentence, the page's verdicts block -- so that two readings of one page cannot disagree, and a reading that
contradicts its numbers is a rendered block that differs from its files: ``scripts/docs.py --check`` fails.
The wording comes from the outcome: "A beats B" when the adjusted p is below 0.05, "inside the noise" otherwise.
Each interval is adjusted with its p-value: at level 1 - 0.05 p / p_holm, it excludes 0 exactly when the adjusted p
is below 0.05 (for a Bonferroni family this is the familiar 1 - 0.05 / m), so an interval and its verdict agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from rendering import table

from poolkit.errors import PoolkitError
from poolkit.training.significance import TIE_LEVEL, corrected_t_test, holm_tested, t_interval


@dataclass(frozen=True)
class Comparison:
    """Condition ``a`` against condition ``b`` on ``what`` (a measure), paired values in the same order (seeds or
    folds). Differences print as (a - b) x ``scale`` in ``unit`` with ``digits`` decimals."""

    key: str
    a: str
    b: str
    a_values: Sequence[float]
    b_values: Sequence[float]
    what: str
    higher_is_better: bool = True
    test_over_train: float = 0.0
    scale: float = 100.0
    unit: str = "points"
    digits: int = 1

    @property
    def test(self) -> str:
        pairs = len(self.a_values)
        unit = "fold" if self.test_over_train else "seed"
        name = "corrected resampled t" if self.test_over_train else "paired t"
        return f"{name}, {pairs} {unit}{'s' if pairs != 1 else ''}"


@dataclass(frozen=True)
class Verdict:
    """A comparison's outcome: the mean difference a - b, its Holm-adjusted interval, the raw and the Holm-adjusted
    p (None without a test: fewer than two pairs, or a value that is not finite)."""

    comparison: Comparison
    mean: float
    low: float
    high: float
    p: float | None
    p_holm: float | None

    @property
    def tested(self) -> bool:
        return self.p_holm is not None

    @property
    def detected(self) -> bool:
        """Whether the difference leaves the noise: the Holm-adjusted p is below 0.05."""
        return self.tested and self.p_holm < TIE_LEVEL

    @property
    def winner(self) -> str | None:
        """The better condition when the difference is detected, else None."""
        if not self.detected:
            return None
        c = self.comparison
        return c.a if (self.mean > 0) == c.higher_is_better else c.b

    @property
    def reading(self) -> str:
        """'A beats B', 'A and B: inside the noise' or 'A and B: not tested (one seed)' (or '(a value is not
        finite)')."""
        c = self.comparison
        if not self.tested:
            why = f"one {'fold' if c.test_over_train else 'seed'}" if len(c.a_values) < 2 else "a value is not finite"
            return f"{c.a} and {c.b}: not tested ({why})"
        if self.detected:
            return f"{self.winner} beats {c.b if self.winner == c.a else c.a}"
        return f"{c.a} and {c.b}: inside the noise"

    @property
    def mark(self) -> str:
        """What a table cell adds to the difference: ' *(noise)*' when it is inside the noise."""
        return " *(noise)*" if self.tested and not self.detected else ""

    def difference(self, interval: str = " ({low} to {high})") -> str:
        """The mean difference a - b in the comparison's unit, then its adjusted interval in the form ``interval``:
        '+2.2 points (-5.9 to +10.4)'."""
        c = self.comparison
        value = f"{c.scale * self.mean:+.{c.digits}f}" + (f" {c.unit}" if c.unit else "")
        if not self.tested:
            return value
        return value + interval.format(low=f"{c.scale * self.low:+.{c.digits}f}",
                                             high=f"{c.scale * self.high:+.{c.digits}f}")

    def sentence(self) -> str:
        """The reading with its numbers: 'attention2d and DFR: inside the noise (+2.2 points, adjusted interval -5.9
        to +10.4; paired t, 3 seeds, Holm p = 0.661)'."""
        c = self.comparison
        if not self.tested:
            return f"{self.reading} ({self.difference()})"
        return (f"{self.reading} ({self.difference(', adjusted interval {low} to {high}')}; {c.test}, Holm "
                f"p {format_p(self.p_holm, '=')})")


def format_p(p: float, equals: str = "") -> str:
    """'< 0.001' or the p-value to 3 decimals (after ``equals`` and a space when given)."""
    return "< 0.001" if p < 0.001 else (f"{equals} " if equals else "") + f"{p:.3f}"


class Verdicts:
    """Every comparison of one page, tested and Holm-adjusted together; ``verdicts[key]`` is one ``Verdict``."""

    def __init__(self, comparisons: Iterable[Comparison]):
        comparisons = list(comparisons)
        keys = [c.key for c in comparisons]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise PoolkitError(f"comparisons declared twice on one page: {twice}; give each comparison its own key")
        unpaired = [c.key for c in comparisons if len(c.a_values) != len(c.b_values)]
        if unpaired:
            raise PoolkitError(f"comparisons whose two conditions hold different counts of values: {unpaired}; pair "
                               "them by seed or fold (the same ones, in the same order)")
        raw = [corrected_t_test(c.a_values, c.b_values, c.test_over_train) for c in comparisons]
        adjusted = holm_tested(raw)
        self._verdicts = {}
        for c, p, p_holm in zip(comparisons, raw, adjusted):
            d = np.asarray(c.a_values, dtype=np.float64) - np.asarray(c.b_values, dtype=np.float64)
            level = 1 - TIE_LEVEL * (p / p_holm if p else 1.0) if p is not None else None
            low, high = t_interval(d, c.test_over_train, level) if p is not None else (math.nan, math.nan)
            self._verdicts[c.key] = Verdict(c, float(d.mean()), low, high, p, p_holm)

    def __getitem__(self, key: str) -> Verdict:
        return self._verdicts[key]

    def __contains__(self, key: str) -> bool:
        return key in self._verdicts

    def __iter__(self):
        return iter(self._verdicts.values())

    def __len__(self) -> int:
        return len(self._verdicts)

    def block(self) -> str:
        """The page's verdicts: one row per comparison (what, the difference with its 95% interval, the test, p,
        Holm p, the reading), under a line that says how they were adjusted."""
        rows = [[v.comparison.what, f"{v.comparison.a} − {v.comparison.b}", v.difference(), v.comparison.test,
                 format_p(v.p) if v.tested else "—", format_p(v.p_holm) if v.tested else "—", v.reading]
                for v in self]
        detected = sum(v.detected for v in self)
        return "\n".join([
            f"{len(self)} comparisons, Holm-adjusted together; {detected} {'leaves' if detected == 1 else 'leave'} the "
            f"noise (adjusted p < {TIE_LEVEL:g}). "
            "Each interval is adjusted with its p-value (level 1 − 0.05 p / Holm p), so it excludes 0 exactly when the "
            "verdict leaves the noise.", "",
            table(["measure", "comparison", "difference (adjusted interval)", "test", "p", "Holm p", "verdict"], rows,
                  align="llrlrrl")])


def paired(frame, index: str, column: str, values: str, a: str, b: str) -> tuple[list[float], list[float]]:
    """``values`` of conditions ``a`` and ``b`` (in ``column``) paired on ``index`` (a seed or a fold): rows where
    one side is missing or not finite stay, as NaN, so that the comparison says it is not tested."""
    cell = frame[frame[column].isin([a, b])].pivot(index=index, columns=column, values=values)
    return cell[a].tolist(), cell[b].tolist()


def grouped_readings(verdicts: Iterable[Verdict], other: str) -> str:
    """The readings of ``verdicts`` (each against ``other``), those inside the noise gathered in one: 'x beats
    none; y, z, each against none: inside the noise'."""
    verdicts = list(verdicts)
    quiet = [v.comparison.a if v.comparison.b == other else v.comparison.b for v in verdicts
             if v.tested and not v.detected]
    told = [v.reading for v in verdicts if not (v.tested and not v.detected)]
    return "; ".join(told + ([f"{', '.join(quiet)}, each against {other}: inside the noise"] if quiet else []))


def counted(values: Iterable[bool]) -> str:
    """'3 of 10' for the true ones among ``values``."""
    values = list(values)
    return f"{sum(values)} of {len(values)}"


def last_epochs(last: Iterable[bool]) -> str:
    """Of runs (``last``: whether each chose its last epoch) '3 of 10', with ' (under-trained)' when most did."""
    last = [bool(x) for x in last]
    return counted(last) + (" (under-trained)" if 2 * sum(last) > len(last) else "")
