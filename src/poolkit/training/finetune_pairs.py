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
- Several processes (``torchrun`` / ``accelerate launch``): each optimizer step's batch is split across them as
  train splits its batches, and the loss is the whole batch's: every process gathers the others' vectors (their
  gradients flow back to the process that made them, :func:`gather`), so a query's in-batch negatives are every
  document of the step, as in one process.

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

from ..data.batching import LengthGroupedBatchSampler, TextCollator, sorted_token_batches
from ..data.pairs import RetrievalData, pair_folds, pair_split
from ..errors import PoolkitError
from ..models.encoders import appends_eos
from ..io import atomic_write_content
from .config import TrainConfig
from .contrastive import PairBatch, PairLayout, pair_loss, training_items, unit_metrics
from .cv import CV_PROTOCOL
from .finetune import _Fold, _Run, _ShortBatchLast, fit_run


def fit_pairs(config: TrainConfig, layout: PairLayout, out_dir: str | Path, resume: bool = False, force: bool = False,
              progress: bool = True, refit_epochs: float | None = None) -> dict[str, Any]:
    """Fine-tune one encoder + pooler per fold on a table of pairs and write the output folder (see the module doc);
    returns metrics.json's dict (``resume``, ``force`` and ``refit_epochs``, every unit then: as
    :func:`poolkit.training.finetune.fit`'s)."""
    return fit_run(_PairRun, config, layout, out_dir, resume, force, progress, refit_epochs)


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
    """Training items -> both sides of their :class:`poolkit.training.contrastive.PairBatch` tokenised (``first``,
    ``second``: input_ids / attention_mask, ...), the ``items`` themselves and the text rows of the second side
    (``second_rows``): what the loss of the whole step's batch is built from."""

    def __init__(self, layout: PairLayout, tokenizer, max_length: int, padding: str, append_eos: bool = False) -> None:
        self.layout = layout
        self.collate = TextCollator(tokenizer, max_length, padding, append_eos)

    def tokens(self, rows: np.ndarray) -> dict[str, torch.Tensor]:
        return self.collate([(self.layout.texts[i], None) for i in rows])

    def __call__(self, items: list[np.ndarray]) -> dict[str, Any]:
        items = np.stack(items)
        batch = PairBatch.of(self.layout, items)
        return {"first": self.tokens(batch.first), "second": self.tokens(batch.second),
                "items": torch.from_numpy(items), "second_rows": torch.from_numpy(batch.second)}


def gather(tensor: torch.Tensor, processes: int) -> torch.Tensor:
    """Every process's ``tensor`` (sizes may differ along dim 0) joined in rank order, with autograd: a process's
    gradient reaches the process that made each part (summed over the processes, each computing the same loss; DDP
    then averages, which leaves the whole batch's gradient). One process: ``tensor`` itself."""
    if processes == 1:
        return tensor
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_gather

    sizes = [torch.zeros(1, dtype=torch.int64, device=tensor.device) for _ in range(processes)]
    dist.all_gather(sizes, torch.tensor([len(tensor)], device=tensor.device))
    sizes = [int(size) for size in sizes]
    padded = torch.cat([tensor, tensor.new_zeros(max(sizes) - len(tensor), *tensor.shape[1:])])
    return torch.cat([part[:size] for part, size in zip(all_gather(padded), sizes)])


def whole_batch_loss(layout: PairLayout, items: torch.Tensor, first: torch.Tensor, second: torch.Tensor,
                     second_rows: torch.Tensor, processes: int) -> torch.Tensor:
    """The contrastive loss of one optimizer step's batch: every process's ``items`` together, each side's vectors
    gathered (``first`` follows the items; ``second`` this process's :class:`PairBatch` second side, of text rows
    ``second_rows``, each document of the whole batch read from the first process that has it)."""
    whole = PairBatch.of(layout, gather(items.to(first.device), processes).cpu().numpy())
    rows = gather(second_rows.to(first.device), processes).cpu().numpy()
    seen = {}
    for position, row in enumerate(rows.tolist()):
        seen.setdefault(row, position)
    pick = torch.tensor([seen[row] for row in whole.second.tolist()], device=first.device)
    return pair_loss(gather(first, processes), gather(second, processes)[pick], whole.positives, whole.left_out,
                     whole.scores)


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
                            collate_fn=PairCollator(layout, run.tokenizer, config.max_length, config.padding,
                                                    appends_eos(model.pooler, run.tokenizer)))
        return loader, {}

    def loss(self, batch: dict[str, Any]) -> torch.Tensor:
        first = self.model(**batch["first"]).pooled.float()
        second = self.model(**batch["second"]).pooled.float()
        return whole_batch_loss(self.run.data, batch["items"], first, second, batch["second_rows"],
                                self.accelerator.num_processes)

    def embed(self, rows: np.ndarray) -> torch.Tensor:
        """The current model's vectors (len(rows), D) float32 of ``layout.texts[rows]``, in eval mode."""
        model = self.accelerator.unwrap_model(self.model)
        training = model.training
        model.eval()
        texts = [self.run.data.texts[i] for i in rows]
        sampler, batches = sorted_token_batches(self.run.tokenizer, texts, self.config.max_length,
                                                self.config.batch_size, self.accelerator.device,
                                                append_eos=appends_eos(model.pooler, self.run.tokenizer))
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
