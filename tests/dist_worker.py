"""The fine-tuning tests' toy task, and the worker of the multi-process test (tests/training/test_distributed.py):

    torchrun --nproc_per_node 2 tests/dist_worker.py JOBS.json

runs each job of JOBS.json in turn in every process: ``{"fit": [MODEL_DIR, OUT_DIR]}`` (the toy task, 2 folds),
``{"pairs": [MODEL_DIR, PAIRS_CSV, OUT_DIR]}`` (retrieval fine-tuning with :data:`PAIR_SETTINGS`),
``{"whole_batch_loss": OUT_PREFIX}`` (:func:`whole_batch_step`'s loss and gradients, to OUT_PREFIX.RANK.pt) or
``{"cli": [ARG, ...]}`` (``poolkit`` with those arguments; a nonzero exit stops the worker with it). One launch for
every job: each process's start (imports, the process group) costs seconds on a small CPU.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from transformers import BertConfig

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import WORDS, tiny_bert_dir  # noqa: E402

from poolkit.data import TableData  # noqa: E402
from poolkit.training.config import TrainConfig  # noqa: E402
from poolkit.training.finetune import fit  # noqa: E402

FILLER = [w for w in WORDS if w not in ("good", "bad")]


def toy_model_dir(folder: Path) -> str:
    """The tiny BERT without dropout, so one and two processes draw no different random masks."""
    path = tiny_bert_dir(folder)
    config = BertConfig.from_pretrained(path)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    config.save_pretrained(path)
    return path


def toy_data(n: int = 40, seed: int = 0) -> TableData:
    """n short texts; the label is the one of 'good' / 'bad' that the text contains (balanced classes)."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for i in range(n):
        words = list(rng.choice(FILLER, size=rng.integers(2, 7)))
        words.insert(int(rng.integers(0, len(words) + 1)), ("bad", "good")[i % 2])
        texts.append(" ".join(words))
        labels.append(i % 2)
    return TableData(texts, np.array(labels, dtype=np.int64), "classification", ["neg", "pos"], ("label",),
                     "text", "toy")


def toy_config(model: str, **overrides) -> TrainConfig:
    """Settings that learn the toy task in a few seconds on a CPU."""
    config = TrainConfig(model=model, epochs=4, batch_size=4, encoder_lr=2e-3, pooler_lr=3e-2, warmup_ratio=0.1,
                         max_length=16, head_dropout=0.0, patience=0, seed=3)
    return replace(config, **overrides)


#: retrieval fine-tuning of the tiny BERT + attention in a few seconds; 2 folds of the test's 40 queries leave 16 fit
#: queries per fold: whole batches of 8, so two processes see the same items as one
PAIR_SETTINGS = {"task": "retrieval", "pooler": "attention", "folds": 2, "epochs": 2, "batch_size": 8,
                 "max_length": 16, "encoder_lr": 1e-3, "pooler_lr": 1e-2, "patience": 0, "seed": 3}


def shared_documents_layout():
    """Six queries over four documents (queries 0 and 3 share document 0, queries 1 and 4 document 1), and the
    vector of every text of the layout (fixed): a step's halves, (0, 1, 2) and (3, 4, 5), share two documents."""
    import torch

    from poolkit.data.pairs import load_pairs
    from poolkit.training.contrastive import PairLayout

    frame = {"text": [f"query {i}" for i in range(6)], "pair": ["doc a", "doc b", "doc c", "doc a", "doc b", "doc d"]}
    layout = PairLayout.of(load_pairs(pd.DataFrame(frame), "retrieval"))
    return layout, torch.randn(len(layout.texts), 8, generator=torch.Generator().manual_seed(0))


def whole_batch_step(items: np.ndarray, processes: int):
    """whole_batch_loss on ``items`` (this process's share of the step) of :func:`shared_documents_layout`, its sides'
    vectors leaves: (loss, {text row: the gradient of its vector, summed over this process's copies})."""
    import torch

    from poolkit.training.contrastive import PairBatch
    from poolkit.training.finetune_pairs import whole_batch_loss

    layout, vectors = shared_documents_layout()
    batch = PairBatch.of(layout, items)
    first, second = (vectors[torch.from_numpy(rows)].clone().requires_grad_() for rows in (batch.first, batch.second))
    loss = whole_batch_loss(layout, torch.from_numpy(items), first, second, torch.from_numpy(batch.second), processes)
    loss.backward()
    grads: dict[int, torch.Tensor] = {}
    for rows, side in ((batch.first, first), (batch.second, second)):
        for row, grad in zip(rows.tolist(), side.grad):
            grads[row] = grads.get(row, torch.zeros_like(grad)) + grad
    return loss.detach(), grads


def run_jobs(path: str) -> None:
    import json

    from poolkit.cli import main

    for job in json.loads(Path(path).read_text()):
        if "fit" in job:
            model, out = job["fit"]
            fit(toy_config(model, folds=2), toy_data(), out, progress=False)
        elif "whole_batch_loss" in job:
            import torch
            import torch.distributed as dist
            from accelerate import PartialState

            PartialState()  # the process group
            rank, items = dist.get_rank(), np.array([[q, d] for q, d in enumerate([0, 1, 2, 0, 1, 3])])
            torch.save(whole_batch_step(items[3 * rank:3 * rank + 3], 2), f"{job['whole_batch_loss']}.{rank}.pt")
        elif "pairs" in job:
            from poolkit.training import api

            model, table, out = job["pairs"]
            api.train(table, out, model=model, progress=False, **PAIR_SETTINGS)
        else:
            code = main(job["cli"])
            if code:
                sys.exit(code)
        sys.stdout.flush()


if __name__ == "__main__":
    run_jobs(sys.argv[1])
