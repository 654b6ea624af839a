"""Two CPU processes (torchrun) give what one gives, for every command that splits its work over processes: embed
(windows r, r + W, ...), compare (each process encodes a share of the texts, rank 0 joins them and trains) and train
(accelerate's data-parallel fine-tuning). One launch runs the three (tests/dist_worker.py): a process's start costs
seconds on a small CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dist_worker import toy_config, toy_data, toy_model_dir
from poolkit.cli import main
from poolkit.training import features as F
from poolkit.training.finetune import fit
from poolkit.training.streaming import embed_to_file, partial_dir
from tiny_models import WORDS

WORKER = Path(__file__).resolve().parents[1] / "dist_worker.py"
WINDOW = 16


def launch(root: Path) -> dict:
    """The inputs in ``root``, and one torchrun launch of 2 processes running embed, compare and train on them."""
    model = toy_model_dir(root / "bert")
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 15)))) for _ in range(53)]
    table = root / "in.csv"
    pd.DataFrame({"id": range(len(texts)), "text": texts}).to_csv(table, index=False)
    labelled = root / "d.csv"
    words = ["the cat sat", "a dog ran far away on the mat", "red", "one two three four five"]
    labelled.write_text("text,label\n" + "".join(f"{w} {words[i % 4]},{w}\n" for i, w in enumerate(["good", "bad"] * 9)))
    compare = ["compare", "--data", str(labelled), "--model", model, "--poolers", "mean,max", "--folds", "2",
               "--epochs", "2", "--max-length", "16"]
    jobs = [{"cli": ["embed", "--data", str(table), "--model", model, "--out", str(root / "two.parquet"),
                     "--window", str(WINDOW), "--quiet"]},
            {"cli": [*compare, "--out", str(root / "compare-two"), "--cache-dir", str(root / "cache2")]},
            {"fit": [model, str(root / "train-two")]}]
    (root / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(WORKER), str(root / "jobs.json")], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return {"root": root, "model": model, "table": table, "compare": compare, "stdout": result.stdout}


def test_two_processes_give_what_one_gives(tmp_path, accelerate_on_one_cpu_thread):
    """One test, so that one launch serves the three commands (pytest-xdist's groups do not hold under pytest 9)."""
    launched = launch(tmp_path)
    check_embed(launched)
    check_compare(launched)
    check_train(launched)


def check_embed(launched: dict) -> None:
    root = launched["root"]
    one = root / "one.parquet"
    embed_to_file(launched["table"], one, model=launched["model"], window=WINDOW, progress=False)
    assert "53 embeddings of dimension 32" in launched["stdout"] and "process 1 of 2: its windows" in launched["stdout"]
    a, b = pd.read_parquet(one), pd.read_parquet(root / "two.parquet")
    assert b["id"].tolist() == list(range(53))
    np.testing.assert_allclose(np.stack(b["embedding"]), np.stack(a["embedding"]), atol=1e-5)
    assert not partial_dir(root / "two.parquet").exists()


def check_compare(launched: dict) -> None:
    """The cache equals one process's (to float16 rounding: batches pad differently) and so does the leaderboard
    (catches halves joined in the wrong order, offsets not shifted, a rank encoding every text or none, a second
    process training or waiting on rank 0's lock forever)."""
    root = launched["root"]
    assert main([*launched["compare"], "--out", str(root / "compare-one"), "--cache-dir", str(root / "cache1")]) == 0
    assert "process 1 of 2: its share of the encoding" in launched["stdout"]
    (one,), (two,) = F.list_caches(root / "cache1"), F.list_caches(root / "cache2")
    assert one["path"].name == two["path"].name and not list((root / "cache2").glob("*.tmp"))
    a, b = F.open_cache(one["path"]), F.open_cache(two["path"])  # verify: rank 0 recorded the joined files
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_allclose(np.asarray(b.tokens, np.float32), np.asarray(a.tokens, np.float32), atol=2e-3)
    for key in a.summaries:
        np.testing.assert_allclose(np.asarray(b.summaries[key], np.float32), np.asarray(a.summaries[key], np.float32),
                                   atol=2e-3)
    boards = [json.loads((root / name / "leaderboard.json").read_text())["rows"] for name in ("compare-one",
                                                                                              "compare-two")]
    assert [r["pooler"] for r in boards[1]] == [r["pooler"] for r in boards[0]]
    for x, y in zip(*boards):
        assert (x["mean"], x["log_loss_mean"]) == pytest.approx((y["mean"], y["log_loss_mean"]), abs=1e-3), (x, y)


def check_train(launched: dict) -> None:
    root = launched["root"]
    reference = fit(toy_config(launched["model"], folds=2), toy_data(), root / "train-one", progress=False)
    out = root / "train-two"
    assert "2 process(es)" in (out / "train.log").read_text()
    two = json.loads((out / "metrics.json").read_text())
    for key in ("mean", "oof"):
        assert two[key] == pytest.approx(reference[key], rel=1e-3)
    assert [f["best_step"] for f in two["folds"]] == [f["best_step"] for f in reference["folds"]]
    oof_two, oof_one = pd.read_csv(out / "oof.csv"), pd.read_csv(root / "train-one" / "oof.csv")
    np.testing.assert_allclose(oof_two[["prob_neg", "prob_pos"]], oof_one[["prob_neg", "prob_pos"]], atol=1e-3)
