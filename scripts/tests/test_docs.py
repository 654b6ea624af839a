"""The docs tool (scripts/docs.py): every page matches its committed result files (``--check`` over every page, run
here so that ``make test`` checks it beside the other tests); a page whose rendered blocks differ fails
``--check``, naming the block; ``--write`` renders it back; and the claims
some pages compute from their files."""

from __future__ import annotations

import dataclasses

import docs
import pytest
import rendering
from pages import benchmarks_compare, snr

from poolkit.errors import PoolkitError


def test_every_rendered_page_matches_its_committed_result_files(capsys):
    # a number typed by hand, or a result re-run and not re-rendered: the output names the page, the block and the fix
    assert docs.main(["--check"]) == 0, capsys.readouterr().out


def test_every_page_module_registers_a_page_whose_file_exists():
    # catches a page module without PAGE, or one pointing at a file that is not there (docs.py would crash on it)
    names = docs.registered()
    assert {"snr", "performance", "leaderboards", "task-arithmetic", "reliability"} <= set(names)
    for name in names:
        page = docs.load(name)
        assert isinstance(page, rendering.Page) and page.file().is_file(), name


def test_a_hand_edited_block_fails_check_naming_it_and_write_renders_it_back(tmp_path, capsys):
    # the real page and its committed result files: a typed-over number inside a rendered block must fail --check
    page = docs.load("spurious")
    text = page.file().read_text()
    block = rendering.current(text, "paper")
    edited = text.replace(block, block.replace("| ours |", "| ours (edited) |", 1))
    assert edited != text
    copy = tmp_path / "spurious.md"
    copy.write_text(edited)
    pages = {"spurious": dataclasses.replace(page, path=str(copy))}
    assert docs.main(["--check"], pages) == 1
    assert "differs from its result files in paper" in capsys.readouterr().out
    assert docs.main(["--write", "spurious"], pages) == 0
    assert copy.read_text() == text  # only the block changed back; the hand-written text around it is kept
    assert docs.main(["--check", "spurious"], pages) == 0


def test_check_fails_when_a_page_marks_a_block_its_files_no_longer_give(tmp_path, capsys):
    # e.g. a suite left out of a re-run: the page keeps a block nobody renders
    copy = tmp_path / "page.md"
    copy.write_text("x\n<!-- begin:a -->\n1\n<!-- end:a -->\n<!-- begin:gone -->\n2\n<!-- end:gone -->\n")
    pages = {"page": rendering.Page(str(copy), lambda: {"a": "1"})}
    assert docs.main(["--check"], pages) == 1
    assert "marked but not rendered: ['gone']" in capsys.readouterr().out


def test_a_page_rendered_whole_is_compared_whole(tmp_path):
    copy = tmp_path / "page.md"
    copy.write_text("# title\n")
    pages = {"page": rendering.Page(str(copy), lambda: "# title\n")}
    assert docs.main(["--check"], pages) == 0
    copy.write_text("# title, edited\n")
    assert docs.main(["--check"], pages) == 1
    assert docs.main(["--write"], pages) == 0 and copy.read_text() == "# title\n"


def test_an_unknown_page_is_refused_naming_the_pages(capsys):
    with pytest.raises(SystemExit) as stop:
        docs.main(["--check", "no-such-page"])
    assert stop.value.code == 2 and "no page no-such-page: choose from" in capsys.readouterr().err


def test_table_aligns_columns_and_writes_empty_cells_as_one_space():
    # catches a rule that ignores align, columns that do not line up in the padded form, and '|  |' for empty cells
    assert rendering.table(["a", "b", ""], [["x", 1, ""]], align="lr") == "| a | b | |\n|---|---:|---|\n| x | 1 | |"
    assert rendering.table(["name", "v"], [["x", 0.5], ["long", 123.4]], padded=True) == (
        "| name | v    |\n|------|------|\n| x    | 0.50 |\n| long | 123  |")


PAGE = "intro 1.5x\n<!-- begin:a -->\nold a\n<!-- end:a -->\nmiddle\n<!-- begin:b -->\n<!-- end:b -->\ntail\n"


