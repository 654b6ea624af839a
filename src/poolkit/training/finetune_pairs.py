"""Fine-tuning encoder + pooler for embeddings (``poolkit train --task retrieval|similarity``, and compare's
``finetune_top`` for those tasks): the fold loop of :mod:`poolkit.training.finetune` (accelerate, layer-wise rates,
warmup, accumulation, early stopping, resume, the run folder) with the contrastive losses of
:mod:`poolkit.training.contrastive` in place of a head's.

- Folds are compare's for these tasks (:func:`poolkit.data.pairs.pair_folds`): queries (retrieval) or pairs grouped
  by their first text (similarity); each fold's training units are split (:func:`poolkit.data.pairs.pair_split`,
  seed ``seed + fold``) into those it is fit on and those that choose the checkpoint.
- A batch is ``batch_size`` training items (a query and one of its relevant documents, or a pair); both sides go
  through the same encoder + pooler. Each evaluation encodes the validation queries and the **whole corpus** again
  (similarity: the validation pairs), and the checkpoint is chosen by their metric, the untrained model (epoch 0)
  among the candidates; the test units are scored once, by the best checkpoint, ranked against the whole corpus.
- One process: under several, in-batch negatives would be cut into per-process shares (refused in one line).

The output folder is train's without ``oof.csv``: ``fold_K/`` holds a PooledModel with no head (it loads in
``TextEncoder``, ``embed`` and ``evaluate``) and test_outputs.npz the fold's units (``test_rows``, ``fit_rows``,
``val_rows``: indices of queries, or of pairs).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..data.batching import LengthGroupedBatchSampler, sorted_token_batches
from ..data.pairs import RetrievalData, pair_folds, pair_split
from ..errors import PoolkitError
from ..io import atomic_write_content
from .config import TrainConfig
from .contrastive import PairBatch, PairLayout, pair_loss, training_items, unit_metrics
from .cv import CV_PROTOCOL
from .finetune import _Fold, _Run, _ShortBatchLast, fit_run


def fit_pairs(config: TrainConfig, layout: PairLayout, out_dir: str | Path, resume: bool = False, force: bool = False,
              progress: bool = True) -> dict[str, Any]:
    """Fine-tune one encoder + pooler per fold on a table of pairs and write the output folder (see the module doc);
    returns metrics.json's dict (``resume`` and ``force`` as :func:`poolkit.training.finetune.fit`'s)."""
    return fit_run(_PairRun, config, layout, out_dir, resume, force, progress)


def pairs_sha1(layout: PairLayout) -> str:
    """SHA-1 of a table of pairs: its task, distinct texts and which of them pair up how (relevance and hard
    negatives, or scores); a resume must match it."""
    data = layout.data
    digest = hashlib.sha1(layout.task.encode())
    for text in layout.texts:
        digest.update(text.encode() + b"\0")
    digest.update(np.concatenate([layout.first, layout.second]).tobytes())
    if isinstance(data, RetrievalData):
        digest.update(json.dumps([[sorted(r) for r in data.relevant], [sorted(n) for n in data.negatives]]).encode())
    else:
        digest.update(np.ascontiguousarray(data.scores).tobytes())
    return digest.hexdigest()


class PairCollator:
    """Training items -> both sides tokenised (``first``, ``second``: input_ids / attention_mask, ...) and what the
    loss reads (``positives`` / ``left_out``, or ``scores``; see :class:`poolkit.training.contrastive.PairBatch`)."""

    def __init__(self, layout: PairLayout, tokenizer, max_length: int, padding: str) -> None:
        self.layout, self.tokenizer, self.max_length, self.padding = layout, tokenizer, max_length, padding

    def tokens(self, rows: np.ndarray) -> dict[str, torch.Tensor]:
        return dict(self.tokenizer([self.layout.texts[i] for i in rows], padding=self.padding, truncation=True,
                                   max_length=self.max_length, return_tensors="pt"))

    def __call__(self, items: list[np.ndarray]) -> dict[str, Any]:
        batch = PairBatch.of(self.layout, np.stack(items))
        extra = {name: getattr(batch, name) for name in ("positives", "left_out", "scores")
                 if getattr(batch, name) is not None}
        return {"first": self.tokens(batch.first), "second": self.tokens(batch.second), **extra}


class _Items(Dataset):
    def __init__(self, items: np.ndarray) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.items[i]


class _PairRun(_Run):
    """The folds of a table of pairs: units instead of rows, no out-of-fold outputs."""

    def __init__(self, config: TrainConfig, layout: PairLayout, out: Path, show: bool, state) -> None:
        if state.num_processes > 1:
            raise PoolkitError(f"fine-tuning for {layout.task} runs in one process (its in-batch negatives would be "
                               "split across processes): run it without torchrun / accelerate launch")
        if config.frozen_head:
            raise PoolkitError(f"`frozen_head` trains a head first, and a {layout.task} model has none: leave it at 0")
        super().__init__(config, layout, out, show, state)

    def data_fingerprint(self) -> dict[str, Any]:
        return {"cv_protocol": CV_PROTOCOL, "config": self.config.to_dict(), "data_sha1": pairs_sha1(self.data)}

    def cross_validation(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        config, data = self.config, self.data.data
        splits = []
        for k, (train, test) in enumerate(pair_folds(data, config.folds, config.val_fraction, config.seed)):
            fit, val = pair_split(data, train, config.val_fraction, config.seed + k)
            splits.append((fit, val, test))
        return splits

    def new_fold(self, k: int, rows: tuple[np.ndarray, np.ndarray, np.ndarray], work: Path) -> _PairFold:
        return _PairFold(self, k, *rows, work)

    def out_of_fold(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        return {}  # every query is ranked against the whole corpus: there is no table of outputs to pool

    def write_results(self, results: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        atomic_write_content(self.out / "metrics.json", json.dumps(summary, indent=2) + "\n")


class _PairFold(_Fold):
    """One fold of a table of pairs: batches of training items, the contrastive loss, embeddings for the metrics.
    The encoder as it comes (epoch 0) is a candidate of the checkpoint choice: a pretrained embedder may already be
    better than what a few epochs on this data make of it."""

    start_is_a_candidate = True

    def loaders(self, model) -> tuple[DataLoader, dict[str, DataLoader]]:
        run, config, layout = self.run, self.config, self.run.data
        items = training_items(layout, self.fit_rows)
        lengths = [len(layout.texts[layout.first[item[0]]]) for item in items]
        self.sampler = LengthGroupedBatchSampler(lengths, config.batch_size, shuffle=True, seed=config.seed + self.k)
        loader = DataLoader(_Items(items), batch_sampler=_ShortBatchLast(self.sampler),
                            collate_fn=PairCollator(layout, run.tokenizer, config.max_length, config.padding))
        return loader, {}

    def loss(self, batch: dict[str, Any]) -> torch.Tensor:
        first = self.model(**batch["first"]).pooled.float()
        second = self.model(**batch["second"]).pooled.float()
        return pair_loss(first, second, batch.get("positives"), batch.get("left_out"), batch.get("scores"))

    def embed(self, rows: np.ndarray) -> torch.Tensor:
        """The current model's vectors (len(rows), D) float32 of ``layout.texts[rows]``, in eval mode."""
        model = self.accelerator.unwrap_model(self.model)
        training = model.training
        model.eval()
        texts = [self.run.data.texts[i] for i in rows]
        sampler, batches = sorted_token_batches(self.run.tokenizer, texts, self.config.max_length,
                                                self.config.batch_size, self.accelerator.device)
        out = []
        with torch.inference_mode(), self.accelerator.autocast():
            for _, batch in batches:
                out.append(model(**batch).pooled.float().cpu())
        model.train(training)
        return sampler.restore(torch.cat(out)) if out else torch.zeros(0, model.pooler.output_dim)

    def validation(self) -> tuple[dict[str, float], bool]:
        vectors: list[torch.Tensor] = []

        def embed(rows: np.ndarray) -> torch.Tensor:
            vectors.append(self.embed(rows))
            return vectors[-1]

        metrics = unit_metrics(self.run.data, self.val_rows, embed)
        return metrics, all(bool(torch.isfinite(v).all()) for v in vectors)

    def test(self) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        return unit_metrics(self.run.data, self.test_rows, self.embed), {}
