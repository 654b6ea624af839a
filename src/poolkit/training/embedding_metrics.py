"""How good embeddings are for search and similarity: the metrics of sentence-transformers'
``InformationRetrievalEvaluator`` and ``EmbeddingSimilarityEvaluator`` (the MTEB-style figures), by cosine.

Retrieval ranks the whole corpus for every query (ties broken by the lower corpus index) and scores the ranking
with binary relevance: nDCG@10 (DCG = sum of rel_i / log2(i + 1) over ranks i = 1..10, over the ideal DCG of the
query's relevant documents), MRR@10 (1 / the rank of the first relevant document in the top 10, else 0), MAP@100
(the mean over the relevant documents in the top 100 of the precision at their rank, divided by min(100, relevant
documents)) and Recall@1 / @10 (the share of the relevant documents in the top k), each averaged over the queries.
Similarity is the Spearman and Pearson correlation (scipy.stats) of the pairs' cosines with their scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy import stats

from .config import NEIGHBOURS

RETRIEVAL_METRICS = ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10")
SIMILARITY_METRICS = ("spearman", "pearson")
#: how deep each query's ranking goes (MAP@100)
DEPTH = 100
#: the corpus is ranked in blocks of this many queries (a block's scores: block x corpus floats)
QUERY_BLOCK = 256


def ranked(queries: torch.Tensor, corpus: torch.Tensor, depth: int, cosine: bool = True) -> np.ndarray:
    """For each query (Q, D), the indices of its ``depth`` most cosine-similar (``cosine=False``: largest dot product)
    documents of ``corpus`` (N, D), best first, ties broken by the lower index: (Q, min(depth, N))."""
    queries, corpus = queries.float(), corpus.float()
    if cosine:
        queries = torch.nn.functional.normalize(queries, dim=-1)
        corpus = torch.nn.functional.normalize(corpus, dim=-1)
    depth = min(depth, corpus.shape[0])
    rows = []
    for start in range(0, queries.shape[0], QUERY_BLOCK):
        scores = queries[start:start + QUERY_BLOCK] @ corpus.T
        # the top depth + 1 by value, then sorted by (score descending, index ascending); a row whose scores tie
        # across the cut-off (Hamming distances do, often) is sorted whole, stably, so that the lower indices win
        values, indices = torch.topk(scores, min(depth + 1, corpus.shape[0]), dim=1)
        tied = (values[:, depth - 1] == values[:, depth]).numpy() if values.shape[1] > depth else None
        values, indices = values.numpy(), indices.numpy()
        order = np.lexsort((indices, -values), axis=1)
        top = np.take_along_axis(indices, order, axis=1)[:, :depth]
        if tied is not None and tied.any():
            top[tied] = torch.sort(scores[torch.from_numpy(tied)], dim=1, descending=True,
                                   stable=True).indices[:, :depth].numpy()
        rows.append(top)
    return np.concatenate(rows) if rows else np.zeros((0, depth), dtype=np.int64)


def retrieval_metrics(queries: torch.Tensor, corpus: torch.Tensor, relevant: Sequence[set[int]]) -> dict[str, float]:
    """The retrieval metrics (see the module docstring) of query vectors against corpus vectors; ``relevant``: per
    query, the indices of its relevant documents (at least one each)."""
    return ranking_metrics(ranked(queries, corpus, DEPTH), relevant)


def quantized_retrieval_metrics(queries: torch.Tensor, corpus: torch.Tensor, relevant: Sequence[set[int]], kind: str,
                                rescore: int | None = None) -> dict[str, float]:
    """The retrieval metrics when queries and corpus, L2-normalised (as cosine search stores them), are both quantised
    to ``kind`` (:func:`poolkit.quantize`; int8 / uint8 ranges calibrated on the corpus) and ranked by the dot product
    of their codes (binary kinds: by Hamming distance); with ``rescore``, the top ``rescore`` x 100 candidates are
    then ranked again by the float32 query's dot product with the dequantised documents (sentence-transformers'
    rescoring), the corpus staying quantised."""
    from ..quantization import dequantize, quantization_ranges, quantize

    queries = torch.nn.functional.normalize(queries.float(), dim=-1)
    corpus = torch.nn.functional.normalize(corpus.float(), dim=-1)
    dims = corpus.shape[1]
    ranges = quantization_ranges(corpus) if kind in ("int8", "uint8") else None
    codes = {name: quantize(side, kind, ranges=ranges) for name, side in (("queries", queries), ("corpus", corpus))}
    stored = torch.from_numpy(dequantize(codes["corpus"], kind, dims, ranges=ranges))
    searched = stored if ranges is None else torch.from_numpy(codes["corpus"].astype(np.float32))
    asked = torch.from_numpy(codes["queries"].astype(np.float32) if ranges is not None else
                             dequantize(codes["queries"], kind, dims))
    if rescore is None:
        return ranking_metrics(ranked(asked, searched, DEPTH, cosine=False), relevant)
    candidates = ranked(asked, searched, rescore * DEPTH, cosine=False)
    top = []
    for row, found in enumerate(candidates):
        scores = (stored[torch.from_numpy(found)] @ queries[row]).numpy()
        top.append(found[np.lexsort((found, -scores))][:DEPTH])
    return ranking_metrics(np.stack(top), relevant)


def ranking_metrics(top: np.ndarray, relevant: Sequence[set[int]]) -> dict[str, float]:
    """The retrieval metrics of rankings ``top`` (Q, up to 100 corpus indices, best first)."""
    hits = np.array([[index in wanted for index in row] for row, wanted in zip(top, relevant)], dtype=bool)
    hits = hits.reshape(len(relevant), top.shape[1])
    counts = np.array([len(wanted) for wanted in relevant], dtype=np.float64)
    discount = 1.0 / np.log2(np.arange(2, 12))
    first10 = hits[:, :10]
    dcg = (first10 * discount[:first10.shape[1]]).sum(axis=1)
    ideal = np.array([discount[:min(int(c), 10)].sum() for c in counts])
    first = np.where(first10.any(axis=1), 1.0 / (first10.argmax(axis=1) + 1), 0.0)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    average_precision = (precision * hits).sum(axis=1) / np.minimum(100, counts)
    return {"ndcg@10": float(np.mean(dcg / ideal)), "mrr@10": float(np.mean(first)),
            "map@100": float(np.mean(average_precision)), "recall@1": float(np.mean(hits[:, :1].sum(1) / counts)),
            "recall@10": float(np.mean(hits[:, :10].sum(1) / counts))}


def similarity_metrics(left: torch.Tensor, right: torch.Tensor, scores: np.ndarray) -> dict[str, float]:
    """Spearman and Pearson correlation of each pair's cosine with its score."""
    cosine = torch.nn.functional.cosine_similarity(left.double(), right.double(), dim=-1).numpy()
    return {"spearman": float(stats.spearmanr(cosine, scores).statistic),
            "pearson": float(stats.pearsonr(cosine, scores).statistic)}


