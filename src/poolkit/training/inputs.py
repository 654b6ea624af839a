"""What compare and train read and check before any work: the pooler specs, the table, the token limit that fits
the encoder, the learning rates."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..data import TableData, load_data, stratified_sample
from ..errors import PoolkitError
from ..pooling import build_pooler, list_poolers, pooler_spec

DEFAULT_POOLERS = ("cls", "mean", "max", "mean_max", "gem", "lse", "attention", "attention_head", "gated_attention",
                   "latent", "adapool", "weighted_layer", "mean_layers", "attention_layers", "lstm_layers")


def declared_poolers(poolers: str | Sequence[str | dict[str, Any]], model: str | None, where: str = "compare"
                     ) -> tuple[str | Sequence[str | dict[str, Any]], Any]:
    """``poolers`` with ``auto`` replaced by the registry pooler that ``model``'s folder declares
    (:func:`poolkit.models.declared.declared_pooler_spec`), and what it declares (None without ``auto``)."""
    from ..models.declared import declared_pooler_spec
    from ..models.encoders import resolve_model
    from ..models.declared import AUTO

    items = [name.strip() for name in poolers.split(",") if name.strip()] if isinstance(poolers, str) else list(poolers)
    if AUTO not in items:
        return poolers, None
    spec, declared = declared_pooler_spec(resolve_model(model), where)
    return [spec if item == AUTO else item for item in items], declared


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
         task: str | None = None, limit: int | None = None, seed: int = 0,
         report: Callable[[str], None] | None = None) -> TableData:
    """A TableData from a path, ``builtin:NAME`` or a TableData; ``limit`` keeps a stratified sample. ``report``
    (a callable taking a line) is told the task when it was inferred from a file's target column."""
    if isinstance(data, TableData):
        return data if limit is None else stratified_sample(data, limit, seed)
    targets = (target_col,) if isinstance(target_col, str) else tuple(target_col)
    table = load_data(str(data), limit=limit, seed=seed, text_col=text_col, target_cols=targets, task=task)
    if report is not None and task is None and not str(data).startswith("builtin:"):
        kind = f"{len(table.label_names)} classes" if table.label_names else f"{len(targets)} numeric target(s)"
        report(f"task: {table.task}, inferred from {', '.join(map(repr, targets))} ({kind}); pass `task` to choose")
    return table


def check_rates(**rates: float) -> None:
    """Learning rates must be finite and > 0 (``nan`` / ``inf`` refused)."""
    for name, value in rates.items():
        if not (math.isfinite(value) and value > 0):
            raise PoolkitError(f"`{name}` must be a finite number > 0, got {value!r}")


def fit_to_encoder(model: str | None, max_length: int | None, default: int, trust_remote_code: bool,
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
