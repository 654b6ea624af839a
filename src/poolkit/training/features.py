"""Encode once, pool many times: every hidden layer of a frozen encoder over a dataset, cached on disk.

The cache holds only real tokens (no padding), float16, memory-mapped: ``tokens.npy`` is
(L + 1, total_tokens, D) with the embeddings first, ``offsets.npy`` (N + 1,) says where each text's
tokens start. A batch is gathered back into padded (B, T, D) tensors with a mask, padded only to the
batch's longest text.

Given the poolers it is for (:func:`cache_plan`), the cache keeps only what they read. A pooler whose token
stage is cls / last / mean / sum / mean_sqrt_len (linear in the states and parameter-free: the token poolers
themselves, and every layer pooler over one, which pools each layer before mixing) reads one pooled summary
per layer: ``summary_K.npy`` (L + 1, N, D), pooled in float32 from the unrounded states, stored in float16.
It is handed to the pooler as a one-token sequence, which each of these poolers maps to that token, so its
output is the one it would compute from the full states. Token states are kept only for the other poolers
(max, gem, lse, the learned token poolers: the last layer; a layer pooler over one of them: every layer),
optionally int8-quantised or capped to each text's first ``token_cap`` tokens (the summaries still pool every
token; ``offsets`` then counts the kept tokens, and ``text_lengths.npy`` keeps each text's own count).
docs/scale.md measures the bytes per text before and after, and what int8 and a cap cost on a leaderboard.

A decoder embedder is pooled at its EOS: where the plan has a ``last`` summary and the tokenizer adds no EOS
(GPT-2's, Llama's), each text is encoded with the EOS appended (``append_eos`` in the plan, so in the key), as
:class:`~poolkit.models.TextEncoder` appends it. The ``last`` summary reads that EOS; every other summary and the
stored token states leave its position out, which on a causal model gives them exactly the states of the text
alone (a model that attends both ways is refused unless ``last`` is all the plan holds).

Under ``torchrun`` / ``accelerate launch`` (``RANK`` / ``WORLD_SIZE`` set) the encoding is shared like
``poolkit embed``'s (:mod:`poolkit.training.streaming`): process ``r`` encodes the ``r``-th of ``W`` contiguous
shares of the texts on its own device into ``<key>.tmp/part-r/``; rank 0, holding the key's lock, first says in
``<key>.launch.json`` (with the launch's id) whether there is anything to encode, then waits for every part and
joins them into the one cache. Only rank 0 returns the cache (the others: None, once their part is written).

A cache folder is named by :func:`cache_key`, a digest of what determines the features: the SHA-256 of every
file of the model folder (weights, config, tokenizer files; about 0.1 s for the 90 MB MiniLM), or a hub
model's name and snapshot commit; the texts, each length-prefixed; ``max_length``; the stored dtype; what is
kept (the plan); and :data:`CACHE_VERSION`. ``meta.json``, written last, records the encoder's cost
(``encode_ms_per_1k``: tokenising and the forward passes, ms per 1,000 texts, with the device, batch size and
threads it ran with) and each file's size and SHA-256, checked on open: a damaged cache is rebuilt, saying so.
A cache is built in ``<key>.tmp``, flushed and renamed into place under ``<key>.lock`` (one run encodes, a second
one waits and reuses it); a staging folder left by a killed run is removed by the next run. A cache folder that
cannot be written (a shared, read-only one) is only read: an intact cache there is used, with no lock; anything
else is refused in one line before any work.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock, Timeout
from ..progress import progress as progress_bar
from ..wording import size

from ..data.batching import sorted_token_batches
from ..errors import PoolkitError
from ..io import TMP_SUFFIX, atomic_write_json, file_digest, is_cache_name, made_by_poolkit, replace_dir, temp_dir
from ..io.runs import check_writable
from ..models.encoders import (adds_no_eos, check_model_folder, is_causal, load_config, load_encoder, load_tokenizer,
                               model_fingerprint, resolve_model)
from ..pooling import Pooler, build_pooler

CACHE_VERSION = 3
DTYPE = np.float16
LOCK = ".lock"
#: ``<key>.launch.json``: rank 0's word to the other processes of a launch (encode your share, or it is cached)
LAUNCH = ".launch.json"
#: Positions copied at a time when the processes' parts are joined (memory holds one such slice)
JOIN_CHUNK = 4096
#: Every layer's token states and no summaries: what a cache built without naming its poolers holds.
FULL_PLAN = {"summaries": [], "token_layers": "all", "token_dtype": "float16", "token_cap": None}
#: How token states may be stored: float16, or int8 with one float16 scale per token vector (absmax / 127).
TOKEN_DTYPES = ("float16", "int8")


def default_cache_dir() -> Path:
    return Path(os.environ.get("POOLKIT_CACHE", Path.home() / ".cache" / "poolkit")) / "features"


def summary_spec(pooler: Pooler) -> dict | None:
    """The spec of the token pooler whose per-layer summaries serve ``pooler`` (None: it reads token states)."""
    token = pooler.token if pooler.kind == "layer" else pooler
    if token.kind != "token" or not token.summarises or any(True for _ in token.parameters()):
        return None
    return {k: v for k, v in token.get_config().items() if k != "hidden_size"}


def cache_plan(poolers: Sequence[str | dict], hidden_size: int, num_layers: int,
               summaries: Sequence[str | dict] = (), token_dtype: str = "float16", token_cap: int | None = None
               ) -> dict:
    """What a cache for ``poolers`` keeps: {"summaries": token pooler specs, "token_layers": "none" | "last" |
    "all", "token_dtype", "token_cap"}; ``summaries``: token poolers to summarise as well (e.g. the linear
    baseline's mean); ``token_dtype``: float16, or int8 (a quarter of float32's bytes); ``token_cap``: token states
    of each text's first ``token_cap`` tokens only (None: all). docs/scale.md measures what int8 and a cap cost."""
    check_token_options(token_dtype, token_cap)
    specs: list[dict] = [build_pooler(s, hidden_size).get_config() for s in summaries]
    specs = [{k: v for k, v in s.items() if k != "hidden_size"} for s in specs]
    token_layers = "none"
    for spec in poolers:
        pooler = build_pooler(spec, hidden_size, num_layers)
        summary = summary_spec(pooler)
        if summary is None:
            token_layers = "all" if pooler.kind == "layer" or token_layers == "all" else "last"
        elif summary not in specs:
            specs.append(summary)
    return {"summaries": specs, "token_layers": token_layers, "token_dtype": token_dtype, "token_cap": token_cap}