def test_a_machine_reads_its_generation_and_core_count_in_one_pair_of_brackets():
    """Catches the count bracketed after the generation's own brackets, or a brand name's "(R)" taken for them."""
    from poolkit.provenance import cpu_model

    amd = cpu_model("processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 23\nmodel\t\t: 49\nflags\t\t: fpu avx2\n")
    assert rendering.machine(amd, 2) == "AMD EPYC (family 23 model 49; avx2; 2 cores)"
    assert rendering.machine("Intel(R) Xeon(R) Processor", 2) == "Intel(R) Xeon(R) Processor (2 cores)"
    assert rendering.machine("aarch64", 4) == "aarch64 (4 cores)"
    arm = cpu_model("processor\t: 0\nFeatures\t: fp asimddp\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n")
    assert rendering.machine(arm, 4) == "ARM (implementer 0x41 part 0xd0c; asimddp; 4 cores)"


def test_replace_blocks_keeps_the_text_outside_and_fills_each_block_once():
    # catches a replacement that drops the hand-written text, appends instead of replacing, or duplicates a block
    want = "intro 1.5x\n<!-- begin:a -->\nnew a\n<!-- end:a -->\nmiddle\n<!-- begin:b -->\nB\n1\n<!-- end:b -->\ntail\n"
    got = rendering.replace_blocks(PAGE, {"a": "new a\n", "b": "B\n1"})
    assert got == want
    assert rendering.replace_blocks(got, {"a": "new a", "b": "B\n1"}) == want  # idempotent


@pytest.mark.parametrize("page, blocks", [
    (PAGE, {"a": "x"}),                            # the page has a block the renderer lacks
    (PAGE, {"a": "x", "b": "y", "c": "z"}),        # the renderer has a block the page lacks
    (PAGE + "<!-- begin:a -->\n<!-- end:a -->\n", {"a": "x", "b": "y"}),  # twice
    (PAGE.replace("<!-- end:a -->\nmiddle\n", "middle\n") + "<!-- end:a -->\n", {"a": "x", "b": "y"}),
])
def test_replace_blocks_refuses_markers_that_do_not_pair_up(page, blocks):
    with pytest.raises(PoolkitError, match="do not pair up"):
        rendering.replace_blocks(page, blocks)


def _sweep(mse_std: dict, small_mean: float, extended: dict | None = None) -> snr.Sweep:
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
    # three seeds per cell at its mean -/0/+ its std (so their sample std is the cell's); the seed above the mean has
    # its best epoch last
    runs = [{"stage": "budget", "samples": r["samples"], "epochs": 1, "layers": 1, "pooler": r["pooler"], "K": r["K"],
             "seed": 1 + i, "test_mse": r["mse_mean"] + z * r["mse_std"], "best_epoch": int(z > 0),
             "val_loss": [1.0, 0.9]} for r in rows if r["stage"] == "budget" for i, z in enumerate((-1, 0, 1))]
    meta = {"settings": settings, "runs": runs, "quick_budget": [100, 1]}
    if extended:
        poolers = sorted({p for p, _ in extended})
        meta["extensions"] = [{"budgets": [[400, 1]], "poolers": poolers, "lrs": dict.fromkeys(poolers, 0.01)}]
        rows += [{**rows[0], "samples": 400, "pooler": p, "K": k, "mse_mean": v, "mse_std": v / 100}
                 for (p, k), v in extended.items()]
        runs += [{**runs[0], "samples": 400, "pooler": p, "K": k, "seed": 1 + i, "test_mse": v * (1 + z / 100)}
                 for (p, k), v in extended.items() for i, z in enumerate((-1, 0, 1))]
    return snr.Sweep(meta, rows)


def _claims(sweep: snr.Sweep, before: tuple) -> str:
    return snr.render_claims(sweep, before, snr.page_verdicts(sweep, before))


