"""Tables of text pairs, for the embedding tasks.

- ``retrieval``: each row is a query (``text_col``) and a document relevant to it (``pair_col``), optionally a hard
  negative (``negative_col``); ``corpus`` adds documents that no query names. Queries and documents are identified
  by their text: several rows may share a query (several relevant documents) or a document, and a duplicated row
  counts once. The corpus is every distinct document: the table's, then its negatives', then the corpus file's.
- ``similarity``: two texts (``text_col``, ``pair_col``) and a graded score (``target_col``, e.g. 0-5 as in STS).

Bad input fails in one line naming the column and the rows before any encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import PoolkitError, suggest
from .builtin import PREFIX, builtin_pairs
from .tables import _rows, read_frame, text_list

PAIR_TASKS = ("retrieval", "similarity")


@dataclass
class RetrievalData:
    """Distinct queries and documents, and for each query the indices of its relevant documents in ``corpus``."""

    queries: list[str]
    corpus: list[str]
    relevant: list[set[int]]
    #: distinct (query, relevant document) pairs
    pairs: int

    task = "retrieval"


@dataclass
class SimilarityData:
    """Pairs of texts and their graded similarity scores (N,)."""

    left: list[str]
    right: list[str]
    scores: np.ndarray

    task = "similarity"


def load_pairs(data: str | Path | pd.DataFrame, task: str, *, text_col: str = "text", pair_col: str = "pair",
               target_col: str = "score", negative_col: str | None = None,
               corpus: str | Path | Sequence[str] | None = None) -> RetrievalData | SimilarityData:
    """A table of pairs (a file, ``builtin:NAME`` or a DataFrame) as the ``task`` reads it (see the module
    docstring). ``corpus``: a table file whose ``pair_col`` column holds more documents, or a list of them (retrieval
    only)."""
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
    if task == "similarity":
        if negative_col is not None or corpus is not None:
            raise PoolkitError("`negative_col` and `corpus` are for retrieval; a similarity table has two texts and a "
                               "score per row")
        _columns(frame, source, {"text_col": text_col, "pair_col": pair_col, "target_col": target_col})
        return SimilarityData(text_list(frame[text_col], text_col), text_list(frame[pair_col], pair_col),
                              _scores(frame[target_col], target_col))
    _columns(frame, source, {"text_col": text_col, "pair_col": pair_col,
                             **({"negative_col": negative_col} if negative_col is not None else {})})
    queries, documents = text_list(frame[text_col], text_col), text_list(frame[pair_col], pair_col)
    extra = list(text_list(frame[negative_col], negative_col)) if negative_col is not None else []
    if corpus is not None:
        extra += _corpus_texts(corpus, pair_col)
    index: dict[str, int] = {}
    for text in [*documents, *extra]:
        index.setdefault(text, len(index))
    ids: dict[str, int] = {}
    relevant: list[set[int]] = []
    for query, document in zip(queries, documents):
        if query not in ids:
            ids[query] = len(relevant)
            relevant.append(set())
        relevant[ids[query]].add(index[document])
    return RetrievalData(list(ids), list(index), relevant, sum(len(r) for r in relevant))


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