def check_token_options(token_dtype: str, token_cap: int | None) -> None:
    """Refuse a token dtype not in :data:`TOKEN_DTYPES` and a cap below one token."""
    if token_dtype not in TOKEN_DTYPES:
        raise PoolkitError(f"`cache_dtype` must be one of {', '.join(TOKEN_DTYPES)}, got {token_dtype!r}")
    if token_cap is not None and token_cap < 1:
        raise PoolkitError(f"`cache_max_tokens` must be at least 1, got {token_cap}")


def cache_key(model_path: str, texts: Sequence[str], max_length: int, plan: dict = FULL_PLAN) -> str:
    """A digest of the model's files, the texts (count, then each one length-prefixed: no two lists collide),
    ``max_length``, the stored dtype, the plan and :data:`CACHE_VERSION`."""
    settings = {"version": CACHE_VERSION, "model": model_fingerprint(model_path), "max_length": max_length,
                "dtype": np.dtype(DTYPE).name, "plan": plan}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update(len(texts).to_bytes(8, "little"))
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:32]


@dataclass
class FeatureCache:
    """Hidden states for N texts, as the plan keeps them; ``inputs(rows, pooler)`` gives a pooler its input."""

    folder: Path
    tokens: np.ndarray | None  # (L + 1 or 1, total_tokens, D) float16, memory-mapped; None: no token states kept
    offsets: np.ndarray  # (N + 1,) int64: where each text's stored tokens start (with a cap: at most the cap)
    meta: dict
    #: per summarised token pooler (its spec as sorted JSON): (L + 1, N, D) float16, memory-mapped
    summaries: dict[str, np.ndarray] = field(default_factory=dict)
    #: int8 token states: each token vector's float16 scale, (L + 1 or 1, total_tokens); None for float16 states
    scales: np.ndarray | None = None
    #: with a token cap: each text's token count before the cap, (N,) int64; None: the offsets give it
    text_lengths: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        """Each text's token count (before any cap: training batches group by it, so a cap changes no batch)."""
        return np.diff(self.offsets) if self.text_lengths is None else self.text_lengths

    @property
    def num_layers(self) -> int:
        """Transformer layers (hidden states minus the embeddings)."""
        return self.meta["layers"] - 1 if "layers" in self.meta else self.tokens.shape[0] - 1

    @property
    def hidden_size(self) -> int:
        return self.meta["hidden_size"] if "hidden_size" in self.meta else self.tokens.shape[2]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def bytes_per_text(self) -> float:
        """Bytes on disk per text (every file meta.json records)."""
        return sum(f["size"] for f in self.meta["files"].values()) / max(len(self), 1)

    def inputs(self, rows: np.ndarray | list[int], pooler: Pooler) -> tuple[list[torch.Tensor], torch.Tensor]:
        """What ``pooler`` is called with for ``rows``: its summaries as one-token sequences (L + 1 tensors (B, 1, D)
        for a layer pooler, the last layer's for a token pooler; mask all True), else token states (:meth:`batch`)."""
        summary = summary_spec(pooler)
        key = None if summary is None else json.dumps(summary, sort_keys=True)
        if key not in self.summaries:
            return self.batch(rows, all_layers=pooler.kind == "layer")
        rows = np.asarray(rows, dtype=np.int64)
        source = self.summaries[key] if pooler.kind == "layer" else self.summaries[key][-1:]
        states = torch.from_numpy(np.ascontiguousarray(source[:, rows])).float()[:, :, None]  # (L', B, 1, D)
        return list(states.unbind(0)), torch.ones(len(rows), 1, dtype=torch.bool)

    def has_token_states(self, all_layers: bool = True) -> bool:
        """Whether the cache keeps the token states :meth:`batch` reads: every layer's, or (``all_layers`` False)
        the last layer's."""
        return self.tokens is not None and not (all_layers and self.tokens.shape[0] == 1)

    def batch(self, rows: np.ndarray | list[int], all_layers: bool = True) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Rows -> (hidden states: L + 1 tensors (B, T, D) float32, or just the last layer; mask (B, T) bool)."""
        if not self.has_token_states(all_layers):
            raise PoolkitError(f"the feature cache {self.folder.name} keeps "
                               f"{self.meta.get('plan', FULL_PLAN)['token_layers']} token layers: build it for the "
                               "poolers that read them (encode_features(poolers=...))")
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.offsets[rows + 1] - self.offsets[rows]  # the tokens stored
        width = int(lengths.max())
        positions = np.arange(width)
        mask = positions[None, :] < lengths[:, None]
        index = self.offsets[rows][:, None] + np.minimum(positions[None, :], lengths[:, None] - 1)
        layers = slice(None) if all_layers else slice(-1, None)
        gathered = torch.from_numpy(np.ascontiguousarray(self.tokens[layers][:, index])).float()  # (L', B, T, D)
        if self.scales is not None:
            gathered *= torch.from_numpy(np.ascontiguousarray(self.scales[layers][:, index])).float()[..., None]
        return list(gathered.unbind(0)), torch.from_numpy(mask)


class DamagedCache(Exception):
    """A cache folder whose files do not match its meta.json (the message says how)."""


def open_cache(folder: Path, verify: bool = True) -> FeatureCache:
    """The cache in ``folder``; ``verify`` checks every file's size and SHA-256 against meta.json
    (raises :class:`DamagedCache`)."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        recorded = meta["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DamagedCache(f"meta.json unreadable ({type(err).__name__})") from None
    if verify:
        for name in recorded:
            path = folder / name
            if not path.is_file():
                raise DamagedCache(f"{name} missing")
            if path.stat().st_size != recorded.get(name, {}).get("size"):
                raise DamagedCache(f"{name} has {path.stat().st_size} bytes, not {recorded.get(name, {}).get('size')}")
            if file_digest(path) != recorded[name].get("sha256"):
                raise DamagedCache(f"{name} fails its checksum")
    try:
        tokens = np.load(folder / "tokens.npy", mmap_mode="r") if "tokens.npy" in recorded else None
        offsets = np.load(folder / "offsets.npy")
        summaries = {json.dumps(spec, sort_keys=True): np.load(folder / f"summary_{k}.npy", mmap_mode="r")
                     for k, spec in enumerate(meta["plan"]["summaries"])}
        scales = np.load(folder / "token_scales.npy", mmap_mode="r") if "token_scales.npy" in recorded else None
        text_lengths = np.load(folder / "text_lengths.npy") if "text_lengths.npy" in recorded else None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DamagedCache(f"unreadable ({err})") from None
    return FeatureCache(folder, tokens, offsets, meta, summaries, scales, text_lengths)


