"""docs/gated-mlp.md's readings: GLU against each other variant, each from its paired t over the seeds (test accuracy,
higher is better), Holm-adjusted over the page (the real page's typed-claim and flipped-verdict checks:
test_readings.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from pages import gated_mlp
from verdicts import Verdicts


FFNS = ["gelu_mlp", "glu", "bilinear"]


def synthetic(accuracy: dict[str, list[float]], best_epoch: int = 5) -> tuple[dict, pd.DataFrame]:
    """A results.json and results.csv of the given test accuracy per variant and seed (seeds listed in reverse for
    bilinear: the pairing must follow the seed, not the row order)."""
    runs = [{"ffn": ffn, "seed": seed, "test_accuracy": value, "best_epoch": best_epoch, "seconds": 10.0}
            for ffn, values in accuracy.items() for seed, value in enumerate(values)]
    runs = [r for r in runs if r["ffn"] != "bilinear"] + [r for r in runs if r["ffn"] == "bilinear"][::-1]
    results = {"settings": {"ffns": list(accuracy), "seeds": len(accuracy["glu"]), "epochs": 10}, "runs": runs}
    return results, pd.DataFrame(runs)


def findings(accuracy: dict[str, list[float]]) -> str:
    results, frame = synthetic(accuracy)
    return gated_mlp.render_findings(results, Verdicts(gated_mlp.comparisons(results, frame)))


def test_glu_higher_on_every_seed_against_every_variant_reads_reproduced():
    # catches accuracy read as lower-is-better (glu would lose every comparison)
    text = findings({"gelu_mlp": [0.40, 0.41, 0.42, 0.40, 0.41], "glu": [0.50, 0.51, 0.52, 0.50, 0.51],
                     "bilinear": [0.30, 0.31, 0.32, 0.30, 0.31]})
    assert "gives the better transformer: reproduced.**" in text
    assert "glu beats gelu_mlp; glu beats bilinear" in text


def test_a_win_and_a_tie_read_partly_and_a_loss_reads_not_reproduced():
    # catches a verdict that counts only wins (a loss to one variant would still read 'partly')
    tie = [0.45, 0.56, 0.47, 0.55, 0.46]
    glu = [0.50, 0.51, 0.52, 0.50, 0.51]
    low = [0.30, 0.31, 0.32, 0.30, 0.31]
    text = findings({"gelu_mlp": tie, "glu": glu, "bilinear": low})
    assert "partly reproduced.**" in text and "glu beats bilinear; gelu_mlp, each against glu: inside the noise" in text
    text = findings({"gelu_mlp": [0.60, 0.61, 0.62, 0.60, 0.61], "glu": glu, "bilinear": low})
    assert "not reproduced.**" in text and "gelu_mlp beats glu" in text


def test_the_pairing_follows_the_seed_not_the_row_order():
    # bilinear's rows are stored in reverse seed order; glu - bilinear is +0.10 on every seed when paired by seed
    # and would straddle zero if paired by row
    results, frame = synthetic({"gelu_mlp": [0.5] * 4, "glu": [0.40, 0.50, 0.60, 0.70],
                                "bilinear": [0.30, 0.40, 0.50, 0.60]})
    verdict = Verdicts(gated_mlp.comparisons(results, frame))["glu vs bilinear"]
    assert verdict.mean == pytest.approx(0.10) and verdict.low == pytest.approx(0.10)


def test_the_budget_counts_runs_whose_best_epoch_is_the_last():
    results, _ = synthetic({"gelu_mlp": [0.4] * 3, "glu": [0.5] * 3, "bilinear": [0.3] * 3}, best_epoch=9)
    assert "3 of 3 (under-trained)" in gated_mlp.render_budget(results)
    results, _ = synthetic({"gelu_mlp": [0.4] * 3, "glu": [0.5] * 3, "bilinear": [0.3] * 3}, best_epoch=5)
    assert "| `glu` | 0 of 3 | 6 |" in gated_mlp.render_budget(results)
