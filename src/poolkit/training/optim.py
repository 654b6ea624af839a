"""What fine-tuning trains and how fast: freezing (``train_only``) and AdamW parameter groups with
layer-wise learning-rate decay (LLRD).

Rules, for a :class:`~poolkit.models.PooledModel` (parameter names ``encoder.*``, ``pooler.*``, ``head.*``):

* Encoder layer ``N`` is read from the parameter name: ``.layer.N.``, ``.layers.N.``, ``.h.N.`` or
  ``.block(s).N.`` (BERT, RoBERTa, MPNet, DistilBERT, GPT-2, T5, ModernBERT, ...). With ``L`` layers, layer ``N``
  gets ``lr * decay ** (L - 1 - N)`` (the top layer gets ``lr``), parameters whose name contains ``embed`` get
  ``lr * decay ** L``, and the encoder's other parameters (its own CLS pooler, a final norm) get ``lr``.
* The poolkit pooler and the head get ``pooler_lr``.
* No weight decay on 1-D parameters: biases, LayerNorm / RMSNorm weights, pooler vectors.
* ``train_only="attention"`` (Jin et al. 2024, "Fine-Tuning Attention Modules Only") trains the encoder's
  attention projections -- every ``nn.Linear`` (or GPT-2 ``Conv1D``) inside a module whose path contains
  ``attention`` or ``attn``: BERT's ``attention.self.{query,key,value}`` and ``attention.output.dense`` -- plus
  the pooler and the head. Norms inside attention blocks (BERT's ``attention.output.LayerNorm``) stay frozen:
  they are not projections. ``train_only="head"`` freezes the whole encoder.
* ``train_head=False`` freezes the poolkit pooler and the head too (the second stage of a frozen-head run:
  ``TrainConfig.frozen_head``).
"""

from __future__ import annotations

import re

from torch import nn
from transformers.pytorch_utils import Conv1D

from ..errors import PoolkitError
from .config import TRAIN_ONLY

_LAYER = re.compile(r"\.(?:layer|layers|h|block|blocks)\.(\d+)\.")
_ATTENTION = re.compile(r"attention|attn", re.IGNORECASE)


def layer_index(name: str) -> int | None:
    """The transformer layer a parameter belongs to, from its name; None outside the layer stack."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


def attention_parameters(encoder: nn.Module) -> set[str]:
    """Names (relative to ``encoder``) of the attention projections' weights and biases."""
    return {f"{module_name}.{param_name}"
            for module_name, module in encoder.named_modules()
            if isinstance(module, (nn.Linear, Conv1D)) and _ATTENTION.search(module_name)
            for param_name, _ in module.named_parameters(recurse=False)}


def freeze(model: nn.Module, train_only: str = "all", train_head: bool = True) -> tuple[int, int]:
    """Set ``requires_grad`` by ``train_only`` (all | attention | head) and ``train_head`` (the pooler and the head);
    returns (trainable, total) parameter counts."""
    if train_only not in TRAIN_ONLY:
        raise PoolkitError(f"unknown `train_only` {train_only!r}: use one of {', '.join(TRAIN_ONLY)}")
    keep = set()
    if train_only == "attention":
        keep = attention_parameters(model.encoder)
        if not keep:
            raise PoolkitError("`train_only` attention found no attention projections in this encoder "
                               "(no Linear layer under a module named *attention* / *attn*): use all or head")
    for name, param in model.encoder.named_parameters():
        param.requires_grad_(train_only == "all" or name in keep)
    for module in (model.pooler, model.head):
        if module is not None:  # an embedding model has no head
            module.requires_grad_(train_head)
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def param_groups(model: nn.Module, lr: float, pooler_lr: float, layer_decay: float = 1.0,
                 weight_decay: float = 0.0) -> list[dict]:
    """AdamW groups of the trainable parameters by the module rules: each has params, names, lr, weight_decay."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    layers = [layer_index(n) for n, _ in named if n.startswith("encoder.")]
    depth = 1 + max((i for i in layers if i is not None), default=-1)

    def rate(name: str) -> float:
        if not name.startswith("encoder."):
            return pooler_lr
        index = layer_index(name)
        if index is not None:
            return lr * layer_decay ** (depth - 1 - index)
        return lr * layer_decay ** depth if "embed" in name else lr

    groups: dict[tuple[float, float], dict] = {}
    for name, param in named:
        key = (rate(name), 0.0 if param.ndim <= 1 else weight_decay)
        group = groups.setdefault(key, {"params": [], "names": [], "lr": key[0], "weight_decay": key[1]})
        group["params"].append(param)
        group["names"].append(name)
    return list(groups.values())
