"""Which leaderboard differences are real (poolkit.training.significance) and the repeated folds they rest on."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from poolkit import PoolkitError
from poolkit.data.tables import fold_splits, repeated_folds
from poolkit.training.leaderboard import Leaderboard, leaderboard_row
from poolkit.training.significance import corrected_t_test, holm, pareto_front, t_interval

A = [0.81, 0.78, 0.84, 0.80, 0.79, 0.83]
B = [0.78, 0.77, 0.80, 0.79, 0.75, 0.80]
SETTINGS = {"data": "toy.csv", "rows": 60, "task": "classification", "folds": 3, "repeats": 2,
            "test_over_train": 0.5, "metric": "accuracy", "higher_is_better": True, "model_label": "tiny"}


def by_hand(a: list[float], b: list[float], ratio: float) -> float:
    """Nadeau & Bengio's corrected t, written out: t = mean(d) / sqrt((1/J + n_test/n_train) * var(d))."""
    d = [x - y for x, y in zip(a, b)]
    j = len(d)
    mean = sum(d) / j
    var = sum((x - mean) ** 2 for x in d) / (j - 1)
    t = mean / math.sqrt((1 / j + ratio) * var)
    return 2 * stats.t.sf(abs(t), j - 1)


def test_the_corrected_t_test_is_the_formula_and_without_correction_the_paired_t_test():
    # catches a missing correction term, var with ddof 0, a one-sided p, J degrees of freedom instead of J - 1
    assert corrected_t_test(A, B, 0.5) == pytest.approx(by_hand(A, B, 0.5), rel=1e-12)
    assert corrected_t_test(A, B, 0.0) == pytest.approx(stats.ttest_rel(A, B).pvalue, rel=1e-10)
    assert corrected_t_test(A, B, 0.5) > corrected_t_test(A, B, 0.0)  # the correction widens the variance
    assert corrected_t_test(B, A, 0.5) == pytest.approx(corrected_t_test(A, B, 0.5))  # two-sided
    assert corrected_t_test(A, A, 0.5) == 1.0  # no difference in any fold
    assert corrected_t_test([0.5, 0.6], [0.4, 0.5], 0.5) == 0.0  # the same gap in every fold
    assert corrected_t_test([0.5], [0.4], 0.5) is None  # one fold: no test
    assert corrected_t_test(A, B[:5], 0.5) is None  # other folds
    assert corrected_t_test([float("nan"), *A[1:]], B, 0.5) is None


def test_holm_matches_a_hand_adjustment():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.4, 0.6]) == [0.8, 0.8]  # 0.6 x 1 kept at 0.8
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


def test_the_pareto_front_keeps_only_rows_no_other_row_beats_on_both():
    metric, cost = [0.80, 0.75, 0.70, 0.78, float("nan")], [10.0, 1.0, 2.0, 10.0, 0.5]
    assert pareto_front(metric, cost, higher_is_better=True) == [True, True, False, False, False]
    assert pareto_front([1.0, 2.0], [1.0, 1.0], higher_is_better=False) == [True, False]  # rmse: lower wins


def row(label: str, values: list[float], cost: float | None = None, mode: str = "frozen") -> dict:
    return leaderboard_row(label, {"name": label}, mode, "accuracy", [{"accuracy": v} for v in values], 10, 1.0,
                           infer_ms_per_1k=cost, dim=8)


