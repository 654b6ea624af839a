"""The table formats poolkit writes (predict / embed outputs): the format a file name asks for, checked before any
work, and the atomic writer."""

from __future__ import annotations

from pathlib import Path

from ..errors import PoolkitError
from .files import atomic_write

#: Table formats predict / embed write; the text ones may also end in .gz (gzip-compressed).
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")


def table_format(out: str | Path, others: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(format suffix, compression) that ``out``'s name asks for, e.g. (".csv", "gzip") for x.csv.gz; a name
    poolkit cannot write (``.xlsx``, ``.parquet.gz``, no suffix) is a one-line error, checked before any work."""
    suffixes = [s.lower() for s in Path(out).suffixes]
    compression = "gzip" if suffixes[-1:] == [".gz"] else None
    kind = (suffixes[-2:-1] if compression else suffixes[-1:]) or [""]
    allowed = others + TABLE_SUFFIXES
    if kind[0] not in allowed or (compression and kind[0] not in (".csv", ".tsv", ".jsonl")):
        raise PoolkitError(f"`out` {out}: poolkit cannot write {''.join(suffixes[-2:]) or 'files without a suffix'}; "
                           f"use {', '.join(allowed)} (.csv / .tsv / .jsonl may end in .gz)")
    return kind[0], compression


def write_table(out: Path, frame) -> None:
    """Write a DataFrame atomically in the format its name asks for (see table_format)."""
    kind, compression = table_format(out)
    writer = {".jsonl": lambda tmp: frame.to_json(tmp, orient="records", lines=True, force_ascii=False,
                                                  compression=compression),
              ".parquet": lambda tmp: frame.to_parquet(tmp, index=False),
              ".tsv": lambda tmp: frame.to_csv(tmp, index=False, sep="\t", compression=compression),
              ".csv": lambda tmp: frame.to_csv(tmp, index=False, compression=compression)}[kind]
    atomic_write(out, writer)