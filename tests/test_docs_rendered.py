"""The docs pages whose numbers are rendered from committed result files stay in sync with them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

import markers  # noqa: E402
import render_benchmarks_compare  # noqa: E402
import render_snr  # noqa: E402

from poolkit.errors import PoolkitError  # noqa: E402

#: Every docs renderer that checks its pages with no arguments (render_perf_tables takes its result files and has
#: its own test, tests/test_benchmarks.py).
RENDERERS = sorted(path.stem for path in SCRIPTS.glob("render_*.py") if path.stem != "render_perf_tables")


@pytest.mark.parametrize("renderer", RENDERERS)
def test_page_matches_its_result_files(renderer, capsys):
    # fails when a number in a rendered docs page was typed or left stale
    assert importlib.import_module(renderer).main(["--check"]) == 0, capsys.readouterr().out


PAGE = "intro 1.5x\n<!-- begin:a -->\nold a\n<!-- end:a -->\nmiddle\n<!-- begin:b -->\n<!-- end:b -->\ntail\n"


def test_replace_blocks_keeps_the_text_outside_and_fills_each_block_once():
    # catches a replacement that drops the hand-written text, appends instead of replacing, or duplicates a block
    want = "intro 1.5x\n<!-- begin:a -->\nnew a\n<!-- end:a -->\nmiddle\n<!-- begin:b -->\nB\n1\n<!-- end:b -->\ntail\n"
    got = markers.replace_blocks(PAGE, {"a": "new a\n", "b": "B\n1"})
    assert got == want
    assert markers.replace_blocks(got, {"a": "new a", "b": "B\n1"}) == want  # idempotent


@pytest.mark.parametrize("page, blocks, match", [
    (PAGE, {"a": "x"}, "do not pair up"),                            # the page has a block the renderer lacks
    (PAGE, {"a": "x", "b": "y", "c": "z"}, "do not pair up"),        # the renderer has a block the page lacks
    (PAGE + "<!-- begin:a -->\n<!-- end:a -->\n", {"a": "x", "b": "y"}, "do not pair up"),  # twice
    (PAGE.replace("<!-- end:a -->\nmiddle\n", "middle\n") + "<!-- end:a -->\n", {"a": "x", "b": "y"}, "do not pair up"),
])
def test_replace_blocks_refuses_markers_that_do_not_pair_up(page, blocks, match):
    with pytest.raises(PoolkitError, match=match):
        markers.replace_blocks(page, blocks)


def test_check_fails_on_a_changed_number_and_write_restores_it(tmp_path, capsys):
    doc = tmp_path / "page.md"
    doc.write_text(PAGE.replace("old a", "2.05"))
    blocks = {"a": "2.05", "b": ""}
    assert markers.main(doc, lambda _: blocks, "", ["--check"]) == 0
    doc.write_text(PAGE.replace("old a", "2.06"))
    assert markers.main(doc, lambda _: blocks, "", ["--check"]) == 1
    assert "['a']" in capsys.readouterr().out  # names the stale block
    assert markers.main(doc, lambda _: blocks, "", ["--write"]) == 0
    assert doc.read_text() == PAGE.replace("old a", "2.05")


def _sweep(mse_std: dict, small_mean: float, extended: dict | None = None) -> render_snr.Sweep:
    """A two-budget sweep: (mean, std) per (pooler, K) at the larger budget; mean pooling at ``small_mean`` x
    adapool's MSE at the smaller one; ``extended``: {(pooler, K): mean} of an extension to budget 400 x 1."""
    settings = {"poolers": ["mean", "max", "cls", "adapool"], "ks": [4, 64], "budgets": [[100, 1], [200, 1]],
                "reference": 0, "base": {"layers": 1}, "depths": [], "depth_poolers": [], "depth_k": 4}
    rows = []
    for samples in (100, 200):
        for (pooler, k), (mean, std) in mse_std.items():
            if samples == 100 and pooler == "mean":
                mean = small_mean * mse_std["adapool", k][0]
            stage = "baseline" if pooler.startswith("baseline") else "budget"
            rows.append({"stage": stage, "samples": samples, "epochs": 1, "layers": 0 if stage == "baseline" else 1,
                         "pooler": pooler, "K": k, "mse_mean": mean, "mse_std": std, "seeds": 5, "best_last": 0,
                         "cpu_seconds": 1.0, "lr": 0.01, "budget_x": samples})
    runs = [{"stage": "budget", "samples": 200, "epochs": 1, "pooler": p, "best_epoch": e, "val_loss": [1.0, 0.9]}
            for p in settings["poolers"] for e in (1, 0)]
    meta = {"settings": settings, "runs": runs, "quick_budget": [100, 1]}
    if extended:
        poolers = sorted({p for p, _ in extended})
        meta["extensions"] = [{"budgets": [[400, 1]], "poolers": poolers, "lrs": dict.fromkeys(poolers, 0.01)}]
        rows += [{**rows[0], "samples": 400, "pooler": p, "K": k, "mse_mean": v} for (p, k), v in extended.items()]
    return render_snr.Sweep(meta, rows)


