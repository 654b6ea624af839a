"""Poolers for embeddings, compared on a frozen encoder: each pooled for retrieval or similarity on the feature cache.

A parameter-free pooler (mean, cls, max, ...) gives a **zero-shot** row: its pooled vectors as they are, scored fold
by fold. A pooler with parameters (or any pooler with ``projection``: a Linear(D, D) after it, started at the
identity) is **trained** on each fold's training units, one pooler shared by queries and documents:

- retrieval: the multiple-negatives ranking loss (InfoNCE over in-batch negatives; Henderson et al. 2017, "Efficient
  Natural Language Response Suggestion for Smart Reply"; sentence-transformers' ``MultipleNegativesRankingLoss``):
  each query's relevant document against the batch's other documents and the batch queries' hard negatives, by
  cosine times :data:`SCALE`; a document relevant to the query other than the one it is paired with is left out,
  not counted as a negative;
- similarity: CoSENT (Su 2022; sentence-transformers' ``CoSENTLoss``), log(1 + sum over pairs i, j of the batch with
  score_i > score_j of exp(SCALE (cos_j - cos_i))): only the order of the cosines is trained, as Spearman reads it.

The pooler starts as mean pooling where it can (:meth:`poolkit.pooling.Pooler.start_as_mean`: uniform attention),
and "epoch 0", the untrained model, is a candidate of the epoch choice, made on an inner split of the fold's
*training* units (:func:`poolkit.data.pairs.pair_split`); the fold's test units are scored once, by the chosen model.
Folds split queries (retrieval) or pairs grouped by their first text (similarity); a fold's test queries are ranked
against the **whole corpus**, as ``evaluate`` ranks them, so the fold figures sit beside its whole-table figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..data.pairs import RetrievalData, SimilarityData, pair_folds, pair_split
from ..data.tables import repeated_folds
from ..pooling import Pooler, build_pooler
from .config import ProbeConfig
from .costs import cost_rows, ms_per_1k
from .embedding_metrics import retrieval_metrics, similarity_metrics
from .features import FeatureCache
from .leaderboard import rank_key
from .metrics import primary_metric
from .probing import EpochChoice, ProbeResult, cached_outputs, torch_threads

#: cosine -> logit scale of both losses (sentence-transformers' default for each; a temperature of 0.05)
SCALE = 20.0


@dataclass
class PairLayout:
    """A table of pairs over the distinct texts the feature cache holds (each text once, however many rows name it):
    ``first`` / ``second`` are the cache rows of the queries / the corpus documents (retrieval) or of each pair's
    first / second text (similarity)."""

    data: RetrievalData | SimilarityData
    texts: list[str]
    first: np.ndarray
    second: np.ndarray

    #: what a fine-tuning run (:mod:`poolkit.training.finetune`) records of a table: no head outputs, labels or
    #: target columns
    n_outputs = 0
    label_names = None
    target_cols = ()
    text_col = None

    @classmethod
    def of(cls, data: RetrievalData | SimilarityData, apart: bool = False) -> PairLayout:
        """``apart``: the first side's distinct texts, then the second side's, each side on its own (a text on both
        sides is there twice: the two sides can then be encoded differently, e.g. with their own prompts)."""
        one, two = (data.queries, data.corpus) if isinstance(data, RetrievalData) else (data.left, data.right)
        index: dict[str, int] = {}
        first = np.array([index.setdefault(text, len(index)) for text in one], dtype=np.int64)
        texts = list(index)
        if apart:
            index = {}
        second = np.array([index.setdefault(text, len(index)) for text in two], dtype=np.int64)
        if apart:
            second += len(texts)
        return cls(data, texts + list(index) if apart else list(index), first, second)

    def __len__(self) -> int:
        """The units cross-validation splits (queries, or pairs)."""
        return len(self.data)

    @property
    def task(self) -> str:
        return self.data.task

    @property
    def source(self) -> str:
        return self.data.source


class EmbeddingModel(nn.Module):
    """pooler -> (optional) Linear projection started at the identity: one vector per text."""

    def __init__(self, pooler: Pooler, projection: bool) -> None:
        super().__init__()
        self.pooler = pooler
        self.projection = None
        if projection:
            self.projection = nn.Linear(pooler.output_dim, pooler.output_dim)
            with torch.no_grad():
                self.projection.weight.copy_(torch.eye(pooler.output_dim))
                self.projection.bias.zero_()

    def forward(self, states: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        pooled = self.pooler(states, mask)
        return pooled if self.projection is None else self.projection(pooled)


def ranking_loss(queries: torch.Tensor, documents: torch.Tensor, positives: torch.Tensor,
                 left_out: torch.Tensor) -> torch.Tensor:
    """Multiple-negatives ranking: cross-entropy of each query's positive column among the documents, cosine times
    :data:`SCALE`. queries (B, D), documents (M, D), positives (B,) column indices, left_out (B, M) bool: columns
    that are no negative of that query (its other relevant documents)."""
    logits = SCALE * F.normalize(queries, dim=-1) @ F.normalize(documents, dim=-1).T
    return F.cross_entropy(logits.masked_fill(left_out, float("-inf")), positives)


def cosent_loss(left: torch.Tensor, right: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """CoSENT: log(1 + sum over i, j with scores_i > scores_j of exp(SCALE (cos_j - cos_i))), (B, D) x 2, (B,)."""
    cosine = SCALE * F.cosine_similarity(left, right, dim=-1)
    wrong = (cosine[None, :] - cosine[:, None])[scores[:, None] > scores[None, :]]
    return torch.logsumexp(torch.cat([cosine.new_zeros(1), wrong]), dim=0)


def unit_metrics(layout: PairLayout, units: np.ndarray,
                 embed: Callable[[np.ndarray], torch.Tensor]) -> dict[str, float]:
    """The metrics on ``units``: those queries ranked against the whole corpus (retrieval), or those pairs'
    correlations (similarity); ``embed`` maps rows of ``layout.texts`` to their vectors."""
    data = layout.data
    if isinstance(data, RetrievalData):
        return retrieval_metrics(embed(layout.first[units]), embed(layout.second), [data.relevant[u] for u in units])
    return similarity_metrics(embed(layout.first[units]), embed(layout.second[units]), data.scores[units])


def cached_metrics(model: EmbeddingModel, cache: FeatureCache, layout: PairLayout, units: np.ndarray,
                   batch_size: int) -> dict[str, float]:
    """:func:`unit_metrics` of ``model`` pooling the feature cache."""
    return unit_metrics(layout, units, lambda rows: cached_outputs(model, cache, rows, batch_size))


def training_items(layout: PairLayout, units: np.ndarray) -> np.ndarray:
    """The training items of ``units``: (query, relevant document) pairs (retrieval: (n, 2)) or the units themselves
    (similarity pairs: (n, 1))."""
    data = layout.data
    if isinstance(data, RetrievalData):
        return np.array([(u, d) for u in units for d in sorted(data.relevant[u])], dtype=np.int64).reshape(-1, 2)
    return np.asarray(units, dtype=np.int64)[:, None]


def training_batches(layout: PairLayout, units: np.ndarray, batch_size: int, seed: int) -> list[np.ndarray]:
    """One epoch's batches of the training items of ``units`` (:func:`training_items`) in a seeded random order."""
    items = training_items(layout, units)
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[order[start:start + batch_size]] for start in range(0, len(items), batch_size)]


