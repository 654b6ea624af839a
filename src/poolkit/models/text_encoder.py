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
from torch import nn
from torch.nn import functional as F
from ..progress import progress as progress_bar

from ..data.batching import sorted_token_batches
from ..errors import PoolkitError
from ..extras import require
from ..io import build_dir
from ..pooling import Pooler, build_pooler, pooler_spec
from ..pooling.masking import skip_first_tokens
from .backends import BACKENDS, INT8_BACKEND
from .declared import AUTO, AfterPooling, declared_token_pooler, read_declared, read_prompts, with_token_pooler
from .encoders import (AUTOCAST, adds_no_eos, appends_eos, check_max_length, check_model_folder, hf_bars_off,
                       is_causal, load_encoder, load_tokenizer, probe_first_states, resolve_model, resolve_precision)
from .pooled_model import PooledConfig, PooledModel


def check_backend(backend: str) -> str:
    """``backend`` when it is one of :data:`BACKENDS` and what it needs is installed, else one line."""
    if backend not in BACKENDS:
        raise PoolkitError(f"`backend` must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend != "torch":
        require("onnx")
    return backend


class Embedder(nn.Module):
    """One batch of token ids -> the final vectors: the encoder, the pooler (over the last layer, or over every
    layer for a layer pooler; ``skip``: each row's first ``skip`` real tokens, a prompt, left out of the pool), the
    modules a folder declares after its pooling, the first ``dim`` dimensions, and the L2 norm when asked. The one
    form both backends run: TextEncoder calls it in torch, :mod:`.onnx_graph` exports it whole."""

    def __init__(self, encoder: nn.Module, pooler: Pooler, after: AfterPooling | None, dim: int,
                 normalize: bool, bidirectional: bool = False) -> None:
        super().__init__()
        self.encoder, self.pooler, self.after = encoder, pooler, after
        self.dim, self.normalize, self.bidirectional = dim, normalize, bidirectional

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, skip: int = 0) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": bidirectional_mask(attention_mask, self.encoder.dtype)
                  if self.bidirectional else attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        layers = self.pooler.kind == "layer"
        output = self.encoder(**inputs, output_hidden_states=layers, return_dict=True)
        states = output.hidden_states if layers else output.last_hidden_state
        pooled = self.pooler(states, skip_first_tokens(attention_mask, skip) if skip else attention_mask).float()
        if self.after is not None:
            pooled = self.after(pooled)
        pooled = pooled[:, :self.dim]
        return F.normalize(pooled, dim=-1) if self.normalize else pooled