def clean_staging(root: Path) -> list[Path]:
    """Remove the staging folders of runs that are gone (their lock is free); -> the folders removed. Only folders
    that poolkit made (``io.made_by_poolkit``) named after a cache key: a user's ``notes.tmp/`` stays."""
    removed = []
    for staging in root.glob(f"*{TMP_SUFFIX}"):
        if not (is_cache_name(staging.name[: -len(TMP_SUFFIX)]) and made_by_poolkit(staging)):
            continue
        try:
            with FileLock(root / (staging.name[: -len(TMP_SUFFIX)] + LOCK), timeout=0):
                shutil.rmtree(staging, ignore_errors=True)
                removed.append(staging)
        except Timeout:  # a live run is building it
            continue
    return removed


def encode_features(texts: list[str], model: str | None = None, max_length: int = 256, batch_size: int = 32,
                    cache_dir: str | Path | None = None, progress: bool = True,
                    device: str | torch.device | None = None, cache: bool = True,
                    trust_remote_code: bool | None = None, poolers: Sequence[str | dict] | None = None,
                    summaries: Sequence[str | dict] = (), token_dtype: str = "float16",
                    token_cap: int | None = None) -> FeatureCache | None:
    """Run the encoder once over ``texts`` (length-sorted batches, inference mode) and cache what ``poolers``
    read (:func:`cache_plan`; ``summaries``: token poolers summarised as well; ``token_dtype``: float16 or int8
    token states; ``token_cap``: token states of each text's first ``token_cap`` tokens only), or every layer's
    token states when ``poolers`` is None.

    Returns the cache: reused when an intact one with the same key exists, else built in a staging folder and
    renamed into place, under a lock so that concurrent runs on the same data encode once. ``cache=False``:
    neither read nor written (the features live in a temporary folder removed with the returned object). Under
    ``torchrun`` / ``accelerate launch`` each process encodes its share and only rank 0 gets the cache (the
    others: None; see the module docstring).
    ``progress``: also prints the cache's bytes per text.
    """
    model_path = resolve_model(model)
    trust = check_model_folder(model_path, trust_remote_code)
    check_token_options(token_dtype, token_cap)
    plan = {**FULL_PLAN, "token_dtype": token_dtype, "token_cap": token_cap}
    if poolers is not None:
        config = load_config(model_path, trust)
        plan = cache_plan(poolers, config.hidden_size, config.num_hidden_layers, summaries, token_dtype, token_cap)
        if any(s["name"] == "last" for s in plan["summaries"]) and adds_no_eos(load_tokenizer(model_path, trust)):
            plan["append_eos"] = True  # the EOS a decoder embedder is pooled at, as TextEncoder appends it
    features = _cached(texts, model_path, max_length, batch_size, cache_dir, progress, device, cache, trust, plan)
    if progress and features is not None:
        print(f"feature cache: {features.bytes_per_text() / 1024:.1f} KiB per text ({_describe(plan)})", flush=True)
    return features


