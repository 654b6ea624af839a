"""Fine-tuning for embeddings (poolkit.training.finetune_pairs): ``train --task retrieval|similarity`` on the tiny
BERT, its folds, the untrained encoder as a checkpoint candidate, no leakage, resume, and its folders in embed /
evaluate."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from poolkit import PoolkitError
from poolkit.cli import main
from poolkit.data.pairs import load_pairs, pair_folds, pair_split
from poolkit.models.text_encoder import TextEncoder
from poolkit.training import api, finetune_pairs
from poolkit.training.embedding_metrics import retrieval_metrics
from poolkit.training.finetune import weights_digest
from tiny_models import WORDS

FAST = {"folds": 2, "epochs": 2, "batch_size": 8, "max_length": 16, "encoder_lr": 1e-3, "pooler_lr": 1e-2,
        "patience": 0}


def phrases(count: int, start: int = 0) -> list[str]:
    """Distinct short phrases of the tiny model's words (no [UNK]: each encodes differently)."""
    words = [w for w in WORDS if w not in ("is", "was")]
    return [" ".join(combo) for combo in itertools.islice(itertools.permutations(words, 3), start, start + count)]


@pytest.fixture
def pairs() -> pd.DataFrame:
    """40 queries, each with one document of its own; two queries share their document."""
    queries, documents = phrases(40), phrases(40, start=500)
    documents[1] = documents[0]
    return pd.DataFrame({"text": queries, "pair": documents})


def test_train_retrieval_writes_fold_models_that_embed_and_evaluate(model_dir, pairs, tmp_path):
    out = tmp_path / "run"
    metrics = api.train(pairs, out, task="retrieval", pooler="attention", model=model_dir, progress=False, **FAST)
    assert sorted(p.name for p in out.iterdir()) == [".poolkit_outputs.json", "fold_0", "fold_1", "metrics.json",
                                                     "train.log"]  # no oof.csv: there is no head
    assert metrics["primary_metric"] == "ndcg@10" and "oof" not in metrics
    assert set(metrics["mean"]) == {"ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10"}
    data, seed = load_pairs(pairs, "retrieval"), metrics["config"]["seed"]
    for k, (train, test) in enumerate(pair_folds(data, 2, 0.2, seed)):
        saved = np.load(out / f"fold_{k}" / "test_outputs.npz")
        fit, val = pair_split(data, train, 0.2, seed + k)
        assert saved["test_rows"].tolist() == test.tolist() and sorted(saved.files) == [
            "fit_rows", "test_rows", "val_rows"]
        assert saved["fit_rows"].tolist() == fit.tolist() and saved["val_rows"].tolist() == val.tolist()
        # the fold's test figure is its model's: its test queries ranked against the whole corpus
        encoder = TextEncoder(str(out / f"fold_{k}"), max_length=16)
        again = retrieval_metrics(encoder.encode([data.queries[u] for u in test]), encoder.encode(data.corpus),
                                  [data.relevant[u] for u in test])
        assert again["ndcg@10"] == pytest.approx(metrics["folds"][k]["metrics"]["ndcg@10"], abs=1e-4)
        assert encoder.pooler.name == "attention"
    _, vectors, spec = api.embed(list(pairs["text"][:3]), model=str(out / "fold_0"), progress=False)
    assert vectors.shape == (3, 32) and spec["name"] == "attention"
    scored = api.evaluate(pairs, "retrieval", model=str(out), max_length=16, progress=False)
    assert len(scored["folds"]) == 2 and scored["std_ddof1"]["ndcg@10"] >= 0
    with pytest.raises(PoolkitError, match="is a retrieval model: it gives embeddings, not predictions"):
        api.predict(str(out), pairs)


def test_the_untrained_encoder_is_kept_when_training_cannot_beat_it(model_dir, tmp_path):
    # each document is its query's own text: the encoder as it comes ranks every query's document first (nDCG 1),
    # so no epoch can beat epoch 0 and each fold keeps the base weights, even at a learning rate that wrecks them
    texts = phrases(30)
    frame = pd.DataFrame({"text": texts, "pair": texts})
    metrics = api.train(frame, tmp_path / "run", task="retrieval", model=model_dir, progress=False,
                        **{**FAST, "encoder_lr": 0.5})
    for k, fold in enumerate(metrics["folds"]):
        assert fold["best_epoch"] == 0 and fold["epochs_run"] == 2 and fold["metrics"]["ndcg@10"] == 1.0
        meta = json.loads((tmp_path / "run" / f"fold_{k}" / "poolkit_train.json").read_text())
        assert weights_digest(TextEncoder(str(tmp_path / "run" / f"fold_{k}")).encoder) == meta["base_sha1"]
        assert [h["epoch"] for h in fold["history"]] == [0, 1, 2] and fold["history"][0]["train_loss"] is None


def test_training_batches_hold_only_the_folds_fit_queries(model_dir, pairs, tmp_path, monkeypatch):
    seen = []
    real = finetune_pairs.PairCollator.__call__
    monkeypatch.setattr(finetune_pairs.PairCollator, "__call__",
                        lambda self, items: (seen.append(np.stack(items)), real(self, items))[1])
    metrics = api.train(pairs, tmp_path / "run", task="retrieval", model=model_dir, progress=False,
                        **{**FAST, "folds": 1})
    data, seed = load_pairs(pairs, "retrieval"), metrics["config"]["seed"]
    (train, test), = pair_folds(data, 1, 0.2, seed)
    fit, _ = pair_split(data, train, 0.2, seed)
    trained = np.concatenate(seen)
    assert set(trained[:, 0]) == set(fit.tolist())  # every fit query, no validation or test query
    assert all(d in data.relevant[q] for q, d in trained)


def test_similarity_runs_resume_to_the_same_result(model_dir, tmp_path):
    frame = pd.DataFrame({"text": phrases(36), "pair": phrases(36, start=700),
                          "score": [float(i % 6) for i in range(36)]})
    out = tmp_path / "run"
    first = api.train(frame, out, task="similarity", model=model_dir, progress=False, **FAST)
    assert first["primary_metric"] == "spearman" and set(first["mean"]) == {"spearman", "pearson"}
    # as if killed during fold 1: its folder and the results gone; resuming trains fold 1 again, alone
    import shutil

    shutil.rmtree(out / "fold_1")
    (out / "metrics.json").unlink()
    again = api.train(frame, out, task="similarity", model=model_dir, progress=False, resume=True, **FAST)
    assert [f["metrics"] for f in again["folds"]] == [f["metrics"] for f in first["folds"]]
    assert "fold 0: already trained, skipped" in (out / "train.log").read_text()


def test_train_cli_for_pairs_and_what_it_refuses(model_dir, pairs, tmp_path, capsys):
    path = tmp_path / "pairs.csv"
    pairs.rename(columns={"text": "query", "pair": "doc"}).to_csv(path, index=False)
    args = ["train", "--data", str(path), "--task", "retrieval", "--text-col", "query", "--pair-col", "doc",
            "--model", model_dir, "--folds", "2", "--epochs", "1", "--batch-size", "8", "--max-length", "16"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "mean: test ndcg@10" in out and f"models in {tmp_path / 'run'}" in out
    assert main([*args, "--out", str(tmp_path / "other"), "--frozen-head", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--frozen-head trains a head first, and a retrieval model has none" in err
    assert main(["predict", "--model", str(tmp_path / "run"), "--data", str(path), "--text-col", "query",
                 "--out", str(tmp_path / "p.csv")]) == 2
    assert "gives embeddings, not predictions" in capsys.readouterr().err