def test_snr_claims_and_verdicts_are_computed_from_the_cells():
    # catches an inverted ratio (adapool / mean), a verdict that ignores the order-of-magnitude threshold, an
    # inverted std ratio, a trend read from the wrong end and a best-epoch count off by one (best_epoch is 0-based)
    cells = {("adapool", 4): (0.01, 0.001), ("mean", 4): (0.2, 0.004), ("max", 4): (0.5, 0.01),
             ("cls", 4): (0.15, 0.003), ("adapool", 64): (0.02, 0.002), ("mean", 64): (0.01, 0.001),
             ("max", 64): (0.5, 0.01), ("cls", 64): (0.3, 0.01), ("baseline_mean", 4): (0.05, 0.0),
             ("baseline_x0", 4): (0.04, 0.0), ("baseline_mean", 64): (0.008, 0.0), ("baseline_x0", 64): (0.08, 0.0)}
    before = ({"settings": {"lr": 0.01}}, {})
    text = _claims(_sweep(cells, small_mean=5.0), before)
    assert "at SNR 0.03-0.25: reproduced.** Each at the largest budget it was run at, over K = 4: mean / adapool " \
           "20.00x at 200 × 1 (2×), max / adapool 50.00x at 200 × 1 (2×), cls / adapool 15.00x at 200 × 1 (2×)." in text
    assert "over 100x1 → 200x1: at K = 4 5.00 → 20.00, steps +300% [wider]" in text
    assert "below that of mean, max and CLS pooling: not reproduced.**" in text
    assert "mean 1.00 to 5.00, max 5.00" in text and "in 0 of 6 (pooler, K) pairs" in text
    assert "at 200 × 1 (2×) the best epoch was the last one in 8 of 24 runs" in text
    assert "adapool beats baseline_mean at K = 4; baseline_mean beats adapool at K = 64; adapool beats baseline_x0 " \
           "at K = 4, 64." in text
    cells["cls", 4] = (0.05, 0.003)  # 5x, its interval above half a decade: about an order of magnitude
    assert "at SNR 0.03-0.25: reproduced.**" in _claims(_sweep(cells, 5.0), before)
    cells["cls", 4] = (0.04, 0.006)  # 4x on average, but its interval reaches down to 2.5x: the direction, not the size
    assert "at SNR 0.03-0.25: partly reproduced.**" in _claims(_sweep(cells, 5.0), before)
    cells["mean", 4] = (0.009, 0.004)  # mean beats adapool
    text = _claims(_sweep(cells, 25.0), before)
    assert "at SNR 0.03-0.25: not reproduced.**" in text and "adapool and mean: inside the noise at K = 4" in text
    assert "at K = 4 25.00 → 0.90, steps -96% [narrower]" in text


def test_snr_claims_read_an_extension_s_budgets():
    # catches verdicts that ignore the extended budgets, and a gap read at a budget where a pooler was not run
    cells = {("adapool", 4): (0.01, 0.001), ("mean", 4): (0.2, 0.004), ("max", 4): (0.5, 0.01),
             ("cls", 4): (0.15, 0.003), ("adapool", 64): (0.02, 0.002), ("mean", 64): (0.01, 0.001),
             ("max", 64): (0.5, 0.01), ("cls", 64): (0.3, 0.01), ("baseline_mean", 4): (0.05, 0.0),
             ("baseline_x0", 4): (0.04, 0.0), ("baseline_mean", 64): (0.008, 0.0), ("baseline_x0", 64): (0.08, 0.0)}
    extended = {("adapool", 4): 0.01, ("mean", 4): 0.05, ("adapool", 64): 0.02, ("mean", 64): 0.02}
    sweep = _sweep(cells, 5.0, extended)
    text = _claims(sweep, ({"settings": {"lr": 0.01}}, {}))
    assert "mean / adapool 5.00x at 400 × 1 (4×), max / adapool 50.00x at 200 × 1 (2×), cls / adapool 15.00x" in text
    assert "over 100x1 → 200x1 → 400x1: at K = 4 5.00 → 20.00 → 5.00, steps +300% [wider], -75% [narrower]" in text
    # the rate choice made again at 400 x 1: a pooler whose choice differs from the extension's rate is named
    check = {"settings": {"budgets": [[400, 1]], "reference": 0, "lr_k": 4, "lrs": [0.003, 0.01]},
             "provenance": {"commit": "abcdef0"}, "runs": [],
             "lr_choice": {"mean": {"lr": 0.01, "val_mse": {"0.003": 0.2, "0.01": 0.1}},
                           "adapool": {"lr": 0.003, "val_mse": {"0.003": 0.01, "0.01": 0.02}}}}
    assert "another rate for adapool:" in snr.render_lr_check(sweep, check)
    check["lr_choice"]["adapool"]["lr"] = 0.01
    assert "the rates the extension used for every pooler" in snr.render_lr_check(sweep, check)


