"""Tables of text pairs, for the embedding tasks.

- ``retrieval``: each row is a query (``text_col``) and a document relevant to it (``pair_col``), optionally a hard
  negative (``negative_col``); ``corpus`` adds documents that no query names. Queries and documents are identified
  by their text: several rows may share a query (several relevant documents) or a document, and a duplicated row
  counts once. The corpus is every distinct document: the table's, then its negatives', then the corpus file's.
- ``similarity``: two texts (``text_col``, ``pair_col``) and a graded score (``target_col``, e.g. 0-5 as in STS).

Cross-validation splits *units*, keeping together the units that share a query: a retrieval unit is a query (with
every document relevant to it), a similarity unit is a pair, grouped by its first text (:func:`pair_folds`,
:func:`pair_split`).

Bad input fails in one line naming the column and the rows before any encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import PoolkitError, suggest
from ..tasks import EMBEDDING_TASKS
from .builtin import PREFIX, builtin_pairs
from .tables import _rows, read_frame, text_list

PAIR_TASKS = EMBEDDING_TASKS


@dataclass
class RetrievalData:
    """Distinct queries and documents, and for each query the indices of its relevant documents in ``corpus``."""

    queries: list[str]
    corpus: list[str]
    relevant: list[set[int]]
    #: distinct (query, relevant document) pairs
    pairs: int
    #: per query, the indices in ``corpus`` of its hard negatives (``negative_col``; none relevant to it)
    negatives: list[set[int]] = field(default_factory=list)
    source: str = "the table"

    task = "retrieval"

    def __len__(self) -> int:
        """The units cross-validation splits: the queries."""
        return len(self.queries)

    @property
    def groups(self) -> np.ndarray:
        """Each unit's group (units of one group stay on one side of a split): every query its own."""
        return np.arange(len(self.queries))


@dataclass
class SimilarityData:
    """Pairs of texts and their graded similarity scores (N,)."""

    left: list[str]
    right: list[str]
    scores: np.ndarray
    source: str = "the table"

    task = "similarity"

    def __len__(self) -> int:
        """The units cross-validation splits: the pairs."""
        return len(self.scores)

    @property
    def groups(self) -> np.ndarray:
        """Each pair's group: the pairs that share a first text form one."""
        return np.unique(np.array(self.left, dtype=object), return_inverse=True)[1].reshape(-1)


def load_pairs(data: str | Path | pd.DataFrame, task: str, *, text_col: str = "text", pair_col: str = "pair",
               target_col: str = "score", negative_col: str | None = None,
               corpus: str | Path | Sequence[str] | None = None, limit: int | None = None,
               seed: int = 0) -> RetrievalData | SimilarityData:
    """A table of pairs (a file, ``builtin:NAME`` or a DataFrame) as the ``task`` reads it (see the module
    docstring). ``corpus``: a table file whose ``pair_col`` column holds more documents, or a list of them (retrieval
    only). ``limit``: a random sample (drawn with ``seed``) of that many rows of the table."""
    if task not in PAIR_TASKS:
        raise PoolkitError(f"`task` for pairs must be one of {', '.join(PAIR_TASKS)}, got {task!r}")
    if isinstance(data, pd.DataFrame):
        frame, source = data, "the table"
    elif str(data).startswith(PREFIX):
        frame, info = builtin_pairs(str(data))
        if info.task != task:
            raise PoolkitError(f"{data} is a {info.task} set: pass `task` {info.task}")
        source = str(data)
    else:
        frame, source = read_frame(Path(data)), Path(data).name
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise PoolkitError(f"`limit` must be a positive number of rows, got {limit!r}")
        if limit < len(frame):
            frame = frame.iloc[np.sort(np.random.default_rng(seed).choice(len(frame), limit, replace=False))]
        frame = frame.reset_index(drop=True)
    check_retrieval_columns(task, negative_col, corpus)
    if task == "similarity":
        _columns(frame, source, {"text_col": text_col, "pair_col": pair_col, "target_col": target_col})
        return SimilarityData(text_list(frame[text_col], text_col), text_list(frame[pair_col], pair_col),
                              _scores(frame[target_col], target_col), source)
    _columns(frame, source, {"text_col": text_col, "pair_col": pair_col,
                             **({"negative_col": negative_col} if negative_col is not None else {})})
    queries, documents = text_list(frame[text_col], text_col), text_list(frame[pair_col], pair_col)
    hard = text_list(frame[negative_col], negative_col) if negative_col is not None else []
    extra = list(hard) + (_corpus_texts(corpus, pair_col) if corpus is not None else [])
    index: dict[str, int] = {}
    for text in [*documents, *extra]:
        index.setdefault(text, len(index))
    ids: dict[str, int] = {}
    relevant: list[set[int]] = []
    negatives: list[set[int]] = []
    for row, (query, document) in enumerate(zip(queries, documents)):
        if query not in ids:
            ids[query] = len(relevant)
            relevant.append(set())
            negatives.append(set())
        relevant[ids[query]].add(index[document])
        if hard:
            negatives[ids[query]].add(index[hard[row]])
    negatives = [found - wanted for found, wanted in zip(negatives, relevant)]  # a relevant text is no negative
    return RetrievalData(list(ids), list(index), relevant, sum(len(r) for r in relevant), negatives, source)


