"""compare's tuned linear baseline: logistic / ridge regression on mean-pooled last-layer features, its
regularisation chosen on each fold's inner split (never on the rows it is scored on)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from poolkit.data.tables import TableData, fold_splits
from poolkit.provenance import run_provenance
from poolkit.training import api
from poolkit.training.baseline import mean_features, linear_baseline
from poolkit.training.features import FeatureCache
from poolkit.training.probing import ProbeConfig
from tiny_models import tiny_bert_dir

DIM = 8


def linear_cache(n: int, seed: int = 0) -> tuple[FeatureCache, np.ndarray]:
    """Two cached layers of ragged rows (2-6 tokens): layer 0 is noise, the last layer's per-row mean carries a
    signal; returns the cache and that mean (N, D), computed here with numpy over the real tokens only."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 7, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = rng.standard_normal((2, offsets[-1], DIM)).astype(np.float16)
    means = np.stack([tokens[1, offsets[i]:offsets[i + 1]].astype(np.float64).mean(0) for i in range(n)])
    return FeatureCache(Path("unused"), tokens, offsets, {}), means


def table(targets: np.ndarray, task: str, labels: list[str] | None = None) -> TableData:
    columns = ("label",) if targets.ndim == 1 else tuple(f"t{j}" for j in range(targets.shape[1]))
    return TableData([f"text {i}" for i in range(len(targets))], targets, task, labels, columns, "text", "synthetic")


def test_features_are_the_masked_mean_of_the_last_layer_only():
    """Catches features from the first layer, or a mean that counts the padding of a batch."""
    cache, means = linear_cache(50)
    np.testing.assert_allclose(mean_features(cache, batch_size=7), means, rtol=0, atol=1e-6)


@pytest.mark.parametrize("classes", [2, 3])
def test_logistic_baseline_learns_a_linear_rule_and_outputs_logits_for_every_class(classes):
    """Labels from a linear rule on the mean features: near-perfect out-of-fold accuracy, logits (N, C) whose
    argmax is the prediction (a binary model's single decision value must become two logits)."""
    cache, means = linear_cache(240)
    scores = means @ np.random.default_rng(1).standard_normal((DIM, classes))
    data = table(scores.argmax(1), "classification", [f"c{k}" for k in range(classes)])
    result = linear_baseline(cache, data, ProbeConfig(folds=3))
    assert result.oof.shape == (240, classes)
    assert result.summary()["mean"] >= 0.9, result.summary()
    assert (result.oof.argmax(1) == data.targets).mean() == pytest.approx(result.summary()["mean"], abs=0.02)
    assert result.params == DIM * classes + classes
    assert [set(d) for d in result.fold_detail] == [{"C", "val_accuracy", "test_accuracy", "fit_rows"}] * 3


def test_ridge_baseline_answers_on_the_targets_scale_for_several_targets():
    """Targets around 1000 (std ~50) and -3: predictions on that scale, RMSE far under the targets' std (catches
    standardised outputs left un-standardised, or targets mixed up)."""
    cache, means = linear_cache(200)
    rng = np.random.default_rng(2)
    targets = np.stack([1000 + 50 * means @ rng.standard_normal(DIM), -3 + means @ rng.standard_normal(DIM)], 1)
    targets += rng.normal(0, 0.01, targets.shape)
    result = linear_baseline(cache, table(targets, "regression"), ProbeConfig(folds=4))
    assert result.metric == "mcrmse" and result.oof.shape == (200, 2)
    assert (np.sqrt(((result.oof - targets) ** 2).mean(0)) < 0.05 * targets.std(0)).all()
    assert all("alpha" in d for d in result.fold_detail)


def test_multilabel_baseline_gives_one_logit_per_label():
    cache, means = linear_cache(240)
    targets = (means @ np.random.default_rng(3).standard_normal((DIM, 3)) > 0).astype(np.float32)
    result = linear_baseline(cache, table(targets, "multilabel", ["a", "b", "c"]), ProbeConfig(folds=3))
    assert result.metric == "macro_f1" and result.oof.shape == (240, 3)
    assert result.summary()["mean"] >= 0.85, result.summary()


