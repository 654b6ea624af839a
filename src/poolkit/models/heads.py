"""What a pooled model's head outputs mean: raw outputs (logits, or standardised values) as the task's scores."""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Class probabilities of logits (N, C), row by row."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Independent label probabilities of logits."""
    return 1 / (1 + np.exp(-logits))


def head_scores(task: str, outputs: np.ndarray) -> np.ndarray:
    """Raw head outputs (N, C) -> class probabilities (classification), label probabilities (multilabel) or values."""
    return {"classification": softmax, "multilabel": sigmoid}.get(task, np.asarray)(outputs)