@dataclass
class PairBatch:
    """One training batch of a table of pairs: the rows of ``layout.texts`` on each side and what the loss needs.

    Retrieval: ``first`` the queries, ``second`` the batch's distinct documents (the positives, then the hard
    negatives), ``positives`` each query's column, ``left_out`` (queries x documents) the columns that are relevant to
    a query without being its positive. Similarity: the pairs' first and second texts and their ``scores``."""

    first: np.ndarray
    second: np.ndarray
    positives: torch.Tensor | None = None
    left_out: torch.Tensor | None = None
    scores: torch.Tensor | None = None

    @classmethod
    def of(cls, layout: PairLayout, items: np.ndarray) -> PairBatch:
        """The batch of training ``items`` (rows of :func:`training_batches`)."""
        data = layout.data
        if isinstance(data, SimilarityData):
            units = items[:, 0]
            return cls(layout.first[units], layout.second[units], scores=torch.from_numpy(data.scores[units]))
        queries = items[:, 0]
        documents = list(dict.fromkeys([*items[:, 1].tolist(),
                                        *(n for q in queries for n in sorted(data.negatives[q]) if data.negatives)]))
        column = {d: j for j, d in enumerate(documents)}
        positives = torch.tensor([column[d] for d in items[:, 1].tolist()])
        left_out = torch.tensor([[d in data.relevant[q] and column[d] != p for d in documents]
                                 for q, p in zip(queries.tolist(), positives.tolist())], dtype=torch.bool)
        return cls(layout.first[queries], layout.second[np.array(documents, dtype=np.int64)], positives, left_out)