def test_snr_claims_and_verdicts_are_computed_from_the_cells():
    # catches an inverted ratio (adapool / mean), a verdict that ignores the order-of-magnitude threshold, an
    # inverted std ratio, a trend read from the wrong end and a best-epoch count off by one (best_epoch is 0-based)
    cells = {("adapool", 4): (0.01, 0.001), ("mean", 4): (0.2, 0.004), ("max", 4): (0.5, 0.01),
             ("cls", 4): (0.15, 0.003), ("adapool", 64): (0.02, 0.002), ("mean", 64): (0.01, 0.001),
             ("max", 64): (0.5, 0.01), ("cls", 64): (0.3, 0.01), ("baseline_mean", 4): (0.05, 0.0),
             ("baseline_x0", 4): (0.04, 0.0), ("baseline_mean", 64): (0.008, 0.0), ("baseline_x0", 64): (0.08, 0.0)}
    before = ({"settings": {"lr": 0.01}}, {})
    text = render_snr.render_claims(_sweep(cells, small_mean=5.0), before)
    assert "at SNR 0.03-0.25: reproduced.** Each at the largest budget it was run at, over K = 4: mean / adapool " \
           "20.00x (2×), max / adapool 50.00x (2×), cls / adapool 15.00x (2×)." in text
    assert "at K = 4 5.00 → 20.00 (rising at every step; steps +300%; highest at 2×)" in text
    assert "below that of mean, max and CLS pooling: partly reproduced.**" in text
    assert "mean 0.25 to 2.00, max 0.10 to 0.20" in text and "in 5 of 6 (pooler, K) pairs" in text
    assert "the best epoch was the last one in 4 of 8 runs" in text
    assert "adapool beats both at K = 4; it is worse than predicting vector 0 at no K and worse than predicting " \
           "the mean of all vectors at K = 64." in text
    cells["cls", 4] = (0.05, 0.003)  # 5x: the direction holds, not the size
    assert "at SNR 0.03-0.25: partly reproduced.**" in render_snr.render_claims(_sweep(cells, 5.0), before)
    cells["mean", 4] = (0.009, 0.004)  # mean beats adapool
    text = render_snr.render_claims(_sweep(cells, 25.0), before)
    assert "at SNR 0.03-0.25: not reproduced.**" in text and "mean is as good or better at K = 4" in text
    assert "at K = 4 25.00 → 0.90 (not rising at every step" in text


def test_snr_claims_read_an_extension_s_budgets():
    # catches verdicts that ignore the extended budgets, and a gap read at a budget where a pooler was not run
    cells = {("adapool", 4): (0.01, 0.001), ("mean", 4): (0.2, 0.004), ("max", 4): (0.5, 0.01),
             ("cls", 4): (0.15, 0.003), ("adapool", 64): (0.02, 0.002), ("mean", 64): (0.01, 0.001),
             ("max", 64): (0.5, 0.01), ("cls", 64): (0.3, 0.01), ("baseline_mean", 4): (0.05, 0.0),
             ("baseline_x0", 4): (0.04, 0.0), ("baseline_mean", 64): (0.008, 0.0), ("baseline_x0", 64): (0.08, 0.0)}
    extended = {("adapool", 4): 0.01, ("mean", 4): 0.05, ("adapool", 64): 0.02, ("mean", 64): 0.02}
    sweep = _sweep(cells, 5.0, extended)
    text = render_snr.render_claims(sweep, ({"settings": {"lr": 0.01}}, {}))
    assert "mean / adapool 5.00x (4×), max / adapool 50.00x (2×), cls / adapool 15.00x (2×)" in text
    assert "at K = 4 5.00 → 20.00 → 5.00 (not rising at every step; steps +300%, -75%; highest at 2×)" in text
    # the rate choice made again at 400 x 1: a pooler whose choice differs from the extension's rate is named
    check = {"settings": {"budgets": [[400, 1]], "reference": 0, "lr_k": 4, "lrs": [0.003, 0.01]},
             "provenance": {"commit": "abcdef0"}, "runs": [],
             "lr_choice": {"mean": {"lr": 0.01, "val_mse": {"0.003": 0.2, "0.01": 0.1}},
                           "adapool": {"lr": 0.003, "val_mse": {"0.003": 0.01, "0.01": 0.02}}}}
    assert "another rate for adapool:" in render_snr.render_lr_check(sweep, check)
    check["lr_choice"]["adapool"]["lr"] = 0.01
    assert "the rates the extension used for every pooler" in render_snr.render_lr_check(sweep, check)


def test_benchmark_targets_say_when_one_is_missed():
    # catches a targets table that prints 'met' from the target alone instead of the file's verdict
    ratio = {"wall": 2.5, "cpu": 2.2}
    compare = {"summary": {"target_cli_over_components": 2.0, "cli_over_components": ratio, "target_met": False,
                           "reencode_over_components": ratio, "reencode_over_cli": ratio}}
    padding = {"datasets": [{"name": "embedded", "rows": 10, "summary": {"target": 1.5, "cpu_speedup": 3.0,
                                                                         "speedup": 2.0, "target_met": True}}]}
    text = render_benchmarks_compare.render_targets(compare, padding)
    assert "| <= 2.0x | 2.20x / 2.50x | MISSED |" in text and "| >= 1.5x | 3.00x / 2.00x | met |" in text
    assert "Targets missed: 1." in text
