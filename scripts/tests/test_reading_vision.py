"""docs/vision.md's readings follow their tests: on a synthetic run, a pooler clearly above or below gap over the
seeds reads "beats" with the right winner and one straddling gap reads "inside the noise" (the real page's
typed-claim and flipped-verdict checks: test_readings.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from pages import vision
from verdicts import Verdicts

from poolkit_bench.vision import summarize

JITTER = [0.001, -0.002, 0.0015, -0.0005]


def synthetic_frame() -> pd.DataFrame:
    """One setting, four seeds: gmp clearly above gap, flex straddling it, flex_reg clearly below both."""
    gap = [0.75, 0.76, 0.74, 0.755]
    offsets = {"gap": [0.0] * 4, "gmp": [0.05 + j for j in JITTER], "flex": [0.01, -0.012, 0.008, -0.006],
               "flex_reg": [-0.04 + j for j in JITTER]}
    return pd.DataFrame([{"variant": "scratch", "pooler": name, "size": 1000, "seed": seed + 1,
                          "accuracy": base + offset[seed], "best_epoch": 7}
                         for name, offset in offsets.items() for seed, base in enumerate(gap)])


def test_readings_say_beats_for_the_winner_and_inside_the_noise_for_a_straddle():
    # catches a hard-coded verdict, a sign flip (gap read as the winner over gmp), and accuracy read as lower-is-better
    frame = synthetic_frame()
    verdicts = Verdicts(vision.comparisons(frame))
    assert verdicts[vision.key("scratch", 1000, "gmp", "gap")].winner == "gmp"
    assert verdicts[vision.key("scratch", 1000, "flex_reg", "flex")].winner == "flex"
    readings = vision.render_readings(frame, verdicts)
    assert "gmp beats gap; gap beats flex_reg; flex, each against gap: inside the noise." in readings
    assert "flex beats flex_reg" in readings
    assert "gap beats gmp" not in readings and "flex_reg beats" not in readings
    assert "gem) against gap, over the sizes:** 1 of 1 comparisons leave the noise: 1 won by the pooler, 0 by gap" \
        in readings
    assert "flex+sac) against gap, over the sizes:** 1 of 2 comparisons leave the noise: 0 won by the pooler, 1 by " \
        "gap" in readings
    rows = {line.split(" | ")[0]: line for line in vision.render_table(summarize(frame), "scratch", verdicts)
            .splitlines() if line.startswith("| ")}
    assert "*(noise)*" in rows["| flex"] and "*(noise)*" not in rows["| gmp"] + rows["| flex_reg"]


def test_runs_chosen_at_their_last_epoch_are_counted_and_most_read_under_trained():
    # catches an off-by-one on the 0-based best epoch and 'under-trained' said of a minority
    curve = [0.5, 0.6, 0.7]
    runs = [{"variant": "scratch", "pooler": name, "size": 1000, "best_epoch": best, "val_accuracy": curve}
            for name, bests in {"gap": (2, 2, 1), "gmp": (2, 1, 0)}.items() for best in bests]
    block = vision.render_epochs({"runs": runs, "settings": {"epochs": 3, "sizes": [1000], "poolers": ["gap", "gmp"]}})
    assert block.startswith("Runs whose chosen epoch is the last of their 3: 3 of 6 in all; from scratch 3 of 6.")
    assert "| gap | 2 of 3 (under-trained) |" in block and "| gmp | 1 of 3 |" in block


def test_both_settings_share_one_family():
    # catches a Holm adjustment per setting (from scratch, frozen) where the page declares one family: the clearest
    # comparison's adjusted p is its raw p times the family's size, 4 with one setting and 8 with both
    scratch = synthetic_frame()
    both = pd.concat([scratch, synthetic_frame().assign(variant="frozen")])
    k = vision.key("scratch", 1000, "gmp", "gap")
    alone, joint = vision.page_verdicts(scratch), vision.page_verdicts(both)
    assert (len(alone), len(joint)) == (4, 8) and alone[k].p == pytest.approx(joint[k].p)
    smallest = min(v.p for v in alone)
    assert alone[k].p_holm == pytest.approx(4 * smallest) and joint[k].p_holm == pytest.approx(8 * smallest)
