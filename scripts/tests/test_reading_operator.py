"""docs/operator.md's readings: each from its paired t over the seeds (test rel L2, lower is better), Holm-adjusted
over the page (the real page's typed-claim and flipped-verdict checks: test_readings.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from pages import operator
from verdicts import Verdicts


SETTINGS = {"models": ["attention", "fno"], "train_resolution": 64, "test_resolutions": [32, 64, 128],
            "clustered_resolutions": [64], "seeds": 4}


def synthetic(errors: dict[tuple[str, str, int], list[float]]) -> tuple[dict, pd.DataFrame]:
    """A results.json and results.csv with the given test rel L2 per (model, grid, resolution) and seed; the rows
    stored in reverse seed order (the pairing must follow the seed)."""
    rows = [{"model": m, "seed": seed, "grid": g, "resolution": r, "params": 100, "rel_l2": value}
            for (m, g, r), values in errors.items() for seed, value in enumerate(values)][::-1]
    return {"settings": SETTINGS}, pd.DataFrame(rows)


def flat(value: float) -> list[float]:
    return [value * f for f in (1.0, 1.1, 0.9, 1.05)]


def grid_of(attention: float, fno: float, unweighted: float, fine_attention: float | None = None) -> dict:
    cells = {("attention", "uniform", r): flat(attention) for r in (32, 64)}
    cells["attention", "uniform", 128] = flat(fine_attention or attention)
    cells.update({("fno", "uniform", r): flat(fno) for r in (32, 64, 128)})
    cells["attention", "clustered", 64] = flat(attention)
    cells["attention_unweighted", "clustered", 64] = flat(unweighted)
    return cells


def verdicts_of(cells: dict) -> tuple[dict, Verdicts]:
    results, frame = synthetic(cells)
    return results, Verdicts(operator.comparisons(results, frame))


def test_the_lower_error_wins_and_the_unweighted_score_is_compared_on_clustered_grids_only():
    # catches rel L2 read as higher-is-better, and the unweighted row compared on a uniform grid
    results, verdicts = verdicts_of(grid_of(attention=0.02, fno=0.05, unweighted=0.2))
    text = operator.render_findings(results, verdicts)
    assert "attention at 128 beats fno at 128" in text
    assert "attention at 64 clustered beats attention_unweighted at 64 clustered" in text
    assert [v.comparison.key for v in verdicts if "unweighted" in v.comparison.key] == [
        "attention at 64 clustered vs attention_unweighted at 64 clustered"]


def test_invariance_compares_each_model_with_itself_at_the_training_resolution():
    # catches a model compared with the other one, and the training resolution compared with itself
    results, verdicts = verdicts_of(grid_of(attention=0.02, fno=0.05, unweighted=0.2, fine_attention=0.08))
    keys = [v.comparison.key for v in verdicts if v.comparison.b.endswith(" at 64")
            and v.comparison.a.split(" at ")[0] == v.comparison.b.split(" at ")[0]]
    assert keys == ["attention at 32 vs attention at 64", "attention at 128 vs attention at 64",
                    "fno at 32 vs fno at 64", "fno at 128 vs fno at 64"]
    text = operator.render_findings(results, verdicts)
    assert "attention at 64 beats attention at 128" in text
    assert "attention at 32 and attention at 64: inside the noise" in text


def test_values_pair_by_seed():
    results, frame = synthetic(grid_of(attention=0.02, fno=0.05, unweighted=0.2))
    assert operator.values(frame, "attention", "uniform", 64) == pytest.approx(flat(0.02))