def test_regularisation_is_chosen_without_looking_at_the_test_rows():
    """Shuffle the test rows' labels: the chosen C and its inner validation score must not move (a choice made on
    the test rows would), while the test score drops to about chance."""
    cache, means = linear_cache(300)
    labels = (means @ np.random.default_rng(4).standard_normal(DIM) + np.random.default_rng(5).normal(0, 0.8, 300)
              > 0).astype(np.int64)
    data = table(labels, "classification", ["no", "yes"])
    splits = fold_splits(data, 3, seed=0)[:1]
    clean = linear_baseline(cache, data, ProbeConfig(folds=3), splits)
    shuffled = labels.copy()
    test_rows = splits[0][1]
    shuffled[test_rows] = np.random.default_rng(6).permutation(labels[test_rows])
    noisy = linear_baseline(cache, table(shuffled, "classification", ["no", "yes"]), ProbeConfig(folds=3), splits)
    keep = ("C", "val_accuracy")
    assert [{k: d[k] for k in keep} for d in noisy.fold_detail] == [{k: d[k] for k in keep} for d in clean.fold_detail]
    assert noisy.fold_detail[0]["test_accuracy"] < clean.fold_detail[0]["test_accuracy"] - 0.15


def test_the_test_rows_are_scored_by_the_validated_model_fit_on_the_poolers_rows():
    """Ridge on two folds: each fold's test outputs equal a ridge fit by hand on that fold's fit rows only (the
    rows a probed pooler is fit on) at the chosen alpha. Catches a refit on all of the fold's training rows
    (a quarter more rows than the poolers get) or a model other than the one validated."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    from poolkit.data.tables import split_rows

    cache, means = linear_cache(120)
    rng = np.random.default_rng(7)
    targets = means @ rng.standard_normal(DIM) + rng.normal(0, 0.5, 120)
    data = table(targets[:, None].astype(np.float32), "regression")
    config = ProbeConfig(folds=2)
    result = linear_baseline(cache, data, config)
    features = mean_features(cache)
    for fold, ((train_rows, test_rows), detail) in enumerate(zip(fold_splits(data, 2, seed=0), result.fold_detail)):
        fit, _ = split_rows(data.subset(train_rows), config.val_fraction, config.seed + fold)
        rows = train_rows[fit]
        scaler = StandardScaler().fit(features[rows])
        ridge = Ridge(alpha=detail["alpha"]).fit(scaler.transform(features[rows]), targets[rows])
        expected = ridge.predict(scaler.transform(features[test_rows]))
        np.testing.assert_allclose(result.oof[test_rows, 0], expected, rtol=1e-5, atol=1e-5)
        assert detail["fit_rows"] == len(rows) < len(train_rows)


def test_compare_ranks_the_baseline_with_the_frozen_rows_and_can_leave_it_out(tmp_path):
    bert = tiny_bert_dir(tmp_path / "bert")
    rows = [{"text": f"the {('good', 'bad')[i % 2]} dog {'ran' if i % 3 else 'sat'}", "label": ("good", "bad")[i % 2]}
            for i in range(24)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    common = dict(poolers=["mean"], model=bert, folds=2, epochs=1, cache_dir=tmp_path / "cache", progress=False)
    board = api.compare(tmp_path / "t.csv", out=tmp_path / "out", **common)
    assert sorted((r["pooler"], r["mode"]) for r in board.rows) == [("mean", "frozen"), ("mean+logistic", "frozen")]
    saved = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["rows"]
    linear = next(r for r in saved if r["pooler"] == "mean+logistic")
    assert linear["config"]["name"] == "mean" and len(linear["fold_detail"]) == 2 and "C" in linear["fold_detail"][0]
    provenance = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["settings"]["provenance"]
    assert provenance["commit"] == run_provenance()["commit"] and provenance["torch"] == run_provenance()["torch"]
    # the same model from another folder reuses the cache, and the board names the folder asked for, not the one
    # that wrote the cache
    shutil.copytree(bert, tmp_path / "moved")
    moved = api.compare(tmp_path / "t.csv", baseline=False, **{**common, "model": str(tmp_path / "moved")})
    assert len([p for p in (tmp_path / "cache").iterdir() if p.suffix != ".lock"]) == 1  # encoded once
    assert (moved.settings["model"], moved.settings["model_label"]) == (str(tmp_path / "moved"), "moved")

