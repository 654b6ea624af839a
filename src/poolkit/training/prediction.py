"""Predictions of a trained run: every fold model's head outputs on new texts, averaged (``poolkit predict``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ..progress import progress as progress_bar

from ..data.batching import sorted_token_batches
from ..errors import PoolkitError
from ..io.runs import TRAIN_META, fold_models
from ..models import PooledModel
from ..models.encoders import AUTOCAST, appends_eos, check_max_length, hf_bars_off, load_tokenizer, resolve_precision
from ..models.heads import head_scores
from ..tasks import EMBEDDING_TASKS
from ..wording import counted
from .processes import accelerate_state


def model_outputs(model: PooledModel, tokenizer, texts: list[str], max_length: int, batch_size: int = 64,
                  desc: str = "", progress: bool = False) -> np.ndarray:
    """A model's raw head outputs float32 (N, C) for ``texts``, in their order: on accelerate's device, in eval mode,
    under the device's automatic precision, batched as ``TextEncoder.encode`` is (length-sorted, padded per batch;
    the EOS appended where TextEncoder appends it)."""
    device = accelerate_state().device
    precision = resolve_precision("auto", device)
    model.to(device).eval()
    sampler, batches = sorted_token_batches(tokenizer, list(texts), max_length, batch_size, device,
                                            append_eos=appends_eos(model.pooler, tokenizer))
    chunks = []
    with torch.inference_mode(), torch.autocast(device.type, dtype=AUTOCAST.get(precision), enabled=precision != "no"):
        for _, batch in progress_bar(batches, total=len(sampler), desc=desc, disable=not progress, leave=False):
            chunks.append(model(**batch).logits.float().cpu())
    return sampler.restore(torch.cat(chunks)).numpy()


def predict_outputs(model_dir: str | Path, texts: list[str], batch_size: int = 64, max_length: int | None = None,
                    progress: bool = True, allow_incomplete: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """Outputs (N, C) of every fold model in ``model_dir`` (or of the one ``fold_K`` folder given), averaged: class /
    label probabilities, or regression values; plus info {task, label_names, target_cols, n_models}. Rows keep the
    order of ``texts``. Batched as ``TextEncoder.encode`` is (tokenised once, length-sorted, padded per batch).
    ``allow_incomplete``: average the finished folds of an unfinished run (else refused)."""
    folds = fold_models(model_dir, allow_incomplete)
    if not texts:
        raise PoolkitError("nothing to predict: no texts given")
    total, first = 0.0, None
    for fold in folds:
        meta = head_meta(fold)
        outputs = fold_outputs(fold, meta, texts, batch_size, max_length, progress)  # loading checks the folder
        labels = (meta["task"], meta["label_names"], meta["target_cols"])
        first = first or (fold, labels)
        if labels != first[1]:
            raise PoolkitError(f"{fold} and {first[0]} name different outputs in their {TRAIN_META} (task, label "
                               "names, target columns): averaging them would mislabel them; pass one fold, or "
                               "restore the files")
        total = total + head_scores(meta["task"], outputs)
    info = {"task": meta["task"], "label_names": meta["label_names"], "target_cols": meta["target_cols"],
            "n_models": len(folds)}
    return total / len(folds), info


def head_meta(fold: Path) -> dict[str, Any]:
    """A fold model's training record (task, label_names, target_cols, config), refused in one line when the model
    has no head (a retrieval / similarity model)."""
    meta = json.loads((fold / TRAIN_META).read_text())
    if meta.get("task") in EMBEDDING_TASKS:
        raise PoolkitError(f"{fold} is a {meta['task']} model: it gives embeddings, not predictions (use "
                           "`embed`, or `evaluate` on a table of pairs)")
    return meta


def fold_outputs(fold: Path, meta: dict[str, Any], texts: list[str], batch_size: int = 64,
                 max_length: int | None = None, progress: bool = False) -> np.ndarray:
    """One fold model's raw head outputs (N, C) on ``texts`` (at ``max_length``, default the one it was trained
    with); NaN or inf outputs are refused in one line, naming the rows."""
    with hf_bars_off():
        model = PooledModel.from_pretrained(fold)
    length = check_max_length(max_length, model.config.encoder) or meta["config"]["max_length"]
    outputs = model_outputs(model, load_tokenizer(str(fold)), texts, length, batch_size, f"predict {fold.name}",
                            progress)
    names = meta["label_names"] if meta["task"] != "regression" else meta["target_cols"]
    if names is None or len(names) != outputs.shape[1]:
        raise PoolkitError(f"{fold}/{TRAIN_META} names {counted(len(names or []), 'output')} but the model's head "
                           f"has {outputs.shape[1]}: the file does not belong to these weights (edited?); restore it")
    bad = ~np.isfinite(outputs).all(axis=1)
    if bad.any():
        rows = ", ".join(str(r + 1) for r in np.flatnonzero(bad)[:5])
        raise PoolkitError(f"{fold} gives NaN or inf outputs for {int(bad.sum())} of {len(texts)} texts (rows "
                           f"{rows}; row 1 = first): its weights are not usable (a merge with too large an "
                           "alpha?), so nothing is predicted")
    return outputs
