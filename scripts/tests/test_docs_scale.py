"""docs/scale.md's claims are computed from the cells of benchmarks/results/scale.json (scripts/pages/scale.py)."""

from __future__ import annotations

from pages import scale as render_scale


def cell(model, n, rss, speed):
    return {"model": model, "n": n, "wall_s": n / speed, "cpu_s": n / speed, "texts_per_s": speed,
            "peak_rss_mib": rss}


def test_flatness_is_measured_from_10k_up_per_model():
    # catches a spread taken over every N (the 1k cell's lower RSS would count), across models, or inverted
    result = {"scaling": [cell("a", 1_000, 50.0, 500.0), cell("a", 10_000, 100.0, 1000.0),
                          cell("a", 100_000, 105.0, 900.0), cell("b", 10_000, 300.0, 10.0)]}
    text = render_scale.render_embed(result)
    assert "- a, N = 10,000 to 100,000: peak RSS from 100 to 105 MiB (5% apart" in text
    assert "from 900 to 1,000 (11% apart" in text
    assert "Between consecutive N: 890 texts/s" in text  # 90,000 texts in 111.1 - 10.0 s: start-up cancels out
    assert "- b," not in text  # one cell from 10k up: no spread to state


def test_leaderboard_says_when_a_ranking_differs():
    # catches a ranking compared by value instead of order, a difference taken from the wrong board, and poolers
    # said to be higher / lower the wrong way round
    board = {"rows": 10, "folds": 3, "epochs": 2, "metric": "accuracy", "boards": {
        "full": {"x": {"mean": 0.5, "std": 0.1}, "y": {"mean": 0.4, "std": 0.1}},
        "lean": {"x": {"mean": 0.5, "std": 0.1}, "y": {"mean": 0.4, "std": 0.1}},
        "lean + int8 tokens": {"y": {"mean": 0.47, "std": 0.1}, "x": {"mean": 0.46, "std": 0.1}}}}
    text = render_scale.render_leaderboard({"leaderboard": board})
    assert "lean: largest difference from the full cache 0.0000; ranking the same." in text
    assert ("lean + int8 tokens: largest difference from the full cache 0.0700 (higher for y; lower for x); "
            "ranking DIFFERENT (y, x).") in text
