"""Metrics for regression (RMSE, MAE, Pearson, Spearman, MCRMSE) and classification (accuracy, macro-F1, log-loss).

Predictions are what the head outputs: regression values (N, T); class logits or probabilities (N, C)
for classification; per-label logits or probabilities (N, C) for multilabel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats
from sklearn import metrics as sk

from ..models.heads import sigmoid, softmax


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool

    def better(self, a: float, b: float) -> bool:
        """True when score ``a`` beats score ``b``."""
        return a > b if self.higher_is_better else a < b


PRIMARY = {"regression": Metric("rmse", False), "classification": Metric("accuracy", True),
           "multilabel": Metric("macro_f1", True), "retrieval": Metric("ndcg@10", True),
           "similarity": Metric("spearman", True)}


def primary_metric(task: str, n_targets: int = 1) -> Metric:
    """The metric early stopping and leaderboards rank by: RMSE (MCRMSE for several targets), accuracy, macro-F1."""
    if task == "regression" and n_targets > 1:
        return Metric("mcrmse", False)
    return PRIMARY[task]


def regression_metrics(pred: np.ndarray, target: np.ndarray) -> dict[str, float]:
    pred = np.asarray(pred, np.float64).reshape(len(pred), -1)
    target = np.asarray(target, np.float64).reshape(len(target), -1)
    rmse_per_target = np.sqrt(((pred - target) ** 2).mean(axis=0))
    out = {"rmse": float(np.sqrt(((pred - target) ** 2).mean())), "mae": float(np.abs(pred - target).mean()),
           "mcrmse": float(rmse_per_target.mean())}
    correlations = [(_safe(stats.pearsonr, pred[:, j], target[:, j]), _safe(stats.spearmanr, pred[:, j], target[:, j]))
                    for j in range(target.shape[1])]
    out["pearson"] = float(np.mean([c[0] for c in correlations]))
    out["spearman"] = float(np.mean([c[1] for c in correlations]))
    return out


def _safe(fn, a: np.ndarray, b: np.ndarray) -> float:
    """A correlation, or 0.0 when one side is constant (undefined)."""
    if np.std(a) == 0 or np.std(b) == 0:
        return 0.0
    return float(fn(a, b)[0])


def classification_metrics(logits: np.ndarray, target: np.ndarray, n_classes: int | None = None) -> dict[str, float]:
    probs = softmax(np.asarray(logits, np.float64))
    labels = np.arange(n_classes or probs.shape[1])
    target = np.asarray(target).astype(int)
    pred = probs.argmax(axis=1)
    return {"accuracy": float((pred == target).mean()),
            "macro_f1": float(sk.f1_score(target, pred, labels=labels, average="macro", zero_division=0)),
            "log_loss": float(sk.log_loss(target, np.clip(probs, 1e-15, 1), labels=labels))}


def multilabel_metrics(logits: np.ndarray, target: np.ndarray) -> dict[str, float]:
    probs = sigmoid(np.asarray(logits, np.float64))
    target = np.asarray(target).astype(int)
    pred = (probs >= 0.5).astype(int)
    clipped = np.clip(probs, 1e-15, 1 - 1e-15)
    return {"accuracy": float((pred == target).all(axis=1).mean()),
            "macro_f1": float(sk.f1_score(target, pred, average="macro", zero_division=0)),
            "log_loss": float(-(target * np.log(clipped) + (1 - target) * np.log(1 - clipped)).mean())}


def compute_metrics(task: str, outputs: np.ndarray, target: np.ndarray,
                    n_classes: int | None = None) -> dict[str, float]:
    """All metrics of the task, from raw head outputs (regression values or logits)."""
    if task == "regression":
        return regression_metrics(outputs, target)
    if task == "classification":
        return classification_metrics(outputs, target, n_classes)
    return multilabel_metrics(outputs, target)
