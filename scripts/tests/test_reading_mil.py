"""docs/mil.md's readings: each from its corrected resampled t over the folds (1 / (K - 1) for a K-fold),
Holm-adjusted over the page; a hand-typed claim or a flipped verdict fails ``scripts/docs.py --check``."""

from __future__ import annotations

import pandas as pd
import pytest
import rendering
from pages import mil
from verdicts import Verdicts

from poolkit.errors import PoolkitError

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


def test_a_hand_typed_claim_on_the_page_is_refused():
    text = mil.PAGE.file().read_text()
    with pytest.raises(PoolkitError, match="hand-written readings"):
        mil.PAGE.update(text + "\nThe one-sided glu is better than abmil.\n")


def test_a_verdict_flipped_inside_the_verdicts_block_is_stale():
    text = mil.PAGE.file().read_text()
    block = rendering.current(text, "verdicts")
    flipped = block.replace("| glu and abmil: inside the noise |", "| glu beats abmil |", 1)
    assert flipped != block
    assert mil.PAGE.update(text.replace(block, flipped))[1] == ["verdicts"]
