"""Length-grouped batching with dynamic padding, so a batch pads only to its own longest text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from poolkit.data import PADDINGS
from poolkit.errors import PoolkitError

if TYPE_CHECKING:  # tables needs pandas; batching itself only torch and numpy
    from poolkit.data.tables import TableData



class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Yields lists of indices whose lengths are close.

    Training (``shuffle=True``): a seeded permutation is cut into mega-buckets of ``mega_batches`` batches,
    each sorted by length and cut into batches, and the batch order is shuffled; every pass draws a new
    order from (seed, epoch). Inference (``shuffle=False``): all indices sorted by length, longest first,
    and :meth:`restore` puts outputs gathered in batch order back in the original row order; ``max_tokens``
    also ends an inference batch before its padded size (rows x its longest length) passes that many tokens
    (a batch holds at least one row), so that the longest texts do not set the memory peak.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        mega_batches: int = 50,
        drop_last: bool = False,
        max_tokens: int | None = None,
    ):
        if batch_size < 1:
            raise PoolkitError(f"batch size must be at least 1, got {batch_size}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.mega_batches = mega_batches
        self.drop_last = drop_last
        self.max_tokens = max_tokens
        self.epoch = 0
        self.order = np.argsort(-self.lengths, kind="stable")  # inference order: longest first

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            yield from self._cut(self.order) if self.max_tokens is None else self._cut_tokens(self.order)
            return
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        perm = rng.permutation(len(self.lengths))
        size = self.batch_size * self.mega_batches
        batches = []
        for start in range(0, len(perm), size):
            bucket = perm[start : start + size]
            batches += self._cut(bucket[np.argsort(-self.lengths[bucket], kind="stable")])
        for b in rng.permutation(len(batches)):
            yield batches[b]

    def _cut(self, indices: np.ndarray) -> list[list[int]]:
        """Consecutive batches of ``indices``; only the last can be short, and ``drop_last`` drops it."""
        batches = [indices[i : i + self.batch_size].tolist() for i in range(0, len(indices), self.batch_size)]
        return batches[:-1] if self.drop_last and batches and len(batches[-1]) < self.batch_size else batches

    def _cut_tokens(self, indices: np.ndarray) -> Iterator[list[int]]:
        """Batches of ``indices`` (longest first) of at most ``batch_size`` rows and ``max_tokens`` padded tokens."""
        start = 0
        while start < len(indices):
            rows = min(self.batch_size, max(1, self.max_tokens // max(int(self.lengths[indices[start]]), 1)))
            yield indices[start:start + rows].tolist()
            start += rows

    def restore(self, outputs):
        """Outputs concatenated in inference batch order (tensor, array or list, length N) -> original row order."""
        if self.shuffle or self.drop_last:
            raise PoolkitError("restore needs the inference order: use shuffle=False and drop_last=False")
        inverse = np.argsort(self.order)
        if isinstance(outputs, torch.Tensor):
            return outputs[torch.from_numpy(inverse).to(outputs.device)]
        if isinstance(outputs, np.ndarray):
            return outputs[inverse]
        return [outputs[i] for i in inverse]


def tokenized(tokenizer, texts: Sequence[str], max_length: int, append_eos: bool = False) -> dict[str, list]:
    """The texts tokenised, unpadded, truncated to ``max_length`` tokens; ``append_eos``: each cut to one token fewer
    and ended by the tokenizer's EOS (attended; other columns repeat their last value), so truncation keeps it."""
    encoded = tokenizer(list(texts), truncation=True, max_length=max(max_length - 1, 1) if append_eos else max_length)
    if append_eos:
        for key, rows in encoded.items():
            end = {"input_ids": tokenizer.eos_token_id, "attention_mask": 1}.get(key)
            for row in rows:
                row.append(row[-1] if end is None and row else end if end is not None else 0)
    return encoded


