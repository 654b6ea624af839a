"""A whole embedder as one ONNX graph (token ids + attention mask -> the final vectors), and ONNX Runtime running it.

:func:`export_graph` exports a :class:`~poolkit.models.text_encoder.TextEncoder` 's :class:`Embedder` (the encoder,
the pooler with its trained weights, the Dense / Normalize modules a folder declares, ``dim``, ``normalize``) with
torch's dynamo exporter (the encoder's attention traced as :data:`TRACE_ATTENTION`), batch and sequence axes
dynamic, into a folder that needs neither torch nor poolkit:

- ``model.onnx`` (inputs ``input_ids``, ``attention_mask`` and, where the tokenizer makes them, ``token_type_ids``;
  output ``sentence_embedding``);
- ``model-int8.onnx`` with ``int8=True``: onnxruntime's dynamic quantisation of the weights (:data:`INT8`: the
  choice measured in ``benchmarks/perf_onnx.py``, docs/onnx.md);
- the tokenizer's files, and ``poolkit-onnx.json``: the manifest (opset, versions, the pooling and settings, how to
  tokenise: prompt, EOS, maximum length, padding id; the onnxruntime session choices, :data:`DISABLED_OPTIMIZERS`
  and :data:`SESSION_CONFIG`; the parity with torch measured at export on :data:`PROBE_TEXTS`, and the int8 copy's
  agreement with the float32 graph).

``poolkit export-onnx`` (:func:`poolkit.models.text_encoder.export_onnx`) writes such a folder where asked;
``TextEncoder(backend="onnx" | "onnx-int8")`` exports once into the cache (:func:`cached_graph`:
``$POOLKIT_CACHE/onnx/<key>``, the key a digest of every weight, the tokenizer files and the settings) and runs
the graph with :class:`OnnxSession`; ``poolkit cache list|clear`` shows and removes these folders
(:func:`list_graphs`, :func:`clear_graphs`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ..errors import PoolkitError
from ..io import atomic_write_json, build_dir, file_digest, is_cache_name
from .. import __version__



class TextEncoder(Protocol):
    """What an export reads from a :class:`poolkit.models.text_encoder.TextEncoder` (named here, not imported: the
    encoder imports this module)."""

    module: nn.Module
    tokenizer: Any
    pooler: nn.Module
    device: torch.device
    max_length: int
    prompt: str
    append_eos: bool
    dim: int
    pooling: str
    model_path: str

    def settings(self) -> dict[str, Any]: ...

    def prompt_skip(self, prompt: str) -> int: ...

MANIFEST = "poolkit-onnx.json"
FORMAT = "poolkit-onnx"
GRAPH_VERSION = 2  # 2: traced with TRACE_ATTENTION
FLOAT_FILE, INT8_FILE = "model.onnx", "model-int8.onnx"
OUTPUT = "sentence_embedding"
#: How the int8 copy is quantised (onnxruntime.quantization.quantize_dynamic): signed int8 weights, one scale per
#: output channel, the MatMul weights and the embedding tables (Gather). Chosen by ``benchmarks/perf_onnx.py``'s
#: grid (docs/onnx.md): per-tensor scales lose about 0.04 of mean cosine to float32 on MiniLM; quantising the
#: embeddings too costs no agreement and makes the file less than half as large.
INT8 = {"per_channel": True, "op_types": ["MatMul", "Gather"], "weight_type": "QInt8"}
#: The attention a Hugging Face encoder is traced with (None: its own, torch's scaled-dot-product attention for most).
#: The dynamo exporter writes that one out as its decomposition with a NaN guard on every score (IsNaN + Where); the
#: eager softmax over the masked scores is the same function in fewer ops (``benchmarks/perf_onnx.py`` times both
#: traces of MiniLM and their int8 copies, docs/onnx.md). Parity with torch is measured on the graph as traced.
TRACE_ATTENTION: str | None = "eager"
#: onnxruntime's graph optimisations that poolkit's sessions leave out (``disabled_optimizers``): its fused
#: SkipLayerNormalization CPU kernel is slower than the Add and LayerNormalization it replaces, in every cell measured
#: (float32 and int8 graphs, one thread and the default; ``benchmarks/perf_onnx.py``'s fusions part, docs/onnx.md). The
#: manifest records them, so that a session outside poolkit can do the same (examples/serve_onnx.py does).
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
#: onnxruntime session settings (``add_session_config_entry``) of poolkit's CPU sessions: the intra-op threads wait
#: for work without spinning. A spinning thread holds a core that another process could use: beside busy processes,
#: passes whose threads wait were faster at two threads, and on a quiet machine within a few percent of spinning ones
#: (``benchmarks/perf_onnx.py``'s spinning part, docs/onnx.md). The manifest records them, as it does
#: :data:`DISABLED_OPTIMIZERS`.
SESSION_CONFIG = MappingProxyType({"session.intra_op.allow_spinning": "0"})
#: The largest |difference| to torch an export accepts, relative to the vectors' largest magnitude (at least 1).
PARITY = 1e-4
#: Texts of many lengths (an empty one, one past any maximum length) on which an export measures its parity.
PROBE_TEXTS = (
    "", "a", "Pooling turns many vectors into one.", "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Paris is the capital and most populous city of France.",
    "Mean pooling averages the token states where the attention mask is one; CLS pooling takes the first token.",
    "naïve café résumé — ünïcode, emoji 🙂 and numbers 3.14159 1e-9",
    " ".join(["A sentence long enough to be truncated at the model's maximum length."] * 80),
)
_LOCK = ".lock"


def default_graph_dir() -> Path:
    """Where exported graphs are cached: ``$POOLKIT_CACHE/onnx`` (default ``~/.cache/poolkit/onnx``)."""
    return Path(os.environ.get("POOLKIT_CACHE", Path.home() / ".cache" / "poolkit")) / "onnx"


class _Graph(nn.Module):
    """The embedder with its prompt length fixed: what the exporter traces (its inputs are tensors only)."""

    def __init__(self, embedder: nn.Module, skip: int) -> None:
        super().__init__()
        self.embedder, self.skip = embedder, skip

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
                ) -> torch.Tensor:
        return self.embedder(input_ids, attention_mask, token_type_ids, skip=self.skip)


def graph_inputs(encoder: TextEncoder) -> list[str]:
    """The graph's input names: what the tokenizer gives that the embedder takes."""
    made = encoder.tokenizer(["a", "a b"], padding=True)
    return [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in made]


