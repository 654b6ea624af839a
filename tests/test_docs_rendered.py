"""The docs pages whose numbers are rendered from committed result files stay in sync with them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import markers  # noqa: E402
import render_benchmarks_compare  # noqa: E402
import render_leaderboards  # noqa: E402
import render_scale  # noqa: E402
import render_snr  # noqa: E402
import render_vision  # noqa: E402

from poolkit.errors import PoolkitError  # noqa: E402


@pytest.mark.parametrize("renderer", [render_snr, render_benchmarks_compare, render_vision, render_leaderboards,
                                      render_scale],
                         ids=lambda m: m.__name__)
def test_page_matches_its_result_files(renderer, capsys):
    # fails when a number in docs/snr.md, benchmarks-compare.md, vision.md or leaderboards.md was typed or left stale
    assert renderer.main(["--check"]) == 0, capsys.readouterr().out


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


def test_snr_claims_are_computed_from_the_cells():
    # catches an inverted ratio (adapool / mean), a best-epoch count off by one (best_epoch is 0-based) and a
    # K list that does not follow the cells
    ks = [1, 4]
    cells = {"adapool": {1: (0.1, 0.01), 4: (0.05, 0.001)}, "mean": {1: (0.2, 0.002), 4: (0.04, 0.0004)},
             "max": {1: (1.0, 0.1), 4: (0.5, 0.05)}, "cls": {1: (0.11, 0.01), 4: (0.05, 0.001)},
             "baseline_mean": {1: (0.3, 0.0), 4: (0.03, 0.0)}, "baseline_x0": {1: (0.09, 0.0), 4: (0.2, 0.0)}}
    runs = [{"pooler": p, "best_epoch": e, "val_loss": [1.0, 0.9, 0.8]} for p in render_snr.POOLERS for e in (2, 1)]
    text = render_snr.render_claims({"settings": {"ks": ks}, "runs": runs}, cells)
    assert "mean / adapool is 2.00 at K = 1, 0.80 at K = 4" in text
    assert "over K = 4-4 it is 0.80x" in text
    assert "Mean pooling has the lower MSE at K = 4," in text
    assert "for 4 of the 8 runs the best epoch was the last one" in text
    assert ("adapool is worse than predicting vector 0 at K = 1 and worse than predicting the mean of all vectors "
            "at K = 4") in text


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