def bidirectional_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) 0/1 -> the (B, 1, T, T) additive mask under which every position attends to every real token (0) and
    to no padding (``dtype``'s lowest value): a decoder given it as its attention mask attends both ways, as LLM2Vec
    and GritLM run their decoders (transformers' decoders take a 4-D mask as it is)."""
    keys = attention_mask[:, None, None, :].bool()
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=attention_mask.device)
    additive = torch.where(keys, torch.zeros((), dtype=dtype, device=attention_mask.device), blocked)
    length = attention_mask.shape[1]
    return additive.expand(attention_mask.shape[0], 1, length, length)


def check_bidirectional(encoder: nn.Module, tokenizer: Any, device: torch.device) -> None:
    """Refuse ``bidirectional_attention`` in one line unless ``encoder`` is a causal model that honours the switch:
    two texts that differ in their last token give the same first state under the model's own mask (causal) and
    different ones under :func:`bidirectional_mask` (the switch reaches every layer)."""
    if not is_causal(encoder, tokenizer, device):
        raise PoolkitError("`bidirectional_attention` is for decoders (causal models); this encoder already attends "
                           "both ways: leave it out")
    both = probe_first_states(encoder, tokenizer, device, lambda mask: bidirectional_mask(mask, encoder.dtype))
    if torch.allclose(both[0], both[1], atol=1e-6):
        raise PoolkitError(f"{type(encoder).__name__} does not take a bidirectional mask (it stays causal): leave "
                           "`bidirectional_attention` out")


class TextEncoder:
    """Embeds texts with an encoder and a pooler: ``TextEncoder(model, pooler).encode(texts) -> (N, dim)``.

    ``model``: a local folder or hub name of an encoder (default: the packaged all-MiniLM-L6-v2), or a
    saved :class:`PooledModel` (a ``fold_K`` folder of ``poolkit train``), whose trained pooler is then
    used and ``pooler`` must be left out.

    ``pooler``: a name or a spec dict (``{"name": ..., **options}``; options may also come as keywords), a built
    (e.g. trained) pooler, used as it is, or ``"auto"``: the pooling a sentence-transformers folder declares (its
    ``modules.json``: the Pooling modes, then its Dense layers and Normalize; :mod:`.declared`), which is also the
    default for such a folder (the packaged MiniLM: mean, then Normalize); elsewhere the default is mean.
    :attr:`pooling` says which ran. An explicit pooler replaces the declared pooling *and* the modules after it.
    Built from a name or spec on a bare encoder, poolers with weight matrices (the attention family, latent,
    adapool, lstm_layers, ...) would embed with random weights and are refused unless ``allow_untrained=True``;
    poolers whose few parameters start at a meaningful value (gem's p, lse's temperature, weighted_layer's uniform
    layer weights) are accepted.

    ``prompt`` (a text put before each text) or ``prompt_name`` (one of the folder's named prompts, in its
    ``config_sentence_transformers.json``; its ``default_prompt_name`` applies when neither is given, and
    ``prompt=""`` turns it off); ``include_prompt=False`` keeps the prompt's tokens out of the pooled positions
    while the encoder still attends to them (default: what the folder's Pooling declares under ``auto``, else
    True), as sentence-transformers' ``Pooling(include_prompt=False)``. ``dim``: keep each vector's first ``dim``
    dimensions (Matryoshka truncation), before ``normalize`` (as sentence-transformers' ``truncate_dim`` with
    ``normalize_embeddings``). Decoder embedders (GPT-2, Llama, Qwen, Mistral style): a tokenizer with no pad
    token pads with its EOS; with last-token pooling every text ends in the tokenizer's EOS, appended when the
    tokenizer does not add it and kept by truncation (``append_eos=False`` turns that off); batches are padded on
    the right, so a tokenizer that pads on the left gives the same vectors. ``bidirectional_attention=True``: a
    decoder attends both ways (every token sees the whole text, LLM2Vec / GritLM style; a 4-D mask given to the
    model, float32 only), refused in one line on an encoder or a model that stays causal; it suits decoders trained
    that way, and makes others' vectors worse, not better. ``precision`` (auto, no, bf16, fp16):
    ``auto`` runs bf16 (or fp16) autocast on CUDA and float32 on CPU. ``backend``: ``torch``, or ``onnx`` /
    ``onnx-int8``: the whole embedder (encoder, pooler with its weights, declared modules, ``dim``, ``normalize``)
    exported once into one ONNX graph in the cache (:mod:`.onnx_graph`; int8: its weights quantised) and run by
    ONNX Runtime, with the same batching. A model folder with code of its own
    (``auto_map``) is refused unless ``trust_remote_code=True``.
    """

    def __init__(self, model: str | None = None, pooler: str | dict[str, Any] | Pooler | None = None, *,
                 normalize: bool = False, dim: int | None = None, max_length: int | None = None,
                 prompt: str | None = None, prompt_name: str | None = None, include_prompt: bool | None = None,
                 append_eos: bool | None = None, bidirectional_attention: bool = False, backend: str = "torch",
                 device: str | torch.device | None = None,
                 precision: str = "auto", allow_untrained: bool = False, trust_remote_code: bool | None = None,
                 **pooler_options: Any) -> None:
        path = resolve_model(model)
        trust = check_model_folder(path, trust_remote_code)
        self.device = torch.device(device) if device is not None else torch.device(
            "cuda" if torch.cuda.is_available() else "cpu")
        self.backend = check_backend(backend)
        if self.backend != "torch" and precision not in ("auto", "no"):
            raise PoolkitError(f"`precision` {precision!r} is torch's autocast; backend {backend!r} runs the exported "
                               "float32 (or int8) graph: leave `precision` out")
        self.precision = "no" if self.backend != "torch" else resolve_precision(precision, self.device)
        self.prompts, default_prompt = read_prompts(path)
        self.after: AfterPooling | None = None
        declared = None
        if _is_pooled_model(path):
            if pooler not in (None, AUTO) or pooler_options:
                raise PoolkitError(f"{path} is a trained poolkit model with its own pooler; leave the pooler out "
                                   "(or pass the bare encoder to pool it another way)")
            with hf_bars_off():
                pooled = PooledModel.from_pretrained(path, trust_remote_code=trust)
            self.encoder, self.pooler, self.after = pooled.encoder, pooled.pooler, pooled.after
            self.tokenizer = load_tokenizer(path, trust)
            encoder_path = path
        else:
            declared = read_declared(path) if pooler in (None, AUTO) else None
            if pooler == AUTO and declared is None:
                raise PoolkitError(f"pooler 'auto' uses the pooling a sentence-transformers folder declares, and "
                                   f"{path} has no modules.json: pass a pooler (e.g. 'mean')")
            if declared is not None and pooler_options:
                raise PoolkitError(f"the declared pooling of {path} ({declared.label}) takes no options: pass a pooler "
                                   "with them instead")
            encoder_path = str(declared.encoder) if declared is not None else path
            self.tokenizer = load_tokenizer(encoder_path, trust)
            with hf_bars_off():
                self.encoder = load_encoder(encoder_path, trust)
            config = self.encoder.config
            if isinstance(pooler, Pooler):
                if pooler_options or pooler.hidden_size != config.hidden_size:
                    raise PoolkitError(f"a built {pooler.name} pooler is used as it is: it takes no options, and its "
                                       f"hidden_size {pooler.hidden_size} must be the encoder's {config.hidden_size}")
                self.pooler = pooler
            else:
                # a layer pooler pools each layer's tokens as the encoder was trained to, unless told otherwise
                spec = declared.pooler_spec if declared is not None else with_token_pooler(
                    pooler_spec(pooler or "mean", **pooler_options), declared_token_pooler(path))
                self.pooler = build_pooler(spec, config.hidden_size, config.num_hidden_layers)
            untrained = not isinstance(pooler, Pooler) and any(p.dim() >= 2 for p in self.pooler.parameters())
            if untrained and not allow_untrained:
                raise PoolkitError(
                    f"pooler {self.pooler.name!r} has learned weight matrices and {path} is a bare encoder, so they "
                    "would be random: pass a model trained with `poolkit train` (its fold_K folder), pick a pooler "
                    "without them (mean, cls, max, mean_max, gem, weighted_layer, ...), or allow untrained weights "
                    "(`allow_untrained=True`)")
            if declared is not None:
                self.after = AfterPooling.from_declared(declared, self.pooler.output_dim).to(self.device).eval()
        self.declared = declared
        self.encoder.to(self.device).eval()
        self.pooler.to(self.device).eval()
        self.normalize = normalize
        self.prompt = self._prompt(prompt, prompt_name, default_prompt)
        self.include_prompt = (declared.include_prompt if declared is not None else True) if include_prompt is None \
            else bool(include_prompt)
        width = self.after.output_dim if self.after is not None else self.pooler.output_dim
        if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or not 0 < dim <= width):
            raise PoolkitError(f"`dim` must be a number of dimensions from 1 to the pooler's {width}, got {dim!r}")
        self.width = width
        self.append_eos = self._append_eos(append_eos)
        self.truncate = dim
        self.max_length = check_max_length(max_length, self.encoder.config) or _model_max_length(
            encoder_path, self.tokenizer, self.encoder)
        self.model_path = encoder_path
        self.bidirectional_attention = bool(bidirectional_attention)
        if self.bidirectional_attention:
            if self.precision != "no":
                raise PoolkitError("`bidirectional_attention` runs in float32 only: pass precision='no'")
            check_bidirectional(self.encoder, self.tokenizer, self.device)
        self.module = Embedder(self.encoder, self.pooler, self.after, self.dim, normalize,
                               self.bidirectional_attention).eval()
        self._sessions: dict[str, Any] = {}
        if self.backend != "torch":
            self._runner(self.prompt)  # exported (or found in the cache) before any text is read

    @property
    def dim(self) -> int:
        """Length of each embedding."""
        return self.truncate or self.width

    @property
    def pooling(self) -> str:
        """Which pooling runs: e.g. ``mean+normalize (declared)`` for a folder's own, else the pooler's name."""
        return f"{self.declared.label} (declared)" if self.declared is not None else self.pooler.name

    def settings(self) -> dict[str, Any]:
        """What decides the vectors besides the model and the texts: a JSON record for run settings."""
        return {"pooler": self.pooler.get_config(), "declared": None if self.declared is None else
                self.declared.describe(), "prompt": self.prompt, "include_prompt": self.include_prompt,
                "append_eos": self.append_eos, "normalize": self.normalize, "dim": self.dim,
                "max_length": self.max_length, "backend": self.backend,
                **({"bidirectional_attention": True} if self.bidirectional_attention else {})}

    def prompt_skip(self, prompt: str) -> int:
        """How many leading tokens of each text are kept out of the pool for ``prompt`` (0: all pooled)."""
        return 0 if self.include_prompt or not prompt else prompt_length(self.tokenizer, prompt)

    def _append_eos(self, asked: bool | None) -> bool:
        """Whether every text gets the tokenizer's EOS appended: by default for last-token pooling when the tokenizer
        does not add one itself (GPT-2, Llama: the decoder embedder's pooled token is its EOS)."""
        if asked is None:
            return appends_eos(self.pooler, self.tokenizer)
        if asked and self.tokenizer.eos_token_id is None:
            raise PoolkitError("`append_eos=True` but the tokenizer has no EOS token: leave `append_eos` out")
        return bool(asked) and adds_no_eos(self.tokenizer)

    def _prompt(self, prompt: str | None, prompt_name: str | None, default: str | None) -> str:
        """The prompt text: ``prompt``, the named one, else the folder's default (``""`` for none)."""
        if prompt is not None and prompt_name is not None:
            raise PoolkitError("pass `prompt` (the text) or `prompt_name` (one of the folder's prompts), not both")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise PoolkitError(f"`prompt` must be a text, got {type(prompt).__name__}")
            return prompt
        name = prompt_name if prompt_name is not None else default
        if name is None:
            return ""
        if name not in self.prompts:
            raise PoolkitError(f"`prompt_name` {name!r} is not one of the model's prompts "
                               f"({', '.join(self.prompts) or 'it has none'}): pass `prompt` with the text instead")
        return self.prompts[name]

    def encode(self, texts: Sequence[str], batch_size: int = 32, progress: bool = False, *,
               prompt: str | None = None, prompt_name: str | None = None) -> torch.Tensor:
        """(N, dim) float32 embeddings on the CPU, one row per text, in the order given; ``prompt`` /
        ``prompt_name`` replace the encoder's prompt for this call."""
        if isinstance(texts, str):
            raise PoolkitError("encode takes a list of texts, got a single string: wrap it in a list")
        texts = list(texts)
        if not texts:
            return torch.empty(0, self.dim)
        wrong = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
        if wrong is not None:
            raise PoolkitError(f"encode takes texts (str); texts[{wrong}] is {type(texts[wrong]).__name__} "
                               f"{texts[wrong]!r:.40}: convert or drop it")
        if batch_size < 1:
            raise PoolkitError(f"batch_size must be at least 1, got {batch_size}")
        text = self.prompt if prompt is None and prompt_name is None else self._prompt(prompt, prompt_name, None)
        sampler, batches = sorted_token_batches(self.tokenizer, [text + t for t in texts] if text else texts,
                                                self.max_length, batch_size, self.device, append_eos=self.append_eos)
        run = self._runner(text)
        outputs = []
        autocast = torch.autocast(self.device.type, dtype=AUTOCAST.get(self.precision), enabled=self.precision != "no")
        with torch.inference_mode(), autocast, progress_bar(total=len(texts), desc="encoding", unit="text",
                                                            disable=not progress) as bar:
            for rows, batch in batches:
                outputs.append(run(batch))
                bar.update(len(rows))
        return sampler.restore(torch.cat(outputs)).cpu()

    def _runner(self, prompt: str):
        """What turns one batch into vectors for texts that begin with ``prompt``: the torch module, or the ONNX
        Runtime session of its exported graph (exported into the cache on first use; one graph per prompt kept out
        of the pool, one for every prompt otherwise)."""
        if self.backend == "torch":
            skip = self.prompt_skip(prompt)
            return lambda batch: self.module(**batch, skip=skip)
        graph_prompt = self.prompt if self.include_prompt else prompt
        if graph_prompt not in self._sessions:
            from .onnx_graph import cached_graph

            self._sessions[graph_prompt] = cached_graph(self, graph_prompt, int8=self.backend == INT8_BACKEND,
                                                        device=self.device)
        return self._sessions[graph_prompt]