def tokenizer_record(encoder: TextEncoder, prompt: str) -> dict[str, Any]:
    """What a user outside poolkit needs to tokenise as the graph expects (``prompt`` first)."""
    tokenizer = encoder.tokenizer
    return {"max_length": encoder.max_length, "pad_token_id": tokenizer.pad_token_id, "padding_side": "right",
            "prompt": prompt, "prompt_tokens_left_out": encoder.prompt_skip(prompt), "append_eos": encoder.append_eos,
            "eos_token_id": tokenizer.eos_token_id}


def graph_key(encoder: TextEncoder, prompt: str) -> str:
    """A digest of what decides the graph and its manifest: every tensor of the embedder (encoder, pooler, declared
    modules), the tokenizer's files, the settings, the prompt (its length kept out of the pool, when it is), the
    exporter's versions, the int8 recipe, the traced attention and :data:`GRAPH_VERSION`."""
    from .encoders import model_fingerprint

    settings = {"version": GRAPH_VERSION, "poolkit": __version__, "torch": torch.__version__, "int8": INT8,
                "attention": TRACE_ATTENTION,
                "settings": {k: v for k, v in encoder.settings().items() if k != "backend"}, "prompt": prompt,
                "inputs": graph_inputs(encoder), "tokenizer": model_fingerprint(encoder.model_path)}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for name, tensor in encoder.module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def export_graph(encoder: TextEncoder, folder: Path, prompt: str | None = None, int8: bool = False,
                 attention: str | None = TRACE_ATTENTION) -> dict[str, Any]:
    """Write ``encoder`` 's whole graph, its tokenizer files and the manifest into the empty ``folder``; ``prompt``:
    the one whose tokens are kept out of the pool when ``include_prompt`` is off (default: the encoder's); ``int8``:
    the quantised copy too; ``attention``: the Hugging Face attention implementation to trace (None: the model's
    own). -> the manifest."""
    prompt = encoder.prompt if prompt is None else prompt
    skip = encoder.prompt_skip(prompt)
    names = graph_inputs(encoder)
    probe = encoder.tokenizer(["a short text", "a longer text of a few more words"], padding=True, truncation=True,
                              max_length=encoder.max_length, return_tensors="pt")
    # the sequence axis up to the maximum length: the position embeddings hold no more, and without the bound the
    # exporter would fix the axes it cannot prove unbounded
    batch, length = torch.export.Dim("batch"), torch.export.Dim("sequence", max=encoder.max_length)
    graph = _Graph(encoder.module, skip).to("cpu").eval()
    started = time.perf_counter()
    try:
        with _quiet_exporter(), torch.no_grad(), _traced_attention(encoder.module, attention):
            program = torch.onnx.export(graph, tuple(probe[name] for name in names), dynamo=True,
                                        input_names=names, output_names=[OUTPUT], external_data=False,
                                        dynamic_shapes=tuple({0: batch, 1: length} for _ in names), verbose=False)
    except Exception as err:  # the exporter's failures are long tracebacks: one line naming the pooler
        raise PoolkitError(f"pooler {encoder.pooler.name!r} on this model does not export to ONNX ({_first(err)}): "
                           "use backend 'torch'") from None
    finally:
        encoder.module.to(encoder.device)
    program.save(str(folder / FLOAT_FILE), external_data=False)
    seconds = time.perf_counter() - started
    try:
        exported = OnnxSession.on_texts(folder, encoder, int8=False)
    except Exception as err:  # noqa: BLE001 - onnxruntime's errors: e.g. an axis the graph fixed after all
        raise PoolkitError(f"the ONNX graph of pooler {encoder.pooler.name!r} fails in onnxruntime on texts of other "
                           f"lengths ({_first(err)}): use backend 'torch'") from None
    expected = _torch_vectors(encoder, skip)
    diff = float(np.abs(exported - expected).max())
    if not diff <= PARITY * max(1.0, float(np.abs(expected).max())):
        raise PoolkitError(f"the ONNX graph of pooler {encoder.pooler.name!r} gives vectors {diff:.2g} away from "
                           "torch's: use backend 'torch'")
    encoder.tokenizer.save_pretrained(str(folder))
    import onnx

    manifest = {"format": FORMAT, "version": GRAPH_VERSION, "poolkit": __version__, "torch": torch.__version__,
                "onnxruntime": require_onnxruntime().__version__,
                "opset": next(o.version for o in onnx.load(str(folder / FLOAT_FILE), load_external_data=False)
                              .opset_import if o.domain in ("", "ai.onnx")),
                "inputs": names, "output": OUTPUT, "dim": encoder.dim, "pooling": encoder.pooling,
                "settings": {k: v for k, v in encoder.settings().items() if k != "backend"},
                "tokenizer": tokenizer_record(encoder, prompt), "traced_attention": attention,
                "export_seconds": round(seconds, 2),
                "session": {"disabled_optimizers": list(DISABLED_OPTIMIZERS), "config": dict(SESSION_CONFIG)},
                "files": {FLOAT_FILE: file_digest(folder / FLOAT_FILE)},
                "parity": {"texts": len(PROBE_TEXTS), "max_abs_diff_to_torch": diff}}
    if int8:
        manifest = add_int8(folder, manifest, encoder)
    atomic_write_json(folder / MANIFEST, manifest)
    return manifest


