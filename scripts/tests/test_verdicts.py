"""scripts/verdicts.py: a page's readings from declared tests, Holm-adjusted together, worded from the outcome."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from verdicts import Comparison, Verdicts

from poolkit.errors import PoolkitError

A = [0.90, 0.92, 0.91, 0.93, 0.90]
B = [0.80, 0.83, 0.80, 0.82, 0.81]


def test_a_lower_is_better_measure_names_the_lower_condition_the_winner():
    # catches a verdict that reads every measure as higher-is-better (an MSE's larger value named the winner)
    verdicts = Verdicts([Comparison("acc", "a", "b", A, B, "accuracy"),
                         Comparison("mse", "a", "b", A, B, "MSE", higher_is_better=False)])
    assert verdicts["acc"].reading == "a beats b" and verdicts["mse"].reading == "b beats a"


def test_p_values_are_the_paired_t_test_and_holm_adjusted_over_the_page():
    # catches an unpaired test, an unadjusted family and the corrected test's factor left out over folds
    noisy = [0.81, 0.93, 0.79, 0.94, 0.83]
    verdicts = Verdicts([Comparison("x", "a", "b", A, B, "m"), Comparison("y", "a", "c", A, noisy, "m"),
                         Comparison("z", "a", "b", A, B, "m", test_over_train=1 / 4)])
    assert verdicts["x"].p == pytest.approx(stats.ttest_rel(A, B).pvalue, rel=1e-10)
    p = sorted(v.p for v in verdicts)
    assert sorted(v.p_holm for v in verdicts) == pytest.approx([3 * p[0], max(3 * p[0], 2 * p[1]),
                                                                 max(3 * p[0], 2 * p[1], p[2])])
    assert verdicts["z"].p > verdicts["x"].p and verdicts["z"].high - verdicts["z"].low > \
        verdicts["x"].high - verdicts["x"].low
    assert "corrected resampled t, 5 folds" in verdicts.block() and "paired t, 5 seeds" in verdicts.block()


def test_one_seed_is_not_tested_and_unpaired_values_are_refused():
    # catches a verdict printed without a test, and a silent broadcast of unequal seed counts
    lone = Verdicts([Comparison("x", "a", "b", [0.9], [0.8], "m")])["x"]
    assert not lone.tested and lone.reading == "a and b: not tested (one seed)" and lone.mark == ""
    with pytest.raises(PoolkitError, match=r"different counts of values: \['x'\]"):
        Verdicts([Comparison("x", "a", "b", A, B[:3], "m")])
    with pytest.raises(PoolkitError, match=r"declared twice on one page: \['x'\]"):
        Verdicts([Comparison("x", "a", "b", A, B, "m")] * 2)


def test_the_adjusted_interval_excludes_zero_exactly_when_the_verdict_leaves_the_noise():
    # catches a plain 95% interval beside a Holm verdict (the two disagreeing), a z quantile and a ddof-0 std: the
    # interval is the t-interval at level 1 - 0.05 p / p_holm
    gaps = [[0.05, 0.04, 0.06, 0.05, 0.05], [0.02, -0.01, 0.04, 0.01, 0.03], [0.03, 0.0, 0.05, 0.01, 0.03],
            [0.01, -0.02, 0.03, 0.0, 0.02], [0.04, 0.035, 0.045, 0.04, 0.042]]
    verdicts = Verdicts([Comparison(str(i), "a", "b", [0.8 + g for g in gap], [0.8] * 5, "m")
                         for i, gap in enumerate(gaps)])
    for v, gap in zip(verdicts, gaps):
        level = 1 - 0.05 * v.p / v.p_holm
        half = stats.t.ppf(0.5 + level / 2, 4) * np.std(gap, ddof=1) / np.sqrt(5)
        assert (v.low, v.high) == (pytest.approx(np.mean(gap) - half), pytest.approx(np.mean(gap) + half))
        assert (v.low > 0 or v.high < 0) == v.detected
    assert [v.detected for v in verdicts] == [True, False, False, False, True]  # the family: both outcomes occur
