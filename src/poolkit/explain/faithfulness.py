"""Are the weights faithful? Deleting the k words a pooler weights most should move the prediction more than
deleting k words drawn at random (the deletion test of DeYoung et al., "ERASER", ACL 2020: comprehensiveness
against a random baseline)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import PoolkitError
from .explainer import Explainer, Explanation


def delete_words(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` without the characters of ``spans``, runs of whitespace left behind collapsed to one space."""
    kept, start = [], 0
    for begin, end in sorted(spans):
        kept.append(text[start:begin])
        start = end
    kept.append(text[start:])
    return re.sub(r"\s+", " ", "".join(kept)).strip()


def deletion_curve(model: Any, texts: Sequence[str], ks: Sequence[int] = (1, 2, 3, 4, 5), draws: int = 5,
                   seed: int = 0, explanation: Explanation | None = None) -> dict[str, Any]:
    """The drop of the predicted class's probability (regression: the change |Δ| of the predicted value) when the
    k top-weighted words are deleted, against k random words (``draws`` draws per text), for each k.

    ``model``: an :class:`~poolkit.explain.Explainer` or anything it loads. A text takes part at k when it has
    more than k words. Returns {"ks", "rows": [{k, texts, top_mean, top_sem, random_mean, random_sem,
    top_wins}], "measure"} where ``top_wins`` is the share of texts whose top-k deletion moved the prediction more
    than the mean of their random deletions.
    """
    explainer = model if hasattr(model, "scores") and hasattr(model, "explain") else Explainer(model)
    if any(int(k) < 1 for k in ks) or draws < 1:
        raise PoolkitError(f"ks must be >= 1 and draws >= 1, got ks={list(ks)}, draws={draws}")
    explanation = explanation or explainer.explain(texts)
    rng = np.random.default_rng(seed)
    edited, plan = [], []  # every edited text, and (text index, k, "top" / "random") for each
    for index, item in enumerate(explanation.items):
        words = item.content_words()
        ranked = sorted(words, key=lambda i: -item.weights[i])
        for k in ks:
            if len(words) <= k:
                continue
            edited.append(delete_words(item.text, [item.spans[i] for i in ranked[:k]]))
            plan.append((index, k, "top"))
            for _ in range(draws):
                chosen = rng.choice(words, size=k, replace=False)
                edited.append(delete_words(item.text, [item.spans[i] for i in chosen]))
                plan.append((index, k, "random"))
    if not edited:
        raise PoolkitError(f"no text has more than {min(ks)} words: nothing to delete")
    regression = explainer.task == "regression"
    before = explainer.scores([item.text for item in explanation.items])
    after = explainer.scores(edited)
    changes: dict[tuple[int, int, str], list[float]] = {}
    for (index, k, kind), scores in zip(plan, after):
        column = explainer.predicted_score(before[index])
        change = abs(scores[column] - before[index][column]) if regression else before[index][column] - scores[column]
        changes.setdefault((index, k, kind), []).append(float(change))
    rows = []
    for k in ks:
        indices = sorted({index for index, kk, _ in plan if kk == k})
        if not indices:
            continue
        top = np.array([changes[(i, k, "top")][0] for i in indices])
        random = np.array([np.mean(changes[(i, k, "random")]) for i in indices])
        rows.append({"k": int(k), "texts": len(indices), "top_mean": float(top.mean()), "top_sem": _sem(top),
                     "random_mean": float(random.mean()), "random_sem": _sem(random),
                     "top_wins": float(np.mean(top > random))})
    measure = ("|change| of the predicted value" if regression else
               "drop of the predicted class's probability (before - after)")
    return {"ks": [int(k) for k in ks], "draws": draws, "seed": seed, "measure": measure, "rows": rows}


def _sem(values: np.ndarray) -> float:
    """Standard error of the mean (sample std, ddof = 1); 0 for one value."""
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0
