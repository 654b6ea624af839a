import numpy as np
import pytest
from scipy import stats

from poolkit.training.metrics import compute_metrics, primary_metric


def test_regression_metrics_match_definitions():
    rng = np.random.default_rng(0)
    target = rng.normal(size=(50, 2))
    pred = target + rng.normal(scale=0.3, size=(50, 2))
    m = compute_metrics("regression", pred, target)
    assert m["rmse"] == pytest.approx(np.sqrt(((pred - target) ** 2).mean()))
    assert m["mae"] == pytest.approx(np.abs(pred - target).mean())
    assert m["mcrmse"] == pytest.approx(np.mean([np.sqrt(((pred[:, j] - target[:, j]) ** 2).mean()) for j in range(2)]))
    assert m["pearson"] == pytest.approx(np.mean([stats.pearsonr(pred[:, j], target[:, j])[0] for j in range(2)]))
    assert 0.8 < m["spearman"] <= 1
    assert compute_metrics("regression", np.zeros((5, 1)), np.arange(5.0)[:, None])["pearson"] == 0.0


def test_classification_metrics():
    logits = np.array([[3.0, 0, 0], [0, 3.0, 0], [0, 0, 3.0], [3.0, 0, 0]])
    target = np.array([0, 1, 2, 1])
    m = compute_metrics("classification", logits, target)
    assert m["accuracy"] == 0.75
    assert m["macro_f1"] == pytest.approx(np.mean([2 / 3, 2 / 3, 1.0]))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert m["log_loss"] == pytest.approx(-np.mean(np.log(probs[np.arange(4), target])))


def test_multilabel_metrics_and_primary():
    logits = np.array([[5.0, -5.0], [-5.0, 5.0]])
    m = compute_metrics("multilabel", logits, np.array([[1, 0], [0, 1]]))
    assert m["accuracy"] == 1.0 and m["macro_f1"] == 1.0 and m["log_loss"] < 0.01
    assert primary_metric("regression", 3).name == "mcrmse"
    assert primary_metric("classification").better(0.9, 0.8)
    assert primary_metric("regression").better(0.1, 0.2)
