"""The SNR budget sweep: its tiny setting end to end, the learning-rate choice on validation rows, seeding, CLI."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from poolkit_bench import snr_config, snr_sweep, snr_sweep_config
from poolkit_bench.commands import parser_for
from poolkit.cli.options import config_from_args
from poolkit.errors import PoolkitError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = snr_sweep_config.SweepConfig(
    base=dataclasses.replace(snr_config.QUICK, num_vectors=12, batch_size=32, workers=1),
    poolers=("mean", "adapool", "cls"), ks=(2, 4), budgets=((60, 1), (80, 2)), reference=0, seeds=2,
    largest_seeds=3, lrs=(1e-2, 3e-3), lr_k=4, depths=(0, 1), depth_poolers=("cls",), depth_k=2)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    frame, meta = snr_sweep.run_snr_sweep(TINY, out, progress=False)
    return out, frame, meta


def test_tiny_sweep_runs_end_to_end_and_writes_its_files(tiny_run):
    out, frame, meta = tiny_run
    assert list(frame.columns) == snr_sweep.COLUMNS
    assert pd.read_csv(out / "results.csv").equals(frame)
    assert json.loads((out / "results.json").read_text())["runs"] == meta["runs"]
    assert (out / snr_sweep_config.PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "report.html").exists()
    budget = frame[frame["stage"] == "budget"]
    # every pooler at every K and budget; the largest budget has largest_seeds runs per cell, the others seeds
    assert len(budget) == 2 * 3 * 2
    assert set(budget[budget["samples"] == 80]["seeds"]) == {3} and set(budget[budget["samples"] == 60]["seeds"]) == {2}
    assert list(budget["budget_x"].unique()) == [60 / 32000, 80 * 2 / 32000]
    # depth: only the layer counts not already in the budget stage (base 1 layer), at the reference budget, depth_k
    depth = frame[frame["stage"] == "depth"]
    assert list(depth[["layers", "pooler", "K", "samples"]].itertuples(index=False, name=None)) == [(0, "cls", 2, 60)]
    # the baselines once per budget and K; each cell's CPU seconds are the sum over its runs
    assert len(frame[frame["stage"] == "baseline"]) == 2 * 2 * 2
    runs = pd.DataFrame(meta["runs"])
    assert len(runs) == 3 * 2 + (2 * 2 + 3 * 2) * 3 + 2
    cell = budget.iloc[0]
    mine = runs[(runs["stage"] == "budget") & (runs["pooler"] == cell["pooler"]) & (runs["K"] == cell["K"])
                & (runs["samples"] == cell["samples"])]
    assert cell["cpu_seconds"] == pytest.approx(mine["cpu_seconds"].sum(), abs=0.051)
    assert cell["mse_mean"] == pytest.approx(mine["test_mse"].mean())


def test_learning_rate_is_chosen_on_validation_rows_and_used_after(tiny_run):
    # catches a choice by test MSE (or by the last epoch's loss) and a chosen rate that later runs ignore
    _, _, meta = tiny_run
    runs = pd.DataFrame(meta["runs"])
    for pooler in TINY.poolers:
        tried = runs[(runs["stage"] == "lr") & (runs["pooler"] == pooler)]
        assert sorted(tried["lr"]) == sorted(TINY.lrs) and set(tried["K"]) == {TINY.lr_k}
        best_val = {row.lr: min(row.val_loss) for row in tried.itertuples()}
        chosen = min(best_val, key=best_val.get)
        assert meta["lr_choice"][pooler]["lr"] == chosen
        later = runs[(runs["stage"] != "lr") & (runs["pooler"] == pooler)]
        assert set(later["lr"]) == {chosen}


def test_same_seed_same_numbers(tiny_run):
    _, frame, _ = tiny_run
    again, _ = snr_sweep.run_snr_sweep(TINY, progress=False)
    columns = [c for c in snr_sweep.COLUMNS if c != "cpu_seconds"]
    pd.testing.assert_frame_equal(again[columns], frame[columns])


@pytest.mark.parametrize("change, match", [
    ({"budgets": ()}, "budgets"),
    ({"budgets": ((60, 1), (60, 1))}, "budgets"),
    ({"reference": 2}, "reference"),
    ({"lrs": (0.0,)}, "lrs"),
    ({"depth_poolers": ("max",)}, "depth_poolers"),
    ({"depths": (-1,)}, "depths"),
    ({"poolers": ("nope",)}, "unknown pooler"),
    ({"ks": (2, 40)}, "at most"),
    ({"lr_k": 40}, "at most"),
])
def test_bad_sweep_raises(change, match):
    with pytest.raises(PoolkitError, match=match):
        dataclasses.replace(TINY, **change).validated()


def test_cli_arguments():
    parser = parser_for("snr-sweep")
    assert config_from_args(parser.parse_args([]), snr_sweep_config.PRESETS) == snr_sweep_config.CPU_SWEEP
    sweep = config_from_args(parser.parse_args(["--budgets", "100x1", "200X2", "--poolers", "mean,cls", "--depths",
                                                "--workers", "1", "--lrs", "0.01"]), snr_sweep_config.PRESETS)
    assert sweep.budgets == ((100, 1), (200, 2)) and sweep.poolers == ("mean", "cls") and sweep.depths == ()
    assert sweep.base.workers == 1 and sweep.lrs == (0.01,) and sweep.seeds == snr_sweep_config.CPU_SWEEP.seeds
    with pytest.raises(SystemExit):
        parser.parse_args(["--budgets", "100-1"])


@pytest.fixture()
def copied_run(tiny_run, tmp_path):
    for name in ("results.csv", "results.json"):
        (tmp_path / name).write_bytes((tiny_run[0] / name).read_bytes())
    return tmp_path, json.loads((tmp_path / "results.json").read_text())


def test_extension_adds_budgets_with_the_run_s_protocol(copied_run):
    # catches an extension that re-chooses or ignores the run's rates, drops or re-runs earlier rows, skips the
    # reproduction check, or loses the commit of the rows
    out, meta = copied_run
    frame, after = snr_sweep.extend_snr_sweep(out, ((80, 3),), ("adapool", "mean"), progress=False)
    assert after["runs"][:len(meta["runs"])] == [{**r, "commit": meta["provenance"]["commit"]} for r in meta["runs"]]
    new = pd.DataFrame(after["runs"][len(meta["runs"]):])
    assert set(new["stage"]) == {"budget"} and set(new["epochs"]) == {3} and len(new) == 2 * 2 * TINY.seeds
    assert all(new["lr"] == [meta["lr_choice"][p]["lr"] for p in new["pooler"]])
    ext = after["extensions"][0]
    assert ext["reproduced"]["then"] == ext["reproduced"]["now"] and ext["budgets"] == [[80, 3]]
    assert after["settings"] == meta["settings"] and pd.read_csv(out / "results.csv").shape == frame.shape
    cells = frame[(frame["stage"] == "budget") & (frame["epochs"] == 3)]
    assert sorted(cells["pooler"]) == ["adapool", "adapool", "mean", "mean"] and set(cells["seeds"]) == {TINY.seeds}
    assert len(frame[(frame["stage"] == "baseline") & (frame["epochs"] == 3)]) == 2 * len(TINY.ks)
    with pytest.raises(PoolkitError, match="already there: mean at 80x3"):
        snr_sweep.extend_snr_sweep(out, ((80, 3),), ("mean",), progress=False)


def test_extension_at_some_of_the_run_s_k_runs_only_those(copied_run):
    # catches --ks ignored (every K run) or a K the sweep never ran accepted (its rate and baselines unchosen)
    out, meta = copied_run
    k = TINY.ks[0]
    _, after = snr_sweep.extend_snr_sweep(out, ((80, 3),), ("mean",), (k,), progress=False)
    new = after["runs"][len(meta["runs"]):]
    assert {r["K"] for r in new} == {k} and len(new) == TINY.seeds and after["extensions"][0]["ks"] == [k]
    with pytest.raises(PoolkitError, match="--ks must be some of the run's K"):
        snr_sweep.extend_snr_sweep(out, ((90, 3),), ("mean",), (max(TINY.ks) + 1,), progress=False)


def test_extension_under_other_settings_is_refused(copied_run):
    # catches an extension that trusts a results.json whose settings no longer give its numbers (here the data
    # seed was edited), and a CLI that lets other options through beside --extend
    out, _ = copied_run
    meta = json.loads((out / "results.json").read_text())
    meta["settings"]["base"]["data_seed"] += 1
    (out / "results.json").write_text(json.dumps(meta))
    with pytest.raises(PoolkitError, match="does not reproduce"):
        snr_sweep.extend_snr_sweep(out, ((80, 3),), ("mean",), progress=False)
    assert "extensions" not in json.loads((out / "results.json").read_text())
    parser = parser_for("snr-sweep")
    for extra in (["--seeds", "5"], ["--workers", "1"], ["--out", str(out)], []):
        args = parser.parse_args(["--extend", str(out), *(["--budgets", "80x3"] if extra else []), *extra,
                                  "--no-progress"])
        with pytest.raises(PoolkitError, match="--extend takes the protocol"):
            snr_sweep.run_snr_sweep_command(args)
