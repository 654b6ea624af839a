"""``evaluate``: how good a model is on a table, with no training. On a table of pairs, an encoder + pooler's
embeddings (retrieval: every query ranked against the whole corpus; similarity: cosine against the scores), the
figures of sentence-transformers' evaluators (:mod:`.embedding_metrics`). On a table of texts and targets
(regression, classification, multilabel): a trained model's head (``method="head"``, the default for a ``poolkit
train`` model of the task), or the embeddings themselves by leave-one-out k-nearest neighbours (``method="knn"``,
the default for an encoder: :func:`.embedding_metrics.neighbour_outputs`), scored with the task's metrics
(:mod:`.metrics`). A ``poolkit train`` run of several folds is scored fold by fold (each fold model with its trained
pooler), as the mean and sample std over its folds."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data import TableData
from ..data.pairs import RetrievalData, SimilarityData, check_retrieval_columns, load_pairs
from ..errors import PoolkitError
from ..io.runs import TRAIN_META, fold_models
from ..models.encoders import is_run_folder
from ..settings import config_from
from ..tasks import EMBEDDING_TASKS, HEAD_TASKS
from .config import EVALUATE_METHODS, NEIGHBOURS, RESCORE, EncodeConfig


def evaluate(data: str | Path | pd.DataFrame | TableData, task: str, *, model: str | None = None,
             pooler: str | dict[str, Any] | None = None, text_col: str = "text", pair_col: str = "pair",
             target_col: str | Sequence[str] | None = None, negative_col: str | None = None,
             corpus: str | Path | Sequence[str] | None = None, fold: int | None = None,
             dims: Sequence[int] | None = None, quantize: Sequence[str] | None = None, rescore: int = RESCORE,
             query_prompt: str | None = None, document_prompt: str | None = None, method: str | None = None,
             neighbours: int = NEIGHBOURS, trust_remote_code: bool = False, progress: bool = True,
             **settings: Any) -> dict[str, Any]:
    """The metrics of ``model`` (default: the packaged all-MiniLM-L6-v2; or a ``poolkit train`` run or fold folder,
    with its trained pooler) pooled with ``pooler`` (default: the pooling a sentence-transformers folder declares,
    the packaged MiniLM's mean + Normalize; else mean; ``pooling`` says which ran) on ``data`` read for ``task``
    (retrieval | similarity; see :func:`poolkit.data.pairs.load_pairs` for the columns and ``corpus``). A run of several folds is
    scored fold by fold: ``metrics`` is their mean, ``std_ddof1`` the sample std, ``folds`` each one's (``fold``: that
    fold alone). ``settings``: EncodeConfig's fields (batch_size, max_length, precision, allow_untrained, dim,
    prompt, prompt_name, include_prompt).
    ``dims``: also score each vector's first N dimensions for each N given (Matryoshka truncation; the texts are
    encoded once), as ``by_dim``: [{"dim", "metrics"}, ...] (fold means for a run). Returns {"task", "metrics",
    "model", "pooler" (its spec), "queries" / "corpus" / "pairs" (retrieval) or "pairs" (similarity), "max_length",
    "seconds"}.

    Retrieval only: ``quantize`` (kinds of :func:`poolkit.quantize`: int8, uint8, binary, ubinary) also scores each
    kind, queries and corpus quantised (int8 / uint8 ranges calibrated on the corpus) and ranked by their codes, and
    again with the top ``rescore`` x 100 candidates re-ranked by the float32 query against the quantised documents
    (sentence-transformers' rescoring), as ``by_quantize``: [{"kind", "metrics", "rescored"}, ...];
    ``query_prompt`` / ``document_prompt`` put a prompt before the queries / the documents only (in place of
    ``prompt``, which goes before every text).

    ``task`` regression, classification or multilabel: ``data`` a table (a file, or a :class:`TableData`) of
    ``text_col`` and ``target_col`` (default: the columns a trained model was trained on, else label), scored by
    ``method``: ``"head"``, a ``poolkit train`` model's head (the default for one), or ``"knn"``, each row predicted
    from its ``neighbours`` most cosine-similar other rows (the default for an encoder; see
    :func:`poolkit.training.embedding_metrics.neighbour_outputs`); returns {"task", "method", "metrics" (those of
    :func:`poolkit.training.metrics.compute_metrics`), "rows", ...} as above (``neighbours`` with knn)."""
    config = config_from(EncodeConfig, "evaluate", settings)
    config.check()
    if task in HEAD_TASKS:
        if dims is not None or quantize is not None or query_prompt is not None or document_prompt is not None:
            raise PoolkitError(f"`dims`, `quantize` and `query_prompt` / `document_prompt` score embeddings for "
                               f"retrieval or similarity: leave them out for {task}")
        check_retrieval_columns(task, negative_col, corpus)
        return _evaluate_table(data, task, model, pooler, text_col, target_col, fold, method, neighbours, config,
                               trust_remote_code, progress)
    if task not in EMBEDDING_TASKS:
        raise PoolkitError(f"unknown task {task!r}: use one of {', '.join(EMBEDDING_TASKS + HEAD_TASKS)}")
    if method is not None:
        raise PoolkitError(f"`method` picks how a {'/'.join(HEAD_TASKS)} table is scored: leave it out for {task}")
    target_col = "score" if target_col is None else target_col
    if not isinstance(target_col, str):
        raise PoolkitError(f"`target_col` of a {task} table is one column (the graded score), got {target_col!r}")
    dims = _check_dims(dims, config.dim)
    kinds = _check_quantize(quantize, task, rescore)
    if task != "retrieval" and (query_prompt is not None or document_prompt is not None):
        raise PoolkitError("`query_prompt` / `document_prompt` are for retrieval: for similarity pass `prompt`")
    models = _models(model, fold)
    pairs = load_pairs(data, task, text_col=text_col, pair_col=pair_col, target_col=target_col,
                       negative_col=negative_col, corpus=corpus)  # bad input fails before a model loads
    started = time.perf_counter()
    prompts = (query_prompt, document_prompt)
    scored = [_score(one, pooler, pairs, config, dims, kinds, rescore, prompts, trust_remote_code, progress)
              for one in models]
    sizes = ({"queries": len(pairs.queries), "corpus": len(pairs.corpus), "pairs": pairs.pairs}
             if isinstance(pairs, RetrievalData) else {"pairs": len(pairs.scores)})
    result = {"task": task, "metrics": scored[0]["metrics"], "model": str(model) if model is not None else None,
              "pooler": scored[0]["pooler"], "pooling": scored[0]["pooling"], **sizes,
              "max_length": scored[0]["max_length"]}
    result.update(over_folds(models, scored))
    if dims:
        result["by_dim"] = [{"dim": dim, "metrics": fold_mean([s["by_dim"][k] for s in scored])}
                            for k, dim in enumerate(dims)]
    if kinds:
        result["by_quantize"] = [{"kind": kind, "rescore": rescore,
                                  **{key: fold_mean([s["by_quantize"][k][key] for s in scored])
                                     for key in ("metrics", "rescored")}} for k, kind in enumerate(kinds)]
    if query_prompt is not None or document_prompt is not None:
        result["prompts"] = {"query": query_prompt, "document": document_prompt}
    return {**result, "seconds": time.perf_counter() - started}


def _check_quantize(kinds: Sequence[str] | None, task: str, rescore: int) -> list[str]:
    """The quantisation kinds to score (retrieval only), each known, in the order given."""
    from ..quantization import KINDS

    if kinds is None:
        return []
    kinds = list(kinds)
    if task != "retrieval":
        raise PoolkitError("`quantize` scores retrieval (quantised corpus search): leave it out for similarity")
    unknown = [k for k in kinds if k not in KINDS or k == "float32"]
    if not kinds or unknown:
        raise PoolkitError(f"`quantize` takes kinds from {', '.join(k for k in KINDS if k != 'float32')}, "
                           f"got {kinds!r}")
    if not isinstance(rescore, int) or isinstance(rescore, bool) or rescore < 1:
        raise PoolkitError(f"`rescore` must be an int >= 1 (candidates per result kept for rescoring), got {rescore!r}")
    return list(dict.fromkeys(kinds))


def over_folds(models: list[str | None], scored: list[dict[str, Any]]) -> dict[str, Any]:
    """With several fold models: their metrics' mean (``metrics``), sample std (``std_ddof1``) and each fold's
    (``folds``); with one, nothing (its own metrics stand)."""
    if len(scored) < 2:
        return {}
    names = list(scored[0]["metrics"])
    return {"metrics": fold_mean([s["metrics"] for s in scored]),
            "std_ddof1": {m: float(np.std([s["metrics"][m] for s in scored], ddof=1)) for m in names},
            "folds": [{"fold": Path(one).name, "metrics": s["metrics"]} for one, s in zip(models, scored)]}


def fold_mean(metrics: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the folds' metrics (one fold: its own)."""
    return {m: float(np.mean([one[m] for one in metrics])) for m in metrics[0]}


def _check_dims(dims: Sequence[int] | None, dim: int | None) -> list[int]:
    """The dimensions to score at, each a positive integer, in increasing order (the pooler's width is checked once
    the model is loaded)."""
    if dims is None:
        return []
    if dim is not None:
        raise PoolkitError("`dims` scores several truncations of the full vectors: leave `dim` out")
    dims = list(dims)
    if not dims or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
        raise PoolkitError(f"`dims` must be positive numbers of dimensions, got {dims!r}")
    return sorted(set(dims))


def _models(model: str | None, fold: int | None) -> list[str | None]:
    """The models to score: a ``poolkit train`` run's fold models (or its fold ``fold``), else ``model`` itself."""
    if not is_run_folder(model):
        if fold is not None:
            raise PoolkitError("`fold` picks a fold of a `poolkit train` run: pass the run folder as `model`")
        return [model]
    folds = [str(path) for path in fold_models(model)]
    if fold is None:
        return folds
    chosen = [path for path in folds if Path(path).name == f"fold_{fold}"]
    if not chosen:
        raise PoolkitError(f"{model} has no fold_{fold}: its folds are {', '.join(Path(f).name for f in folds)}")
    return chosen


def _score(model: str | None, pooler: Any, pairs: RetrievalData | SimilarityData, config: EncodeConfig,
           dims: list[int], kinds: list[str], rescore: int, prompts: tuple[str | None, str | None],
           trust_remote_code: bool, progress: bool) -> dict[str, Any]:
    """One encoder + pooler's metrics on ``pairs`` (and at each of ``dims``: ``by_dim``, a list of metrics; for each
    of ``kinds``: ``by_quantize``)."""
    import torch

    from ..models.text_encoder import TextEncoder
    from .contrastive import PairLayout, unit_metrics
    from .embedding_metrics import quantized_retrieval_metrics

    encoder = TextEncoder(model, pooler, **config.encoder_options(), trust_remote_code=trust_remote_code)
    if dims and dims[-1] > encoder.dim:
        raise PoolkitError(f"`dims` go up to {dims[-1]} but the pooler gives {encoder.dim} dimensions")

    apart = prompts != (None, None)  # queries and documents prompted apart: a text on both sides is encoded twice
    layout = PairLayout.of(pairs, apart=apart)  # else each distinct text encoded once, queries and documents alike
    if apart:
        split = int(layout.second.min()) if len(layout.second) else len(layout.texts)
        vectors = torch.cat([encoder.encode(layout.texts[:split], batch_size=config.batch_size, progress=progress,
                                            prompt=prompts[0]),
                             encoder.encode(layout.texts[split:], batch_size=config.batch_size, progress=progress,
                                            prompt=prompts[1])]).float()
    else:
        vectors = encoder.encode(layout.texts, batch_size=config.batch_size, progress=progress).float()
    vectors = _finite(vectors, encoder.pooling)
    units = np.arange(len(pairs))

    def metrics(width: int) -> dict[str, float]:
        return unit_metrics(layout, units, lambda rows: vectors[torch.from_numpy(rows), :width])

    def quantized(kind: str) -> dict[str, dict[str, float]]:
        queries, corpus = vectors[torch.from_numpy(layout.first)], vectors[torch.from_numpy(layout.second)]
        return {key: quantized_retrieval_metrics(queries, corpus, pairs.relevant, kind, rescore=how)
                for key, how in (("metrics", None), ("rescored", rescore))}

    return {"metrics": metrics(encoder.dim), "by_dim": [metrics(dim) for dim in dims],
            "by_quantize": [quantized(kind) for kind in kinds],
            "pooler": encoder.pooler.get_config(), "pooling": encoder.pooling, "max_length": encoder.max_length}


def _evaluate_table(data: str | Path | TableData, task: str, model: str | None, pooler: Any, text_col: str,
                    target_col: str | Sequence[str] | None, fold: int | None, method: str | None, neighbours: int,
                    config: EncodeConfig, trust_remote_code: bool, progress: bool) -> dict[str, Any]:
    """:func:`evaluate` for a table of texts and targets: every model's metrics by its head or by neighbours."""
    import json

    from ..data.tables import load_table
    from .metrics import compute_metrics
    from .prediction import fold_outputs

    if method is not None and method not in EVALUATE_METHODS:
        raise PoolkitError(f"`method` must be one of {', '.join(EVALUATE_METHODS)}, got {method!r}")
    if not isinstance(neighbours, int) or isinstance(neighbours, bool) or neighbours < 1:
        raise PoolkitError(f"`neighbours` must be an int >= 1, got {neighbours!r}")
    models = _models(model, fold)
    metas = [json.loads((Path(one) / TRAIN_META).read_text()) if one is not None and (Path(one) / TRAIN_META).is_file()
             else None for one in models]
    meta = metas[0]
    has_head = meta is not None and meta.get("task") in HEAD_TASKS
    method = method or ("head" if has_head else "knn")
    if method == "head":
        if not has_head:
            raise PoolkitError(f"{model or 'the packaged MiniLM'} has no head that predicts {task} (pass a "
                               "`poolkit train` model of that task), or score its embeddings with `method` knn")
        if meta["task"] != task:
            raise PoolkitError(f"{model} predicts {meta['task']}, not {task}: pass `task` {meta['task']}")
        if pooler is not None:
            raise PoolkitError("a trained model's head reads its own pooler: leave `pooler` out (or `method` knn)")
    label_names = meta["label_names"] if has_head and meta["task"] == task else None
    if target_col is None:
        target_col = meta["target_cols"] if has_head and meta["task"] == task else "label"
    table = data if isinstance(data, TableData) else load_table(data, text_col, target_col, task, label_names)
    if table.task != task:
        raise PoolkitError(f"`data` holds a {table.task} table, not {task}: pass `task` {table.task}")
    if method == "head" and label_names is not None and table.label_names != label_names:
        raise PoolkitError(f"`data`'s labels ({', '.join(table.label_names)}) are not the model's, in its order "
                           f"({', '.join(label_names)}): pass the table as a file (read in the model's order)")
    if method == "knn" and neighbours >= len(table):
        raise PoolkitError(f"`neighbours` {neighbours} needs more rows than that: the table has {len(table)} (each "
                           "row is predicted from other rows)")
    started = time.perf_counter()
    n_classes = None if task == "regression" else table.n_outputs
    scored = []
    for one, record in zip(models, metas):
        if method == "head":
            outputs = fold_outputs(Path(one), record, table.texts, config.batch_size, config.max_length, progress)
            scored.append({"metrics": compute_metrics(task, outputs, table.targets, n_classes), "pooler": None,
                           "pooling": "its trained pooler and head",
                           "max_length": config.max_length or record["config"]["max_length"]})
        else:
            scored.append(_neighbours_score(one, pooler, table, n_classes, neighbours, config, trust_remote_code,
                                            progress))
    result = {"task": task, "method": method, "metrics": scored[0]["metrics"],
              "model": str(model) if model is not None else None, "pooler": scored[0]["pooler"],
              "pooling": scored[0]["pooling"], "rows": len(table), "max_length": scored[0]["max_length"],
              **({"neighbours": neighbours} if method == "knn" else {})}
    result.update(over_folds(models, scored))
    return {**result, "seconds": time.perf_counter() - started}


def _neighbours_score(model: str | None, pooler: Any, table: TableData, n_classes: int | None, neighbours: int,
                      config: EncodeConfig, trust_remote_code: bool, progress: bool) -> dict[str, Any]:
    """One encoder + pooler's metrics on ``table`` by leave-one-out k-nearest neighbours of its vectors."""
    from ..models.text_encoder import TextEncoder
    from .embedding_metrics import neighbour_outputs
    from .metrics import compute_metrics

    encoder = TextEncoder(model, pooler, **config.encoder_options(), trust_remote_code=trust_remote_code)
    vectors = _finite(encoder.encode(table.texts, batch_size=config.batch_size, progress=progress).float(),
                      encoder.pooling)
    outputs = neighbour_outputs(vectors, table.targets, table.task, neighbours, n_classes)
    return {"metrics": compute_metrics(table.task, outputs, table.targets, n_classes),
            "pooler": encoder.pooler.get_config(), "pooling": encoder.pooling, "max_length": encoder.max_length}


def _finite(vectors, pooling: str):
    """``vectors``, refused in one line when any is NaN or inf (nothing is scored)."""
    import torch

    if not bool(torch.isfinite(vectors).all()):
        bad = int((~torch.isfinite(vectors).all(dim=1)).sum())
        raise PoolkitError(f"{bad} of {len(vectors)} texts give NaN or inf vectors with {pooling}: check the "
                           "model's weights or `precision`; nothing is scored")
    return vectors