def _describe(plan: dict) -> str:
    names = ", ".join(s["name"] for s in plan["summaries"]) or "none"
    eos = " (last: at an appended EOS)" if plan.get("append_eos") else ""
    cap = f", first {plan['token_cap']} tokens per text" if plan.get("token_cap") else ""
    return (f"per-layer summaries: {names}{eos}; token states: {plan['token_layers']} layers, "
            f"{plan['token_dtype']}{cap}")


def _cached(texts: list[str], model_path: str, max_length: int, batch_size: int, cache_dir: str | Path | None,
            progress: bool, device: str | torch.device | None, cache: bool, trust: bool, plan: dict
            ) -> FeatureCache | None:
    """The cache for ``plan``: reused, or encoded (see :func:`encode_features`); with several processes, each
    encodes its share (see the module docstring)."""
    from .processes import launch_id, process_device, process_rank, read_json, wait_for

    rank, world = process_rank()
    if world > 1 and not cache:
        raise PoolkitError("`cache=False` cannot be used under torchrun / accelerate launch: the processes share "
                           "their encoding through the feature cache; drop `cache=False` (or run one process)")
    device = process_device(world) if world > 1 else device
    if not cache:
        scratch = Path(tempfile.mkdtemp(prefix="poolkit-features-"))
        features = open_cache(_encode(texts, model_path, max_length, batch_size, scratch, progress, device, trust,
                                      plan), verify=False)
        weakref.finalize(features, shutil.rmtree, scratch, True)
        return features
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = cache_key(model_path, texts, max_length, plan)
    folder, signal = root / key, root / (key + LAUNCH)
    try:
        check_writable(root, "`cache_dir`")
    except PoolkitError as err:  # a shared, read-only cache: read what it holds, write nothing
        if not folder.is_dir():
            raise PoolkitError(f"{err} (it holds no cache for these texts and settings)") from None
        try:
            features = open_cache(folder)
        except DamagedCache as damage:
            raise PoolkitError(f"feature cache {folder} is damaged ({damage}) and {root} cannot be written to "
                               "rebuild it: choose another `cache_dir`") from None
        return features if rank == 0 else None
    root.mkdir(parents=True, exist_ok=True)
    clean_staging(root)
    bounds = [len(texts) * r // world for r in range(world + 1)]

    def encode_share(r: int, staging: Path) -> Path:
        part = staging / f"part-{r}"
        part.mkdir()
        return _encode(texts[bounds[r]:bounds[r + 1]], model_path, max_length, batch_size, part, progress and r == 0,
                       device, trust, plan)

    if rank != 0:
        wait_for(lambda: (read_json(signal) or {}).get("launch") == launch_id(), f"rank 0's word in {signal}")
        if read_json(signal)["encode"]:
            encode_share(rank, temp_dir(folder, create=False))
        return None
    with FileLock(root / (key + LOCK)):
        if folder.exists():
            try:
                features = open_cache(folder)
                if world > 1:
                    atomic_write_json(signal, {"launch": launch_id(), "encode": False})
                return features
            except DamagedCache as err:
                print(f"feature cache {folder} is damaged ({err}): rebuilding it", file=sys.stderr, flush=True)
        staging = temp_dir(folder)
        try:
            if world == 1:
                _encode(texts, model_path, max_length, batch_size, staging, progress, device, trust, plan)
            else:
                atomic_write_json(signal, {"launch": launch_id(), "encode": True})
                parts = [encode_share(0, staging)] + [staging / f"part-{r}" for r in range(1, world)]
                wait_for(lambda: all(read_json(p / "meta.json") for p in parts),
                         f"the other processes' parts in {staging}")
                _join(parts, staging)
            replace_dir(staging, folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return open_cache(folder, verify=False)


def _encode(texts: list[str], model_path: str, max_length: int, batch_size: int, folder: Path, progress: bool,
            device: str | torch.device | None, trust: bool, plan: dict = FULL_PLAN) -> Path:
    """Encode into ``folder`` what ``plan`` keeps (tokens.npy, summary_K.npy, offsets.npy), then meta.json with
    sizes and checksums."""
    tokenizer = load_tokenizer(model_path, trust)
    tokenizer.padding_side = "right"  # the copy loop below keeps each row's first `length` positions
    encoder = load_encoder(model_path, trust).eval()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    encoder.to(device)
    eos = bool(plan.get("append_eos"))
    if eos and (plan["token_layers"] != "none" or any(s["name"] != "last" for s in plan["summaries"])) \
            and not is_causal(encoder, tokenizer, device):
        raise PoolkitError(f"`last` is pooled at an EOS appended to each text (the tokenizer adds none), and "
                           f"{model_path} attends both ways, so that EOS would change the states the other poolers "
                           "read: compare `last` in a run of its own (with `baseline` off), or the others without it")
    started = time.perf_counter()  # the encoder's own cost: tokenising + the forward passes, not loading it
    sampler, batches = sorted_token_batches(tokenizer, texts, max_length, batch_size, device, append_eos=eos)
    own = sampler.lengths - eos  # each text's own tokens: an appended EOS is read by `last` alone
    lengths = own if plan.get("token_cap") is None else np.minimum(own, plan["token_cap"])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # the tokens kept
    layers, hidden = encoder.config.num_hidden_layers + 1, encoder.config.hidden_size
    kept = {"none": 0, "last": 1, "all": layers}[plan["token_layers"]]
    int8 = plan["token_dtype"] == "int8"
    planned = {"tokens.npy": (np.int8 if int8 else DTYPE, (kept, int(offsets[-1]), hidden)) if kept else None,
               "token_scales.npy": (DTYPE, (kept, int(offsets[-1]))) if kept and int8 else None,
               **{f"summary_{k}.npy": (DTYPE, (layers, len(texts), hidden)) for k in range(len(plan["summaries"]))}}
    planned = {name: plan_ for name, plan_ in planned.items() if plan_ is not None}
    check_free_space(folder, sum(np.dtype(dtype).itemsize * math.prod(shape) for dtype, shape in planned.values()))
    arrays = {name: reserved_memmap(folder / name, dtype, shape) for name, (dtype, shape) in planned.items()}
    tokens, scales = arrays.get("tokens.npy"), arrays.get("token_scales.npy")
    poolers = [build_pooler(spec, hidden).to(device) for spec in plan["summaries"]]
    summaries = [arrays[f"summary_{k}.npy"] for k in range(len(poolers))]
    bar = progress_bar(total=len(texts), desc="encoding (all layers, once)", unit="text", disable=not progress)
    with torch.inference_mode():
        for rows, batch in batches:
            states = encoder(**batch, output_hidden_states=True).hidden_states
            mask = own_mask = batch["attention_mask"]
            if eos:  # right padding: each row's last real position is its EOS (on a causal model no other state
                own_mask = mask.clone()  # depends on it)
                own_mask[torch.arange(len(rows)), mask.sum(1) - 1] = 0
            for pooler, summary in zip(poolers, summaries):  # pooled from the float32 states, then stored
                read = mask if pooler.name == "last" else own_mask
                pooled = torch.stack([pooler(h, read) for h in states])  # (L + 1, B, D)
                summary[:, rows] = pooled.to(torch.float16).cpu().numpy()
            if tokens is not None:
                stacked, scale = _stored_tokens(torch.stack(states[-kept:]), int8)  # (kept, B, T, D), (kept, B, T)
                for j, row in enumerate(rows):  # keep the (first ``cap``) real tokens only (right padding)
                    tokens[:, offsets[row]:offsets[row + 1]] = stacked[:, j, : lengths[row]]
                    if scales is not None:
                        scales[:, offsets[row]:offsets[row + 1]] = scale[:, j, : lengths[row]]
            bar.update(len(rows))
    bar.close()
    encode_ms_per_1k = round((time.perf_counter() - started) * 1e6 / max(len(texts), 1), 3)
    for array in arrays.values():
        array.flush()
    del tokens, summaries, scales, arrays
    np.save(folder / "offsets.npy", offsets)
    if plan.get("token_cap") is not None:
        np.save(folder / "text_lengths.npy", np.asarray(own, dtype=np.int64))
    _write_meta(folder, {"version": CACHE_VERSION, "model": model_path, "max_length": max_length, "texts": len(texts),
                         "layers": layers, "hidden_size": hidden, "tokens": int(offsets[-1]),
                         "dtype": np.dtype(DTYPE).name, "plan": plan, "encode_ms_per_1k": encode_ms_per_1k,
                         "encode_device": device.type, "encode_batch_size": batch_size,
                         "encode_threads": torch.get_num_threads()})
    return folder


#: the fixes named when the cache does not fit on its disk
MORE_SPACE = ("free some space, give another `cache_dir`, or make the cache smaller (`cache_dtype` int8, "
              "`cache_max_tokens`)")


def check_free_space(folder: Path, needed: int) -> None:
    """Refuse, in one line and before any encoding, a cache larger than the free space where it is built."""
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise PoolkitError(f"the feature cache needs {size(needed)} and {folder.parent} has {size(free)} free: "
                           f"{MORE_SPACE}")


def reserved_memmap(path: Path, dtype: Any, shape: tuple[int, ...]) -> np.memmap:
    """A new .npy memmap of ``shape`` whose blocks are allocated on disk first (``posix_fallocate``), so that a disk
    filling up while it is written is a one-line error here, not a bus error (SIGBUS) from a page the kernel cannot
    back."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    try:
        with open(path, "r+b") as handle:
            os.posix_fallocate(handle.fileno(), 0, os.fstat(handle.fileno()).st_size)
    except OSError as err:
        del array
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise PoolkitError(f"no space left for the feature cache's {path.name} in {path.parent.parent}: "
                               f"{MORE_SPACE}") from None
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system that cannot reserve: write as before
            raise
    return array


def _write_meta(folder: Path, meta: dict) -> None:
    """meta.json, written last: ``meta`` plus the bytes per text and every .npy file's size and SHA-256."""
    names = sorted(f.name for f in folder.glob("*.npy"))
    files = {name: {"size": (folder / name).stat().st_size, "sha256": file_digest(folder / name)} for name in names}
    meta = {**meta, "bytes_per_text": round(sum(f["size"] for f in files.values()) / max(meta["texts"], 1), 1),
            "files": files}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))


