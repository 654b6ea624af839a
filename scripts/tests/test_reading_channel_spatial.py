"""docs/channel-spatial.md's readings: rendered from the page's one Holm-adjusted ``Verdicts``, worded from the
outcome (a block that is steadily ahead beats, one whose differences straddle 0 is inside the noise), the runs
that chose their last epoch counted (the real page's typed-claim and flipped-verdict checks: test_readings.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from pages import channel_spatial as page

from poolkit_bench.channel_spatial import COLUMNS, summarize_runs

SEEDS = (1, 2, 3, 4, 5)
BASE = (0.70, 0.74, 0.72, 0.76, 0.71)
#: per-seed offsets from none: residual steadily ahead, ca_sa steadily behind, ca_msa (the small-data pick) on
#: both sides of 0
OFFSETS = {"none": (0.0,) * 5, "residual": (0.050, 0.052, 0.049, 0.051, 0.050),
           "ca_sa": (-0.040, -0.041, -0.039, -0.040, -0.042), "ca_msa": (0.010, -0.012, 0.008, -0.009, 0.001)}


def synthetic(offsets=OFFSETS, best_epoch=lambda seed: 3) -> pd.DataFrame:
    """A 500-image run (the paper's small regime) of four epochs per run, accuracy none's plus each offset."""
    return pd.DataFrame([("all", name, 500, 4, seed, base + offset, best_epoch(seed))
                         for name, values in offsets.items() for seed, base, offset in zip(SEEDS, BASE, values)],
                        columns=COLUMNS)


def test_a_steady_gap_beats_with_the_right_winner_and_a_straddling_one_is_noise():
    # catches a hard-coded verdict, a sign flip (none read as the winner over residual) and the pick's wash read
    # as a win
    frame = synthetic()
    verdicts = page.Verdicts(page.comparisons(frame))
    assert page.pair(verdicts, "all", 500, "residual", "none").reading == "residual beats none"
    assert page.pair(verdicts, "all", 500, "none", "ca_sa").reading == "none beats ca_sa"
    assert page.pair(verdicts, "all", 500, "ca_msa", "none").reading == "ca_msa and none: inside the noise"
    assert page.pair(verdicts, "all", 500, "ca_sa", "residual").winner == "residual"
    text = page.render_verdicts(summarize_runs(frame), verdicts)
    assert "residual beats none; none beats ca_sa; ca_msa, each against none: inside the noise" in text
    assert "`ca_msa`, ranks 2 of 3 blocks by mean (untested)" in text
    assert "**detectably below `residual`**, against the guidance" in text
    assert "Residual connections" in text and "residual beats ca_sa" in text


def verdicts_of(frame) -> str:
    return page.render_verdicts(summarize_runs(frame), page.Verdicts(page.comparisons(frame)))


def test_the_guidance_holds_only_when_the_pick_beats_none_and_every_other_block():
    # catches 'holds' from the best mean alone: the pick steadily ahead of everything holds, ahead by mean only not
    offsets = {**OFFSETS, "ca_msa": (0.080, 0.081, 0.079, 0.080, 0.082)}
    frame = synthetic(offsets)
    assert "**the guidance holds here**" in verdicts_of(frame)
    noisy = {**OFFSETS, "ca_msa": (0.090, -0.030, 0.150, -0.010, 0.100)}
    frame = synthetic(noisy)
    text = verdicts_of(frame)
    assert "the best mean (untested) is `ca_msa`" in text and "**not supported**" in text


def test_the_fine_grained_order_is_read_from_its_verdict():
    # catches the ordering claim typed regardless of the numbers (the audit's 'spatial-first is detectably worse')
    def reading(sa_ca_offsets):
        offsets = {"none": (0.0,) * 5, "ca_sa": (0.01, 0.012, 0.009, 0.011, 0.010), "sa_ca": sa_ca_offsets}
        frame = synthetic(offsets).assign(task="fine", size=1000)
        results = {"settings": {"fine_blocks": list(offsets), "fine_classes": [0, 2, 4, 6], "dataset": "test",
                                "fine_size": 1000, "fine_epochs": 4, "seeds": len(SEEDS)}}
        speed = pd.DataFrame({"block_params": 1, "forward_ms": 1.0, "vs_none": 1.0}, index=list(offsets))
        return page.render_fine(results, summarize_runs(frame), speed, page.Verdicts(page.comparisons(frame)))

    ahead = reading((0.05, 0.051, 0.049, 0.050, 0.052))
    assert "sa_ca beats ca_sa" in ahead and "as the paper says" in ahead
    assert "ca_sa beats sa_ca" in reading((-0.03, -0.031, -0.029, -0.030, -0.032))
    straddling = reading((0.03, -0.01, 0.04, -0.02, 0.01))
    assert "sa_ca and ca_sa: inside the noise" in straddling and "not supported here" in straddling


def test_runs_that_chose_their_last_epoch_are_counted_and_most_read_under_trained():
    # catches best_epoch read as 1-based (the results count epochs from 0) and 'under-trained' missing where most are
    text = page.render_epochs(synthetic(best_epoch=lambda seed: 3 if seed <= 3 else 1))
    assert "all ten classes, 500 images (4 epochs): 12 of 20 (under-trained)" in text
    assert "| `none` | 3 of 5 (under-trained) |" in text
    assert "12 of 20" not in page.render_epochs(synthetic(best_epoch=lambda seed: 2))


def test_every_size_shares_one_family():
    # catches a Holm adjustment per (task, size) where the page declares one family: the clearest comparison's
    # adjusted p (the smallest raw p) is its raw p times the family's size, which grows with a second size
    small, large = synthetic(), synthetic().assign(size=2000)
    alone, joint = page.page_verdicts(small), page.page_verdicts(pd.concat([small, large]))
    clearest = min(alone, key=lambda v: v.p)  # residual against none or ca_sa
    assert len(joint) == len(alone) + len(page.page_verdicts(large)) > len(alone)
    assert clearest.p_holm == pytest.approx(len(alone) * clearest.p)
    assert joint[clearest.comparison.key].p_holm == pytest.approx(len(joint) * clearest.p)
