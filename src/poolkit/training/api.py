"""The Python API behind the ``poolkit`` command: ``compare`` -> Leaderboard, ``train`` -> metrics, ``predict`` ->
table, ``embed`` -> (table, vectors), ``evaluate`` -> metrics of embeddings. The CLI only parses arguments, calls
these and prints.

``data`` is a CSV/TSV/JSONL/Parquet path, ``builtin:NAME`` (``poolkit data list``) or a loaded ``TableData``;
a pooler is a name or a spec ``{"name": ..., **options}`` (``poolkit.pooling.pooler_spec``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data import TableData, decode_labels
from ..data.texts import read_texts
from ..io.runs import check_writable
from ..models.encoders import embedding_model
from ..settings import config_from
from .compare import DEFAULT_DATA, compare, compare_config, compare_folder
from .config import EmbedConfig, PredictConfig, TrainConfig
from .evaluation import evaluate
from .inputs import DEFAULT_POOLERS, declared_poolers, fit_to_encoder, load, resolve_poolers

__all__ = ["DEFAULT_DATA", "DEFAULT_POOLERS", "compare", "compare_config", "compare_folder", "embed", "evaluate",
           "load", "predict", "resolve_poolers", "train", "train_config"]

def train_config(pooler: str | dict[str, Any] = "mean", model: str | None = None, **settings: Any):
    """A checked TrainConfig; unknown settings raise naming the known ones."""
    config = config_from(TrainConfig, "training", settings, model=model, pooler=pooler)
    config.check()
    return config


def train(data: str | Path | TableData, out: str | Path, *, pooler: str | dict[str, Any] = "mean",
          model: str | None = None, text_col: str = "text", target_col: str | Sequence[str] | None = None,
          task: str | None = None, pair_col: str = "pair", negative_col: str | None = None,
          corpus: str | Path | Sequence[str] | None = None, limit: int | None = None, resume: bool = False,
          force: bool = False, trust_remote_code: bool = False, progress: bool = True,
          report: Callable[[str], None] | None = None, **settings: Any) -> dict[str, Any]:
    """Fine-tune encoder + pooler + head, one model per fold, into ``out`` (fold_K/, oof.csv, metrics.json,
    train.log); returns metrics.json's dict. Each fold's checkpoint is chosen on an inner split of its training
    rows and its test rows are scored once (see :mod:`poolkit.training.finetune`). ``settings``: any TrainConfig
    field (folds, epochs, batch_size, encoder_lr, pooler_lr, precision, train_only, ...). A layer pooler without a
    ``token_pooler`` pools each layer's tokens with the pooling the model folder declares (mean for the packaged
    MiniLM), else with its own default. ``trust_remote_code``:
    allow a model folder's own code. ``report``: told the task when it was inferred from the target column.

    ``pooler="auto"``: the pooling the model folder declares (a sentence-transformers folder's modes; one with
    Dense layers after its pooling is refused).

    ``task`` retrieval or similarity: ``data`` is a table of pairs (``text_col``, ``pair_col``, ``target_col``
    (default: score), ``negative_col``, ``corpus``: see :func:`poolkit.data.pairs.load_pairs`) and the encoder +
    pooler are fine-tuned with a contrastive loss, with no head (:mod:`poolkit.training.finetune_pairs`); no
    oof.csv. ``target_col`` of the other tasks: default label."""
    from ..data.pairs import PAIR_TASKS, check_retrieval_columns, load_pairs, score_column
    from ..models.declared import declared_token_pooler, with_token_pooler
    from ..models.encoders import remote_code, resolve_model
    from ..pooling import pooler_spec
    from . import finetune

    check_writable(Path(out))
    (pooler,), _ = declared_poolers([pooler], model, "train")  # auto: the pooling the model folder declares
    # a layer pooler pools each layer's tokens as the encoder was trained to, unless told otherwise
    pooler = with_token_pooler(pooler_spec(pooler), declared_token_pooler(resolve_model(model)))
    settings["max_length"] = fit_to_encoder(model, settings.get("max_length"), TrainConfig.max_length,
                                             trust_remote_code, [pooler])
    config = train_config(pooler, model, **settings)  # fails before the data is read
    if task in PAIR_TASKS:
        from .contrastive import PairLayout
        from .finetune_pairs import fit_pairs

        pairs = load_pairs(data, task, text_col=text_col, pair_col=pair_col, target_col=score_column(target_col, task),
                           negative_col=negative_col, corpus=corpus, limit=limit, seed=config.seed)
        with remote_code(trust_remote_code):
            return fit_pairs(config, PairLayout.of(pairs), out, resume=resume, force=force, progress=progress)
    check_retrieval_columns(task, negative_col, corpus)
    table = load(data, text_col, target_col or "label", task, limit, config.seed, report)
    with remote_code(trust_remote_code):
        return finetune.fit(config, table, out, resume=resume, force=force, progress=progress)


def predict(model: str | Path, data: str | Path | Sequence[str], *, text_col: str = "text",
            trust_remote_code: bool = False, progress: bool = True, **settings: Any) -> pd.DataFrame:
    """The input table plus predictions of a ``poolkit train`` folder (every fold model averaged) or of one of its
    ``fold_K`` folders: ``pred_<target>`` (regression) or ``prob_<label>`` and ``prediction`` (classification;
    multi-label: labels joined by ``|``). ``frame.attrs["n_models"]``: how many models were averaged. ``settings``:
    PredictConfig's fields (batch_size, max_length, allow_incomplete: an unfinished run is refused unless it is set,
    then its finished folds are averaged)."""
    from ..models.encoders import remote_code
    from .prediction import predict_outputs

    config = config_from(PredictConfig, "predict", settings)
    config.check()
    frame, texts = read_texts(data, text_col)
    with remote_code(trust_remote_code):
        outputs, info = predict_outputs(model, texts, batch_size=config.batch_size, max_length=config.max_length,
                                        progress=progress, allow_incomplete=config.allow_incomplete)
    result = frame.copy()
    task, names = info["task"], info.get("label_names")
    if task == "regression":
        for j, col in enumerate(info.get("target_cols") or [f"target_{j}" for j in range(outputs.shape[1])]):
            result[f"pred_{col}"] = outputs[:, j]
    else:
        for j, name in enumerate(names):
            result[f"prob_{name}"] = outputs[:, j]
        decoded = decode_labels(outputs, names, multilabel=task == "multilabel")
        result["prediction"] = ["|".join(d) for d in decoded] if task == "multilabel" else decoded
    result.attrs["n_models"] = info["n_models"]
    return result


def embed(data: str | Path | Sequence[str], *, model: str | None = None, pooler: str | dict[str, Any] | None = None,
          text_col: str = "text", trust_remote_code: bool = False, progress: bool = True,
          **settings: Any) -> tuple[pd.DataFrame, np.ndarray, dict[str, Any]]:
    """(input table, (N, dim) float32 vectors, the pooler's spec). ``model``: an encoder (default: the packaged
    all-MiniLM-L6-v2) pooled with ``pooler`` (default mean), or a ``poolkit train`` model -- a ``fold_K`` folder,
    or the run folder when it holds one fold -- with its own trained pooler. ``settings``: EmbedConfig's fields
    (normalize, batch_size, max_length, precision, allow_untrained; vectors holding NaN / inf are refused unless
    allow_nonfinite)."""
    from ..models.text_encoder import TextEncoder
    from .streaming import check_finite

    config = config_from(EmbedConfig, "embed", settings)
    config.check()
    model = embedding_model(model)
    frame, texts = read_texts(data, text_col)
    encoder = TextEncoder(model, pooler, **config.encoder_options(), trust_remote_code=trust_remote_code)
    vectors = encoder.encode(texts, batch_size=config.batch_size, progress=progress).numpy()
    check_finite(vectors, 0, config.allow_nonfinite)
    return frame, vectors, encoder.pooler.get_config()


