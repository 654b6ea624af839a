"""docs/sets.md's readings: each from its paired t over the seeds (test MSE, lower is better), Holm-adjusted over the
page (the real page's typed-claim and flipped-verdict checks: test_readings.py)."""

from __future__ import annotations

import pytest
from pages import sets
from verdicts import Verdicts


KEY = "typed: zonotope x1 vs attention x1"


def synthetic(zonotope: list[float], attention: list[float], best_epoch: int = 5) -> dict:
    """A results.json of one task and two models, with the given test MSE per seed."""
    runs = [{"task": "typed", "model": model, "seed": seed, "params": 10, "test_mse": mse, "best_epoch": best_epoch}
            for model, values in (("attention x1", attention), ("zonotope x1", zonotope))
            for seed, mse in enumerate(values, 1)]
    return {"settings": {"tasks": ["typed"], "models": ["attention x1", "zonotope x1"], "seeds": len(zonotope),
                         "epochs": 10}, "runs": runs}


def test_a_clearly_lower_error_reads_as_a_win_for_the_lower_one():
    # the zonotope's MSE is far lower on every seed: it wins (a higher-is-better reading would crown attention)
    results = synthetic([0.010, 0.012, 0.011], [0.50, 0.53, 0.51])
    verdicts = Verdicts(sets.comparisons(results))
    assert verdicts[KEY].winner == "zonotope x1"
    assert "zonotope x1 beats attention x1" in sets.render_findings(results, verdicts)
    assert "zonotope x1 beats attention x1" in verdicts.block()


def test_differences_that_straddle_zero_read_as_noise():
    results = synthetic([0.20, 0.31, 0.25], [0.25, 0.26, 0.26])
    verdicts = Verdicts(sets.comparisons(results))
    assert not verdicts[KEY].detected
    assert "zonotope x1 and attention x1: inside the noise" in sets.render_findings(results, verdicts)


def test_the_budget_counts_runs_whose_best_epoch_is_the_last():
    assert "3 of 3 (under-trained)" in sets.render_budget(synthetic([0.1] * 3, [0.2] * 3, best_epoch=9))
    assert "0 of 3; best 6" in sets.render_budget(synthetic([0.1] * 3, [0.2] * 3, best_epoch=5))


def test_zonotope_x1_is_compared_with_each_baseline_paired_by_seed():
    # catches a baseline comparison left undeclared, and values paired in the order of the file instead of by seed
    mse = {"zonotope x1": [0.1, 0.2, 0.3], "set_transformer": [0.4, 0.5, 0.6], "deepsets": [0.7, 0.8, 0.9]}
    runs = [{"task": "typed", "model": model, "seed": seed, "test_mse": values[seed - 1]}
            for model, values in mse.items() for seed in (3, 1, 2)]
    results = {"settings": {"tasks": ["typed"], "models": list(mse)}, "runs": runs}
    found = {c.key: c for c in sets.comparisons(results)}
    assert set(found) == {"typed: zonotope x1 vs set_transformer", "typed: zonotope x1 vs deepsets"}
    assert list(found["typed: zonotope x1 vs deepsets"].a_values) == mse["zonotope x1"]
    assert list(found["typed: zonotope x1 vs deepsets"].b_values) == mse["deepsets"]


def test_the_tdof_cell_spans_the_seeds_and_marks_models_without_value_maps():
    # catches a TDOF read from one seed only, or a missing TDOF (NaN in results.csv) printed as a number
    rows = [{"task": "typed", "model": model, "target": target, "tdof": value}
            for model, values in (("zonotope x1", (4, 5, 5)), ("deepsets", (float("nan"),) * 3))
            for value in values for target in ("all", "y0")]
    assert sets.tdof_cell(rows, "typed", "zonotope x1") == "4 to 5"
    assert sets.tdof_cell(rows, "typed", "deepsets") == "—"


def test_every_task_shares_one_family():
    # catches a Holm adjustment per task where the page declares one family: the clearer task's adjusted p is its
    # raw p times 2 once a second task's comparison joins it
    one = synthetic([0.010, 0.012, 0.011], [0.50, 0.53, 0.51])
    other = synthetic([0.20, 0.31, 0.25], [0.25, 0.26, 0.26])
    for run in other["runs"]:
        run["task"] = "statistics"
    both = {"settings": {**one["settings"], "tasks": ["typed", "statistics"]}, "runs": one["runs"] + other["runs"]}
    alone, joint = sets.page_verdicts(one), sets.page_verdicts(both)
    assert (len(alone), len(joint)) == (1, 2) and alone[KEY].p_holm == pytest.approx(alone[KEY].p)
    assert joint[KEY].p_holm == pytest.approx(2 * alone[KEY].p)
