"""``compare --export DIR``: the winner, ready to use. The best learned row of the board (frozen or fine-tuned, by the
metric; never the scikit-learn baseline; or the row named by ``export_pooler``, of ``export_mode``) is trained again
on every row of the table (every query or pair of an embedding task) for the median of the epochs its folds chose
(AutoGluon's ``refit_full``: the cross-validation chose the epoch count, so no row need be held out):

- a frozen row on the cached states (an embedding row whose folds chose the untrained pooler, or a zero-shot row, is
  exported as it starts), written as a model folder: the frozen encoder's files, the pooler (and head) trained, the
  tokenizer, and ``poolkit_train.json``;
- a fine-tuned row by ``poolkit train``'s loop on every row (:func:`poolkit.training.finetune.fit`'s
  ``refit_epochs``: the same settings and learning-rate schedule as its folds, stopped at their median epoch), the
  encoder trained with it;

so that ``poolkit predict``, ``explain``, ``embed``, ``evaluate``, :class:`~poolkit.models.TextEncoder` and
:meth:`~poolkit.models.PooledModel.from_pretrained` load it as they load one fold of ``poolkit train``.

``export_format="sentence-transformers"`` writes instead a folder that ``SentenceTransformer(DIR)`` loads and that
gives the refit pooler's vectors (the head, which sentence-transformers has no place for, is left out): its own
``Pooling`` module for the poolings it has (mean, cls, max, ...: no poolkit needed to load it), else poolkit's
:class:`~poolkit.models.st_pooling.PoolkitPooling` with the trained weights, which sentence-transformers loads only
with ``trust_remote_code=True`` (it imports a module class from outside its own package).

Either folder records (``poolkit_export.json``) the CV figure its row was chosen by, the epochs, and ``parity``: the
largest difference between the refit model and the written folder run from the texts, on a few rows (a frozen row:
the refit on the cached float16 states; a fine-tuned row in the sentence-transformers format: the refit PooledModel;
a fine-tuned row in the poolkit format is the refit model's own folder, and records none).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import PoolkitError
from ..io import atomic_write_content, build_dir
from ..io.runs import TRAIN_META, check_writable
from .leaderboard import BASELINE_LABELS, best_row, learned_rows

#: what an exported folder's EXPORT_META says made it (``--force`` replaces only such a folder)
EXPORTED_FROM = "poolkit compare --export"
EXPORT_META = "poolkit_export.json"
EXPORT_FORMATS = ("poolkit", "sentence-transformers")
#: the rows ``export_mode`` chooses among (None: either)
EXPORT_MODES = ("frozen", "finetuned")
#: the texts ``parity`` is measured on
PARITY_ROWS = 16
#: a fine-tuned row's refit run, inside the staging folder while it is written
REFIT_DIR = "refit"


def check_export(out: str | Path | None, force: bool, pooler: str | None = None,
                 specs: list[dict[str, Any]] | None = None, export_format: str = "poolkit",
                 projection: bool = False, mode: str | None = None, finetune_top: int = 0) -> None:
    """Refuse, before any work, an export folder that exists (without ``force``, or that compare did not write),
    an ``export_pooler`` that names none of the poolers compared, an unknown ``export_format`` or ``export_mode``
    (``finetuned`` without ``finetune_top``), and a projection (embedding rows trained with ``projection``) in the
    poolkit format, which has no place for it."""
    if export_format not in EXPORT_FORMATS:
        raise PoolkitError(f"`export_format` must be one of {', '.join(EXPORT_FORMATS)}, got {export_format!r}")
    if mode not in (None, *EXPORT_MODES):
        raise PoolkitError(f"`export_mode` must be one of {', '.join(EXPORT_MODES)} (or left out: either, by the "
                           f"metric), got {mode!r}")
    if mode == "finetuned" and finetune_top < 1:
        raise PoolkitError("`export_mode` finetuned needs fine-tuned rows: pass `finetune_top` 1 or more")
    if out is None:
        if pooler is not None or export_format != "poolkit" or mode is not None:
            raise PoolkitError("`export_pooler`, `export_mode` and `export_format` need `export`: the folder to "
                               "write the refit model to")
        return
    if export_format == "sentence-transformers":
        from ..extras import require

        require("st", "sentence_transformers")
    if projection and export_format == "poolkit":
        raise PoolkitError("rows trained with `projection` keep a Linear after the pooler that a poolkit model "
                           "folder has no place for: pass `export_format` sentence-transformers (its Dense module "
                           "holds it)")
    if pooler is not None and specs is not None and (
            pooler in BASELINE_LABELS.values() or re.split(r"[(+]", pooler)[0] not in {s["name"] for s in specs}):
        raise PoolkitError(f"`export_pooler` {pooler!r} is none of the poolers compared: use one of "
                           f"{', '.join(s['name'] for s in specs)} (labelled as the board labels it)")
    # the exact label is checked once the layer poolers' token poolers are settled (check_export_pooler)
    out = Path(out)
    check_writable(out.parent if not out.exists() else out, "`export`")
    if out.exists() or out.is_symlink():
        if not force:
            raise PoolkitError(f"`export` {out} already exists: pass `force=True` to replace it, or choose another "
                               "folder")
        meta = out / EXPORT_META
        try:
            made_here = out.is_dir() and not out.is_symlink() and \
                json.loads(meta.read_text()).get("exported_from") == EXPORTED_FROM
        except (OSError, ValueError):
            made_here = False
        if not made_here:
            raise PoolkitError(f"`export` {out} is not a folder written by compare's export, so poolkit does not "
                               "replace it: choose another folder")


def check_export_pooler(pooler: str, specs: list[dict[str, Any]], projection: bool) -> None:
    """Refuse an ``export_pooler`` that is no label the board will have (``projection``: embedding rows trained
    with one, labelled ``+projection``)."""
    from .probing import spec_label

    labels = [spec_label(spec) for spec in specs]
    labels += [f"{label}+projection" for label in labels] if projection else []
    if pooler not in labels:
        raise PoolkitError(f"`export_pooler` {pooler!r} is no row label of this board: use one of {', '.join(labels)}")


def exported_row(rows: list[dict[str, Any]], higher_is_better: bool, pooler: str | None = None,
                 mode: str | None = None) -> dict[str, Any]:
    """The row to export: the best row with a trained pooler or head (the baseline never; ``mode``: of that mode
    only, else of either), or the best such row labelled ``pooler``."""
    learned = learned_rows(rows, mode)
    which = f"{mode} pooler row" if mode else "pooler row"
    if pooler is not None:
        found = [row for row in learned if row["pooler"] == pooler]
        if not found:
            raise PoolkitError(f"`export_pooler` {pooler!r} is no {which} of this board: use one of "
                               f"{', '.join(dict.fromkeys(row['pooler'] for row in learned))}")
        learned = found
    if not learned:
        raise PoolkitError(f"the board has no {which} to export (only the baseline): compare some poolers")
    return best_row(learned, higher_is_better)


def median_epochs(row: dict[str, Any]) -> float:
    """The median over the row's folds of the epoch each chose (an embedding row's 0: the untrained pooler): whole
    epochs for a frozen row, as its folds' are; a fine-tuned row's may be a fraction (``eval_every``)."""
    median = float(np.median([d["best_epoch"] for d in row["fold_detail"]]))
    return median if row["mode"] == "finetuned" else int(round(median))


def export_winner(run: Any, out: str | Path, pooler: str | None = None, export_format: str = "poolkit",
                  mode: str | None = None) -> dict[str, Any]:
    """Refit the row :func:`exported_row` picks on every row of ``run`` (a compare ``Comparison``) and write the
    model folder ``out`` in ``export_format`` (replacing it only when :func:`check_export` allowed it) -> what the
    folder records."""
    from ..models.encoders import resolve_model

    config, table = run.config, run.table
    row = exported_row(run.rows, run.metric.higher_is_better, pooler, mode)
    model_path = resolve_model(config.model)
    texts = list(table.texts[:PARITY_ROWS])
    info = {"exported_from": EXPORTED_FROM, "format": export_format, "task": table.task, "mode": row["mode"],
            "label_names": table.label_names, "target_cols": list(table.target_cols), "text_col": table.text_col,
            "n_folds": 1, "pooler_label": row["pooler"], "epochs": median_epochs(row),
            "rows": len(table.data) if run.pairs else len(table), "base_model": model_path,
            "cv": {"metric": row["metric"], "mean": row["mean"], "std": row["std"], "folds": row["folds"],
                   "p_vs_best": row.get("p_vs_best")}}
    write = (_refit_finetuned if row["mode"] == "finetuned" else _refit_frozen)(run, row, info, model_path, texts)
    return build_dir(Path(out), write)


def _refit_frozen(run: Any, row: dict[str, Any], info: dict[str, Any], model_path: str,
                  texts: list[str]) -> Callable[[Path], dict[str, Any]]:
    """A frozen row refit on the cached states (``info`` completed) -> what writes its folder into a staging
    folder."""
    from .contrastive import EmbeddingModel, refit_pairs
    from .probing import cached_outputs, refit_head

    config, table, cache, epochs = run.config, run.table, run.features, info["epochs"]
    st = info["format"] == "sentence-transformers"
    if run.pairs:  # the pooler (and its projection) is the model: its vectors are the outputs
        fitted = refit_pairs(row["config"], cache, table, run.probe, epochs, config.seed, learned=row["params"] > 0,
                             projection=row["pooler"].endswith("+projection"))
        measured = fitted
    else:
        fitted = refit_head(row["config"], cache, table, run.probe, epochs, config.seed)
        measured = fitted.model if not st else EmbeddingModel(fitted.model.pooler, False)
    expected = cached_outputs(measured, cache, np.arange(len(texts)), len(texts)).numpy()
    expected = expected if st or run.pairs else fitted.outputs(expected)
    info.update(_target_stats(fitted, table))
    info["config"] = {"model": model_path, "pooler": row["config"], "max_length": config.max_length,
                      "epochs": epochs, "batch_size": run.probe.batch_size, "pooler_lr": run.probe.pooler_lr,
                      "weight_decay": run.probe.weight_decay, "head_dropout": run.probe.head_dropout,
                      "seed": config.seed, "train_only": "head"}

    def write(staging: Path) -> dict[str, Any]:
        if st:
            got = _write_sentence_transformers(staging, row["config"], fitted.pooler if run.pairs else
                                               fitted.model.pooler, fitted.projection if run.pairs else None,
                                               model_path, config.max_length, texts)
        else:
            got = _write_pooled_model(staging, row, fitted, table, run, model_path, texts)
        info["parity_max_abs_diff"] = float(np.abs(got - expected).max())
        atomic_write_content(staging / EXPORT_META, json.dumps(info, indent=2) + "\n")
        if not st:  # what predict / explain read of a fold folder
            atomic_write_content(staging / TRAIN_META, json.dumps(info, indent=2) + "\n")
        return info

    return write


def _refit_finetuned(run: Any, row: dict[str, Any], info: dict[str, Any], model_path: str,
                     texts: list[str]) -> Callable[[Path], dict[str, Any]]:
    """A fine-tuned row refit by train's loop on every row, with its folds' settings, for the median epoch they
    chose (``info`` completed) -> what writes its folder into a staging folder."""
    from ..models.encoders import remote_code
    from .finetune import fit
    from .finetune_pairs import fit_pairs

    config = run.config
    trained = config.finetuning(row["config"], run.probe.val_fraction)
    info["config"] = trained.to_dict()

    def write(staging: Path) -> dict[str, Any]:
        refit = staging / REFIT_DIR
        with remote_code(config.trust_remote_code):
            meta = (fit_pairs if run.pairs else fit)(trained, run.table, refit, progress=run.progress,
                                                     refit_epochs=info["epochs"])
        info.update({"steps": meta["steps"], **{k: meta[k] for k in ("target_mean", "target_std") if k in meta}})
        fold = refit / "fold_0"
        if info["format"] == "sentence-transformers":
            info["parity_max_abs_diff"] = _finetuned_sentence_transformers(staging, row["config"], fold,
                                                                           config.max_length, texts)
        else:  # the refit fold is the model folder: nothing to compare it with
            for entry in fold.iterdir():
                os.rename(entry, staging / entry.name)
            info["parity_max_abs_diff"] = None
            atomic_write_content(staging / TRAIN_META, json.dumps({**meta, **info}, indent=2) + "\n")
        os.rename(refit / "train.log", staging / "train.log")
        shutil.rmtree(refit)
        atomic_write_content(staging / EXPORT_META, json.dumps(info, indent=2) + "\n")
        return info

    return write


def _finetuned_sentence_transformers(staging: Path, spec: dict[str, Any], fold: Path, max_length: int,
                                     texts: list[str]) -> float:
    """A refit fine-tuned fold (a PooledModel folder) as a sentence-transformers folder in ``staging`` -> the largest
    difference between its vectors of ``texts`` and the PooledModel's."""
    from ..models import PooledModel
    from ..models.encoders import load_tokenizer

    model = PooledModel.from_pretrained(fold).eval()
    tokenizer = load_tokenizer(str(fold))
    encoder = fold / "encoder"  # the trained encoder as a Hugging Face folder, for sentence-transformers' Transformer
    model.encoder.save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        expected = model.pool(**batch)[0].float().numpy()
    got = _write_sentence_transformers(staging, spec, model.pooler, None, str(encoder), max_length, texts)
    return float(np.abs(got - expected).max())


