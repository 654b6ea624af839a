"""What a leaderboard row costs at inference: milliseconds per 1,000 texts of its pooler + head (or the baseline's
mean + linear model) on the cached hidden states, on this device at the probes' thread count, the median of a few
timed passes over the same rows after one warm-up pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: the rows each pass runs over (the cache's first rows, fewer when it holds fewer) and how many passes are timed
COST_ROWS = 1000
COST_PASSES = 3


def cost_rows(n_rows: int) -> np.ndarray:
    """The cache rows every row of a board is timed on: the same rows for each pooler."""
    return np.arange(min(n_rows, COST_ROWS))


def ms_per_1k(run: Callable[[np.ndarray], Any], rows: np.ndarray, passes: int = COST_PASSES) -> float:
    """Median milliseconds per 1,000 rows of ``run(rows)`` over ``passes`` timed passes, after one untimed pass."""
    run(rows)
    seconds = []
    for _ in range(passes):
        start = time.perf_counter()
        run(rows)
        seconds.append(time.perf_counter() - start)
    return round(float(np.median(seconds)) * 1e6 / max(len(rows), 1), 4)
