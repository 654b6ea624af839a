"""``evaluate``: how good an encoder + pooler's embeddings are on a table of pairs, with no training (retrieval:
every query ranked against the whole corpus; similarity: cosine against the scores). The figures are those of
sentence-transformers' evaluators (:mod:`.embedding_metrics`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..data.pairs import RetrievalData, load_pairs
from ..models.encoders import embedding_model
from ..settings import config_from
from .config import EncodeConfig
from .embedding_metrics import retrieval_metrics, similarity_metrics


def evaluate(data: str | Path | pd.DataFrame, task: str, *, model: str | None = None,
             pooler: str | dict[str, Any] | None = None, text_col: str = "text", pair_col: str = "pair",
             target_col: str = "score", negative_col: str | None = None,
             corpus: str | Path | Sequence[str] | None = None, trust_remote_code: bool = False, progress: bool = True,
             **settings: Any) -> dict[str, Any]:
    """The metrics of ``model`` (default: the packaged all-MiniLM-L6-v2; or a ``poolkit train`` fold folder, with its
    trained pooler) pooled with ``pooler`` (default mean) on ``data`` read for ``task`` (retrieval | similarity; see
    :func:`poolkit.data.pairs.load_pairs` for the columns and ``corpus``). ``settings``: EncodeConfig's fields
    (batch_size, max_length, precision, allow_untrained). Returns {"task", "metrics": {name: value}, "model",
    "pooler" (its spec), "queries" / "corpus" / "pairs" (retrieval) or "pairs" (similarity), "seconds"}."""
    from ..models.text_encoder import TextEncoder

    config = config_from(EncodeConfig, "evaluate", settings)
    config.check()
    pairs = load_pairs(data, task, text_col=text_col, pair_col=pair_col, target_col=target_col,
                       negative_col=negative_col, corpus=corpus)  # bad input fails before the model loads
    model = embedding_model(model)
    encoder = TextEncoder(model, pooler, max_length=config.max_length, precision=config.precision,
                          allow_untrained=config.allow_untrained, trust_remote_code=trust_remote_code)
    started = time.perf_counter()

    def vectors(texts: list[str]):
        return encoder.encode(texts, batch_size=config.batch_size, progress=progress).float()

    if isinstance(pairs, RetrievalData):
        metrics = retrieval_metrics(vectors(pairs.queries), vectors(pairs.corpus), pairs.relevant)
        sizes = {"queries": len(pairs.queries), "corpus": len(pairs.corpus), "pairs": pairs.pairs}
    else:
        metrics = similarity_metrics(vectors(pairs.left), vectors(pairs.right), pairs.scores)
        sizes = {"pairs": len(pairs.scores)}
    return {"task": task, "metrics": metrics, "model": model, "pooler": encoder.pooler.get_config(), **sizes,
            "max_length": encoder.max_length, "seconds": time.perf_counter() - started}