def pair_loss(first: torch.Tensor, second: torch.Tensor, positives: torch.Tensor | None = None,
              left_out: torch.Tensor | None = None, scores: torch.Tensor | None = None) -> torch.Tensor:
    """The loss of a :class:`PairBatch` given its two sides' vectors: CoSENT with ``scores``, else ranking."""
    if scores is not None:
        return cosent_loss(first, second, scores)
    return ranking_loss(first, second, positives, left_out)


def batch_loss(model: EmbeddingModel, cache: FeatureCache, layout: PairLayout, items: np.ndarray) -> torch.Tensor:
    """The loss of one batch of training items, both sides pooled from the feature cache in one call."""
    batch = PairBatch.of(layout, items)
    pooled = model(*cache.inputs(np.concatenate([batch.first, batch.second]), model.pooler))
    return pair_loss(pooled[:len(batch.first)], pooled[len(batch.first):], batch.positives, batch.left_out,
                     batch.scores)


def train_pair_fold(spec: dict[str, Any], cache: FeatureCache, layout: PairLayout, train_units: np.ndarray,
                    test_units: np.ndarray, config: ProbeConfig, seed: int, learned: bool
                    ) -> tuple[dict[str, float], dict[str, Any]]:
    """One fold -> (its test metrics, how the model was chosen: best_epoch (0: untrained), epochs_run, the inner
    validation metric and the test metric). ``learned``: trained from mean pooling (else: the zero-shot pooling)."""
    torch.manual_seed(seed)
    metric = primary_metric(layout.task)
    model = EmbeddingModel(build_pooler(spec, cache.hidden_size, cache.num_layers), config.projection and learned)
    fit, val = pair_split(layout.data, train_units, config.val_fraction, seed)
    if learned:
        model.pooler.start_as_mean()
    choice = EpochChoice(metric, config.patience)
    choice.offer(0, cached_metrics(model, cache, layout, val, config.batch_size * 2)[metric.name], model)
    optimizer = _optimizer(model, config) if learned else None  # a zero-shot pooler may have no parameters at all
    for epoch in range(1, config.epochs + 1 if learned else 1):
        pair_epoch(model, optimizer, cache, layout, fit, config.batch_size, seed * 1000 + epoch)
        if choice.offer(epoch, cached_metrics(model, cache, layout, val, config.batch_size * 2)[metric.name], model):
            break
    model.load_state_dict(choice.best_state)
    metrics = cached_metrics(model, cache, layout, test_units, config.batch_size * 2)
    return metrics, choice.detail(metrics[metric.name])


def _optimizer(model: nn.Module, config: ProbeConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=config.pooler_lr, weight_decay=config.weight_decay)