def quantize_graph(source: Path, target: Path, how: dict[str, Any] = INT8) -> None:
    """``source`` 's weights quantised as ``how`` says (:data:`INT8`'s keys) into ``target``, written atomically."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    staged = target.with_name(f".{target.name}.poolkit-int8.tmp")
    with _quiet_exporter():
        quantize_dynamic(str(source), str(staged), per_channel=how["per_channel"], op_types_to_quantize=how["op_types"],
                         weight_type=getattr(QuantType, how["weight_type"]))
    os.replace(staged, target)


def add_int8(folder: Path, manifest: dict[str, Any], encoder: TextEncoder) -> dict[str, Any]:
    """Quantise ``folder`` 's float32 graph as :data:`INT8` says into ``model-int8.onnx``; the manifest with the
    choice and its agreement with the float32 graph on :data:`PROBE_TEXTS` (cosine, per text)."""
    quantize_graph(folder / FLOAT_FILE, folder / INT8_FILE)
    manifest = {**manifest, "files": {**manifest["files"], INT8_FILE: file_digest(folder / INT8_FILE)}}
    full = OnnxSession.on_texts(folder, encoder, int8=False)
    small = OnnxSession.on_texts(folder, encoder, int8=True)
    cosine = (full * small).sum(1) / np.maximum(np.linalg.norm(full, axis=1) * np.linalg.norm(small, axis=1), 1e-12)
    manifest["int8"] = {**INT8, "file": INT8_FILE, "chosen_in": "docs/onnx.md",
                        "cosine_to_float32": {"mean": float(cosine.mean()), "min": float(cosine.min())}}
    return manifest


def probe_vectors(encoder: TextEncoder, run) -> np.ndarray:
    """``run`` (one batch dict -> its vectors) over :data:`PROBE_TEXTS`, in batches of 4 on the encoder's device:
    what the parity figures of an export compare."""
    from ..data.batching import sorted_token_batches

    sampler, batches = sorted_token_batches(encoder.tokenizer, PROBE_TEXTS, encoder.max_length, 4, encoder.device,
                                            append_eos=encoder.append_eos)
    with torch.inference_mode():
        rows = [run(batch).float() for _, batch in batches]
    return sampler.restore(torch.cat(rows)).cpu().numpy()


def _torch_vectors(encoder: TextEncoder, skip: int) -> np.ndarray:
    """The torch backend's vectors of :data:`PROBE_TEXTS`."""
    return probe_vectors(encoder, lambda batch: encoder.module(**batch, skip=skip))


