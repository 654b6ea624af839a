"""The Python API behind the ``poolkit`` command: ``compare`` -> Leaderboard, ``train`` -> metrics, ``predict`` ->
table, ``embed`` -> (table, vectors). The CLI only parses arguments, calls these and prints.

``data`` is a CSV/TSV/JSONL/Parquet path, ``builtin:NAME`` (``poolkit data list``) or a loaded ``TableData``;
a pooler is a name or a spec ``{"name": ..., **options}`` (``poolkit.pooling.pooler_spec``).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data import TableData, decode_labels, fold_splits, load_data, stratified_sample
from ..data.texts import read_texts
from ..errors import PoolkitError, suggest
from ..io import RunFolder
from ..io.runs import check_writable
from ..models.encoders import embedding_model
from ..pooling import build_pooler, list_poolers, pooler_spec
from .leaderboard import OUTPUTS, Leaderboard, leaderboard_row, mean_std

DEFAULT_DATA = "builtin:embedded"
#: ``compare`` without data: the embedded WordNet subset, sized to fit in 10 minutes on 2 CPU cores.
QUICK_DEFAULTS = {"folds": 3, "epochs": 8}
DEFAULT_POOLERS = ("cls", "mean", "max", "mean_max", "gem", "lse", "attention", "attention_head", "gated_attention",
                   "latent", "adapool", "weighted_layer", "mean_layers", "attention_layers", "lstm_layers")
#: ``compare``'s report explains this many of fold 0's held-out texts per class (other tasks: EXPLAINED_TEXTS).
EXPLAINED_PER_CLASS = 3
EXPLAINED_TEXTS = 30


def resolve_poolers(poolers: str | Sequence[str | dict[str, Any]]) -> list[dict[str, Any]]:
    """Checked specs from a list of names and spec dicts, or a string of comma-separated names; ``"default"`` stands
    for 15 poolers, ``"all"`` for every registered one."""
    if isinstance(poolers, str):
        poolers = [name.strip() for name in poolers.split(",") if name.strip()]
    expanded: list[str | dict[str, Any]] = []
    for item in poolers:
        if item == "default":
            expanded += DEFAULT_POOLERS
        elif item == "all":
            expanded += list_poolers()
        else:
            expanded.append(item)
    if not expanded:
        raise PoolkitError("no poolers given: name some (e.g. mean,attention), or 'default' or 'all'")
    specs: list[dict[str, Any]] = []
    for spec in map(pooler_spec, expanded):  # each once (e.g. "default,mean"), in the order first given
        if spec not in specs:
            specs.append(spec)
    return specs


def load(data: str | Path | TableData, text_col: str = "text", target_col: str | Sequence[str] = "label",
         task: str | None = None, limit: int | None = None, seed: int = 0, say_task: bool = False) -> TableData:
    """A TableData from a path, ``builtin:NAME`` or a TableData; ``limit`` keeps a stratified sample.
    ``say_task``: print one line naming the task when it was inferred from a file's target column."""
    if isinstance(data, TableData):
        return data if limit is None else stratified_sample(data, limit, seed)
    targets = (target_col,) if isinstance(target_col, str) else tuple(target_col)
    table = load_data(str(data), limit=limit, seed=seed, text_col=text_col, target_cols=targets, task=task)
    if say_task and task is None and not str(data).startswith("builtin:"):
        kind = f"{len(table.label_names)} classes" if table.label_names else f"{len(targets)} numeric target(s)"
        print(f"task: {table.task}, inferred from {', '.join(map(repr, targets))} ({kind}); pass --task to choose")
    return table


