"""Compare poolers on a frozen encoder: train pooler + head on cached hidden states, K-fold.

The encoder runs once (:mod:`poolkit.training.features`); every pooler then trains on the same
cached layers with the same folds, seeds, optimiser and early stopping, so the leaderboard ranks
the poolers and nothing else. Early stopping and the choice of epoch use an inner validation split of
each fold's *training* rows (``val_fraction``, stratified); the fold's test rows are scored once, by the
chosen model, so no model selection sees the rows it is scored on.
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
from ..data.tables import TableData, repeated_folds, split_rows
from ..errors import PoolkitError
from ..models.pooled_model import task_loss
from ..pooling import Pooler, build_pooler, pooler_options
from .config import ProbeConfig
from .costs import cost_rows, ms_per_1k
from .features import FeatureCache
from .leaderboard import rank_key
from .significance import sample_std
from .metrics import compute_metrics, primary_metric


def spec_label(spec: str | dict[str, Any]) -> str:
    """A pooler spec's display name: its name with the options that differ from the defaults (e.g.
    ``attention(attn_size=64)``), then for a layer pooler ``+`` its token pooler's label, how it pools each layer's
    tokens (``weighted_layer+mean``, ``weighted_layer(weighting=softmax)+attention(attn_size=8)``); the encoder's
    sizes (hidden_size, num_layers) are left out."""
    spec = {"name": spec} if isinstance(spec, str) else spec
    defaults = pooler_options(spec["name"])
    tokens = f"+{spec_label(spec.get('token_pooler', defaults['token_pooler']))}" if "token_pooler" in defaults else ""
    shown = {k: v for k, v in spec.items() if k not in ("name", "hidden_size", "num_layers", "token_pooler")
             and (k not in defaults or defaults[k] != v)}
    return spec["name"] + (f"({', '.join(f'{k}={v}' for k, v in shown.items())})" if shown else "") + tokens


@dataclass
class ProbeResult:
    """One pooler's cross-validated result: its full spec (``get_config()``), per-fold metrics, out-of-fold
    outputs, size and cost."""

    spec: dict[str, Any]
    metric: str
    fold_metrics: list[dict[str, float]]
    #: out-of-fold head outputs (None for embeddings, which have no head)
    oof: np.ndarray | None
    params: int
    seconds: float
    #: per fold: best_epoch, epochs_run, the inner validation metric (chose the epoch) and the test metric
    fold_detail: list[dict[str, float]] = field(default_factory=list)
    #: fold 0's chosen model, trained without fold 0's test rows: what ``poolkit compare`` explains those rows with
    first_fold: FoldModel | None = None
    #: appended to the pooler's label: "+projection" for an embedding pooler trained with a projection
    suffix: str = ""
    #: milliseconds per 1,000 texts of the pooler + head on the cached states (:mod:`poolkit.training.costs`)
    infer_ms_per_1k: float | None = None
    #: the size of the pooled vector
    dim: int | None = None

    @property
    def label(self) -> str:
        return spec_label(self.spec) + self.suffix

    def summary(self, name: str | None = None) -> dict[str, float | None]:
        """The metric's mean and sample std over folds (std None for one fold)."""
        values = np.array([m[name or self.metric] for m in self.fold_metrics])
        return {"mean": float(values.mean()), "std": sample_std(values)}


class ProbeModel(nn.Module):
    """pooler -> dropout -> Linear head, trained on cached hidden states."""

    def __init__(self, pooler: Pooler, n_outputs: int, dropout: float) -> None:
        super().__init__()
        self.pooler = pooler
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(pooler.output_dim, n_outputs)

    def forward(self, states: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.pooler(states, mask)))


@dataclass
class FoldModel:
    """One fold's chosen pooler + head, the rows it was scored on (never trained or selected on), and ``outputs``:
    raw head outputs -> the task's values (regression targets are standardised for training)."""

    model: ProbeModel
    task: str
    test_rows: np.ndarray
    outputs: Callable[[np.ndarray], np.ndarray]


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


