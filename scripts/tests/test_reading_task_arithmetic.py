"""docs/task-arithmetic.md's readings come from their tests: a synthetic run where one mode is clearly ahead over
the seeds reads "beats" with that mode as the winner (interference and disentanglement error read lower-is-better),
each claim read beside the winner it predicts per measure, one whose differences straddle 0 reads "inside the
noise", the budget block counts runs whose best epoch is the last (the real page's typed-claim and flipped-verdict
checks: test_readings.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pages import task_arithmetic
from verdicts import Verdicts


def synthetic(gap: float, straddle: bool = False, seeds: int = 8, mode: str = "attention",
              single: float = 0.0) -> pd.DataFrame:
    """Every mode scores alike per seed and task except ``mode``, whose merged skill is the others' plus a shift,
    whose interference (raw and per norm) and disentanglement error are theirs minus it, and whose single-task skill
    is theirs plus ``single`` times it: the shift is ``gap`` (with a little noise), or with ``straddle`` alternately
    +``gap`` and -``gap`` around a mean of a tenth of it."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(seeds):
        shift = gap * ((-1) ** seed + 0.1) if straddle else gap + rng.normal(0, abs(gap) / 20)
        for task in ("a", "b"):
            finetuned, change, interference = 0.4 + rng.normal(0, 0.01), -0.05 + rng.normal(0, 0.002), 0.2
            for name in task_arithmetic.MODES:
                s = shift if name == mode else 0.0
                rows.append({"mode": name, "seed": seed, "task": task, "finetuned_skill": finetuned + single * s,
                             "merged_skill": finetuned + change + s, "change": change + s - single * s,
                             "interference": interference - s, "interference_per_norm": 2 * interference - s,
                             "disentanglement_error": interference - s, "tau_norm": 1.0, "trainable_params": 1})
    return pd.DataFrame(rows)


def claim_table(paper: str, claim: str) -> str:
    """The paper block's table for the claim whose text is ``PAPER[claim]``."""
    return paper.split(f"**{task_arithmetic.PAPER[claim]}**")[1].split("\n**")[0]


def test_a_mode_clearly_ahead_over_the_seeds_beats_the_other_with_the_right_winner():
    # catches a lower-is-better measure read with the wrong sign, or a claim read against the wrong mode
    frame = synthetic(0.05)
    verdicts = Verdicts(task_arithmetic.comparisons(frame))
    for key in ("change:attention-all", "interference_per_norm:attention-all", "disentanglement_error:attention-all"):
        assert verdicts[key].detected and verdicts[key].winner == "`attention`", key
        assert verdicts[key].reading == "`attention` beats `all`"
    assert verdicts["cost:all"].winner == "`all` single-task"  # merging took skill off in every seed
    assert verdicts["finetuned_skill:attention-all"].reading == "`attention` and `all`: inside the noise"
    first = claim_table(task_arithmetic.render_paper(frame, verdicts), "attention_vs_all")
    assert first.count("as the claim predicts") == 3 and "against the claim" not in first


def test_the_other_mode_ahead_reads_against_the_claim():
    # catches "beside the claim" worded from the verdict alone: a sign flip, `all` merging with less loss and less
    # interference, wins where the claim predicts `attention`
    frame = synthetic(-0.05)
    verdicts = Verdicts(task_arithmetic.comparisons(frame))
    for key in ("change:attention-all", "interference_per_norm:attention-all"):
        assert verdicts[key].winner == "`all`", key
    first = claim_table(task_arithmetic.render_paper(frame, verdicts), "attention_vs_all")
    assert first.count("against the claim") == 3 and "as the claim predicts" not in first


def test_each_linearised_claim_is_read_beside_the_winner_it_predicts_per_measure():
    # catches a claim that predicts its own mode on every measure: the tangent-space claim predicts `all` the
    # single-task winner, Jin et al.'s `attention`, and neither a winner where the two are close
    frame = synthetic(0.05, mode="linearized", single=-1.0)
    verdicts = Verdicts(task_arithmetic.comparisons(frame))
    assert verdicts["finetuned_skill:linearized-all"].winner == "`all`"
    paper = task_arithmetic.render_paper(frame, verdicts)
    assert claim_table(paper, "linearized_vs_all").count("as the claim predicts") == 4
    versus = claim_table(paper, "linearized_vs_attention")
    assert versus.count("as the claim predicts") == 1 and versus.count("against the claim") == 1
    assert versus.count(task_arithmetic.CLOSE) == 2
    assert "interference (raw)" not in verdicts.block()  # raw interference is described, not tested


def test_differences_that_straddle_zero_are_inside_the_noise():
    # catches a reading that calls a difference whose sign flips from seed to seed a win
    frame = synthetic(0.05, straddle=True)
    verdicts = Verdicts(task_arithmetic.comparisons(frame))
    for key in ("change:attention-all", "interference_per_norm:attention-all", "merged_skill:attention-all"):
        assert verdicts[key].reading == "`attention` and `all`: inside the noise", key
    modes = task_arithmetic.mode_summary(frame)
    assert "*(noise)*" not in task_arithmetic.render_modes(frame, modes, verdicts).splitlines()[2]  # `all`: a cost
    assert "beats" not in task_arithmetic.render_paper(frame, verdicts)


def test_the_budget_block_reads_runs_whose_best_epoch_is_the_last_as_under_trained():
    # catches a budget count over merges instead of fine-tuning runs, or one that reads a minority as under-trained
    results = {"settings": {"epochs": 2, "grid": [0.1, 0.5], "modes": ["all", "attention"]},
               "runs": [{"mode": "all", "alpha": 0.1, "best_epochs": {"a": 2, "b": 2}},
                        {"mode": "all", "alpha": 0.5, "best_epochs": {"a": 1, "b": 2}},
                        {"mode": "attention", "alpha": 0.5, "best_epochs": {"a": 1, "b": 1}},
                        {"mode": "attention", "alpha": 0.5, "best_epochs": {"a": 2, "b": 0}}]}
    rows = task_arithmetic.render_budget(results).splitlines()[2:]
    assert rows == ["| `all` | 3 of 4 | under-trained | 1 of 2 |", "| `attention` | 1 of 4 | — | 0 of 2 |"]


def test_one_epoch_is_no_choice_and_a_missing_task_leaves_the_comparison_untested():
    # catches 'under-trained' read off a one-epoch budget, and a seed's mean over the tasks it happens to have (a
    # missing task skipped on one side only, so the pair compares different tasks)
    results = {"settings": {"epochs": 1, "grid": [0.5], "modes": ["all"]},
               "runs": [{"mode": "all", "alpha": 0.5, "best_epochs": {"a": 1, "b": 1}}]}
    assert "| `all` | 2 of 2 | no choice (one epoch) | 1 of 1 |" in task_arithmetic.render_budget(results)
    frame = synthetic(0.05)
    frame.loc[(frame["mode"] == "attention") & (frame["seed"] == 0) & (frame["task"] == "b"), "merged_skill"] = np.nan
    verdict = Verdicts(task_arithmetic.comparisons(frame))["merged_skill:attention-all"]
    assert not verdict.tested and verdict.reading.endswith("not tested (a value is not finite)")
