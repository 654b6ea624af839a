"""The fine-tuning tests' toy task, and the worker of the multi-process test (tests/training/test_distributed.py):

    torchrun --nproc_per_node 2 tests/dist_worker.py JOBS.json

runs each job of JOBS.json in turn in every process: ``{"fit": [MODEL_DIR, OUT_DIR]}`` (the toy task, 2 folds) or
``{"cli": [ARG, ...]}`` (``poolkit`` with those arguments; a nonzero exit stops the worker with it). One launch for
every job: each process's start (imports, the process group) costs seconds on a small CPU.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
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


def run_jobs(path: str) -> None:
    import json

    from poolkit.cli import main

    for job in json.loads(Path(path).read_text()):
        if "fit" in job:
            model, out = job["fit"]
            fit(toy_config(model, folds=2), toy_data(), out, progress=False)
        else:
            code = main(job["cli"])
            if code:
                sys.exit(code)
        sys.stdout.flush()


if __name__ == "__main__":
    run_jobs(sys.argv[1])