def test_benchmark_targets_say_when_one_is_missed():
    # catches a targets table that prints 'met' from the target alone instead of the file's verdict
    ratio = {"wall": 2.5, "cpu": 2.2}
    compare = {"summary": {"target_cli_over_components": 2.0, "cli_over_components": ratio, "target_met": False,
                           "reencode_over_components": ratio, "reencode_over_cli": ratio}}
    padding = {"datasets": [{"name": "embedded", "rows": 10, "summary": {"target": 1.5, "cpu_speedup": 3.0,
                                                                         "speedup": 2.0, "target_met": True}}]}
    text = benchmarks_compare.render_targets(compare, padding)
    assert "| <= 2.0x | 2.20x / 2.50x | MISSED |" in text and "| >= 1.5x | 3.00x / 2.00x | met |" in text
    assert "Targets missed: 1." in text


def test_the_readme_speed_claim_names_each_runs_threads_and_load_and_says_slower_below_one():
    # catches a claim read from the wrong run, one that calls torch's default "0 threads", loses the background
    # load, or words a ratio below 1 as a speed-up
    from pages import readme

    def run(threads, background, speedup, device_threads=2):
        options = {"threads": threads} | ({"background": background} if background is not None else {})
        return {"options": options, "device": f"CPU, {device_threads} torch threads, 2 cores visible",
                "machine": {"cpu": "Some CPU", "cores": 2},
                "suites": {"embed": {"speedup": speedup, "per_repeat": [speedup - 0.1, speedup + 0.1], "texts": 320}}}

    text = readme.claim([[run(1, None, 1.24), run(0, 0, 1.3), run(0, 2, 0.934)]])
    assert "1.24x at 1 torch thread(s), quiet (per repeat 1.14 to 1.34x)" in text
    assert "1.30x at torch's default, 2 torch threads, quiet" in text
    assert "0.93x (slower) at torch's default, 2 torch threads beside 2 busy process(es)" in text
    assert "(slower)" not in text.split("0.93x")[0] and "2-core Some CPU" in text
    other = run(0, 2, 1.17) | {"machine": {"cpu": "Other CPU", "cores": 2}}
    two = readme.claim([[run(1, None, 1.24), run(0, 2, 0.934)], [other]])
    # each machine's runs under its own name, in the order given: catches runs credited to the wrong CPU
    assert two.index("on a 2-core Some CPU: 1.24x") < two.index("0.93x (slower)") < two.index(
        " Measured on a 2-core Other CPU: 1.17x at torch's default, 2 torch threads beside 2 busy process(es)")


def test_the_embeddings_reading_follows_the_figures():
    # catches a best pooler read from the wrong end, mean called the best when another pooler beats it, and two
    # poolers called equal when only their first metric agrees
    from pages import embeddings

    def row(name, spearman, pearson):
        return {"task": "similarity", "data": "builtin:x", "pooler": {"name": name},
                "metrics": {"spearman": spearman, "pearson": pearson}}

    result = {"results": [row("mean", 0.5, 0.4), row("cls", 0.7, 0.6), row("mean_sqrt_len", 0.5, 0.41),
                          {**row("max", 0.1, 0.1), "task": "retrieval",
                           "metrics": dict.fromkeys(embeddings.METRICS["retrieval"], 0.2)},
                          {**row("mean", 0.3, 0.3), "task": "retrieval",
                           "metrics": dict.fromkeys(embeddings.METRICS["retrieval"], 0.3)}]}
    text = embeddings.render_reading(result)
    assert "**similarity** (`builtin:x`): `cls` is first by spearman (0.7000), `mean` last (0.5000)" not in text
    assert "`cls` is first by spearman (0.7000)" in text and "is 0.2000 below the best." in text
    assert "**retrieval** (`builtin:x`): `mean` is first by ndcg@10 (0.3000), `max` last (0.2000)" in text
    assert "scores exactly as mean" not in text


