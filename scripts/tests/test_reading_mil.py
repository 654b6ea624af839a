"""docs/mil.md's readings: each from its corrected resampled t over the folds (1 / (K - 1) for a K-fold),
Holm-adjusted over the page (the real page's typed-claim and flipped-verdict checks: test_readings.py)."""

from __future__ import annotations

import pandas as pd
from pages import mil
from verdicts import Verdicts


FOLDS = 10


def synthetic(glu: list[float], abmil: list[float]) -> pd.DataFrame:
    """A results.csv of one dataset, one repetition and two poolers, with the given test-fold accuracies."""
    return pd.DataFrame([{"dataset": "musk1", "pooler": pooler, "repeat": 0, "fold": fold, "accuracy": accuracy,
                          "epochs": 30 if fold < 6 else 10}
                         for pooler, values in ((mil.ABLATION_BASE, abmil), (mil.GLU, glu))
                         for fold, accuracy in enumerate(values)])


def test_a_clearly_higher_accuracy_reads_as_a_win_from_the_corrected_test():
    frame = synthetic([0.9, 0.95, 0.9, 1.0, 0.9, 0.95, 0.9, 1.0, 0.95, 0.9], [0.6, 0.7, 0.6, 0.65, 0.6, 0.7, 0.6,
                                                                            0.65, 0.7, 0.6])
    comparisons = mil.comparisons(frame, FOLDS)
    assert {c.test_over_train for c in comparisons} == {1 / (FOLDS - 1)}
    verdicts = Verdicts(comparisons)
    assert verdicts[mil.key(mil.GLU, mil.ABLATION_BASE, "musk1")].winner == "glu"
    assert "glu beats abmil" in mil.render_ablation(verdicts, ["musk1"])
    assert " *(noise)* |" not in mil.render_ablation(verdicts, ["musk1"])


def test_differences_that_straddle_zero_read_as_noise():
    frame = synthetic([0.9, 0.8, 0.9, 0.7, 0.9, 0.8, 0.9, 0.7, 0.8, 0.9], [0.8, 0.9, 0.8, 0.9, 0.8, 0.8, 0.9, 0.8,
                                                                          0.9, 0.8])
    verdicts = Verdicts(mil.comparisons(frame, FOLDS))
    assert not verdicts[mil.key(mil.GLU, mil.ABLATION_BASE, "musk1")].detected
    assert "glu and abmil: inside the noise" in mil.render_ablation(verdicts, ["musk1"])


def test_the_budget_counts_folds_that_chose_the_last_checkpoint():
    table = mil.render_budget(synthetic([0.9] * 10, [0.8] * 10), {"settings": {"epochs": 30}})
    assert "| gated_attention | 6 of 10 (under-trained) |" in table
