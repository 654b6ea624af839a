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

RETRIEVAL_METRICS = ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10")
SIMILARITY_METRICS = ("spearman", "pearson")
#: the corpus is ranked in blocks of this many queries (a block's scores: block x corpus floats)
QUERY_BLOCK = 256


def ranked(queries: torch.Tensor, corpus: torch.Tensor, depth: int) -> np.ndarray:
    """For each query (Q, D), the indices of its ``depth`` most cosine-similar documents of ``corpus`` (N, D), best
    first, ties broken by the lower index: (Q, min(depth, N))."""
    queries = torch.nn.functional.normalize(queries.float(), dim=-1)
    corpus = torch.nn.functional.normalize(corpus.float(), dim=-1)
    depth = min(depth, corpus.shape[0])
    rows = []
    for start in range(0, queries.shape[0], QUERY_BLOCK):
        scores = queries[start:start + QUERY_BLOCK] @ corpus.T
        # the top depth + 1 by value, then sorted by (score descending, index ascending): a tie at the cut-off is
        # resolved like the rest (the extra candidate)
        values, indices = torch.topk(scores, min(depth + 1, corpus.shape[0]), dim=1)
        values, indices = values.numpy(), indices.numpy()
        order = np.lexsort((indices, -values), axis=1)
        rows.append(np.take_along_axis(indices, order, axis=1)[:, :depth])
    return np.concatenate(rows) if rows else np.zeros((0, depth), dtype=np.int64)


def retrieval_metrics(queries: torch.Tensor, corpus: torch.Tensor, relevant: Sequence[set[int]]) -> dict[str, float]:
    """The retrieval metrics (see the module docstring) of query vectors against corpus vectors; ``relevant``: per
    query, the indices of its relevant documents (at least one each)."""
    top = ranked(queries, corpus, 100)
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