def cached_outputs(model: nn.Module, cache: FeatureCache, rows: np.ndarray, batch_size: int) -> torch.Tensor:
    """``model``'s outputs (len(rows), ...) float32 on cache ``rows`` (its pooler reads them), in eval mode and
    length-grouped batches, in the order of ``rows``."""
    model.eval()
    outputs = []
    sampler = LengthGroupedBatchSampler(cache.lengths[rows], batch_size, shuffle=False)
    with torch.inference_mode():
        for batch in sampler:
            states, mask = cache.inputs(rows[batch], model.pooler)
            outputs.append(model(states, mask).float())
    return sampler.restore(torch.cat(outputs))


class EpochChoice:
    """Early stopping on an inner validation metric: the best model state offered so far (a candidate only when
    strictly better than the best), and whether ``patience`` evaluations in a row brought no improvement."""

    def __init__(self, metric: Any, patience: int) -> None:
        self.metric, self.patience = metric, patience
        self.best: float | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_epoch, self.stale, self.epochs_run = 0, 0, 0

    def offer(self, epoch: int, score: float, model: nn.Module) -> bool:
        """Record ``model`` after ``epoch`` (0: untrained) with validation ``score``; True when training should
        stop."""
        self.epochs_run = epoch
        if self.best is None or self.metric.better(score, self.best):
            self.best, self.best_state, self.best_epoch, self.stale = score, copy.deepcopy(model.state_dict()), epoch, 0
            return False
        self.stale += 1
        return self.stale >= self.patience

    def detail(self, test_score: float) -> dict[str, float]:
        """How the model was chosen: best_epoch, epochs_run, the inner validation and the test metric."""
        name = self.metric.name
        return {"best_epoch": self.best_epoch, "epochs_run": self.epochs_run, f"val_{name}": float(self.best),
                f"test_{name}": float(test_score)}


class HeadTraining:
    """One pooler + head being trained on the cache rows ``rows``: the model, its AdamW, the targets (regression
    standardised on ``rows``) and seeded, shuffled length-grouped batches; :meth:`epoch` runs one pass over them."""

    def __init__(self, spec: dict[str, Any], cache: FeatureCache, data: TableData, rows: np.ndarray,
                 config: ProbeConfig, seed: int) -> None:
        torch.manual_seed(seed)
        self.cache, self.data, self.rows = cache, data, rows
        self.model = ProbeModel(build_pooler(spec, cache.hidden_size, cache.num_layers), data.n_outputs,
                                config.head_dropout)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.pooler_lr,
                                           weight_decay=config.weight_decay)
        self.targets = _Targets(data, rows)
        self.sampler = LengthGroupedBatchSampler(cache.lengths[rows], config.batch_size, shuffle=True, seed=seed)

    def epoch(self) -> None:
        self.model.train()
        for batch in self.sampler:
            rows = self.rows[batch]
            states, mask = self.cache.inputs(rows, self.model.pooler)
            loss = task_loss(self.data.task, self.model(states, mask), self.targets.values[rows])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def train_fold(spec: dict[str, Any], cache: FeatureCache, data: TableData, train_rows: np.ndarray,
               test_rows: np.ndarray, config: ProbeConfig, seed: int
               ) -> tuple[np.ndarray, dict[str, float], dict[str, float], FoldModel]:
    """Train one pooler + head on one fold -> (test outputs, test metrics, detail, the chosen model).

    The epoch is chosen (early stopping) on an inner validation split of ``train_rows``; ``test_rows`` are
    predicted once, by the chosen model. ``detail``: best_epoch, epochs_run, the inner validation metric and
    the test metric (the primary metric's name, prefixed ``val_`` / ``test_``).
    """
    fit, val = split_rows(data.subset(train_rows), config.val_fraction, seed)
    fit_rows, val_rows = train_rows[fit], train_rows[val]
    run = HeadTraining(spec, cache, data, fit_rows, config, seed)
    model, targets = run.model, run.targets
    metric = primary_metric(data.task, data.n_outputs)
    choice = EpochChoice(metric, config.patience)
    for epoch in range(1, config.epochs + 1):
        run.epoch()
        outputs = targets.outputs(cached_outputs(model, cache, val_rows, config.batch_size * 2).numpy())
        if choice.offer(epoch, compute_metrics(data.task, outputs, data.targets[val_rows], data.n_outputs)[metric.name],
                        model):
            break
    model.load_state_dict(choice.best_state)
    test_outputs = targets.outputs(cached_outputs(model, cache, test_rows, config.batch_size * 2).numpy())
    metrics = compute_metrics(data.task, test_outputs, data.targets[test_rows], data.n_outputs)
    detail = choice.detail(metrics[metric.name])
    return test_outputs, metrics, detail, FoldModel(model.eval(), data.task, test_rows, targets.outputs)