class OnnxSession:
    """An exported folder's graph (``file``: another graph file in it) in an ONNX Runtime session: ``session(batch)``
    takes the tokenizer's batch dict of tensors and gives the (B, dim) float32 vectors. Runs on the CPU with torch's
    thread count (CUDA when the encoder's device is a GPU and onnxruntime has CUDA); on the CPU, without the graph
    optimisations ``disabled_optimizers`` names (default :data:`DISABLED_OPTIMIZERS`) and with the settings of
    ``session_config`` (default :data:`SESSION_CONFIG`). ``options``: onnxruntime ``SessionOptions`` to start from (a
    benchmark's, with profiling on), their threads, log level and ``session_config`` set here."""

    def __init__(self, folder: Path, int8: bool = False, device: torch.device | None = None,
                 file: str | None = None, disabled_optimizers: tuple[str, ...] = DISABLED_OPTIMIZERS,
                 session_config: Mapping[str, str] = SESSION_CONFIG, options: Any = None) -> None:
        ort = require_onnxruntime()
        options = options or ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.log_severity_level = 3
        providers: list = ["CPUExecutionProvider"]
        if device is not None and device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device.index or 0}))
        self.folder = folder
        on_cpu = len(providers) == 1  # what the choices below were measured on
        left_out = list(disabled_optimizers) if on_cpu else []
        for key, value in (session_config if on_cpu else {}).items():
            options.add_session_config_entry(key, value)
        self.session = ort.InferenceSession(str(folder / (file or (INT8_FILE if int8 else FLOAT_FILE))), options,
                                            providers=providers, disabled_optimizers=left_out)
        self.inputs = [node.name for node in self.session.get_inputs()]

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        feeds = {name: batch[name].cpu().numpy() for name in self.inputs}
        return torch.from_numpy(self.session.run([OUTPUT], feeds)[0])

    @classmethod
    def on_texts(cls, folder: Path, encoder: TextEncoder, int8: bool) -> np.ndarray:
        """The graph's vectors of :data:`PROBE_TEXTS` (for the parity figures of an export)."""
        return probe_vectors(encoder, cls(folder, int8=int8))