def compare(data: str | Path | TableData | None = None, *, text_col: str = "text",
            target_col: str | Sequence[str] = "label", task: str | None = None, limit: int | None = None,
            poolers: str | Sequence[str | dict[str, Any]] = "default", model: str | None = None,
            folds: int | None = None, epochs: int | None = None, batch_size: int = 64, pooler_lr: float = 1e-3,
            patience: int = 3, max_length: int | None = None, seed: int = 0, cache_dir: str | Path | None = None,
            finetune_top: int = 0, finetune_epochs: int = 3, encoder_lr: float = 5e-5, out: str | Path | None = None,
            force: bool = False, cache: bool = True, trust_remote_code: bool = False, baseline: bool = True,
            progress: bool = True, cache_dtype: str = "float16", cache_max_tokens: int | None = None
            ) -> Leaderboard | None:
    """Encode ``data`` once with the frozen encoder, train every pooler + head on the cached layers with the same
    K folds, then (``finetune_top`` K > 0) fine-tune the encoder with the K best poolers.

    Without ``data``: the embedded WordNet subset, 3 folds and 8 epochs unless given (else 5 folds, 20 epochs).
    ``pooler_lr``: pooler + head learning rate (frozen rows and fine-tuning); ``encoder_lr``: the encoder's when
    fine-tuning. ``max_length``: default 256, or the model's positions when fewer. With ``out`` (locked for the
    run), leaderboard.csv / .json / .png are written there (the frozen board before fine-tuning starts) and the
    fine-tuned models under ``out/finetuned/``; without, fine-tuned models are discarded. ``cache=False``: encode
    afresh, reading and writing no feature cache. ``trust_remote_code``: allow a model folder's own code
    (``auto_map``); off, such folders are refused. ``baseline``: add the tuned linear baseline's row
    (:mod:`poolkit.training.baseline`: logistic / ridge regression on mean-pooled features, ranked with the frozen
    rows). ``cache_dtype``: the cached token states' dtype, float16 or int8 (smaller, at an accuracy cost that
    docs/scale.md measures); ``cache_max_tokens``: cache the token states of each text's first N tokens only
    (the poolers that read token states see those; docs/scale.md measures the cost); the poolers linear in the
    states read per-layer summaries of every token either way.

    Under ``torchrun`` / ``accelerate launch -m poolkit.cli compare ...`` every process encodes its share of the
    texts into the feature cache (:mod:`poolkit.training.features`); rank 0 joins them, trains the heads alone
    and returns the leaderboard; the others return None once their share is written. Fine-tuning
    (``finetune_top``) and ``cache=False`` are refused there.
    """
    from ..models.encoders import model_label, remote_code, resolve_model
    from ..provenance import run_provenance
    from . import finetune
    from .baseline import baseline_label, linear_baseline
    from .features import encode_features
    from .metrics import primary_metric
    from .probing import ProbeConfig, compare_poolers

    from .processes import process_rank

    specs = resolve_poolers(poolers)  # bad names fail before the data is read
    _check_rates(pooler_lr=pooler_lr, encoder_lr=encoder_lr)
    rank, world = process_rank()
    if world > 1 and finetune_top > 0:
        raise PoolkitError("--finetune-top cannot be used under torchrun / accelerate launch (the processes share "
                           "only the encoding): compare with several processes, then fine-tune with `poolkit train`")
    progress = progress and rank == 0
    out = out if rank == 0 else None  # the other processes only encode their share
    if out is not None:
        compare_folder(out).check(force=force)
    max_length = _fit_to_encoder(model, max_length, 256, trust_remote_code, specs)
    quick = data is None
    folds = folds or (QUICK_DEFAULTS["folds"] if quick else 5)
    epochs = epochs or (QUICK_DEFAULTS["epochs"] if quick else 20)
    table = load(DEFAULT_DATA if quick else data, text_col, target_col, task, limit, seed, say_task=progress)
    config = ProbeConfig(folds=folds, epochs=epochs, batch_size=batch_size, pooler_lr=pooler_lr, patience=patience,
                         seed=seed)
    fold_splits(table, config.folds, config.val_fraction, config.seed)  # too few rows per class: before encoding
    with ExitStack() as held:
        if out is not None:  # one run per folder: locked for the whole run
            out = held.enter_context(compare_folder(out).claim(force=force))
        metric = primary_metric(table.task, table.n_outputs)

        def say(text: str) -> None:
            if progress:
                print(text, flush=True)

        say(f"poolkit compare: {len(specs)} poolers on {table.source} ({len(table)} rows, {table.task}, {folds} folds, "
            f"up to {epochs} epochs), ranked by {metric.name}")

        start = time.perf_counter()
        features = encode_features(table.texts, model, max_length=max_length, cache_dir=cache_dir, progress=progress,
                                   cache=cache, trust_remote_code=trust_remote_code, poolers=specs,
                                   summaries=["mean"] if baseline else [],  # the baseline pools with mean
                                   token_dtype=cache_dtype, token_cap=cache_max_tokens)
        if features is None:  # not rank 0: its share of the encoding is written
            return None
        encode_seconds = time.perf_counter() - start
        # the model asked for now (a reused feature cache records the path of whichever install first wrote it)
        settings = {"data": table.source, "rows": len(table), "task": table.task, "model": resolve_model(model),
                    "model_label": model_label(model), "metric": metric.name,
                    "higher_is_better": metric.higher_is_better, "folds": folds, "probe": asdict(config),
                    "encode_seconds": round(encode_seconds, 2),
                    "cache_bytes_per_text": round(features.bytes_per_text()), "cache_dtype": cache_dtype,
                    "cache_max_tokens": cache_max_tokens,
                    "poolers": specs, "finetune_top": finetune_top,
                    **({"finetune_epochs": finetune_epochs, "encoder_lr": encoder_lr} if finetune_top > 0 else {}),
                    "provenance": run_provenance()}

        def report(result, label=None):
            summary = result.summary()
            say(f"  {label or result.label:<22} {metric.name} {mean_std(summary['mean'], summary['std'])}  "
                f"({result.seconds:.1f}s)")

        results = compare_poolers(specs, features, table, config, on_result=report)
        rows = [leaderboard_row(r.label, r.spec, "frozen", r.metric, r.fold_metrics, r.params, r.seconds,
                                r.fold_detail) for r in results]
        if baseline:
            linear = linear_baseline(features, table, config)
            report(linear, baseline_label(table.task))
            rows.append(leaderboard_row(baseline_label(table.task), linear.spec, "frozen", linear.metric,
                                        linear.fold_metrics, linear.params, linear.seconds, linear.fold_detail))

        explained = explain_best(results, features, table, model, max_length, trust_remote_code, seed)

        def publish() -> Leaderboard:
            board = Leaderboard(rows, {**settings, "total_seconds": round(time.perf_counter() - start, 2)}, explained)
            if out is not None:
                board.save(out)
            return board

        board = publish()  # on disk before any (long) fine-tuning starts
        if finetune_top > 0:
            with tempfile.TemporaryDirectory(prefix="poolkit-finetune-") as scratch:
                root = (out or Path(scratch)) / "finetuned"
                for result in results[:finetune_top]:
                    say(f"fine-tuning the encoder with {result.label} ({folds} folds, {finetune_epochs} epochs)")
                    trained = finetune.TrainConfig(model=model, pooler=result.spec, folds=folds, epochs=finetune_epochs,
                                                   encoder_lr=encoder_lr, pooler_lr=pooler_lr, max_length=max_length,
                                                   val_fraction=config.val_fraction, seed=seed)  # the probes' splits
                    started = time.perf_counter()
                    with remote_code(trust_remote_code):
                        metrics = finetune.fit(trained, table, root / result.label, force=force, progress=progress)
                    rows.append(finetune.finetuned_row(result.label, result.spec, metrics,
                                                       time.perf_counter() - started))
            board = publish()
        return board