def sorted_token_batches(tokenizer, texts: Sequence[str], max_length: int, batch_size: int,
                         device: torch.device | str = "cpu",
                         append_eos: bool = False) -> tuple[LengthGroupedBatchSampler, Iterator]:
    """Inference batches: the texts tokenised once, cut into batches of similar token length (longest first),
    each padded on the right to its own longest text and moved to ``device``. ``append_eos``: the tokenizer's EOS
    ends every text, kept by truncation (a decoder embedder's last-token pooling reads it). Right padding: a causal
    decoder's real tokens then never follow a pad, so their positions are those of the text alone.

    A batch holds at most ``batch_size`` times the texts' mean token length in padded tokens (fewer rows where
    the texts are long): its memory is then set by the typical length, which is stable as the data grows, not by
    the longest text, which keeps growing with it.

    Returns the sampler (its ``lengths`` are the token counts; ``restore`` puts outputs gathered in batch order
    back in input order) and an iterator of (rows, batch dict of tensors).
    """
    encoded = tokenized(tokenizer, texts, max_length, append_eos)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    budget = batch_size * max(1, -(-sum(lengths) // max(len(lengths), 1)))  # batch_size x the mean length, rounded up
    sampler = LengthGroupedBatchSampler(lengths, batch_size, shuffle=False, max_tokens=budget)

    def batches() -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
        for rows in sampler:
            batch = tokenizer.pad({k: [encoded[k][i] for i in rows] for k in encoded.keys()}, return_tensors="pt",
                                  padding_side="right")
            yield rows, {k: v.to(device) for k, v in batch.items()}

    return sampler, batches()


class TextDataset(Dataset):
    """(text, target row) pairs of a TableData; target is None when the data has no targets."""

    def __init__(self, texts: Sequence[str], targets: np.ndarray | None = None):
        self.texts = texts
        self.targets = targets

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[str, np.ndarray | None]:
        return self.texts[i], None if self.targets is None else self.targets[i]


class TextCollator:
    """Tokenize (text, target) pairs into input_ids / attention_mask [/ token_type_ids] (B, L) and targets.

    ``padding='longest'`` pads to the batch's longest text (dynamic); ``'max_length'`` pads every batch to
    ``max_length`` (fixed shape, for comparison benchmarks). Texts longer than ``max_length`` are truncated.
    ``append_eos``: the tokenizer's EOS ends every text, kept by truncation (:func:`tokenized`).
    Targets: int64 (B,) class ids, or float32 (B, T) / (B, C).
    """

    def __init__(self, tokenizer, max_length: int = 512, padding: str = "longest", append_eos: bool = False):
        if padding not in PADDINGS:
            raise PoolkitError(f"unknown padding {padding!r}: use one of {', '.join(PADDINGS)}")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.padding = padding
        self.append_eos = append_eos

    def __call__(self, batch: Sequence[tuple[str, np.ndarray | None]]) -> dict[str, torch.Tensor]:
        texts = [text for text, _ in batch]
        out = dict(self.tokenizer.pad(tokenized(self.tokenizer, texts, self.max_length, self.append_eos),
                                      padding=self.padding, max_length=self.max_length, return_tensors="pt"))
        if batch[0][1] is not None:
            out["targets"] = torch.from_numpy(np.stack([target for _, target in batch]))
        return out


def make_loader(
    data: TableData,
    tokenizer,
    batch_size: int,
    train: bool,
    seed: int = 0,
    max_length: int = 512,
    padding: str = "longest",
    num_workers: int = 0,
) -> DataLoader:
    """A DataLoader over ``data`` with length-grouped batches (lengths in characters); for inference, its
    ``batch_sampler.restore`` puts outputs back in row order."""
    sampler = LengthGroupedBatchSampler([len(t) for t in data.texts], batch_size, shuffle=train, seed=seed)
    collate = TextCollator(tokenizer, max_length, padding)
    dataset = TextDataset(data.texts, data.targets)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)