def encode(texts: Sequence[str], model: str | None = None, pooler: str | dict[str, Any] | Pooler | None = None, *,
           normalize: bool = False, batch_size: int = 32, **options: Any) -> torch.Tensor:
    """One call: ``poolkit.encode(["a text", ...], pooler="mean", normalize=True)`` -> (N, dim) float32.

    Builds a :class:`TextEncoder` each time; keep one to embed several lists with the same model.
    """
    return TextEncoder(model, pooler, normalize=normalize, **options).encode(texts, batch_size=batch_size)


def export_onnx(out: str | Path, model: str | None = None, pooler: Any = None, *, int8: bool = False,
                force: bool = False, **encoder_options: Any) -> dict[str, Any]:
    """``poolkit export-onnx``: ``TextEncoder(model, pooler, **encoder_options)`` (normalize, dim, prompt, ...)
    exported whole into the folder ``out`` (:func:`export_graph`; ``int8``: the quantised copy too); -> its manifest.
    An existing ``out`` is replaced only with ``force`` and only when it is a poolkit export."""
    from .onnx_graph import MANIFEST, export_graph, read_manifest, require_onnxruntime

    out = Path(out)
    if out.exists() or out.is_symlink():
        if not force:
            raise PoolkitError(f"{out} already exists: pass `force=True` to replace it, or choose another `out`")
        if not out.is_dir() or out.is_symlink() or not (out / MANIFEST).is_file():
            raise PoolkitError(f"{out} is not a graph written by `poolkit export-onnx`, so poolkit does not replace "
                               "it: choose another `out`")
        read_manifest(out)
    if not out.parent.is_dir():
        raise PoolkitError(f"the folder of `out` {out} does not exist: create {out.parent} first")
    require_onnxruntime()
    encoder = TextEncoder(model, pooler, **encoder_options)
    return build_dir(out, lambda staging: export_graph(encoder, staging, int8=int8))


def prompt_length(tokenizer, prompt: str) -> int:
    """How many leading tokens of a text are the prompt's: the prompt tokenised alone, its trailing special token
    (SEP, EOS) not counted, as sentence-transformers counts it."""
    ids = tokenizer(prompt)["input_ids"]
    return len(ids) - (1 if ids and ids[-1] in set(tokenizer.all_special_ids) else 0)


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