def compare_folder(out: str | Path) -> RunFolder:
    """compare's output folder: the leaderboard files and report.html (each fine-tuned run under finetuned/ is a
    train folder of its own)."""
    return RunFolder(Path(out), OUTPUTS)


def explain_best(results: Sequence[Any], features: Any, table: TableData, model: str | None, max_length: int,
                 trust_remote_code: bool = False, seed: int = 0) -> Any:
    """The best pooler with learned weights (``results`` ranked best first) explaining, with its fold-0 model, a
    few of fold 0's held-out texts: up to :data:`EXPLAINED_PER_CLASS` per class (other tasks:
    :data:`EXPLAINED_TEXTS`), drawn with ``seed``. Their hidden states come from the feature cache ``features``
    when it keeps the token states that pooler reads; otherwise these texts alone are encoded again. An
    :class:`~poolkit.explain.Explanation`, or None when no pooler has learned weights."""
    from ..explain import Explainer
    from ..models.encoders import load_tokenizer
    from .features import encode_features

    best = next((r for r in results if r.first_fold is not None
                 and any(True for _ in r.first_fold.model.pooler.parameters())), None)
    if best is None:
        return None
    fold = best.first_fold
    rng = np.random.default_rng(seed)
    if table.task == "classification":
        rows = np.concatenate([rng.choice(found, size=min(EXPLAINED_PER_CLASS, len(found)), replace=False)
                               for c in range(len(table.label_names))
                               if len(found := fold.test_rows[table.targets[fold.test_rows] == c])])
        targets, sample = [table.label_names[table.targets[i]] for i in rows], f"up to {EXPLAINED_PER_CLASS} per class"
    else:
        rows = np.sort(rng.choice(fold.test_rows, size=min(EXPLAINED_TEXTS, len(fold.test_rows)), replace=False))
        targets = [float(table.targets[i, 0]) for i in rows] if table.task == "regression" else None
        sample = "drawn at random"
    texts = [table.texts[i] for i in rows]
    layered = fold.model.pooler.kind == "layer"
    if not features.has_token_states(all_layers=layered):
        features, rows = encode_features(texts, model, max_length, cache=False, progress=False,
                                         trust_remote_code=trust_remote_code), np.arange(len(rows))
        read = "these texts encoded again (the feature cache keeps no token states for this pooler)"
    else:
        read = "read from the feature cache (no second encoder pass)"
    source = (f"{best.label}'s fold-0 model (pooler + head trained without fold 0's held-out rows, its epoch chosen "
              f"on an inner split of its training rows) on {len(texts)} of fold 0's held-out texts, {sample}; hidden "
              f"states {read}")
    explainer = Explainer.on_cached_states(fold, lambda at: features.batch(rows[at], all_layers=layered),
                                           load_tokenizer(model, trust_remote_code), max_length,
                                           table.label_names, source, list(table.target_cols))
    return explainer.explain(texts, targets)


