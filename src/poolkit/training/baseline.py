"""The strongest cheap baseline a learned pooler must beat: a tuned linear model on mean-pooled features.

Mean-pooled last-layer features of the frozen encoder, standardised on the rows it is fit on, then
scikit-learn's logistic regression (classification; one-vs-rest for multilabel) or ridge regression
(regression, several targets at once). Per fold it is fit on the rows the probed poolers are fit on, its
regularisation strength is chosen on the same inner validation split that chooses their epoch, and the model
so chosen scores the fold's test rows once. So the baseline sees exactly the rows a pooler sees.
"""

from __future__ import annotations

import copy
import time
import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..data.batching import LengthGroupedBatchSampler
from ..data.tables import TableData, repeated_folds, split_rows
from ..pooling import build_pooler
from .costs import cost_rows, ms_per_1k
from .features import FeatureCache
from .leaderboard import BASELINE_LABELS
from .metrics import compute_metrics, primary_metric
from .probing import ProbeConfig, ProbeResult, torch_threads

#: the regularisation grids (log-spaced): logistic regression's inverse strength C, from strong to weak
#: regularisation (each fit warm-starts from the previous one), and ridge's strength alpha
LOGISTIC_C = (0.001, 0.01, 0.1, 1.0)
RIDGE_ALPHA = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)


def baseline_label(task: str) -> str:
    return BASELINE_LABELS["regression" if task == "regression" else "classification"]


def mean_features(cache: FeatureCache, rows: np.ndarray | None = None, batch_size: int = 256) -> np.ndarray:
    """The masked mean of the last layer of ``rows`` (default: every row), float64 (len(rows), D), computed with
    poolkit's own ``mean`` pooler."""
    pooler = build_pooler("mean", cache.hidden_size, cache.num_layers)
    rows = np.arange(len(cache)) if rows is None else np.asarray(rows)
    sampler = LengthGroupedBatchSampler(cache.lengths[rows], batch_size, shuffle=False)
    parts = []
    with torch.inference_mode():
        for batch in sampler:
            states, mask = cache.inputs(rows[batch], pooler)
            parts.append(pooler(states[-1], mask))
    return sampler.restore(torch.cat(parts)).double().numpy()


#: the pipeline parameter that sets the strength, per task
STRENGTH = {"regression": "ridge__alpha", "classification": "logisticregression__C",
            "multilabel": "onevsrestclassifier__estimator__C"}


def _model(task: str, seed: int):
    """Standardise, then ridge / logistic regression. The (single-label) logistic model starts each fit from the
    last one's coefficients (``warm_start``; one-vs-rest clones its estimator, so multilabel fits start cold):
    the grid runs from strong to weak regularisation, and each fit starts near its solution."""
    if task == "regression":
        return make_pipeline(StandardScaler(), Ridge())
    logistic = LogisticRegression(max_iter=1000, random_state=seed, warm_start=True)
    return make_pipeline(StandardScaler(), OneVsRestClassifier(logistic) if task == "multilabel" else logistic)


def _outputs(model, task: str, features: np.ndarray, n_outputs: int) -> np.ndarray:
    """What a head would output: values (regression) or logits (N, n_outputs); a binary logistic model's single
    decision value becomes the logits (0, d), whose softmax is its probabilities."""
    if task == "regression":
        return model.predict(features).reshape(len(features), -1)
    logits = model.decision_function(features)
    if task == "classification" and logits.ndim == 1:
        logits = np.stack([np.zeros_like(logits), logits], axis=1)
    if task == "classification" and logits.shape[1] < n_outputs:  # classes missing from the training rows
        full = np.full((len(logits), n_outputs), -1e9)
        full[:, model.classes_] = logits
        logits = full
    return logits


def _fit(model, task: str, strength: float, features: np.ndarray, targets: np.ndarray):
    with warnings.catch_warnings():  # the weakest regularisation may stop at max_iter: it is then simply scored
        warnings.simplefilter("ignore", ConvergenceWarning)
        # a learning curve's small sizes hold few rows per class: not a sign of a regression target here
        warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
        return model.set_params(**{STRENGTH[task]: strength}).fit(features, targets)


def linear_baseline(cache: FeatureCache, data: TableData, config: ProbeConfig,
                    splits: list[tuple[np.ndarray, np.ndarray]] | None = None, timed: bool = True) -> ProbeResult:
    """(Repeated) K-fold cross-validation of the tuned linear baseline, on the folds (and inner splits) the poolers
    use (``splits``, or ``config``'s repeats x folds).

    Per fold ``fold_detail`` holds the chosen strength (``C`` or ``alpha``), the inner validation metric at that
    strength, the test metric and the number of rows fit on. Its cost (``timed``): mean pooling + fold 0's model on
    the cache."""
    start = time.perf_counter()
    splits = splits or repeated_folds(data, config.folds, config.repeats, config.val_fraction, config.seed)
    features = mean_features(cache)
    metric = primary_metric(data.task, data.n_outputs)
    grid, key = (RIDGE_ALPHA, "alpha") if data.task == "regression" else (LOGISTIC_C, "C")
    targets = data.targets
    oof = np.full((len(data), data.n_outputs), np.nan, dtype=np.float32)
    fold_metrics, details = [], []
    for fold, (train_rows, test_rows) in enumerate(splits):
        seed = config.seed + fold
        fit, val = split_rows(data.subset(train_rows), config.val_fraction, seed)
        fit_rows, val_rows = train_rows[fit], train_rows[val]
        scores, fitted, model = [], [], _model(data.task, seed)
        for strength in grid:
            fitted.append(copy.deepcopy(_fit(model, data.task, strength, features[fit_rows], targets[fit_rows])))
            outputs = _outputs(fitted[-1], data.task, features[val_rows], data.n_outputs)
            scores.append(compute_metrics(data.task, outputs, targets[val_rows], data.n_outputs)[metric.name])
        best = max(range(len(grid)), key=lambda i: scores[i] if metric.higher_is_better else -scores[i])
        outputs = _outputs(fitted[best], data.task, features[test_rows], data.n_outputs)  # the model validated
        if fold < config.folds:  # the first repeat covers every row once
            oof[test_rows] = outputs
        if fold == 0:
            first = fitted[best]
        metrics = compute_metrics(data.task, outputs, targets[test_rows], data.n_outputs)
        fold_metrics.append(metrics)
        details.append({key: grid[best], f"val_{metric.name}": float(scores[best]),
                        f"test_{metric.name}": float(metrics[metric.name]), "fit_rows": len(fit_rows)})
    seconds = time.perf_counter() - start
    params = features.shape[1] * data.n_outputs + data.n_outputs
    spec = build_pooler("mean", cache.hidden_size, cache.num_layers).get_config()
    cost = None
    if timed:
        with torch_threads(config.threads):  # as the poolers' costs are timed
            cost = ms_per_1k(lambda rows: _outputs(first, data.task, mean_features(cache, rows), data.n_outputs),
                             cost_rows(len(cache)))
    return ProbeResult(spec, metric.name, fold_metrics, oof, params, seconds, details, infer_ms_per_1k=cost,
                       dim=features.shape[1])
