"""compare's probing protocol: the epoch is chosen on an inner split of each fold's training rows, and the
fold's test rows are scored once, by the chosen model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from poolkit.data.tables import TableData, fold_splits
from poolkit.training.features import FeatureCache
from poolkit.training.probing import ProbeConfig, probe_pooler


def noise_data(n: int = 300, length: int = 4, dim: int = 16, seed: int = 0) -> tuple[FeatureCache, TableData]:
    """Random cached features (2 layers) and labels that are pure noise: no pooler can beat chance on new rows."""
    rng = np.random.default_rng(seed)
    tokens = rng.standard_normal((2, n * length, dim)).astype(np.float16)
    cache = FeatureCache(Path("unused"), tokens, np.arange(0, n * length + 1, length), {})
    data = TableData([f"text {i}" for i in range(n)], rng.integers(0, 2, n), "classification", ["a", "b"],
                     ("label",), "text", "noise")
    return cache, data


def test_noise_labels_score_chance_when_the_epoch_is_not_chosen_on_the_test_rows():
    """Many epochs, a patience that never stops early and a high learning rate: choosing the epoch on the test
    fold (what compare did before) reports ~0.6-0.7 on coin flips; the inner split reports chance, within three
    standard deviations of a chance-level accuracy over all rows."""
    cache, data = noise_data()
    config = ProbeConfig(folds=10, epochs=40, patience=40, pooler_lr=3e-2, batch_size=32)
    result = probe_pooler("mean", cache, data, config)
    accuracy = result.summary()["mean"]
    assert abs(accuracy - 0.5) <= 3 * math.sqrt(0.25 / len(data)), accuracy


def test_each_fold_records_how_it_chose_its_model():
    cache, data = noise_data(n=120)
    config = ProbeConfig(folds=3, epochs=4, patience=2)
    result = probe_pooler("attention", cache, data, config)
    assert len(result.fold_detail) == 3
    for detail, metrics in zip(result.fold_detail, result.fold_metrics):
        assert detail["epochs_run"] <= 4 and detail["best_epoch"] in range(1, detail["epochs_run"] + 1)
        assert detail["test_accuracy"] == metrics["accuracy"] and 0 <= detail["val_accuracy"] <= 1
    # out-of-fold outputs: each fold's test rows, predicted by that fold's chosen model (its reported accuracy)
    for (_, test_rows), metrics in zip(fold_splits(data, 3, config.val_fraction, config.seed), result.fold_metrics):
        assert (result.oof[test_rows].argmax(1) == data.targets[test_rows]).mean() == metrics["accuracy"]
    assert not np.isnan(result.oof).any()  # every row is some fold's test row
