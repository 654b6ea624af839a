"""Two CPU processes (torchrun) give what one gives, for every command that splits its work over processes: embed
(windows r, r + W, ...), compare (each process encodes a share of the texts, rank 0 joins them and trains), train
(accelerate's data-parallel fine-tuning) and train for retrieval (in-batch negatives gathered across the processes).
One launch runs the four (tests/dist_worker.py): a process's start costs
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
import torch

from dist_worker import PAIR_SETTINGS, shared_documents_layout, toy_config, toy_data, toy_model_dir, whole_batch_step
from poolkit.cli import main
from poolkit.data.pairs import load_pairs, pair_folds, pair_split
from poolkit.training import api
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
    queries = [" ".join(rng.choice(WORDS, size=4)) + f" q{i}" for i in range(40)]
    pairs = root / "pairs.csv"
    documents = [" ".join(rng.choice(WORDS, size=6)) for _ in queries]
    documents[1::5] = documents[0::5]  # shared documents: a step's two halves may both hold one
    pd.DataFrame({"text": queries, "pair": documents}).to_csv(pairs, index=False)
    compare = ["compare", "--data", str(labelled), "--model", model, "--poolers", "mean,max", "--folds", "2",
               "--epochs", "2", "--max-length", "16"]
    jobs = [{"cli": ["embed", "--data", str(table), "--model", model, "--out", str(root / "two.parquet"),
                     "--window", str(WINDOW), "--quiet"]},
            {"cli": [*compare, "--out", str(root / "compare-two"), "--cache-dir", str(root / "cache2")]},
            {"fit": [model, str(root / "train-two")]},
            {"pairs": [model, str(pairs), str(root / "pairs-two")]},
            {"whole_batch_loss": str(root / "step")}]
    (root / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(WORKER), str(root / "jobs.json")], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return {"root": root, "model": model, "table": table, "pairs": pairs, "compare": compare, "stdout": result.stdout}


def test_two_processes_give_what_one_gives(tmp_path, accelerate_on_one_cpu_thread):
    """One test, so that one launch serves the three commands (pytest-xdist's groups do not hold under pytest 9)."""
    launched = launch(tmp_path)
    check_embed(launched)
    check_compare(launched)
    check_train(launched)
    check_pair_train(launched)
    check_whole_batch_loss(launched)


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


def check_pair_train(launched: dict) -> None:
    """Retrieval fine-tuning: each process holds half of a step's queries, and the loss ranks each against every
    document of the step (catches in-batch negatives cut to a process's own half, documents matched to the wrong
    process's vectors, and a gradient counted once per process: each trains another model than one process does)."""
    root, table = launched["root"], launched["pairs"]
    data = load_pairs(pd.read_csv(table), "retrieval")
    for k, (train, _) in enumerate(pair_folds(data, 2, 0.2, PAIR_SETTINGS["seed"])):  # whole batches: same items
        assert len(pair_split(data, train, 0.2, PAIR_SETTINGS["seed"] + k)[0]) % PAIR_SETTINGS["batch_size"] == 0
    reference = api.train(table, root / "pairs-one", model=launched["model"], progress=False, **PAIR_SETTINGS)
    two = json.loads((root / "pairs-two" / "metrics.json").read_text())
    assert "2 process(es)" in (root / "pairs-two" / "train.log").read_text()
    for a, b in zip(two["folds"], reference["folds"]):  # the same loss and validation, step by step
        assert [h["epoch"] for h in a["history"]] == [h["epoch"] for h in b["history"]] == [0, 1, 2]
        for x, y in zip(a["history"][1:], b["history"][1:]):
            assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-4), (a["history"], b["history"])
            assert x == pytest.approx(y, rel=1e-4, abs=1e-4)  # the validation metrics too
    assert two["mean"] == pytest.approx(reference["mean"], abs=1e-4)


def check_whole_batch_loss(launched: dict) -> None:
    """Two processes holding half a step each compute the loss of the whole step, and their gradients add up to one
    process's (DDP averages the two, each computed on a loss the two share). Catches negatives cut to a process's
    half, a document two halves share counted twice or matched to the wrong vectors, and a gather that lets no
    gradient back to the process that made a vector."""
    layout, _ = shared_documents_layout()
    items = np.array([[q, d] for q, d in enumerate([0, 1, 2, 0, 1, 3])])
    loss, grads = whole_batch_step(items, 1)
    parts = [torch.load(launched["root"] / f"step.{rank}.pt") for rank in (0, 1)]
    for part_loss, _ in parts:
        assert float(part_loss) == pytest.approx(float(loss), rel=1e-6)
    assert sorted(grads) == list(range(len(layout.texts)))
    for row, grad in grads.items():
        summed = sum(part[1].get(row, torch.zeros_like(grad)) for part in parts) / 2
        torch.testing.assert_close(summed, grad, rtol=1e-5, atol=1e-6)