def test_each_row_is_tested_against_the_best_of_its_mode_with_holm_over_the_board():
    # catches the wrong reference row, Holm left out or taken over another family, and fine-tuned rows tested against
    # frozen ones
    c = [0.70, 0.72, 0.69, 0.71, 0.70, 0.68]
    board = Leaderboard([row("max", B, 12.0), row("attention", A, 9.0), row("cls", c, 1.0),
                         row("attention", A[:3], mode="finetuned"), row("max", B[:3], mode="finetuned")], SETTINGS)
    frozen = {r["pooler"]: r for r in board.rows if r["mode"] == "frozen"}
    raw = [by_hand(B, A, 0.5), by_hand(c, A, 0.5)]
    assert raw[0] > raw[1]  # max is closer to attention than cls is: cls's p is the smaller, times 2
    expected = [max(raw[0], min(1.0, 2 * raw[1])), min(1.0, 2 * raw[1])]
    assert frozen["max"]["p_vs_best"] == pytest.approx(expected[0])
    assert frozen["cls"]["p_vs_best"] == pytest.approx(expected[1])
    assert frozen["attention"]["p_vs_best"] is None and frozen["attention"]["tied_with_best"] is True
    assert frozen["max"]["tied_with_best"] == (expected[0] >= 0.05)
    assert frozen["cls"]["tied_with_best"] is False
    tuned = [r for r in board.rows if r["mode"] == "finetuned"]
    assert tuned[1]["p_vs_best"] == pytest.approx(by_hand(B[:3], A[:3], 0.5))  # its own family of one
    # the Pareto front: cls is cheapest, attention best; max, worse and dearer than attention, is not on it
    assert {r["pooler"]: r["pareto"] for r in frozen.values()} == {"attention": True, "max": False, "cls": True}
    assert all(r["pareto"] is None for r in tuned)
    text = str(board)
    assert "best" in text and "ms/1k" in text and "Holm-adjusted" in text and "1.00*" in text
    assert board.tied() == ["attention"] + (["max"] if expected[0] >= 0.05 else [])


def test_a_pooler_duplicated_under_two_names_is_tied_with_itself():
    board = Leaderboard([row("mean", A), row("avg", A), row("cls", [v - 0.2 for v in B])], SETTINGS)
    same = next(r for r in board.rows if r["pooler"] == "avg" or r["rank"] == 2)
    assert same["p_vs_best"] == 1.0 and same["tied_with_best"] is True
    assert board.tied() == [board.rows[0]["pooler"], same["pooler"]]


def test_a_one_fold_board_says_it_has_no_test():
    board = Leaderboard([row("mean", [0.5]), row("max", [0.4])], {**SETTINGS, "folds": 1, "repeats": 1,
                                                                     "test_over_train": 0.25})
    assert all(r["p_vs_best"] is None and r["tied_with_best"] is None for r in board.rows)
    assert not board.tested and "no test of the differences" in str(board) and board.tied() == []


def test_repeated_folds_are_fresh_partitions_the_first_of_them_the_plain_k_fold(tmp_path):
    from poolkit.data.tables import load_table

    pd.DataFrame({"text": [f"t{i}" for i in range(30)], "label": ["a", "b", "c"] * 10}).to_csv(tmp_path / "t.csv")
    data = load_table(tmp_path / "t.csv")
    splits = repeated_folds(data, 3, 2, 0.2, 7)
    assert len(splits) == 6
    assert [t.tolist() for _, t in splits[:3]] == [t.tolist() for _, t in fold_splits(data, 3, 0.2, 7)]
    for r in range(2):  # each repeat tests every row once, never a row it trains on
        tested = np.concatenate([test for _, test in splits[3 * r:3 * r + 3]])
        assert sorted(tested.tolist()) == list(range(30))
        assert all(not set(train) & set(test) for train, test in splits[3 * r:3 * r + 3])
    assert [t.tolist() for _, t in splits[:3]] != [t.tolist() for _, t in splits[3:]]  # assigned afresh
    with pytest.raises(PoolkitError, match="`repeats` must be a positive integer"):
        repeated_folds(data, 3, 0)


def test_the_interval_is_the_one_the_test_inverts():
    # catches a z quantile, a ddof-0 std or an interval that forgets the correction: at 0 it is scipy's paired
    # t-interval, and its ends sit exactly where the test's p-value is 1 - level
    d = np.subtract(A, B)
    low, high = t_interval(d)
    expected = stats.ttest_rel(A, B).confidence_interval(0.95)
    assert (low, high) == (pytest.approx(expected.low, rel=1e-10), pytest.approx(expected.high, rel=1e-10))
    low, high = t_interval(d, 0.5, level=0.9)
    assert corrected_t_test(d - low, np.zeros(len(d)), 0.5) == pytest.approx(0.1, rel=1e-8)
    assert corrected_t_test(d - high, np.zeros(len(d)), 0.5) == pytest.approx(0.1, rel=1e-8)
    assert all(np.isnan(t_interval([0.3])))
