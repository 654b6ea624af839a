"""Texts -> vectors: a Hugging Face encoder + a poolkit pooler, batched for throughput.

``TextEncoder(pooler="mean").encode(texts)`` embeds with the packaged all-MiniLM-L6-v2 (or any local /
hub encoder); ``TextEncoder("runs/x/fold_0")`` uses the encoder *and the trained pooler* of a model written
by ``poolkit train`` (or any saved :class:`PooledModel`). The texts are tokenised once, cut into batches of
similar token length (longest first, so each batch is padded only to its own longest text), run under
``torch.inference_mode`` with all hidden states asked for only when the pooler pools over layers, and the
rows come back in input order. Measured against sentence-transformers' ``encode`` in
``benchmarks/perf_embed.py`` (docs/performance.md, item 5).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from ..data.batching import sorted_token_batches
from ..errors import PoolkitError
from ..pooling import Pooler, build_pooler, pooler_spec
from .encoders import (AUTOCAST, check_max_length, check_model_folder, hf_bars_off, load_encoder, load_tokenizer,
                       resolve_model, resolve_precision)
from .pooled_model import PooledConfig, PooledModel


class TextEncoder:
    """Embeds texts with an encoder and a pooler: ``TextEncoder(model, pooler).encode(texts) -> (N, dim)``.

    ``model``: a local folder or hub name of an encoder (default: the packaged all-MiniLM-L6-v2), or a
    saved :class:`PooledModel` (a ``fold_K`` folder of ``poolkit train``), whose trained pooler is then
    used and ``pooler`` must be left out. ``pooler`` is a name or a spec dict (``{"name": ..., **options}``;
    options may also come as keywords), or a built (e.g. trained) pooler, used as it is. Built from a name or
    spec on a bare encoder, poolers with weight matrices (the attention family, latent, adapool, lstm_layers,
    ...) would embed with random weights and are refused unless ``allow_untrained=True``; poolers whose few
    parameters start at a meaningful value (gem's p, lse's temperature, weighted_layer's uniform layer weights)
    are accepted. ``dim``: keep each vector's first ``dim`` dimensions (Matryoshka truncation), before ``normalize``
    (as sentence-transformers' ``truncate_dim`` with ``normalize_embeddings``). ``precision`` (auto, no, bf16,
    fp16): ``auto`` runs bf16 (or fp16) autocast on CUDA and float32 on CPU. A model folder with code of its own
    (``auto_map``) is refused unless ``trust_remote_code=True``.
    """

    def __init__(self, model: str | None = None, pooler: str | dict[str, Any] | Pooler | None = None, *,
                 normalize: bool = False, dim: int | None = None, max_length: int | None = None,
                 device: str | torch.device | None = None,
                 precision: str = "auto", allow_untrained: bool = False, trust_remote_code: bool | None = None,
                 **pooler_options: Any) -> None:
        path = resolve_model(model)
        trust = check_model_folder(path, trust_remote_code)
        self.device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")
        self.precision = resolve_precision(precision, self.device)
        self.tokenizer = load_tokenizer(path, trust)
        if _is_pooled_model(path):
            if pooler is not None or pooler_options:
                raise PoolkitError(f"{path} is a trained poolkit model with its own pooler; leave the pooler out "
                                   "(or pass the bare encoder to pool it another way)")
            with hf_bars_off():
                pooled = PooledModel.from_pretrained(path, trust_remote_code=trust)
            self.encoder, self.pooler = pooled.encoder, pooled.pooler
        else:
            with hf_bars_off():
                self.encoder = load_encoder(path, trust)
            config = self.encoder.config
            if isinstance(pooler, Pooler):
                if pooler_options or pooler.hidden_size != config.hidden_size:
                    raise PoolkitError(f"a built {pooler.name} pooler is used as it is: it takes no options, and its "
                                       f"hidden_size {pooler.hidden_size} must be the encoder's {config.hidden_size}")
                self.pooler = pooler
            else:
                self.pooler = build_pooler(pooler_spec(pooler or "mean", **pooler_options), config.hidden_size,
                                           config.num_hidden_layers)
            untrained = not isinstance(pooler, Pooler) and any(p.dim() >= 2 for p in self.pooler.parameters())
            if untrained and not allow_untrained:
                raise PoolkitError(
                    f"pooler {self.pooler.name!r} has learned weight matrices and {path} is a bare encoder, so they "
                    "would be random: pass a model trained with `poolkit train` (its fold_K folder), pick a pooler "
                    "without them (mean, cls, max, mean_max, gem, weighted_layer, ...), or allow untrained weights "
                    "(`allow_untrained=True`)")
        self.encoder.to(self.device).eval()
        self.pooler.to(self.device).eval()
        self.normalize = normalize
        width = self.pooler.output_dim
        if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or not 0 < dim <= width):
            raise PoolkitError(f"`dim` must be a number of dimensions from 1 to the pooler's {width}, got {dim!r}")
        self.truncate = dim
        self.max_length = check_max_length(max_length, self.encoder.config) or _model_max_length(
            path, self.tokenizer, self.encoder)

    @property
    def dim(self) -> int:
        """Length of each embedding."""
        return self.truncate or self.pooler.output_dim

    def encode(self, texts: Sequence[str], batch_size: int = 32, progress: bool = False) -> torch.Tensor:
        """(N, dim) float32 embeddings on the CPU, one row per text, in the order given."""
        if isinstance(texts, str):
            raise PoolkitError("encode takes a list of texts, got a single string: wrap it in a list")
        texts = list(texts)
        if not texts:
            return torch.empty(0, self.dim)
        if batch_size < 1:
            raise PoolkitError(f"batch_size must be at least 1, got {batch_size}")
        sampler, batches = sorted_token_batches(self.tokenizer, texts, self.max_length, batch_size, self.device)
        layers = self.pooler.kind == "layer"
        outputs = []
        autocast = torch.autocast(self.device.type, dtype=AUTOCAST.get(self.precision), enabled=self.precision != "no")
        with torch.inference_mode(), autocast, tqdm(total=len(texts), desc="encoding", unit="text",
                                                    disable=not progress) as bar:
            for rows, batch in batches:
                output = self.encoder(**batch, output_hidden_states=layers, return_dict=True)
                states = output.hidden_states if layers else output.last_hidden_state
                pooled = self.pooler(states, batch["attention_mask"]).float()[:, :self.dim]
                outputs.append(F.normalize(pooled, dim=-1) if self.normalize else pooled)
                bar.update(len(rows))
        return sampler.restore(torch.cat(outputs)).cpu()


def encode(texts: Sequence[str], model: str | None = None, pooler: str | dict[str, Any] | Pooler | None = None, *,
           normalize: bool = False, batch_size: int = 32, **options: Any) -> torch.Tensor:
    """One call: ``poolkit.encode(["a text", ...], pooler="mean", normalize=True)`` -> (N, dim) float32.

    Builds a :class:`TextEncoder` each time; keep one to embed several lists with the same model.
    """
    return TextEncoder(model, pooler, normalize=normalize, **options).encode(texts, batch_size=batch_size)


def _is_pooled_model(path: str) -> bool:
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") == PooledConfig.model_type
    except (OSError, ValueError):
        return False


def _model_max_length(path: str, tokenizer, encoder) -> int:
    """The sentence-transformers limit when the folder has one (all-MiniLM-L6-v2: 256, what it was trained
    with), else the smaller of the tokenizer's and the position embeddings' limits (else 512)."""
    st_config = Path(path) / "sentence_bert_config.json"
    if st_config.is_file():
        try:
            return int(json.loads(st_config.read_text())["max_seq_length"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    limits = [getattr(tokenizer, "model_max_length", None), getattr(encoder.config, "max_position_embeddings", None)]
    limits = [n for n in limits if isinstance(n, int) and 0 < n < 100_000]
    return min(limits) if limits else 512