def refit_head(spec: dict[str, Any], cache: FeatureCache, data: TableData, config: ProbeConfig, epochs: int,
               seed: int) -> FoldModel:
    """One pooler + head trained on every row for ``epochs`` epochs (``compare --export``: the epoch count chosen by
    the cross-validation, so no row is held out); its ``test_rows`` are none."""
    run = HeadTraining(spec, cache, data, np.arange(len(data)), config, seed)
    for _ in range(epochs):
        run.epoch()
    return FoldModel(run.model.eval(), data.task, np.zeros(0, dtype=np.int64), run.targets.outputs)


def probe_pooler(spec: str | dict[str, Any], cache: FeatureCache, data: TableData, config: ProbeConfig,
                 splits: list[tuple[np.ndarray, np.ndarray]] | None = None, timed: bool = True) -> ProbeResult:
    """(Repeated) K-fold cross-validation of one pooler (a name or spec) on the cached features: ``splits``, or
    ``config``'s repeats x folds; the out-of-fold outputs are the first repeat's. Then (``timed``) its cost: fold
    0's model timed on the cache (:func:`poolkit.training.costs.ms_per_1k`)."""
    if len(cache) != len(data):
        raise PoolkitError(f"the feature cache has {len(cache)} rows but the data has {len(data)}")
    splits = splits or repeated_folds(data, config.folds, config.repeats, config.val_fraction, config.seed)
    spec = build_pooler(spec, cache.hidden_size, cache.num_layers).get_config()  # the full spec, sized to the cache
    metric = primary_metric(data.task, data.n_outputs)
    oof = np.full((len(data), data.n_outputs), np.nan, dtype=np.float32)
    fold_metrics, details, first = [], [], None
    start = time.perf_counter()
    for fold, (train_rows, test_rows) in enumerate(splits):
        outputs, metrics, detail, trained = train_fold(spec, cache, data, train_rows, test_rows, config,
                                                       config.seed + fold)
        if fold < config.folds:  # the first repeat covers every row once
            oof[test_rows] = outputs
        fold_metrics.append(metrics)
        details.append(detail)
        first = trained if fold == 0 else first
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in first.model.parameters())
    cost = ms_per_1k(lambda rows: cached_outputs(first.model, cache, rows, config.batch_size * 2),
                     cost_rows(len(cache))) if timed else None
    return ProbeResult(spec, metric.name, fold_metrics, oof, params, seconds, details, first, infer_ms_per_1k=cost,
                       dim=first.model.pooler.output_dim)


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def compare_poolers(specs: list[str | dict[str, Any]], cache: FeatureCache, data: TableData, config: ProbeConfig,
                    on_result: Callable[[ProbeResult], None] | None = None,
                    splits: list[tuple[np.ndarray, np.ndarray]] | None = None, timed: bool = True
                    ) -> list[ProbeResult]:
    """Every pooler (names or specs) on the same folds (``splits``, or ``config``'s repeats x folds); results ranked
    best first by the task's primary metric; ``timed``: each one's cost measured."""
    splits = splits or repeated_folds(data, config.folds, config.repeats, config.val_fraction, config.seed)
    results = []
    for spec in specs:
        with torch_threads(config.threads):
            result = probe_pooler(spec, cache, data, config, splits, timed)
        results.append(result)
        if on_result is not None:
            on_result(result)
    metric = primary_metric(data.task, data.n_outputs)
    return sorted(results, key=lambda r: rank_key(r.summary()["mean"], metric.higher_is_better))