def _check_rates(**rates: float) -> None:
    """Learning rates must be finite and > 0 (``nan`` / ``inf`` refused)."""
    for name, value in rates.items():
        if not (math.isfinite(value) and value > 0):
            raise PoolkitError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value!r}")


def _fit_to_encoder(model: str | None, max_length: int | None, default: int, trust_remote_code: bool,
                    specs: Sequence[str | dict[str, Any]]) -> int:
    """What the encoder's config settles before any work: every pooler spec's option values (each built once for
    the encoder's sizes) and ``max_length`` against its positions; returns ``max_length`` (unset: ``default``, or
    the positions when fewer)."""
    from transformers import AutoConfig

    from ..models.encoders import check_max_length, model_positions, resolve_model

    try:
        config = AutoConfig.from_pretrained(resolve_model(model), trust_remote_code=trust_remote_code)
    except (OSError, ValueError):  # the model's own loader names the problem later
        return max_length or default
    for spec in specs:  # e.g. attn_size=-1 or a layer_start past the encoder's layers
        build_pooler(spec, config.hidden_size, getattr(config, "num_hidden_layers", None))
    positions = model_positions(config)
    return check_max_length(max_length, config) or min(default, positions or default)


def train_config(pooler: str | dict[str, Any] = "mean", model: str | None = None, **settings: Any):
    """A checked TrainConfig; unknown settings raise naming the known ones."""
    from . import finetune

    known = {f.name for f in fields(finetune.TrainConfig)}
    for key in settings:
        if key not in known:
            raise PoolkitError(f"unknown training setting {key!r}.{suggest(key, known)} "
                               f"Known: {', '.join(sorted(known))}")
    config = finetune.TrainConfig(model=model, pooler=pooler, **settings)
    config.check()
    return config