def _join(parts: list[Path], folder: Path) -> None:
    """The caches in ``parts`` (consecutive shares of the texts) as one cache in ``folder``: every array joined
    along its texts' / tokens' axis a slice at a time, the offsets shifted; then the parts are removed."""
    metas = [json.loads((part / "meta.json").read_text()) for part in parts]
    lengths = np.concatenate([np.diff(np.load(part / "offsets.npy")) for part in parts])
    np.save(folder / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    for name in metas[0]["files"]:
        if name == "offsets.npy":
            continue
        arrays = [np.load(part / name, mmap_mode="r") for part in parts]
        axis = 0 if arrays[0].ndim == 1 else 1  # text_lengths (N,); tokens, scales, summaries: (layers, N or T, ...)
        shape = list(arrays[0].shape)
        shape[axis] = sum(a.shape[axis] for a in arrays)
        joined = reserved_memmap(folder / name, arrays[0].dtype, tuple(shape))
        at = 0
        for array in arrays:
            for start in range(0, array.shape[axis], JOIN_CHUNK):
                piece = array[start:start + JOIN_CHUNK] if axis == 0 else array[:, start:start + JOIN_CHUNK]
                target = slice(at + start, at + start + piece.shape[axis])
                joined[(target,) if axis == 0 else (slice(None), target)] = piece
            at += array.shape[axis]
        joined.flush()
        del joined, arrays
    for part in parts:
        shutil.rmtree(part)
    _write_meta(folder, {**metas[0], "texts": sum(m["texts"] for m in metas), "tokens": int(lengths.sum())})


def _stored_tokens(states: torch.Tensor, int8: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Token states as stored: float16, or int8 with each vector's float16 scale (its largest magnitude / 127,
    rounded to float16 before quantising, so that dequantising multiplies by exactly the scale used)."""
    if not int8:
        return states.to(torch.float16).cpu().numpy(), None
    scale = (states.abs().amax(-1) / 127).clamp_min(1e-8).to(torch.float16).float()
    quantised = torch.round(states.float() / scale[..., None]).clamp(-127, 127).to(torch.int8)
    return quantised.cpu().numpy(), scale.to(torch.float16).cpu().numpy()


def is_cache_folder(folder: Path) -> bool:
    """Whether ``folder`` is a cache poolkit wrote, damaged or not: a real folder named by a cache key that holds
    only the files a cache has (meta.json and .npy arrays). Anything else under a cache folder is the user's:
    never listed, never removed."""
    if not (folder.is_dir() and not folder.is_symlink() and is_cache_name(folder.name)):
        return False
    return all(entry.is_file() and not entry.is_symlink() and (entry.name == "meta.json" or entry.suffix == ".npy")
               for entry in folder.iterdir())


def list_caches(cache_dir: str | Path | None = None) -> list[dict]:
    """Every cache folder under ``cache_dir`` (:func:`is_cache_folder`): its path, size in bytes and meta.json (``{}``
    when unreadable)."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entries = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not is_cache_folder(folder):
            continue
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        entries.append({"path": folder, "bytes": size, "meta": meta})
    return entries


def clear_caches(cache_dir: str | Path | None = None) -> tuple[int, list[Path]]:
    """Remove every cache folder under ``cache_dir`` not in use, and staging folders left by killed runs;
    -> (how many caches were removed, the ones in use and kept). Empty lock files stay; a removed cache's
    ``<key>.launch.json`` goes with it."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    removed, busy = 0, []
    for entry in list_caches(root):
        folder = entry["path"]
        try:
            with FileLock(root / (folder.name + LOCK), timeout=0):
                shutil.rmtree(folder)
                (root / (folder.name + LAUNCH)).unlink(missing_ok=True)
                removed += 1
        except Timeout:
            busy.append(folder)
    if root.is_dir():
        clean_staging(root)
    return removed, busy
