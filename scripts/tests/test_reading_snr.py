"""docs/snr.md's readings come from their tests: a clear difference over the seeds reads 'beats' with the right
winner, one that straddles 0 reads 'inside the noise' (the real page's typed-claim check: test_readings.py)."""

import statistics

from pages import snr


ADAPOOL = [0.0100, 0.0103, 0.0098, 0.0101, 0.0099]  # five seeds, a percent or two apart
NOISE = [1.03, 0.97, 1.02, 0.98, 1.0]  # factors whose log straddles 0
SMALL, LARGE = (100, 1), (200, 1)
NO_BEFORE = ({"settings": {"lr": 0.01}}, {})


def sweep(larger: dict[tuple[str, int], list[float]], smaller: dict[tuple[str, int], list[float]] | None = None,
          baselines: dict[int, float] | None = None) -> snr.Sweep:
    """A sweep of mean, max, cls and adapool at K = 4 and 64 and two budgets, from per-seed test MSEs (the
    smaller budget: ``smaller``, default the larger's); every run's best epoch is its last."""
    settings = {"poolers": ["mean", "max", "cls", "adapool"], "ks": [4, 64], "budgets": [list(SMALL), list(LARGE)],
                "reference": 1, "base": {"layers": 1}, "depths": [], "depth_poolers": [], "depth_k": 4}
    runs, rows = [], []
    for budget, cells in ((SMALL, smaller or larger), (LARGE, larger)):
        for (pooler, k), values in cells.items():
            runs += [{"stage": "budget", "samples": budget[0], "epochs": budget[1], "layers": 1, "pooler": pooler,
                      "K": k, "seed": 1 + i, "test_mse": v, "best_epoch": 1, "val_loss": [1.0, 0.9],
                      "cpu_seconds": 1.0} for i, v in enumerate(values)]
            rows.append({"stage": "budget", "samples": budget[0], "epochs": budget[1], "layers": 1, "pooler": pooler,
                         "K": k, "mse_mean": statistics.fmean(values), "mse_std": statistics.stdev(values),
                         "seeds": len(values), "best_last": len(values), "cpu_seconds": 1.0, "lr": 0.01,
                         "budget_x": 1.0})
        for k, value in (baselines or {4: 1.0, 64: 1.0}).items():
            rows += [{**rows[0], "stage": "baseline", "samples": budget[0], "epochs": budget[1], "layers": 0,
                      "pooler": name, "K": k, "mse_mean": value, "mse_std": 0.0} for name in snr.BASELINES]
    return snr.Sweep({"settings": settings, "runs": runs, "quick_budget": list(LARGE)}, rows)


def cells(mean: float, max_: float, cls: float, spread: list[float] | None = None) -> dict:
    """Each pooler's per-seed MSEs at K = 4 and 64: ``mean`` / ``max_`` / ``cls`` times adapool's, seed by seed
    (times ``spread`` too when given)."""
    spread = spread or [1.0] * len(ADAPOOL)
    out = {}
    for k in (4, 64):
        out["adapool", k] = ADAPOOL
        for pooler, factor in (("mean", mean), ("max", max_), ("cls", cls)):
            out[pooler, k] = [a * factor * f for a, f in zip(ADAPOOL, spread)]
    return out


def claims(s: snr.Sweep) -> str:
    return snr.render_claims(s, NO_BEFORE, snr.page_verdicts(s, NO_BEFORE))


def test_a_clear_lead_reads_beats_with_adapool_the_winner_and_its_size_decides_the_verdict():
    # catches a hard-coded verdict, and a ratio read the wrong way round
    s = sweep(cells(20.0, 50.0, 15.0))
    verdicts = snr.page_verdicts(s, NO_BEFORE)
    assert verdicts[snr.mse_key("adapool", "mean", LARGE, 4)].winner == "adapool"
    text = claims(s)
    assert "0.03-0.25: reproduced.**" in text and "adapool beats mean at K = 4; adapool beats max at K = 4" in text
    assert "0.03-0.25: partly reproduced.**" in claims(sweep(cells(2.0, 50.0, 15.0)))  # the direction, not the size


def test_a_lower_mse_wins_and_a_difference_that_straddles_zero_is_inside_the_noise():
    # catches MSE read as higher-is-better (mean at half adapool's MSE would 'lose'), and a sign flip
    text = claims(sweep(cells(0.5, 50.0, 15.0)))
    assert "0.03-0.25: not reproduced.**" in text and "mean beats adapool at K = 4" in text
    text = claims(sweep({**cells(2.0, 50.0, 15.0), ("mean", 4): [a * f for a, f in zip(ADAPOOL, NOISE)]}))
    assert "adapool and mean: inside the noise at K = 4" in text and "0.03-0.25: not reproduced.**" in text


def test_the_gap_s_growth_with_the_budget_is_read_from_its_test():
    # catches a trend read from the wrong end, and a step called wider without its test
    def gapped(small: float, large: float, noise=NOISE):
        return sweep(cells(large, 50.0, 15.0), cells(small, 50.0, 15.0, noise))
    assert "→ 4.00, steps +100% [wider]" in claims(gapped(2.0, 4.0))
    assert "steps -50% [narrower]" in claims(gapped(4.0, 2.0))
    assert "steps +1% [inside the noise]" in claims(gapped(2.0, 2.02))


def test_the_variance_claim_needs_a_lower_spread_against_every_pooler():
    # catches a 'partly' from one pooler alone, and a spread ratio inverted
    wide = [1.35, 0.74, 1.36, 0.73, 1.35]  # about +-30% on the log scale against adapool's +-2%
    steady = cells(2.0, 50.0, 15.0)
    noisy = {key: [v * f for v, f in zip(values, wide)] if key[0] != "adapool" else values
             for key, values in steady.items()}
    assert "mean, max and CLS pooling: reproduced.**" in claims(sweep(noisy))
    one = {**steady, **{key: values for key, values in noisy.items() if key[0] == "max"}}
    text = claims(sweep(one))
    assert "mean, max and CLS pooling: not reproduced.**" in text and "adapool beats max at K = 4, 64" in text
    louder = {**steady, **{("adapool", k): [v * f for v, f in zip(ADAPOOL, wide)] for k in (4, 64)}}
    assert "mean beats adapool at K = 4, 64" in snr.claim_variance(sweep(louder),
                                                                   snr.page_verdicts(sweep(louder), NO_BEFORE))


def test_the_baselines_and_the_under_trained_runs_are_read_from_the_runs():
    # catches a baseline comparison with the sign flipped, and best-epoch counts that ignore the runs
    s = sweep(cells(2.0, 50.0, 15.0), baselines={4: 0.02, 64: 0.005})
    text = claims(s)
    assert "adapool beats baseline_mean at K = 4; baseline_mean beats adapool at K = 64" in text
    assert "the best epoch was the last one in 40 of 40 runs" in text and "1× every pooler" in text