def pair_epoch(model: EmbeddingModel, optimizer: torch.optim.Optimizer, cache: FeatureCache, layout: PairLayout,
               units: np.ndarray, batch_size: int, seed: int) -> None:
    """One pass of the contrastive loss over the training items of ``units``, in an order drawn with ``seed``."""
    model.train()
    for batch in training_batches(layout, units, batch_size, seed):
        loss = batch_loss(model, cache, layout, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def refit_pairs(spec: dict[str, Any], cache: FeatureCache, layout: PairLayout, config: ProbeConfig, epochs: int,
                seed: int, learned: bool, projection: bool) -> EmbeddingModel:
    """One pooler (with ``projection``: and its Linear) trained contrastively on every unit for ``epochs`` epochs
    from mean pooling (``compare --export``: the epoch count chosen by the cross-validation; 0, or ``learned``
    False: the pooler as it starts)."""
    torch.manual_seed(seed)
    model = EmbeddingModel(build_pooler(spec, cache.hidden_size, cache.num_layers), projection)
    if learned:
        model.pooler.start_as_mean()
        optimizer = _optimizer(model, config)
        for epoch in range(1, epochs + 1):
            pair_epoch(model, optimizer, cache, layout, np.arange(len(layout.data)), config.batch_size,
                       seed * 1000 + epoch)
    return model.eval()


def probe_pairs(spec: dict[str, Any], cache: FeatureCache, layout: PairLayout, config: ProbeConfig,
                splits: list[tuple[np.ndarray, np.ndarray]], learned: bool, timed: bool = True) -> ProbeResult:
    """Cross-validation of one pooler spec on the pairs: zero-shot (``learned`` False) or trained; (``timed``) its
    cost timed on the cache with the same modules (the cost does not depend on the trained values)."""
    spec = build_pooler(spec, cache.hidden_size, cache.num_layers).get_config()
    started = time.perf_counter()
    folds = [train_pair_fold(spec, cache, layout, train, test, config, config.seed + k, learned)
             for k, (train, test) in enumerate(splits)]
    model = EmbeddingModel(build_pooler(spec, cache.hidden_size, cache.num_layers), config.projection and learned)
    suffix = "+projection" if model.projection is not None else ""
    seconds = time.perf_counter() - started
    cost = ms_per_1k(lambda rows: cached_outputs(model, cache, rows, config.batch_size * 2),
                     cost_rows(len(cache))) if timed else None
    return ProbeResult(spec, primary_metric(layout.task).name, [m for m, _ in folds], None,
                       sum(p.numel() for p in model.parameters()), seconds, [d for _, d in folds], suffix=suffix,
                       infer_ms_per_1k=cost, dim=model.pooler.output_dim)


def has_parameters(spec: dict[str, Any], cache: FeatureCache) -> bool:
    return any(True for _ in build_pooler(spec, cache.hidden_size, cache.num_layers).parameters())


def compare_pair_poolers(specs: list[dict[str, Any]], cache: FeatureCache, layout: PairLayout, config: ProbeConfig,
                         on_result: Callable[[ProbeResult], None] | None = None,
                         splits: list[tuple[np.ndarray, np.ndarray]] | None = None, timed: bool = True
                         ) -> list[ProbeResult]:
    """Every pooler on the same folds (``splits``, or ``config``'s repeats x folds of the pairs): a zero-shot row
    for each parameter-free one, a trained row for each one with parameters (with ``projection``: for every one);
    ranked best first; ``timed``: each one's cost measured."""
    splits = splits or repeated_folds(layout.data, config.folds, config.repeats, config.val_fraction, config.seed,
                                      pair_folds)
    results = []
    for spec in specs:
        trained = has_parameters(spec, cache)
        for learned in ([False] if not trained else []) + ([True] if trained or config.projection else []):
            with torch_threads(config.threads):
                result = probe_pairs(spec, cache, layout, config, splits, learned, timed)
            results.append(result)
            if on_result is not None:
                on_result(result)
    higher = primary_metric(layout.task).higher_is_better
    return sorted(results, key=lambda r: rank_key(r.summary()["mean"], higher))