def check_retrieval_columns(task: str | None, negative_col: str | None, corpus: object) -> None:
    """``negative_col`` and ``corpus`` belong to a retrieval table: refused for every other ``task``."""
    if task != "retrieval" and (negative_col is not None or corpus is not None):
        raise PoolkitError("`negative_col` and `corpus` are for retrieval; a similarity table has two texts and a "
                           "score per row" if task == "similarity" else "`negative_col` and `corpus` are for `task` "
                           "retrieval")


def score_column(target_col: str | Sequence[str] | None, task: str) -> str:
    """The score column of a table of pairs (default: score): one column."""
    if target_col is None:
        return "score"
    if isinstance(target_col, str):
        return target_col
    if len(target_col) != 1:
        raise PoolkitError(f"`target_col` of {task} is one column (the score), got {list(target_col)}")
    return target_col[0]


def _scores(column: pd.Series, name: str) -> np.ndarray:
    """The similarity scores as float64 (N,); missing, non-numeric or infinite ones are an error."""
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        raise PoolkitError(f"similarity score {name!r} is missing or not a finite number in {_rows(bad)}: fix or drop "
                           "those rows, or pass the score column with `target_col`")
    return values


def _columns(frame: pd.DataFrame, source: str, columns: dict[str, str]) -> None:
    """Every named column is in the table, and no column plays two parts."""
    available = list(map(str, frame.columns))
    for parameter, column in columns.items():
        if column not in frame.columns:
            raise PoolkitError(f"column {column!r} not found in {source} (columns: {', '.join(available)}): pass the "
                               f"right `{parameter}`.{suggest(column, available)}")
    if len(set(columns.values())) < len(columns):
        raise PoolkitError(f"one column plays two parts ({', '.join(f'{p}={c!r}' for p, c in columns.items())}): "
                           "give each its own column")


def _corpus_texts(corpus: str | Path | Sequence[str], pair_col: str) -> list[str]:
    """More documents: a list of texts, or a table file with a ``pair_col`` column."""
    if isinstance(corpus, (str, Path)):
        frame = read_frame(Path(corpus))
        _columns(frame, Path(corpus).name, {"pair_col": pair_col})
        return text_list(frame[pair_col], pair_col)
    return text_list(pd.Series(list(corpus), dtype=object), "corpus")


def pair_folds(data: RetrievalData | SimilarityData, folds: int, val_fraction: float = 0.2,
               seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(training units, test units) per fold (units: see the module docstring), each group on one side.

    ``folds >= 2``: K-fold over the groups in a seeded random order, every unit tested exactly once; ``folds == 1``:
    one split holding out ``val_fraction`` of the groups."""
    if not isinstance(folds, int) or isinstance(folds, bool) or folds < 1:
        raise PoolkitError(f"`folds` must be a positive integer, got {folds!r}")
    groups = data.groups
    count = int(groups.max()) + 1 if len(groups) else 0
    if folds == 1:
        train, test = pair_split(data, np.arange(len(data)), val_fraction, seed)
        return [(train, test)]
    what = "queries" if data.task == "retrieval" else "groups of pairs (pairs sharing a first text)"
    if count < 2 * folds:
        raise PoolkitError(f"{count} {what} are too few for {folds} folds: use fewer `folds` or add rows")
    fold_of = np.empty(count, dtype=np.int64)
    fold_of[np.random.default_rng(seed).permutation(count)] = np.arange(count) % folds
    units = fold_of[groups]
    return [(np.flatnonzero(units != k), np.flatnonzero(units == k)) for k in range(folds)]


def pair_split(data: RetrievalData | SimilarityData, units: np.ndarray, val_fraction: float = 0.2,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``units`` split into (kept, held out): round(val_fraction * groups) of their groups, drawn with ``seed``, held
    out (at least one, and at least one kept)."""
    if not 0.0 < val_fraction < 1.0:
        raise PoolkitError(f"validation fraction must be between 0 and 1, got {val_fraction}")
    units = np.asarray(units, dtype=np.int64)
    present = np.unique(data.groups[units])
    if len(present) < 2:
        raise PoolkitError(f"{len(units)} rows of one query are too few to hold {val_fraction:.0%} out: add rows")
    take = min(max(1, round(len(present) * val_fraction)), len(present) - 1)
    held = np.random.default_rng(seed).permutation(present)[:take]
    out = np.isin(data.groups[units], held)
    return units[~out], units[out]
