"""Matplotlib pictures of explanations, for papers: one per text (its words' weights, and its layer weights for
layer poolers)."""

from __future__ import annotations

import os
from pathlib import Path

from ..io import atomic_write
from .explainer import Explanation, TextExplanation


def picture_names(count: int) -> list[str]:
    return [f"text_{i + 1:04d}.png" for i in range(count)]


def text_figure(item: TextExplanation, title: str = ""):
    """A text's words (special tokens included) as bars of their weight, in reading order top to bottom; the layer
    weights beside them when the pooler has some."""
    from matplotlib.figure import Figure  # no pyplot: no backend switch, no global figure state

    layered = item.layer_weights is not None
    fig = Figure(figsize=(7.5 if layered else 5.5, 0.24 * len(item.words) + 1.2))
    axes = fig.subplots(1, 2 if layered else 1, squeeze=False)[0]
    positions = range(len(item.words))[::-1]
    axes[0].barh(list(positions), item.weights, color="#d6301f")
    # texts and labels are the user's: a `$` is a character, not matplotlib's mathtext
    axes[0].set_yticks(list(positions), item.words, fontsize=8, parse_math=False)
    axes[0].set_xlabel("weight (sum over the word's pieces)")
    if layered:
        axes[1].bar(range(len(item.layer_weights)), item.layer_weights, color="#2b6cb0")
        axes[1].set_xticks(range(len(item.layer_weights)), [label.split()[-1] for label in item.layer_labels])
        axes[1].set_xlabel("layer (0 = embeddings)")
        axes[1].set_ylabel("layer weight")
    predicted = "" if item.prediction is None else f"prediction {item.prediction}" + (
        f" (p = {item.probability:.2f})" if item.probability is not None else "")
    fig.suptitle("\n".join(t for t in (title, predicted) if t), fontsize=9, parse_math=False)
    fig.tight_layout()
    return fig


def write_pictures(explanation: Explanation, folder: str | os.PathLike) -> list[Path]:
    """text_0001.png, ... (one per text, in input order) into ``folder``, each written atomically."""
    folder = Path(folder)
    paths = []
    for name, item in zip(picture_names(len(explanation)), explanation.items):
        figure = text_figure(item, explanation.pooler["name"])
        atomic_write(folder / name, lambda tmp: figure.savefig(tmp, dpi=130, format="png"))
        paths.append(folder / name)
    return paths
