"""Encoder + poolkit pooler + head as one Hugging Face ``PreTrainedModel`` (for the embedding tasks, retrieval and
similarity: encoder + pooler, no head).

``PooledModel.from_encoder("path/or/name", pooler="attention", task="classification", num_labels=5)``
wraps any ``AutoModel`` encoder (``pooler="auto"``: a sentence-transformers folder's own pooling, with the Dense
layers and Normalize it declares after it, so ``pooled`` is that folder's embedding); ``save_pretrained`` /
``from_pretrained`` round-trip it (safetensors), and given ``labels`` it returns the loss, so the Hugging Face
``Trainer`` works unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from ..errors import PoolkitError
from ..pooling import build_pooler, pooler_spec
from ..tasks import EMBEDDING_TASKS, HEAD_TASKS
from .declared import AUTO, AfterPooling, read_declared
from .encoders import check_model_folder, complete_encoder, whole_model

TASKS = HEAD_TASKS + EMBEDDING_TASKS


class PooledConfig(PretrainedConfig):
    """Configuration of a :class:`PooledModel`: the encoder's config, the pooler's spec (its ``get_config()``:
    name, hidden_size and every option), the modules after the pooler (``after``: a sentence-transformers folder's
    Dense layers and Normalize, as :meth:`poolkit.models.declared.AfterPooling.get_config` records them; None for
    none), the head."""

    model_type = "poolkit"
    sub_configs = {"encoder": AutoConfig}

    def __init__(self, encoder: PretrainedConfig | dict[str, Any] | None = None,
                 pooler: str | dict[str, Any] = "mean", task: str = "regression",
                 head_dropout: float = 0.1, after: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if isinstance(encoder, dict):
            encoder = dict(encoder)
            encoder = AutoConfig.for_model(encoder.pop("model_type"), **encoder)
        if task not in TASKS:
            raise PoolkitError(f"task must be one of {TASKS}, got {task!r}")
        if "pooling" in kwargs:  # a model saved by poolkit 0.1: its pooler as a name plus options
            pooler = {"name": kwargs.pop("pooling"), **(kwargs.pop("pooling_options", None) or {})}
        super().__init__(**kwargs)
        # Set after the base init, which would otherwise reset the encoder's attention implementation.
        self.encoder = encoder
        self.pooler = pooler_spec(pooler)
        self.task = task
        self.head_dropout = head_dropout
        self.after = after

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        if isinstance(self.encoder, PretrainedConfig):
            output["encoder"] = self.encoder.to_dict()
        return output


@dataclass
class PooledModelOutput(ModelOutput):
    """loss (given labels), logits (B, num_labels), pooled (B, pooler.output_dim), weights (if asked)."""

    loss: Tensor | None = None
    logits: Tensor | None = None
    pooled: Tensor | None = None
    weights: Any = None


class PooledModel(PreTrainedModel):
    """Any Hugging Face encoder + a poolkit pooler + a regression / classification / multi-label head (none for the
    embedding tasks: ``pooled`` is the output).

    The encoder is asked for all hidden states only when the pooler pools over layers.
    """

    config_class = PooledConfig
    base_model_prefix = "poolkit"
    main_input_name = "input_ids"
    # Attention runs inside the encoder: let it keep the implementation it supports (sdpa, flash, ...).
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def __init__(self, config: PooledConfig, encoder: PreTrainedModel | None = None,
                 after: AfterPooling | None = None) -> None:
        """``encoder`` / ``after``: built ones (with their weights) to use instead of fresh ones from the config."""
        super().__init__(config)
        if config.encoder is None:
            raise PoolkitError("PooledConfig needs the encoder's config: use PooledModel.from_encoder(path)")
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config.encoder)
        self.pooler = build_pooler(config.pooler, config.encoder.hidden_size, config.encoder.num_hidden_layers)
        config.pooler = self.pooler.get_config()  # the complete spec (every option) is what gets saved
        self.after = after if after is not None or config.after is None else AfterPooling(
            config.after.get("dense", ()), config.after.get("normalize", False), self.pooler.output_dim)
        self.dropout = nn.Dropout(config.head_dropout)
        self.head = nn.Linear(self.output_dim, config.num_labels) if config.task in HEAD_TASKS else None
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is initialised (or loaded) by itself and poolers initialise themselves: only the head here.
        if module is getattr(self, "head", None):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, *, pooler: str | dict[str, Any] = "mean",
                     task: str = "regression",
                     num_labels: int = 1, label_names: list[str] | None = None, head_dropout: float = 0.1,
                     trust_remote_code: bool | None = None, **encoder_kwargs: Any) -> PooledModel:
        """A new model on a pretrained encoder (local folder or hub name); the pooler (a name or a spec dict,
        e.g. ``{"name": "attention", "attn_size": 256}``) and the head start fresh. ``pooler="auto"``: the pooling
        a sentence-transformers folder declares (its ``modules.json``), followed by its Dense layers (with their
        saved weights) and Normalize; the head, if any, reads that vector. A folder with code of its own
        (``auto_map``) is refused unless ``trust_remote_code`` (default: off, see ``encoders.remote_code``)."""
        declared = None
        if pooler == AUTO:
            declared = read_declared(encoder_name_or_path) if Path(encoder_name_or_path).is_dir() else None
            if declared is None:
                raise PoolkitError(f"pooler 'auto' uses the pooling a sentence-transformers folder declares, and "
                                   f"{encoder_name_or_path} has no modules.json: pass a pooler (e.g. 'mean')")
            pooler, encoder_name_or_path = declared.pooler_spec, str(declared.encoder)
        trust = check_model_folder(encoder_name_or_path, trust_remote_code)
        encoder = complete_encoder(AutoModel, encoder_name_or_path, trust, **encoder_kwargs)
        after = None
        if declared is not None:
            # each declared mode gives one hidden_size-wide vector, concatenated
            after = AfterPooling.from_declared(declared, len(declared.modes) * encoder.config.hidden_size)
        extra = {}
        if label_names is not None:
            extra["id2label"] = dict(enumerate(label_names))
        config = PooledConfig(encoder=encoder.config, pooler=pooler, task=task, num_labels=num_labels,
                              head_dropout=head_dropout, after=None if after is None else after.get_config(), **extra)
        return cls(config, encoder=encoder, after=after)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, trust_remote_code: bool | None = None,
                        **kwargs: Any) -> PooledModel:
        """A saved PooledModel; a folder with code of its own (``auto_map``) is refused unless ``trust_remote_code``."""
        trust = check_model_folder(pretrained_model_name_or_path, trust_remote_code)
        load = super().from_pretrained
        return whole_model(lambda **info: load(pretrained_model_name_or_path, *args, trust_remote_code=trust,
                                               **kwargs, **info), pretrained_model_name_or_path, "the model's")

    @property
    def output_dim(self) -> int:
        """Length of ``pooled``: the pooler's, or that of the modules after it."""
        return self.pooler.output_dim if self.after is None else self.after.output_dim

    @property
    def needs_hidden_states(self) -> bool:
        return self.pooler.kind == "layer"

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, labels: Tensor | None = None,
                return_weights: bool | str = False, **encoder_kwargs: Any) -> PooledModelOutput:
        pooled, weights = self.pool(input_ids, attention_mask, token_type_ids, return_weights=return_weights,
                                    **encoder_kwargs)
        if self.head is None:  # an embedding model: the pooled vector is the output
            return PooledModelOutput(pooled=pooled, weights=weights)
        logits = self.head(self.dropout(pooled.to(self.head.weight.dtype)))
        loss = self.loss(logits, labels) if labels is not None else None
        return PooledModelOutput(loss=loss, logits=logits, pooled=pooled, weights=weights)

    def pool(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
             token_type_ids: Tensor | None = None, return_weights: bool | str = False,
             **encoder_kwargs: Any) -> tuple[Tensor, Any]:
        """Encoder then pooler: -> pooled (B, output_dim) and the pooler's weights (None unless asked:
        poolers skip computing weights when nobody reads them; ``"heads"``: a multi-head pooler's rows)."""
        if token_type_ids is not None:
            encoder_kwargs["token_type_ids"] = token_type_ids
        output = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              output_hidden_states=self.needs_hidden_states, return_dict=True, **encoder_kwargs)
        states = output.hidden_states if self.needs_hidden_states else output.last_hidden_state
        if return_weights:
            pooled, weights = self.pooler(states, attention_mask, return_weights=return_weights)
        else:
            pooled, weights = self.pooler(states, attention_mask), None
        return (pooled if self.after is None else self.after(pooled)), weights

    def state_dict_with_affine_head(self, scale: Tensor, shift: Tensor) -> dict[str, Tensor]:
        """This model's state dict with ``scale * logits + shift`` (per output, (num_labels,)) folded into the head's
        Linear: W' = diag(scale) W, b' = scale * b + shift. The model itself is unchanged."""
        weight, bias = self.head.weight.detach(), self.head.bias.detach()
        scale, shift = scale.to(weight), shift.to(weight)
        return {**self.state_dict(), "head.weight": weight * scale[:, None], "head.bias": bias * scale + shift}

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return task_loss(self.config.task, logits, labels)


def task_loss(task: str, logits: Tensor, labels: Tensor) -> Tensor:
    """MSE (regression), cross-entropy (classification) or BCE-with-logits (multilabel), in float32."""
    if task == "classification":
        return nn.functional.cross_entropy(logits.float(), labels.long().view(-1))
    if task == "multilabel":
        return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float().view_as(logits))
    return nn.functional.mse_loss(logits.float(), labels.float().view_as(logits))


def register_auto_classes() -> None:
    """Let ``AutoConfig`` / ``AutoModel`` load saved poolkit models by their ``model_type``."""
    try:
        AutoConfig.register(PooledConfig.model_type, PooledConfig)
        AutoModel.register(PooledConfig, PooledModel)
    except ValueError:  # already registered
        pass


register_auto_classes()