def _target_units(fitted: Any, n_outputs: int) -> tuple[np.ndarray, np.ndarray]:
    """A regression refit's (mean, std) per target: its head answers standardised (raw 0 -> mean, 1 -> mean + std)."""
    mean = fitted.outputs(np.zeros((1, n_outputs)))[0]
    return mean, fitted.outputs(np.ones((1, n_outputs)))[0] - mean


def _target_stats(fitted: Any, table: Any) -> dict[str, list[float]]:
    """A regression refit's target_mean / target_std, what train's fold folders record."""
    if table.task != "regression":
        return {}
    mean, std = _target_units(fitted, table.n_outputs)
    return {"target_mean": mean.tolist(), "target_std": std.tolist()}


def _write_pooled_model(staging: Path, row: dict[str, Any], fitted: Any, table: Any, run: Any, model_path: str,
                        texts: list[str]) -> np.ndarray:
    """The refit pooler (+ head) on the frozen encoder as a PooledModel folder -> its outputs on ``texts`` (an
    embedding task's: its vectors)."""
    from ..models import PooledModel
    from ..models.encoders import load_tokenizer

    config = run.config
    model = PooledModel.from_encoder(model_path, pooler=row["config"], task=table.task,
                                     num_labels=max(table.n_outputs, 1), label_names=table.label_names,
                                     head_dropout=run.probe.head_dropout, trust_remote_code=config.trust_remote_code)
    model.pooler.load_state_dict(fitted.pooler.state_dict() if run.pairs else fitted.model.pooler.state_dict())
    if not run.pairs:
        model.head.load_state_dict(fitted.model.head.state_dict())
    if table.task == "regression":  # the refit head answers in standardised units: fold them in
        mean, std = _target_units(fitted, table.n_outputs)
        model.load_state_dict(model.state_dict_with_affine_head(torch.from_numpy(std).float(),
                                                                torch.from_numpy(mean).float()))
    model.eval().save_pretrained(staging)
    tokenizer = load_tokenizer(model_path, config.trust_remote_code)
    tokenizer.save_pretrained(staging)
    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, truncation=True, max_length=config.max_length, return_tensors="pt")
        return (model.pool(**batch)[0] if run.pairs else model(**batch).logits).float().numpy()


def _write_sentence_transformers(staging: Path, spec: dict[str, Any], pooler: Any, projection: Any,
                                 encoder_path: str, max_length: int, texts: list[str]) -> np.ndarray:
    """The encoder at ``encoder_path`` and ``pooler`` (of ``spec``; and an embedding row's ``projection``, as a Dense
    module) as a sentence-transformers folder -> its vectors of ``texts``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Transformer

    from ..models.st_pooling import PoolkitPooling

    word = Transformer(encoder_path, max_seq_length=max_length,
                       config_kwargs={"output_hidden_states": True} if pooler.kind == "layer" else None)
    pool = PoolkitPooling.for_transformer(word, spec)
    if isinstance(pool, PoolkitPooling):
        pool.module.load_state_dict(pooler.state_dict())
    modules = [word, pool]
    if projection is not None:
        dense = Dense(projection.in_features, projection.out_features, activation_function=torch.nn.Identity())
        dense.linear.load_state_dict(projection.state_dict())
        modules.append(dense)
    model = SentenceTransformer(modules=modules, device="cpu")
    model.save(str(staging))
    return model.encode(texts, convert_to_numpy=True, batch_size=len(texts))