def train(data: str | Path | TableData, out: str | Path, *, pooler: str | dict[str, Any] = "mean",
          model: str | None = None, text_col: str = "text", target_col: str | Sequence[str] = "label",
          task: str | None = None, limit: int | None = None, resume: bool = False, force: bool = False,
          trust_remote_code: bool = False, progress: bool = True, **settings: Any) -> dict[str, Any]:
    """Fine-tune encoder + pooler + head, one model per fold, into ``out`` (fold_K/, oof.csv, metrics.json,
    train.log); returns metrics.json's dict. Each fold's checkpoint is chosen on an inner split of its training
    rows and its test rows are scored once (see :mod:`poolkit.training.finetune`). ``settings``: any TrainConfig
    field (folds, epochs, batch_size, encoder_lr, pooler_lr, precision, train_only, ...). ``trust_remote_code``:
    allow a model folder's own code."""
    from ..models.encoders import remote_code
    from . import finetune

    check_writable(Path(out))
    settings["max_length"] = _fit_to_encoder(model, settings.get("max_length"), finetune.TrainConfig.max_length,
                                             trust_remote_code, [pooler])
    config = train_config(pooler, model, **settings)  # fails before the data is read
    table = load(data, text_col, target_col, task, limit, config.seed, say_task=progress)
    with remote_code(trust_remote_code):
        return finetune.fit(config, table, out, resume=resume, force=force, progress=progress)


def predict(model: str | Path, data: str | Path | Sequence[str], *, text_col: str = "text", batch_size: int = 64,
            trust_remote_code: bool = False,
            max_length: int | None = None, allow_incomplete: bool = False, progress: bool = True) -> pd.DataFrame:
    """The input table plus predictions of a ``poolkit train`` folder (every fold model averaged) or of one of its
    ``fold_K`` folders: ``pred_<target>`` (regression) or ``prob_<label>`` and ``prediction`` (classification;
    multi-label: labels joined by ``|``). ``frame.attrs["n_models"]``: how many models were averaged. An unfinished
    run is refused unless ``allow_incomplete`` (then its finished folds are averaged)."""
    from ..models.encoders import remote_code
    from . import finetune

    frame, texts = read_texts(data, text_col)
    with remote_code(trust_remote_code):
        outputs, info = finetune.predict(model, texts, batch_size=batch_size, max_length=max_length, progress=progress,
                                         allow_incomplete=allow_incomplete)
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
          text_col: str = "text", normalize: bool = False, batch_size: int = 32, max_length: int | None = None,
          precision: str = "auto", allow_untrained: bool = False, trust_remote_code: bool = False,
          allow_nonfinite: bool = False, progress: bool = True) -> tuple[pd.DataFrame, np.ndarray, dict[str, Any]]:
    """(input table, (N, dim) float32 vectors, the pooler's spec). ``model``: an encoder (default: the packaged
    all-MiniLM-L6-v2) pooled with ``pooler`` (default mean), or a ``poolkit train`` model -- a ``fold_K`` folder,
    or the run folder when it holds one fold -- with its own trained pooler. Vectors holding NaN / inf are refused
    unless ``allow_nonfinite``."""
    from ..models.text_encoder import TextEncoder
    from .streaming import check_finite

    model = embedding_model(model)
    frame, texts = read_texts(data, text_col)
    encoder = TextEncoder(model, pooler, normalize=normalize, max_length=max_length, precision=precision,
                          allow_untrained=allow_untrained, trust_remote_code=trust_remote_code)
    vectors = encoder.encode(texts, batch_size=batch_size, progress=progress).numpy()
    check_finite(vectors, 0, allow_nonfinite)
    return frame, vectors, encoder.pooler.get_config()


