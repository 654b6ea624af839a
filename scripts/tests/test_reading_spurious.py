"""docs/spurious.md's readings come from its tests: the page's one Holm-adjusted family of paired comparisons."""

from __future__ import annotations

import pandas as pd
from pages import spurious
from verdicts import Comparison, Verdicts


def frame(gaps: dict[str, list[float]], agreement: float = 0.95, cue: str = "stripes") -> pd.DataFrame:
    """Worst-group accuracies over 5 seeds at one cue and agreement: DFR at 0.8 plus noise, each method at DFR + its gaps;
    the rows shuffled (catches values paired by row order instead of by seed)."""
    noise = [0.01, -0.02, 0.0, 0.015, -0.005]
    rows = [{"cue": cue, "agreement": agreement, "seed": seed, "method": "dfr", "worst_group": 0.8 + noise[seed]}
            for seed in range(5)]
    for method, gap in gaps.items():
        rows += [{"cue": cue, "agreement": agreement, "seed": seed, "method": method,
                  "worst_group": 0.8 + noise[seed] + gap[seed]}
                 for seed in range(5)]
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0)


CLEAR = [0.10, 0.11, 0.09, 0.10, 0.12]
STRADDLING = [0.05, -0.04, 0.03, -0.05, 0.01]


def test_a_method_clearly_above_dfr_beats_it_and_one_straddling_zero_is_inside_the_noise():
    # catches a hard-coded verdict, a sign flip (DFR named the winner) and a flex reading that ignores its own test
    data = frame({"erm": [-0.3] * 5, "attention2d": CLEAR, "adapool2d": STRADDLING,
                  "flex": [-0.2, -0.21, -0.19, -0.2, -0.22]})
    verdicts = spurious.page_verdicts(data)
    assert verdicts["stripes 0.95 attention2d vs dfr"].reading == "attention2d beats DFR"
    assert verdicts["stripes 0.95 adapool2d vs dfr"].reading == "adapool2d and DFR: inside the noise"
    assert verdicts["stripes 0.95 flex vs dfr"].reading == "DFR beats flex"
    claim = spurious.claim_reading(verdicts, [("stripes", 0.95)], "dfr", "claim")
    assert "beats DFR in 1 of 2 (pooler, cue, agreement) triples (attention2d on stripes at 0.95); DFR beats it in " \
           "0; inside the noise in 1" in claim


def test_the_family_is_adjusted_together():
    # catches per-comparison (unadjusted) verdicts: a difference that clears p < 0.05 alone is inside the noise
    # once the page's other comparisons share the family
    borderline = [0.04, 0.01, 0.05, 0.0, 0.03]
    alone = Verdicts([Comparison("x", "a", "b", [0.8 + g for g in borderline], [0.8] * 5, "m")])
    assert alone["x"].detected
    data = frame({"erm": borderline, "attention2d": STRADDLING, "adapool2d": STRADDLING, "flex": STRADDLING})
    assert not spurious.page_verdicts(data)["stripes 0.95 erm vs dfr"].detected


def test_both_agreements_share_one_family():
    # catches a Holm adjustment per agreement (6 comparisons) where the page declares 12: a gap whose raw p is about
    # 0.006 leaves the noise among 6 and stays inside it among 12
    gap = [g + 0.007 for g in (0.05, 0.01, 0.04, 0.02, 0.03)]
    quiet = {"erm": STRADDLING, "adapool2d": STRADDLING, "flex": STRADDLING}
    easier = frame({**quiet, "attention2d": gap})
    both = pd.concat([easier, frame({**quiet, "attention2d": STRADDLING}, agreement=0.99)])
    assert spurious.page_verdicts(easier)["stripes 0.95 attention2d vs dfr"].detected
    assert not spurious.page_verdicts(both)["stripes 0.95 attention2d vs dfr"].detected


def test_both_cues_share_one_family_and_keep_their_own_pairs():
    # catches a Holm adjustment per cue, and seeds paired across cues (the colour run's seed 1 is not the stripe
    # run's seed 1): the colour cue's comparison reads its own rows only
    gap = [g + 0.007 for g in (0.05, 0.01, 0.04, 0.02, 0.03)]
    quiet = {"erm": STRADDLING, "adapool2d": STRADDLING, "flex": STRADDLING}
    stripes = frame({**quiet, "attention2d": gap})
    both = pd.concat([stripes, frame({**quiet, "attention2d": [-g for g in CLEAR]}, cue="colour")])
    assert spurious.page_verdicts(stripes)["stripes 0.95 attention2d vs dfr"].detected
    verdicts = spurious.page_verdicts(both)
    assert not verdicts["stripes 0.95 attention2d vs dfr"].detected
    assert verdicts["colour 0.95 attention2d vs dfr"].reading == "DFR beats attention2d"
