"""The cross-validation protocol of ``poolkit train`` (and of compare's fine-tuning): which rows each fold fits on,
chooses its checkpoint on and is scored on, what identifies a run for ``--resume``, and a run's leaderboard row.

Cross-validation without leakage: each fold's test rows (``fold_splits``; with ``folds=1``, ``val_fraction`` of
all rows) are scored once, after training, by the fold's best checkpoint. The checkpoint and early stopping are
chosen on an inner validation split of the fold's *training* rows (``split_rows``: ``val_fraction`` of them,
stratified, seed ``seed + fold``, the same inner split as ``compare``'s probing); the rest are the rows it is fit
on. So no choice made during training sees the rows a fold is scored on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..data import TableData, fold_splits
from ..data.tables import split_rows
from ..errors import PoolkitError
from .config import TrainConfig
from .leaderboard import leaderboard_row

#: 2: checkpoints chosen on an inner split of each fold's training rows (1, unrecorded: on the scored rows)
CV_PROTOCOL = 2


def cv_splits(data: TableData, folds: int, val_fraction: float, seed: int
              ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(fit, validation, test) rows per fold: ``fold_splits``' test rows, and its training rows split (stratified,
    seed ``seed + fold``) into the rows fit on and the rows that choose the checkpoint."""
    splits = []
    for k, (train, test) in enumerate(fold_splits(data, folds, val_fraction, seed)):
        fit_rows, val_rows = split_rows(data.subset(train), val_fraction, seed + k)
        splits.append((train[fit_rows], train[val_rows], test))
    return splits


def fold_detail(fold: dict[str, Any], metric: str) -> dict[str, Any]:
    """How a fold chose its model, under probing's names (leaderboard ``fold_detail``): best_epoch, epochs_run, the
    inner validation metric at the best epoch and the test metric."""
    return {key: fold[key] for key in ("best_epoch", "epochs_run", f"val_{metric}", f"test_{metric}")}


def finetuned_row(label: str, spec: dict[str, Any], metrics: dict[str, Any], seconds: float,
                  flat: bool = False) -> dict[str, Any]:
    """The leaderboard row of a fine-tuning run (``metrics``: its metrics.json): test metrics per fold, the
    parameters it trained, how each fold chose its checkpoint (``flat``: see :func:`leaderboard_row`)."""
    name = metrics["primary_metric"]
    return leaderboard_row(label, spec, "finetuned", name, [f["metrics"] for f in metrics["folds"]],
                           metrics["trainable_params"], seconds, [fold_detail(f, name) for f in metrics["folds"]],
                           flat=flat)


def data_sha1(data: TableData) -> str:
    """SHA-1 of a table's task, labels, target columns, texts and targets: recorded by every run (``data_sha1``)."""
    digest = hashlib.sha1(json.dumps([data.task, data.label_names, list(data.target_cols)]).encode())
    for text in data.texts:
        digest.update(text.encode() + b"\0")
    digest.update(np.ascontiguousarray(data.targets).tobytes())
    return digest.hexdigest()


def fingerprint(config: TrainConfig, data: TableData) -> dict[str, Any]:
    """The protocol, the settings and a hash of the data: a resumed run must match all three."""
    return {"cv_protocol": CV_PROTOCOL, "config": config.to_dict(), "data_sha1": data_sha1(data)}


def check_same(saved: dict[str, Any], current: dict[str, Any], where: Path) -> None:
    """Refuse to resume a run made under another protocol, with other settings or other data."""
    if saved.get("cv_protocol") != current["cv_protocol"]:
        raise PoolkitError(f"cannot resume {where}: an earlier poolkit trained it, choosing checkpoints on the rows "
                           "it scored; `force=True` to start over without that leakage")
    if saved["data_sha1"] != current["data_sha1"]:
        raise PoolkitError(f"cannot resume {where}: it was trained on different data; "
                           "use the same table, or `force=True` to start over")
    defaults = TrainConfig().to_dict()  # a setting added since the saved run was made had its default then
    changed = [f"--{k.replace('_', '-')} {saved['config'].get(k, defaults.get(k))!r} -> {v!r}"
               for k, v in current["config"].items() if saved["config"].get(k, defaults.get(k)) != v]
    if changed:
        raise PoolkitError(f"cannot resume {where}: settings differ ({'; '.join(changed)}); "
                           "resume with the same options, or `force=True` to start over")