def test_the_leaderboards_reading_says_beats_only_where_the_test_says_so():
    # catches "beats" written from the means alone (the docs read "beats it by 0.0050" for a gap the folds could
    # not tell from noise), and a tie said where the test tells the rows apart
    from pages import leaderboards

    from poolkit.training.leaderboard import Leaderboard, leaderboard_row

    settings = {"data": "x", "rows": 100, "task": "classification", "folds": 5, "metric": "accuracy",
                "higher_is_better": True, "model_label": "m", "probe": {"epochs": 12}}

    def board(pooler: list[float], baseline: list[float]) -> list[dict]:
        detail = [{"best_epoch": 3, "epochs_run": 6}] * 5
        rows = [leaderboard_row("adapool", {}, "frozen", "accuracy", [{"accuracy": v} for v in pooler], 1, 1.0,
                                detail),
                leaderboard_row("mean+logistic", {}, "frozen", "accuracy", [{"accuracy": v} for v in baseline], 1,
                                1.0, [{"C": 0.1, "fit_rows": 80}] * 5)]
        return Leaderboard(rows, settings).rows

    steady = leaderboards.reading(settings, board([0.60, 0.61, 0.59, 0.60, 0.62], [0.50, 0.52, 0.49, 0.51, 0.50]),
                                  None)
    assert any("`adapool` beats it by 0.1000 (p " in line for line in steady), steady
    noisy = leaderboards.reading(settings, board([0.60, 0.40, 0.70, 0.45, 0.55], [0.50, 0.50, 0.52, 0.48, 0.50]),
                                 None)
    assert any("`adapool` is tied with it: 0.0400 better on the mean" in line for line in noisy), noisy
    assert not any("beats" in line for line in noisy)


RESEARCH_PAGES = {"spurious", "snr", "task-arithmetic", "vision", "channel-spatial", "sets", "mil", "gated-mlp",
                  "operator"}


def test_every_research_page_renders_its_readings():
    # catches a research page registered without the claim check, where a hand-typed reading would pass --check
    assert {name for name in docs.registered() if docs.load(name).readings} == RESEARCH_PAGES


def test_claim_words_count_only_outside_rendered_blocks_and_code():
    # catches a check that flags rendered readings (every page would fail) or misses one typed between two blocks
    text = ("intro\n<!-- begin:a -->\nA beats B\n```\n<!-- end:a -->\nC is better than D\n<!-- begin:b -->\n"
            "inside the noise\n<!-- end:b -->\n```\nE beats F\n```\nG outperforms H\n")
    assert rendering.hand_written_claims(text) == ['line 6: "better than"', 'line 13: "outperforms"']


def test_the_shuffled_pairs_check_fails_when_a_pooler_is_above_chance_over_the_shuffles():
    # catches a check that reads one shuffle only, one that passes whatever the figures, and one that fails a
    # pooler for sitting below chance (no leak can do that)
    from pages import embeddings

    def shuffles(latent: list[float]) -> dict:
        chance = [0.0020, 0.0023, 0.0025, 0.0023, 0.0024]
        return {"data": "builtin:x", "poolers": ["mean", "latent"],
                "runs": [{"shuffle": i, "chance": {"ndcg@10_mean": c},
                          "rows": {"mean": {"mean": c - 0.0003 * (i % 2)}, "latent": {"mean": value}}}
                         for i, (c, value) in enumerate(zip(chance, latent))]}

    leak = embeddings.shuffle_check(shuffles([0.05, 0.06, 0.055, 0.052, 0.058]))
    assert leak[-1] == "**fails**" and "`latent`" in leak[1]
    assert embeddings.shuffle_check(shuffles([0.0040, 0.0022, 0.0025, 0.0030, 0.0022]))[-1] == "passes"
    assert embeddings.shuffle_check(shuffles([0.0001, 0.0002, 0.0001, 0.0002, 0.0001]))[-1] == "passes"