def read_manifest(folder: Path) -> dict[str, Any]:
    """``folder`` 's manifest, or one line saying the folder is not a poolkit export."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        raise PoolkitError(f"{folder} holds no readable {MANIFEST}: it is not a graph written by `poolkit "
                           "export-onnx`") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PoolkitError(f"{Path(folder) / MANIFEST} is not a poolkit ONNX manifest")
    return manifest


def _intact(folder: Path) -> dict[str, Any] | None:
    """The manifest of a cached graph whose recorded files (the float32 graph, and the int8 copy once made) are all
    there with their recorded digests, else None."""
    try:
        manifest = read_manifest(folder)
    except PoolkitError:
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or FLOAT_FILE not in files:
        return None
    intact = all((folder / name).is_file() and file_digest(folder / name) == digest for name, digest in files.items())
    return manifest if intact else None


def cached_graph(encoder: TextEncoder, prompt: str, int8: bool = False, root: Path | None = None,
                 device: torch.device | None = None) -> OnnxSession:
    """A session on the cached graph of ``encoder`` with ``prompt``, exported on first use (and its int8 copy added
    when first asked for) under the key's lock, which is held until the session has loaded the graph: several
    processes export once, and a concurrent ``cache clear`` cannot remove it in between. A damaged folder (a file
    missing or changed) is exported again, saying so; a folder under the key's name that poolkit did not write is
    refused."""
    from filelock import FileLock

    root = Path(root) if root is not None else default_graph_dir()
    root.mkdir(parents=True, exist_ok=True)
    key = graph_key(encoder, prompt)
    folder = root / key
    with FileLock(str(root / (key + _LOCK))):
        if (folder.exists() or folder.is_symlink()) and not is_graph_folder(folder):
            raise PoolkitError(f"{folder} is in the ONNX graph cache under a graph's name but poolkit did not write "
                               "it: move it away")
        manifest = _intact(folder) if folder.is_dir() else None
        if folder.is_dir() and manifest is None:
            warnings.warn(f"the cached ONNX graph {folder} is damaged: exporting it again", stacklevel=2)
        if manifest is None:
            build_dir(folder, lambda staging: export_graph(encoder, staging, prompt, int8=int8))
        elif int8 and INT8_FILE not in manifest["files"]:
            atomic_write_json(folder / MANIFEST, add_int8(folder, manifest, encoder))
        return OnnxSession(folder, int8=int8, device=device)


def is_graph_folder(folder: Path) -> bool:
    """Whether ``folder`` is a cached graph poolkit wrote: a real folder named by a key (32 hexadecimal digits) that
    holds a poolkit ONNX manifest. Anything else in the cache folder is the user's: never listed, never removed."""
    if not is_cache_name(folder.name) or not folder.is_dir() or folder.is_symlink():
        return False
    try:
        read_manifest(folder)
    except PoolkitError:
        return False
    return True


def list_graphs(root: Path | None = None) -> list[dict[str, Any]]:
    """Every cached graph under ``root``: its path, size in bytes and manifest."""
    root = Path(root) if root is not None else default_graph_dir()
    entries = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if is_graph_folder(folder):
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            entries.append({"path": folder, "bytes": size, "manifest": read_manifest(folder)})
    return entries


def clear_graphs(root: Path | None = None) -> tuple[int, list[Path]]:
    """Remove every cached graph under ``root`` not being exported; -> (how many were removed, those kept busy)."""
    from filelock import FileLock, Timeout

    root = Path(root) if root is not None else default_graph_dir()
    removed, busy = 0, []
    for entry in list_graphs(root):
        folder = entry["path"]
        try:
            with FileLock(str(root / (folder.name + _LOCK)), timeout=0):
                shutil.rmtree(folder)
                removed += 1
        except Timeout:
            busy.append(folder)
    return removed, busy


def _first(err: Exception) -> str:
    """An exception's first line, cut to 300 characters (its type when it has no message)."""
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def require_onnxruntime():
    """onnxruntime, or the one-line message naming the [onnx] extra."""
    from ..extras import require

    require("onnx")
    import onnxruntime

    return onnxruntime


@contextmanager
def _traced_attention(module: nn.Module, implementation: str | None) -> Iterator[None]:
    """The Hugging Face models in ``module`` on attention ``implementation`` (None: their own) while the exporter
    traces them, their own implementation again after."""
    from transformers import PreTrainedModel

    models = [] if implementation is None else [
        m for m in module.modules() if isinstance(m, PreTrainedModel)
        and m.config._attn_implementation != implementation and m._can_set_attn_implementation()]
    was = [m.config._attn_implementation for m in models]
    try:
        for model in models:
            model.set_attn_implementation(implementation)
        yield
    finally:
        for model, own in reversed(list(zip(models, was))):
            model.set_attn_implementation(own)


@contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter's and the quantiser's chatter (torchvision missing, axis names, pre-processing advice) off."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)
