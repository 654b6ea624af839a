"""Compare poolers on a frozen encoder: train pooler + head on cached hidden states, K-fold.

The encoder runs once (:mod:`poolkit.training.features`); every pooler then trains on the same
cached layers with the same folds, seeds, optimiser and early stopping, so the leaderboard ranks
the poolers and nothing else.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.batching import LengthGroupedBatchSampler
from ..data.tables import TableData, fold_splits
from ..errors import PoolkitError
from ..models.pooled_model import task_loss
from ..pooling import Pooler, build_pooler, pooler_options
from .features import FeatureCache
from .leaderboard import rank_key
from .metrics import compute_metrics, primary_metric


@dataclass
class ProbeConfig:
    """How every pooler is trained on the cached features (the same for all of them)."""

    folds: int = 5
    epochs: int = 20
    batch_size: int = 64
    pooler_lr: float = 1e-3
    weight_decay: float = 0.01
    patience: int = 3
    head_dropout: float = 0.1
    val_fraction: float = 0.2
    seed: int = 0
    #: torch threads while probing: the ops are small, and one thread was 3-9x faster than two on a
    #: shared 2-core machine (OpenMP threads spinning against other processes).
    threads: int = 1


def spec_label(spec: dict[str, Any]) -> str:
    """A pooler spec's display name: its name, with the options that differ from the defaults (e.g.
    ``attention(attn_size=64)``); the encoder's sizes (hidden_size, num_layers) are left out."""
    defaults = pooler_options(spec["name"])
    shown = {k: v for k, v in spec.items()
             if k not in ("name", "hidden_size", "num_layers") and (k not in defaults or defaults[k] != v)}
    return spec["name"] + (f"({', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else "")


@dataclass
class ProbeResult:
    """One pooler's cross-validated result: its full spec (``get_config()``), per-fold metrics, out-of-fold
    outputs, size and cost."""

    spec: dict[str, Any]
    metric: str
    fold_metrics: list[dict[str, float]]
    oof: np.ndarray
    params: int
    seconds: float
    epochs_run: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        return spec_label(self.spec)

    def summary(self, name: str | None = None) -> dict[str, float]:
        values = np.array([m[name or self.metric] for m in self.fold_metrics])
        return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0}


class ProbeModel(nn.Module):
    """pooler -> dropout -> Linear head, trained on cached hidden states."""

    def __init__(self, pooler: Pooler, n_outputs: int, dropout: float) -> None:
        super().__init__()
        self.pooler = pooler
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(pooler.output_dim, n_outputs)

    def forward(self, states: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.pooler(states, mask)))


class _Targets:
    """Training targets as tensors; regression targets standardised on the training rows (undone on output)."""

    def __init__(self, data: TableData, train_rows: np.ndarray) -> None:
        self.task = data.task
        values = data.targets
        if self.task == "regression":
            self.mean = values[train_rows].mean(axis=0)
            self.std = values[train_rows].std(axis=0) + 1e-8
            values = (values - self.mean) / self.std
        self.values = torch.from_numpy(np.ascontiguousarray(values))

    def outputs(self, raw: np.ndarray) -> np.ndarray:
        return raw * self.std + self.mean if self.task == "regression" else raw


def _predict(model: ProbeModel, cache: FeatureCache, rows: np.ndarray, batch_size: int, all_layers: bool) -> np.ndarray:
    model.eval()
    outputs = []
    sampler = LengthGroupedBatchSampler(cache.lengths[rows], batch_size, shuffle=False)
    with torch.inference_mode():
        for batch in sampler:
            states, mask = cache.batch(rows[batch], all_layers)
            outputs.append(model(states, mask).float())
    return sampler.restore(torch.cat(outputs)).numpy()


def train_fold(spec: dict[str, Any], cache: FeatureCache, data: TableData, train_rows: np.ndarray,
               val_rows: np.ndarray, config: ProbeConfig, seed: int) -> tuple[np.ndarray, dict[str, float], int, int]:
    """Train one pooler + head on one fold with early stopping -> (val outputs, val metrics, epochs, params)."""
    torch.manual_seed(seed)
    pooler = build_pooler(spec, cache.hidden_size, cache.num_layers)
    model = ProbeModel(pooler, data.n_outputs, config.head_dropout)
    all_layers = pooler.kind == "layer"
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.pooler_lr, weight_decay=config.weight_decay)
    targets = _Targets(data, train_rows)
    metric = primary_metric(data.task, data.n_outputs)
    sampler = LengthGroupedBatchSampler(cache.lengths[train_rows], config.batch_size, shuffle=True, seed=seed)
    best, best_state, best_outputs, stale, epochs_run = None, None, None, 0, 0
    for _ in range(config.epochs):
        model.train()
        for batch in sampler:
            rows = train_rows[batch]
            states, mask = cache.batch(rows, all_layers)
            loss = task_loss(data.task, model(states, mask), targets.values[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        epochs_run += 1
        outputs = targets.outputs(_predict(model, cache, val_rows, config.batch_size * 2, all_layers))
        score = compute_metrics(data.task, outputs, data.targets[val_rows], data.n_outputs)[metric.name]
        if best is None or metric.better(score, best):
            best, best_state, best_outputs, stale = score, copy.deepcopy(model.state_dict()), outputs, 0
        else:
            stale += 1
            if stale >= config.patience:
                break
    model.load_state_dict(best_state)
    params = sum(p.numel() for p in model.parameters())
    metrics = compute_metrics(data.task, best_outputs, data.targets[val_rows], data.n_outputs)
    return best_outputs, metrics, epochs_run, params


def probe_pooler(spec: str | dict[str, Any], cache: FeatureCache, data: TableData, config: ProbeConfig,
                 splits: list[tuple[np.ndarray, np.ndarray]] | None = None) -> ProbeResult:
    """K-fold cross-validation of one pooler (a name or spec) on the cached features."""
    if len(cache) != len(data):
        raise PoolkitError(f"the feature cache has {len(cache)} rows but the data has {len(data)}")
    splits = splits or fold_splits(data, config.folds, config.val_fraction, config.seed)
    spec = build_pooler(spec, cache.hidden_size, cache.num_layers).get_config()  # the full spec, sized to the cache
    metric = primary_metric(data.task, data.n_outputs)
    oof = np.full((len(data), data.n_outputs), np.nan, dtype=np.float32)
    fold_metrics, epochs, params = [], [], 0
    start = time.perf_counter()
    for fold, (train_rows, val_rows) in enumerate(splits):
        outputs, metrics, ran, params = train_fold(spec, cache, data, train_rows, val_rows, config, config.seed + fold)
        oof[val_rows] = outputs
        fold_metrics.append(metrics)
        epochs.append(ran)
    return ProbeResult(spec, metric.name, fold_metrics, oof, params, time.perf_counter() - start, epochs)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def compare_poolers(specs: list[str | dict[str, Any]], cache: FeatureCache, data: TableData, config: ProbeConfig,
                    on_result: Callable[[ProbeResult], None] | None = None) -> list[ProbeResult]:
    """Every pooler (names or specs) on the same folds; results ranked best first by the task's primary metric."""
    splits = fold_splits(data, config.folds, config.val_fraction, config.seed)
    results = []
    for spec in specs:
        with torch_threads(config.threads):
            result = probe_pooler(spec, cache, data, config, splits)
        results.append(result)
        if on_result is not None:
            on_result(result)
    metric = primary_metric(data.task, data.n_outputs)
    return sorted(results, key=lambda r: rank_key(r.summary()["mean"], metric.higher_is_better))
