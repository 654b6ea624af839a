"""Encode once, pool many times: every hidden layer of a frozen encoder over a dataset, cached on disk.

The cache holds only real tokens (no padding), float16, memory-mapped: ``tokens.npy`` is
(L + 1, total_tokens, D) with the embeddings first, ``offsets.npy`` (N + 1,) says where each text's
tokens start. A batch is gathered back into padded (B, T, D) tensors with a mask, padded only to the
batch's longest text. The folder is named by a hash of the model, the texts and ``max_length``, so a
second run on the same data reuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.batching import sorted_token_batches
from ..models.encoders import load_encoder, load_tokenizer, resolve_model

CACHE_VERSION = 1


def default_cache_dir() -> Path:
    return Path(os.environ.get("POOLKIT_CACHE", Path.home() / ".cache" / "poolkit")) / "features"


def cache_key(model_path: str, texts: list[str], max_length: int) -> str:
    digest = hashlib.sha256(f"v{CACHE_VERSION}|{model_path}|{max_length}|{len(texts)}".encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()[:24]


@dataclass
class FeatureCache:
    """Hidden states of every layer for N texts; ``batch(rows)`` gives padded tensors for a pooler."""

    folder: Path
    tokens: np.ndarray  # (L + 1, total_tokens, D) float16, memory-mapped
    offsets: np.ndarray  # (N + 1,) int64
    meta: dict

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_layers(self) -> int:
        """Transformer layers (hidden states minus the embeddings)."""
        return self.tokens.shape[0] - 1

    @property
    def hidden_size(self) -> int:
        return self.tokens.shape[2]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def batch(self, rows: np.ndarray | list[int], all_layers: bool = True) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Rows -> (hidden states: L + 1 tensors (B, T, D) float32, or just the last layer; mask (B, T) bool)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        width = int(lengths.max())
        positions = np.arange(width)
        mask = positions[None, :] < lengths[:, None]
        index = self.offsets[rows][:, None] + np.minimum(positions[None, :], lengths[:, None] - 1)
        source = self.tokens if all_layers else self.tokens[-1:]
        gathered = torch.from_numpy(np.ascontiguousarray(source[:, index])).float()  # (L', B, T, D)
        return list(gathered.unbind(0)), torch.from_numpy(mask)


def open_cache(folder: Path) -> FeatureCache:
    meta = json.loads((folder / "meta.json").read_text())
    tokens = np.load(folder / "tokens.npy", mmap_mode="r")
    offsets = np.load(folder / "offsets.npy")
    return FeatureCache(folder, tokens, offsets, meta)


def encode_features(texts: list[str], model: str | None = None, max_length: int = 256, batch_size: int = 32,
                    cache_dir: str | Path | None = None, progress: bool = True,
                    device: str | torch.device | None = None) -> FeatureCache:
    """Run the encoder once over ``texts`` (length-sorted batches, inference mode) and cache every layer.

    Returns the cache (reused if an identical one exists). Written to a temporary folder first and renamed
    into place, so an interrupted run never leaves a half-written cache behind.
    """
    model_path = resolve_model(model)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / cache_key(model_path, texts, max_length)
    if (folder / "meta.json").exists():
        return open_cache(folder)

    tokenizer = load_tokenizer(model_path)
    tokenizer.padding_side = "right"  # the copy loop below keeps each row's first `length` positions
    encoder = load_encoder(model_path).eval()
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    encoder.to(device)
    sampler, batches = sorted_token_batches(tokenizer, texts, max_length, batch_size, device)
    lengths = sampler.lengths
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    layers = encoder.config.num_hidden_layers + 1
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        tokens = np.lib.format.open_memmap(staging / "tokens.npy", mode="w+", dtype=np.float16,
                                           shape=(layers, int(offsets[-1]), encoder.config.hidden_size))
        bar = tqdm(total=len(texts), desc="encoding (all layers, once)", unit="text", disable=not progress)
        with torch.inference_mode():
            for rows, batch in batches:
                states = encoder(**batch, output_hidden_states=True).hidden_states
                stacked = torch.stack(states).to(torch.float16).cpu().numpy()  # (L + 1, B, T, D)
                for j, row in enumerate(rows):  # keep the real tokens only (right padding)
                    tokens[:, offsets[row]:offsets[row + 1]] = stacked[:, j, : lengths[row]]
                bar.update(len(rows))
        bar.close()
        tokens.flush()
        del tokens
        np.save(staging / "offsets.npy", offsets)
        meta = {"version": CACHE_VERSION, "model": model_path, "max_length": max_length, "texts": len(texts),
                "layers": layers, "hidden_size": encoder.config.hidden_size, "tokens": int(offsets[-1])}
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        try:
            os.replace(staging, folder)
        except OSError:  # another run finished the same cache first
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return open_cache(folder)