def neighbour_outputs(vectors: torch.Tensor, targets: np.ndarray, task: str, neighbours: int = NEIGHBOURS,
                      n_classes: int | None = None) -> np.ndarray:
    """Leave-one-out k-nearest-neighbour predictions, the task's head outputs (as :func:`poolkit.training.metrics.
    compute_metrics` reads them) with no training: each row predicted from the ``neighbours`` other rows most
    cosine-similar to it. Regression: their targets' mean (N, T). Classification: log of the class votes with one
    vote added to every class (N, C): the argmax is the majority, ties to the lower class id, as scikit-learn's
    ``KNeighborsClassifier``; the log-loss stays finite. Multilabel: the logit of (votes + 1/2) / (k + 1) per label
    (predicted when at least half the neighbours have it)."""
    unit = torch.nn.functional.normalize(vectors.float(), dim=-1)
    rows = unit.shape[0]
    found = []
    for start in range(0, rows, QUERY_BLOCK):
        scores = unit[start:start + QUERY_BLOCK] @ unit.T
        block = torch.arange(scores.shape[0])
        scores[block, start + block] = -torch.inf  # a row never votes for itself
        found.append(scores.topk(neighbours, dim=1).indices)
    votes = np.asarray(targets)[torch.cat(found).numpy()]  # (N, k, ...)
    if task == "regression":
        return votes.reshape(rows, neighbours, -1).mean(axis=1)
    if task == "classification":
        counts = np.stack([(votes == c).sum(axis=1) for c in range(n_classes)], axis=1)
        return np.log((counts + 1.0) / (neighbours + n_classes))
    share = (votes.sum(axis=1) + 0.5) / (neighbours + 1.0)
    return np.log(share / (1.0 - share))
