"""Which differences on a leaderboard are real: the corrected resampled t-test of two rows' fold metrics
(Nadeau & Bengio 2003, "Inference for the generalization error", as in scikit-learn's "Statistical comparison of
models using grid search" example), Holm's step-down adjustment over the rows tested against the best (Holm 1979),
and the Pareto front of metric against cost.

K-fold test sets do not overlap, but the training sets do, so the fold differences are correlated and the plain
t-test's variance is too small; the correction adds ``n_test / n_train`` to the ``1 / J`` factor of the variance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: a row whose Holm-adjusted p-value against the best row is at least this is tied with it
TIE_LEVEL = 0.05


def corrected_t_test(a: Sequence[float], b: Sequence[float], test_over_train: float) -> float | None:
    """Two-sided p-value of the corrected resampled t-test of paired fold metrics ``a`` and ``b`` (J values each,
    the same folds in the same order): d = a - b, t = mean(d) / sqrt((1/J + n_test/n_train) var(d)) (var with
    ddof = 1) on J - 1 degrees of freedom. ``test_over_train``: n_test / n_train, the rows inside / outside a test
    fold. None when there is no test: fewer than two folds, or a metric that is not finite. The same difference in
    every fold (no variance) gives 1.0 when it is zero and 0.0 otherwise."""
    from scipy import stats

    if len(a) != len(b) or len(a) < 2:
        return None
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if not np.isfinite(d).all():
        return None
    mean, scale = float(d.mean()), corrected_standard_error(d, test_over_train)
    if scale == 0.0:  # identical differences in every fold: none at all (tied), or a constant gap
        return 1.0 if mean == 0.0 else 0.0
    return float(2.0 * stats.t.sf(abs(mean / scale), df=len(d) - 1))


def corrected_standard_error(d: np.ndarray, test_over_train: float) -> float:
    """sqrt((1/J + n_test/n_train) var(d)) of J paired differences ``d`` (var with ddof = 1): the corrected
    resampled t-test's standard error of mean(d); ``test_over_train`` 0 gives the plain paired t-test's (seeds,
    whose training sets do not overlap)."""
    return float(np.sqrt((1.0 / len(d) + test_over_train) * np.var(d, ddof=1)))


def t_interval(d: Sequence[float], test_over_train: float = 0.0, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` confidence interval of mean(d) that :func:`corrected_t_test` inverts: mean(d) -/+ the
    t quantile on J - 1 degrees of freedom times :func:`corrected_standard_error` (NaN ends for fewer than two)."""
    from scipy import stats

    d = np.asarray(d, dtype=np.float64)
    if len(d) < 2:
        return float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1)) * corrected_standard_error(d, test_over_train)
    return float(d.mean()) - half, float(d.mean()) + half


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (in their order): the k-th smallest (from 0) times
    (m - k), each at least the one before it, capped at 1."""
    order = np.argsort(pvalues, kind="stable")
    adjusted = np.empty(len(order))
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * float(pvalues[i])))
        adjusted[i] = running
    return adjusted.tolist()


def sample_std(values: Sequence[float]) -> float | None:
    """The sample std (ddof = 1) of per-fold values; None for one fold, where there is no spread to estimate (a
    0.0 would read as a perfectly stable score)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def tested_against_best(best: Sequence[float], others: Sequence[Sequence[float]],
                        test_over_train: float | None) -> list[float | None]:
    """Each of ``others``' fold metrics tested against ``best``'s (:func:`corrected_t_test`), Holm-adjusted over
    the ones tested (:func:`holm_tested`); None where there is no test (and for all without ``test_over_train``)."""
    return holm_tested([corrected_t_test(values, best, test_over_train) if test_over_train is not None else None
                        for values in others])


def holm_tested(pvalues: Sequence[float | None]) -> list[float | None]:
    """:func:`holm` over the p-values that are not None (the rows that could be tested), None kept where it is."""
    tested = [k for k, p in enumerate(pvalues) if p is not None]
    adjusted = dict(zip(tested, holm([pvalues[k] for k in tested])))
    return [adjusted.get(k) for k in range(len(pvalues))]


def pareto_front(metric: Sequence[float], cost: Sequence[float], higher_is_better: bool) -> list[bool]:
    """Whether each point is on the Pareto front of (metric, cost): no other point is at least as good on both and
    strictly better on one. A point with a non-finite metric or cost is never on it."""
    sign = 1.0 if higher_is_better else -1.0
    score = sign * np.asarray(metric, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    valid = np.isfinite(score) & np.isfinite(cost)
    front = []
    for i in range(len(score)):
        dominated = valid & (score >= score[i]) & (cost <= cost[i]) & ((score > score[i]) | (cost < cost[i]))
        front.append(bool(valid[i] and not dominated.any()))
    return front
