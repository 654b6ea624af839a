"""Load a user's table of texts and targets (CSV, TSV, JSONL, Parquet) into a checked ``TableData``.

Error messages name CLI flags ``--text-col``, ``--target-col`` and ``--task``; they match the
``text_col``, ``target_cols`` and ``task`` parameters of :func:`load_table`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any
from pathlib import Path

import numpy as np

from poolkit.errors import PoolkitError, suggest
from poolkit.extras import require
from poolkit.tasks import HEAD_TASKS

require("cli", "pandas")

import pandas as pd  # noqa: E402

TASKS = HEAD_TASKS
FORMATS = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zip", ".zst")
_PARSE_FIXES = {
    ".csv": "check quoting and the number of fields per line",
    ".tsv": "check quoting and the number of fields per line",
    ".jsonl": "put one complete JSON object on each line",
    ".json": "use a JSON list of records or one JSON object per line",
    ".parquet": "check that it is a complete Parquet file",
}
#: how an integer target column is read when no task is given: at most CLASS_CODES distinct values (all in [-1,
#: MAX_CLASSES], fewer than half the rows) are class codes; more than QUANTITY_VALUES distinct values (or values
#: beyond MAX_CLASSES) are a quantity (regression); in between the column is ambiguous and `task` is asked for
CLASS_CODES = 10
QUANTITY_VALUES = 20
MAX_CLASSES = 50
#: characters that show nothing: a text made of them (and whitespace) is empty
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


@dataclass
class TableData:
    """Texts with targets: float32 (N, T) regression, int64 (N,) class ids, or float32 (N, C) 0/1 multilabel."""

    texts: list[str]
    targets: np.ndarray
    task: str
    label_names: list[str] | None
    target_cols: tuple[str, ...]
    text_col: str
    source: str

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def n_outputs(self) -> int:
        """Width of the model head: targets for regression, classes otherwise."""
        return len(self.label_names) if self.label_names is not None else self.targets.shape[1]

    def subset(self, indices: Sequence[int] | np.ndarray) -> TableData:
        """The rows at ``indices`` (label names are kept, so class ids stay comparable)."""
        idx = np.asarray(indices, dtype=np.int64)
        return replace(self, texts=[self.texts[i] for i in idx], targets=self.targets[idx])


def load_table(
    path: str | Path,
    text_col: str = "text",
    target_cols: str | Sequence[str] = ("label",),
    task: str | None = None,
    label_names: Sequence[str] | None = None,
) -> TableData:
    """Read a table by extension and check it; ``label_names`` fixes the class order (e.g. the training table's)."""
    path = Path(path)
    target_cols = (target_cols,) if isinstance(target_cols, str) else tuple(target_cols)
    if task is not None and task not in TASKS:
        raise PoolkitError(f"unknown task {task!r}: use one of {', '.join(TASKS)}.{suggest(task, TASKS)}")
    if not target_cols:
        raise PoolkitError("no target column given: name at least one with `target_col`")
    df = read_frame(path)
    _check_columns(df, path, text_col, target_cols)
    texts = text_list(df[text_col], text_col)
    if task is None:
        task = "regression" if len(target_cols) > 1 else _infer_task(df[target_cols[0]])
    if task == "regression":
        targets, names = np.stack([_numeric(df[c], c) for c in target_cols], axis=1), None
    elif task == "classification":
        if len(target_cols) > 1:
            raise PoolkitError(
                f"classification takes one target column, got {len(target_cols)} ({', '.join(target_cols)}): "
                "pass one `target_col`, or `task` multilabel / regression"
            )
        targets, names = _classes(df[target_cols[0]], target_cols[0], label_names)
    else:
        targets, names = _multilabel(df, target_cols, label_names)
    return TableData(texts, targets, task, names, target_cols, text_col, str(path))


def read_frame(path: Path) -> pd.DataFrame:
    """Read CSV/TSV/JSONL/JSON/Parquet (optionally compressed, e.g. ``.csv.gz``) with pandas, as one-line errors."""
    fmt = file_format(path)
    with parse_errors(path, fmt):
        df = _read(path, fmt)
    return checked_frame(df, path, fmt)


def read_frame_windows(path: Path, rows: int) -> Iterator[pd.DataFrame]:
    """The table of :func:`read_frame` in consecutive frames of ``rows`` rows (the last may be shorter), read in
    chunks so that memory holds one frame at a time (a ``.json`` list of records is read whole, then cut)."""
    fmt = file_format(path)
    if fmt == ".json":
        frame = read_frame(path)
        for start in range(0, len(frame), rows):
            yield frame.iloc[start:start + rows].reset_index(drop=True)
        return
    with parse_errors(path, fmt):
        if fmt in (".csv", ".tsv"):
            chunks = pd.read_csv(path, sep="\t" if fmt == ".tsv" else ",", encoding="utf-8", keep_default_na=False,
                                 na_values=[""], chunksize=rows)
        elif fmt == ".jsonl":
            chunks = pd.read_json(path, lines=True, encoding="utf-8", chunksize=rows)
        else:  # Parquet batches stop at row-group ends: regrouped into frames of ``rows`` rows below
            import pyarrow.parquet as pq

            # read each column chunk through a 4 MiB buffer: unbuffered, a whole row group's compressed column is
            # held (pyarrow writes up to 1M rows per group, so memory would grow with the file up to that size)
            reader = pq.ParquetFile(path, buffer_size=1 << 22, pre_buffer=False)
            chunks = (batch.to_pandas() for batch in reader.iter_batches(batch_size=rows))
        pending: list[pd.DataFrame] = []
        first = True
        for chunk in chunks:
            if first:
                chunk, first = checked_frame(chunk, path, fmt), False
            chunk.columns = [str(c) for c in chunk.columns]
            pending.append(chunk)
            while sum(map(len, pending)) >= rows:
                joined = pd.concat(pending, ignore_index=True)
                yield joined.iloc[:rows].reset_index(drop=True)
                pending = [joined.iloc[rows:]]
        if first:
            raise PoolkitError(f"{path.name} has no data rows: add rows below the header")
        rest = pd.concat(pending, ignore_index=True)
        if len(rest):
            yield rest


def file_format(path: Path) -> str:
    """The table format of a data file from its name (``.csv`` for ``x.csv.gz``); a missing file or an unknown
    suffix is a one-line error."""
    if not path.is_file():
        where = ("is a directory, not a file" if path.is_dir() else "is not a regular file" if path.exists()
                 else "does not exist")
        raise PoolkitError(f"data file {str(path)!r} {where}: check the path")
    suffixes = [s.lower() for s in path.suffixes]
    fmt = suffixes[-2] if len(suffixes) > 1 and suffixes[-1] in _COMPRESSIONS else (suffixes or [""])[-1]
    if fmt not in FORMATS:
        raise PoolkitError(
            f"unsupported file type {fmt or '(none)'!r} for {path.name}: "
            f"use one of {', '.join(FORMATS)} (optionally compressed, e.g. .csv.gz)"
        )
    return fmt


@contextmanager
def parse_errors(path: Path, fmt: str) -> Iterator[None]:
    """Reading errors of pandas / Arrow inside the block as one-line PoolkitErrors naming the fix."""
    try:
        yield
    except PoolkitError:
        raise
    except UnicodeDecodeError as e:
        raise PoolkitError(
            f"{path.name} is not valid UTF-8 (byte 0x{e.object[e.start]:02x}): re-save it with UTF-8 encoding"
        ) from e
    except pd.errors.EmptyDataError as e:
        raise PoolkitError(f"{path.name} is empty: it needs a header line and at least one row") from e
    except (ValueError, OSError) as e:  # pandas ParserError, JSON and Arrow errors are ValueErrors
        detail = " ".join(str(e).split())
        raise PoolkitError(f"could not parse {path.name} as {fmt[1:].upper()} ({detail}): {_PARSE_FIXES[fmt]}") from e


def checked_frame(df: pd.DataFrame, path: Path, fmt: str) -> pd.DataFrame:
    """``df`` (a table, or its first chunk) with string column names; no rows or a column name given twice in the
    file's header is a one-line error."""
    if len(df) == 0:
        raise PoolkitError(f"{path.name} has no data rows: add rows below the header")
    header = pd.read_csv(path, sep="\t" if fmt == ".tsv" else ",", header=None, nrows=1, dtype=str,
                         keep_default_na=False).iloc[0] if fmt in (".csv", ".tsv") else df.columns  # pandas renames
    names = pd.Index([str(c) for c in header])
    if names.duplicated().any():
        raise PoolkitError(f"column {names[names.duplicated()][0]!r} appears more than once in {path.name}: "
                           "rename the copies so every column name is unique")
    df.columns = [str(c) for c in df.columns]
    return df


def _read(path: Path, fmt: str) -> pd.DataFrame:
    """Dispatch on format; only empty cells are missing values (so a label like 'NA' stays a label)."""
    if fmt in (".csv", ".tsv"):
        sep = "\t" if fmt == ".tsv" else ","
        return pd.read_csv(path, sep=sep, encoding="utf-8", keep_default_na=False, na_values=[""])
    if fmt == ".parquet":
        return pd.read_parquet(path)
    if fmt == ".jsonl":
        return pd.read_json(path, lines=True, encoding="utf-8")
    try:  # .json: a list of records, else JSON lines
        return pd.read_json(path, encoding="utf-8")
    except ValueError:
        return pd.read_json(path, lines=True, encoding="utf-8")


def _check_columns(df: pd.DataFrame, path: Path, text_col: str, target_cols: tuple[str, ...]) -> None:
    """Every named column exists, and the text column is not also a target."""
    available = list(df.columns)
    for col, flag in [(text_col, "`text_col`"), *((c, "`target_col`") for c in target_cols)]:
        if col in available:
            continue
        hint = suggest(col, available)
        if len(available) == 1 and any(d in available[0] for d in ";\t,|"):
            hint += f" The header was read as one column {available[0]!r}: is the delimiter right for this extension?"
        raise PoolkitError(
            f"column {col!r} not found in {path.name} (columns: {', '.join(available)}): pass the right {flag}.{hint}"
        )
    if text_col in target_cols:
        raise PoolkitError(f"column {text_col!r} is both the text and a target: pick different `text_col` / "
                           "`target_col`")


def _rows(mask: np.ndarray) -> str:
    """'3 rows (2, 5, 9; row 1 = first data row)' for a boolean mask: rows count from 1, the header excluded."""
    rows = (np.flatnonzero(mask) + 1).tolist()
    shown = ", ".join(map(str, rows[:5])) + (f", ... {len(rows) - 5} more" if len(rows) > 5 else "")
    return f"{len(rows)} row{'s' * (len(rows) > 1)} ({shown}; row 1 = first data row)"


def text_list(col: pd.Series, name: str, allow_empty: bool = False) -> list[str]:
    """Texts as str: values that are not strings (numbers, dicts, lists) are an error, and so are missing, blank or
    zero-width-only texts unless ``allow_empty`` (missing ones then read as "")."""
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        raise PoolkitError(f"text column {name!r} holds numbers, not text: pass the text column with `text_col`")
    other = np.array([not isinstance(t, str) and not (np.ndim(t) == 0 and pd.isna(t)) for t in col])
    if other.any():
        kind = type(col[other].iloc[0]).__name__
        raise PoolkitError(f"text column {name!r} holds non-text values ({kind}) in {_rows(other)}: "
                           "store the texts as strings, or pass the text column with `text_col`")
    texts = ["" if not isinstance(t, str) else t for t in col]
    empty = np.array([not t.translate(_ZERO_WIDTH).strip() for t in texts])
    if empty.any() and not allow_empty:
        raise PoolkitError(f"text column {name!r} is empty or whitespace-only in {_rows(empty)}: fill or drop them "
                           "(zero-width characters count as whitespace)")
    return texts


def frame_texts(frame: pd.DataFrame, text_col: str, source: str | Path) -> list[str]:
    """The texts of ``frame[text_col]`` (missing ones as ""); a missing column is a one-line error naming --text-col."""
    if text_col not in frame.columns:
        raise PoolkitError(f"column {text_col!r} not found in {source}.{suggest(text_col, frame.columns)} "
                           f"Columns: {', '.join(map(str, frame.columns))}; pass the text column with `text_col`")
    return text_list(frame[text_col], text_col, allow_empty=True)


def _infer_task(col: pd.Series) -> str:
    """Classification for non-numeric labels or a few integer codes (see :data:`CLASS_CODES`), regression for other
    numbers (years or depths are quantities, not classes); an integer column in between is refused, asking for
    ``task``."""
    if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
        _reject_numeric_looking(col)
        return "classification"
    values = col.dropna().to_numpy(dtype=np.float64)
    distinct = np.unique(values)
    integral = bool(np.all(np.isfinite(values)) and np.all(values == np.round(values)))
    if not integral or len(distinct) > QUANTITY_VALUES or len(distinct) >= len(col) / 2 or \
            distinct.min() < -1 or distinct.max() > MAX_CLASSES:
        return "regression"
    if len(distinct) <= CLASS_CODES:
        return "classification"
    raise PoolkitError(f"target column {col.name!r} holds {len(distinct)} distinct whole numbers, which could be "
                       "class codes or a quantity: pass `task` classification or regression")


def _reject_numeric_looking(col: pd.Series) -> None:
    """Text labels that are mostly numbers are a typo in a numeric column, not classes."""
    parsed = pd.to_numeric(col, errors="coerce")
    bad = (parsed.isna() & col.notna()).to_numpy()
    if parsed.notna().mean() >= 0.9 and bad.any():
        example = col[bad].iloc[0]
        raise PoolkitError(
            f"target column {col.name!r} is numeric except {_rows(bad)}, e.g. {example!r}: "
            "fix those values, or pass `task` classification to treat every value as a label"
        )


def _numeric(col: pd.Series, name: str) -> np.ndarray:
    """Regression target as float32 (N,); missing, non-numeric or infinite values are an error."""
    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        raise PoolkitError(
            f"regression target {name!r} is missing or not a finite number in {_rows(bad)}: "
            "fix or drop those rows, or pass `task` classification"
        )
    return values.astype(np.float32)


def _label_strings(col: pd.Series) -> tuple[list[str], list[str]]:
    """(label of each row, sorted distinct labels) as strings; numbers sort numerically and 2.0 reads as '2'."""
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        values = col.to_numpy(dtype=np.float64)
        as_int = np.all(values == np.round(values))
        fmt = (lambda v: str(int(v))) if as_int else str
        return [fmt(v) for v in values], [fmt(v) for v in np.unique(values)]
    labels = [str(v) for v in col]
    return labels, sorted(set(labels))


def _classes(col: pd.Series, name: str, label_names: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """Class ids int64 (N,) and their names; needs no missing labels and at least two classes."""
    missing = col.isna().to_numpy()
    if missing.any():
        raise PoolkitError(f"label column {name!r} is empty in {_rows(missing)}: fill or drop those rows")
    labels, found = _label_strings(col)
    names = list(label_names) if label_names is not None else found
    if label_names is None and len(names) < 2:
        raise PoolkitError(
            f"label column {name!r} has a single class ({names[0]!r}): classification needs at least two; "
            "check `target_col`, or pass `task` regression"
        )
    index = {n: i for i, n in enumerate(names)}
    _reject_unknown([lab for lab in labels if lab not in index], name, names)
    return np.array([index[lab] for lab in labels], dtype=np.int64), names


def _reject_unknown(unknown: list[str], name: str, names: list[str]) -> None:
    """Labels outside a given label set (e.g. the training table's) are an error."""
    if unknown:
        shown = ", ".join(repr(u) for u in sorted(set(unknown))[:5])
        raise PoolkitError(
            f"column {name!r} has labels not in the known set ({shown}; known: {len(names)} labels): "
            f"use a table with the training labels.{suggest(unknown[0], names)}"
        )


def _multilabel(
    df: pd.DataFrame, cols: tuple[str, ...], label_names: Sequence[str] | None
) -> tuple[np.ndarray, list[str]]:
    """float32 (N, C) 0/1 from several 0/1 columns, or one column of label lists or labels joined by '|' or ','."""
    if len(cols) > 1:
        for c in cols:
            values = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            bad = ~np.isin(values, (0.0, 1.0))
            if bad.any():
                raise PoolkitError(f"multilabel column {c!r} is not 0/1 in {_rows(bad)}: use 0 or 1 in every row")
        return df[list(cols)].to_numpy(dtype=np.float32), list(cols)
    col = df[cols[0]]
    sep = "|" if col.astype(str).str.contains("|", regex=False).any() else ","
    sets = [_label_set(v, sep) for v in col]
    names = list(label_names) if label_names is not None else sorted({lab for s in sets for lab in s})
    index = {n: i for i, n in enumerate(names)}
    _reject_unknown([lab for s in sets for lab in s if lab not in index], cols[0], names)
    if label_names is None and len(names) < 2:
        raise PoolkitError(
            f"multilabel column {cols[0]!r} has fewer than two labels ({', '.join(names) or 'none'}): "
            f"separate labels with '|' or ',', or check `target_col`"
        )
    targets = np.zeros((len(sets), len(names)), dtype=np.float32)
    for row, s in enumerate(sets):
        targets[row, [index[lab] for lab in s]] = 1.0
    return targets, names


def _label_set(value, sep: str) -> list[str]:
    """Labels of one multilabel cell: a list (JSON, Parquet), a joined string, or empty."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [] if pd.isna(value) else [s.strip() for s in str(value).split(sep) if s.strip()]


def decode_labels(
    predictions: np.ndarray, label_names: Sequence[str], multilabel: bool = False, threshold: float = 0.5
) -> list[str] | list[list[str]]:
    """Class ids (N,) or scores (N, C) -> names; multilabel: probabilities (N, C) >= threshold -> lists of names."""
    pred = np.asarray(predictions)
    if multilabel:
        return [[label_names[j] for j in np.flatnonzero(row >= threshold)] for row in pred]
    ids = pred.argmax(axis=-1) if pred.ndim == 2 else pred
    return [label_names[int(i)] for i in ids]


def _strata(data: TableData, n_bins: int = 10) -> np.ndarray:
    """Stratum id per row: the class, an equal-count bin of the first regression target, or one stratum (multilabel)."""
    if data.task == "classification":
        return data.targets
    if data.task == "regression":
        ranks = np.argsort(np.argsort(data.targets[:, 0], kind="stable"), kind="stable")
        return ranks * n_bins // len(data)
    return np.zeros(len(data), dtype=np.int64)


def _shuffled_groups(data: TableData, seed: int) -> list[np.ndarray]:
    """Row indices of each stratum, each in a seeded random order."""
    rng = np.random.default_rng(seed)
    strata = _strata(data)
    return [rng.permutation(np.flatnonzero(strata == s)) for s in np.unique(strata)]


def stratified_sample(data: TableData, n: int, seed: int = 0) -> TableData:
    """Deterministic subsample of ``n`` rows: proportional per stratum, with a floor of n/(3*strata) for rare ones."""
    if n <= 0:
        raise PoolkitError(f"sample size must be a positive number of rows, got {n}")
    return data if n >= len(data) else data.subset(stratified_rows(data, n, seed))


def stratified_rows(data: TableData, n: int, seed: int = 0) -> np.ndarray:
    """The sorted row indices of :func:`stratified_sample` (``n`` < len(data))."""
    groups = _shuffled_groups(data, seed)
    sizes = np.array([len(g) for g in groups])
    take = np.minimum(sizes, n // (3 * len(groups)))
    room = sizes - take
    ideal = room * (n - take.sum()) / room.sum()  # the rest, proportional to what each stratum has left
    take += np.floor(ideal).astype(np.int64)
    take[np.argsort(np.floor(ideal) - ideal, kind="stable")[: n - take.sum()]] += 1  # largest remainders
    return np.sort(np.concatenate([g[:k] for g, k in zip(groups, take)]))


def split_rows(data: TableData, val_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train row indices, validation row indices): round(val_fraction * rows) held out, shared among
    the strata by largest remainders (so small strata are not all rounded down to none); every stratum keeps at
    least one training row."""
    if not 0.0 < val_fraction < 1.0:
        raise PoolkitError(f"validation fraction must be between 0 and 1, got {val_fraction}")
    groups = _shuffled_groups(data, seed)
    wanted = np.array([len(g) for g in groups]) * val_fraction
    take = np.floor(wanted).astype(np.int64)
    short = max(0, round(len(data) * val_fraction) - int(take.sum()))
    take[np.argsort(take - wanted, kind="stable")[:short]] += 1
    val = [g[: min(k, len(g) - 1)] for g, k in zip(groups, take)]
    is_val = np.zeros(len(data), dtype=bool)
    is_val[np.concatenate(val)] = True
    if not is_val.any():
        raise PoolkitError(f"{len(data)} rows are too few to hold out {val_fraction:.0%} for validation: add rows")
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def train_val_split(data: TableData, val_fraction: float = 0.2, seed: int = 0) -> tuple[TableData, TableData]:
    """Stratified split into (train, val) tables (see :func:`split_rows`)."""
    train, val = split_rows(data, val_fraction, seed)
    return data.subset(train), data.subset(val)


def repeat_seed(seed: int, repeat: int) -> int:
    """The seed of repeat ``repeat`` of a K-fold assignment: ``seed`` itself for the first (one repeat is the plain
    K-fold), then one drawn from (seed, repeat) by numpy's SeedSequence."""
    return seed if repeat == 0 else int(np.random.SeedSequence([seed, repeat]).generate_state(1)[0])


def repeated_folds(data: Any, folds: int, repeats: int = 1, val_fraction: float = 0.2, seed: int = 0,
                   splitter: Callable[..., list[tuple[np.ndarray, np.ndarray]]] | None = None
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``repeats`` x ``folds`` (train rows, test rows) splits, repeat by repeat: each repeat is ``splitter``'s
    (default :func:`fold_splits`; the pair tasks pass :func:`poolkit.data.pairs.pair_folds`) with the seed
    :func:`repeat_seed` gives it, so each repeat assigns the folds afresh."""
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise PoolkitError(f"`repeats` must be a positive integer, got {repeats!r}")
    splitter = splitter or fold_splits
    return [split for r in range(repeats) for split in splitter(data, folds, val_fraction, repeat_seed(seed, r))]


def fold_splits(data: TableData, folds: int, val_fraction: float = 0.2,
                seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train rows, validation rows) per fold, stratified like :func:`train_val_split`.

    ``folds >= 2``: K-fold, every row validated exactly once (out-of-fold predictions cover the table).
    ``folds == 1``: one split holding out ``val_fraction``.
    """
    if not isinstance(folds, int) or folds < 1:
        raise PoolkitError(f"`folds` must be a positive integer, got {folds!r}")
    if folds == 1:
        if not 0.0 < val_fraction < 1.0:
            raise PoolkitError(f"validation fraction must be between 0 and 1, got {val_fraction}")
        val = np.sort(np.concatenate([g[: min(round(len(g) * val_fraction), len(g) - 1)]
                                      for g in _shuffled_groups(data, seed)]))
        if len(val) == 0:
            raise PoolkitError(f"{len(data)} rows are too few to hold out {val_fraction:.0%} for validation: add rows")
        return [(np.setdiff1d(np.arange(len(data)), val), val)]
    if len(data) < 2 * folds:
        raise PoolkitError(f"{len(data)} rows are too few for {folds} folds: use fewer `folds` or add rows")
    if data.task == "classification":  # every fold validates every class
        counts = np.bincount(data.targets, minlength=len(data.label_names))
        rare = int(np.argmin(counts))
        if counts[rare] == 0:
            raise PoolkitError(f"class {data.label_names[rare]!r} has no row in the data used (a `limit` too small?): "
                               "use more rows")
        if counts[rare] < folds:
            raise PoolkitError(f"class {data.label_names[rare]!r} has {counts[rare]} row(s), fewer than `folds` "
                               f"{folds}: use `folds` {counts[rare]} or fewer, or add rows of that class")
    fold_of = np.empty(len(data), dtype=np.int64)
    offset = 0
    for group in _shuffled_groups(data, seed):  # deal each stratum round-robin over the folds
        fold_of[group] = (np.arange(len(group)) + offset) % folds
        offset += len(group)
    return [(np.flatnonzero(fold_of != k), np.flatnonzero(fold_of == k)) for k in range(folds)]
