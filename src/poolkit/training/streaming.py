"""``poolkit embed`` on data of any size: streamed in windows, resumable, and sharded over processes.

The input is read in windows of ``window`` rows (:func:`poolkit.data.tables.read_frame_windows`); each window's
texts are length-sorted and batched by :meth:`TextEncoder.encode`, so memory holds one window, never the data.
Each finished window's vectors go to ``<out>.partial/window-NNNNNN.npy`` with a small record beside it (rows,
SHA-256, the digests of the window's texts and of the run's settings) written last, and the partial folder's manifest
holds the settings that determine the vectors (input file, model files, pooler spec or declared pooling, prompt,
normalisation, dim, max_length, precision, window, output format). A run that finds a partial folder with the same
settings keeps every window whose record, digests and checksum match and redoes the rest; different settings are
refused (``force`` starts over). When every window is done and the input is still the one read, the output is
written in input order, one window at a time (Parquet row groups, a ``.npy`` header for the known row count then its
rows, CSV / JSONL lines) to a temporary file renamed to ``out``: the final name never holds a half-written file.

Under ``torchrun`` / ``accelerate launch`` (``RANK`` / ``WORLD_SIZE`` set) process ``r`` encodes windows
``r, r + W, ...`` on its own device (``cuda:LOCAL_RANK`` when there is CUDA); the processes share nothing but the
partial folder, so no collective op can time out on an uneven split; each process marks itself done (with the
launch's id), and rank 0 waits for every mark, then assembles the one output. A process that fails makes the
launcher stop the others.
"""

from __future__ import annotations

import ctypes
import gzip
import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PoolkitError
from ..io import MANIFEST, RunFolder, atomic_write, atomic_write_json, file_digest, refuse_overwrite
from ..io.files import remove_stale_temp_files
from ..settings import config_from
from .config import WINDOW, EmbedConfig
from .processes import launch_id, process_device, process_rank, read_json, wait_for

FORMAT_VERSION = 1
PARTIAL_SUFFIX = ".partial"
#: what a partial folder holds: each window's vectors and record, each process's done-mark
PARTIAL_FILES = ("window-*.npy", "window-*.json", "rank-*.done")
#: where poolkit 0.2 kept a partial folder's settings
LEGACY_MANIFEST = "manifest.json"
#: glibc's mallopt parameter (malloc.h) and the block size from which :func:`return_freed_memory` maps blocks.
M_MMAP_THRESHOLD, MMAP_FROM = -3, 1 << 20


def partial_dir(out: Path) -> Path:
    """Where a run on ``out`` keeps its finished windows and manifest until the output is complete."""
    return out.with_name(out.name + PARTIAL_SUFFIX)


def return_freed_memory() -> None:
    """Have glibc's malloc serve blocks of 1 MiB and more by mmap, so that the memory a batch frees goes back to
    the system. By default its threshold rises to the largest block freed so far; from then on the batches'
    tensors come from the heap, whose free holes (batches differ in shape) stay resident, and the peak RSS grew
    window after window. The setting is process-wide and stays; it costs page faults (docs/scale.md gives the
    CPU seconds). Elsewhere than glibc: nothing."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_FROM)
    except (OSError, AttributeError):  # no libc to load, or one without mallopt
        pass


def input_windows(data: str | Path | Sequence[str], text_col: str, window: int
                  ) -> Iterator[tuple[pd.DataFrame, list[str]]]:
    """(frame, texts) per window of ``window`` rows, in input order: a file read in chunks; ``builtin:NAME`` or a
    list of texts (already in memory) cut into windows."""
    from ..data.tables import frame_texts, read_frame_windows
    from ..data.texts import read_texts

    if isinstance(data, (str, Path)) and not str(data).startswith("builtin:"):
        frames = read_frame_windows(Path(data), window)
    else:
        whole, _ = read_texts(data, text_col)
        frames = (whole.iloc[start:start + window].reset_index(drop=True) for start in range(0, len(whole), window))
    for frame in frames:
        yield frame, frame_texts(frame, text_col, data if isinstance(data, (str, Path)) else "the texts")


def input_fingerprint(data: str | Path | Sequence[str]) -> dict[str, Any]:
    """What identifies the input: a file's name and SHA-256, a built-in set's name, or a digest of a list of texts."""
    if isinstance(data, (str, Path)):
        if str(data).startswith("builtin:"):
            return {"builtin": str(data)}
        from ..data.tables import file_format

        file_format(Path(data))  # a folder, a device or a missing file: one line naming it
        return {"file": Path(data).name, "sha256": file_digest(Path(data))}
    digest = hashlib.sha256()
    for text in data:
        encoded = str(text).encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return {"texts_sha256": digest.hexdigest()}


def embed_to_file(data: str | Path | Sequence[str], out: str | Path, *, model: str | None = None,
                  pooler: str | dict[str, Any] | None = None, text_col: str = "text", trust_remote_code: bool = False,
                  window: int = WINDOW, force: bool = False, progress: bool = True, **settings: Any) -> dict[str, Any]:
    """Embed ``data`` into ``out`` (.npy, or the table plus its vectors: .parquet / .jsonl / .csv / .tsv, the text
    ones optionally .gz) streamed in windows, resuming an interrupted run with the same settings; see the module
    docstring. ``settings``: EmbedConfig's fields, as for ``poolkit.training.api.embed``. Returns {"rows", "dim",
    "pooler" (spec), "pooling" (which ran), "windows", "reused" (windows kept from an earlier run), "rank", "world"};
    with several processes only rank 0 writes ``out`` (the others return ``rows`` None)."""
    from ..io import table_format
    from ..models.encoders import resolve_model
    from ..models.text_encoder import TextEncoder
    from ..models.encoders import embedding_model
    from ..models.encoders import model_fingerprint

    config = config_from(EmbedConfig, "embed", settings)
    config.check()
    out = Path(out)
    kind, compression = table_format(out, others=(".npy",))
    if window < 1:
        raise PoolkitError(f"`window` must be at least 1 row, got {window}")
    fingerprint = input_fingerprint(data)  # a missing or unreadable input fails before the model loads
    rank, world = process_rank()
    refuse_overwrite(out, force)
    ranges_out = ranges_path(out) if config.quantize in ("int8", "uint8") else None
    if ranges_out is not None:
        refuse_overwrite(ranges_out, force)
    return_freed_memory()
    model = embedding_model(model)
    encoder = TextEncoder(model, pooler, **config.encoder_options(), trust_remote_code=trust_remote_code,
                          device=process_device(world))
    spec = encoder.pooler.get_config()
    settings = {"version": FORMAT_VERSION, "input": fingerprint, "text_col": text_col,
                "model": model_fingerprint(resolve_model(model)), **encoder.settings(), "precision": encoder.precision,
                "window": window, "format": kind}
    settings_digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    windows_in = input_windows(data, text_col, window)
    first = next(windows_in)  # a bad input (no such column, unreadable file) fails before anything is written
    partial = partial_dir(out)
    with ExitStack() as held:  # rank 0 holds the partial folder for the run
        if rank == 0:
            held.enter_context(_claim_partial(partial, settings, force))
            for written in (out, ranges_out):  # a run killed while it wrote them left these (issue 32, item 14)
                if written is not None:
                    remove_stale_temp_files(written)
        else:
            wait_for(lambda: (read_json(partial / MANIFEST) or {}).get("settings") == json.loads(json.dumps(settings)),
                     f"{partial / MANIFEST}")
        reused = windows = 0
        from ..progress import progress as progress_bar

        try:
            with progress_bar(desc="embedding", unit="text", disable=not progress or rank != 0) as bar:
                for index, (_, texts) in enumerate(itertools.chain([first], windows_in)):
                    windows += 1
                    if index % world != rank:
                        continue
                    made = {"texts": input_fingerprint(texts)["texts_sha256"], "settings": settings_digest}
                    if _finished_window(partial, index, len(texts), made):
                        reused += 1
                    else:
                        vectors = encoder.encode(texts, batch_size=config.batch_size).numpy()
                        check_finite(vectors, index * window, config.allow_nonfinite)
                        _save_window(partial, index, vectors, made)
                    bar.update(len(texts) * world)
        except BaseException:
            if rank == 0 and not any(partial.glob("window-*.json")):  # nothing worth resuming
                _partial_folder(partial).clear()
            raise
        summary = {"rows": None, "dim": encoder.dim, "pooler": spec, "pooling": encoder.pooling, "windows": windows,
                   "reused": reused, "rank": rank, "world": world}
        if rank != 0:  # done: its windows' records are written
            atomic_write_json(partial / f"rank-{rank}.done", {"launch": launch_id(), "windows": windows})
            return summary
        wait_for(lambda: all(read_json(partial / f"rank-{r}.done") == {"launch": launch_id(), "windows": windows}
                              for r in range(1, world)), f"the other processes' windows in {partial}")
        if input_fingerprint(data) != settings["input"]:  # edited while it was read: rows would mix two inputs
            raise PoolkitError(f"{data} changed while it was being embedded: nothing was written; run again with "
                               "`force=True` (--force) to embed it as it is now")
        records = [json.loads((partial / f"window-{i:06d}.json").read_text()) for i in range(windows)]
        rows = sum(record["rows"] for record in records)
        parts = (_load_window(partial, i, records[i]) for i in range(windows))
        width, dtype = encoder.dim, np.float32
        if config.quantize is not None:
            parts, width, dtype = _codes(ranges_out, config.quantize, partial, records, encoder.dim)
        if kind == ".npy":
            atomic_write(out, lambda tmp: _write_npy(tmp, parts, rows, width, dtype))
        else:
            frames = (_same_texts(frame, texts, records[i]) for i, (frame, texts) in
                      enumerate(input_windows(data, text_col, window)))
            atomic_write(out, lambda tmp: _write_table(tmp, kind, compression, zip(frames, parts)))
        _partial_folder(partial).clear()
        return {**summary, "rows": rows}


def _partial_folder(partial: Path) -> RunFolder:
    """A partial folder as a run folder that starts over in place; ``manifest.json``: the settings record of
    poolkit 0.2's partial folders."""
    return RunFolder(partial, PARTIAL_FILES, exclusive=True, resumable=True,
                     owns=lambda entry: entry.name == LEGACY_MANIFEST)


def _claim_partial(partial: Path, settings: dict[str, Any], force: bool):
    """The partial folder (:class:`poolkit.io.RunFolder`), locked for the run: resumed when it holds a run with
    ``settings``, else refused (``force``: started over)."""
    folder = _partial_folder(partial)
    settings = json.loads(json.dumps(settings))  # as read back: tuples become lists
    if folder.manifest() is None and read_json(partial / LEGACY_MANIFEST) == settings:
        atomic_write_json(partial / MANIFEST, {"outputs": list(PARTIAL_FILES), "settings": settings})  # 0.2's
    if (folder.manifest() or {}).get("settings") == settings:
        return folder.claim(resume=True, settings=settings)  # the same run: continue it, forced or not
    if force:
        return folder.claim(force=True, settings=settings)
    return folder.claim(resume=True, settings=settings)  # a fresh folder, or refused naming what differs


def _finished_window(partial: Path, index: int, rows: int, made: dict[str, str]) -> bool:
    """Whether window ``index`` was written whole by an earlier run from these texts with these settings (``made``):
    its record, row count, the texts' and settings' digests and the vectors' checksum match. A record of poolkit 0.2
    carries no digests: its row count and checksum decide, as then."""
    record_path = partial / f"window-{index:06d}.json"
    try:
        record = json.loads(record_path.read_text())
        same = all(record.get(key, value) == value for key, value in made.items())
        return same and record["rows"] == rows and file_digest(partial / f"window-{index:06d}.npy") == record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _save_window(partial: Path, index: int, vectors: np.ndarray, made: dict[str, str]) -> None:
    """The window's vectors, then its record (the record's presence means the vectors are whole) with the digests of
    the texts and settings they were made from."""
    path = partial / f"window-{index:06d}.npy"
    atomic_write(path, lambda tmp: _save_npy(tmp, vectors))
    atomic_write_json(partial / f"window-{index:06d}.json", {"rows": len(vectors), "sha256": file_digest(path),
                                                             **made})


def _same_texts(frame: pd.DataFrame, texts: list[str], record: dict) -> pd.DataFrame:
    """The frame of a window read again for the output, refused when its texts are not those its vectors were made
    from."""
    digest = input_fingerprint(texts)["texts_sha256"]
    if record.get("texts", digest) != digest:  # 0.2's records carry no digest
        raise PoolkitError("the input changed while its vectors were being written: nothing was written; run again "
                           "with `force=True` (--force) to embed it as it is now")
    return frame


def _save_npy(tmp: str, vectors: np.ndarray) -> None:
    with open(tmp, "wb") as handle:  # np.save(path) would append .npy to the temporary name
        np.save(handle, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)


def _load_window(partial: Path, index: int, record: dict) -> np.ndarray:
    path = partial / f"window-{index:06d}.npy"
    if file_digest(path) != record["sha256"]:
        raise PoolkitError(f"{path} changed after it was written (checksum mismatch): run the same command again "
                           "to redo that window")
    return np.load(path, allow_pickle=False)


def check_finite(vectors: np.ndarray, first_row: int, allow_nonfinite: bool) -> None:
    """Refuse vectors holding NaN / inf unless ``allow_nonfinite``, naming rows (``first_row``: the first's index)."""
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any() and not allow_nonfinite:
        rows = ", ".join(map(str, np.flatnonzero(bad)[:5] + first_row + 1))
        raise PoolkitError(f"{int(bad.sum())} of {len(vectors)} vectors hold NaN or inf (rows {rows}; row 1 = first): "
                           "check the model's weights or `precision`, or pass `allow_nonfinite=True` to write them anyway")


def _write_npy(tmp: str, parts: Iterator[np.ndarray], rows: int, dim: int, dtype=np.float32) -> None:
    """The (rows, dim) array: the header for the known shape, then one window at a time (appended, not through a
    memmap, whose written pages would stay resident and grow with the data)."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (rows, dim)}
    with open(tmp, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        for vectors in parts:
            handle.write(np.ascontiguousarray(vectors, dtype=dtype).tobytes())


def ranges_path(out: Path) -> Path:
    """Where ``embed --quantize int8|uint8`` keeps the (2, dim) ranges its codes are relative to: OUT.ranges.npy."""
    return out.with_name(f"{out.stem}.ranges.npy")


def _codes(ranges_out: Path | None, kind: str, partial: Path, records: list[dict],
           dim: int) -> tuple[Iterator[np.ndarray], int, Any]:
    """The windows' vectors quantised to ``kind``, a window at a time, with their width and dtype (int8 / uint8:
    relative to each dimension's range over every window, found by a first pass and written to ``ranges_out``;
    binary: 8 dimensions to a byte)."""
    from ..quantization import quantization_ranges, quantize

    def parts() -> Iterator[np.ndarray]:
        return (_load_window(partial, i, record) for i, record in enumerate(records))

    ranges = None
    if ranges_out is not None:
        bounds = [quantization_ranges(part) for part in parts() if len(part)]
        ranges = (np.stack([np.min([b[0] for b in bounds], axis=0), np.max([b[1] for b in bounds], axis=0)])
                  if bounds else np.zeros((2, dim), np.float32))
        atomic_write(ranges_out, lambda tmp: _save_npy(tmp, ranges))
    width = dim if ranges is not None else -(-dim // 8)
    dtype = np.uint8 if kind in ("uint8", "ubinary") else np.int8
    codes = (quantize(part, kind, ranges=ranges) if len(part) else np.zeros((0, width), dtype) for part in parts())
    return codes, width, dtype


def _write_table(tmp: str, kind: str, compression: str | None,
                 windows: Iterator[tuple[pd.DataFrame, np.ndarray]]) -> None:
    """The input table plus its vectors, one window at a time: Parquet (one row group per window, an ``embedding``
    list column), JSONL (an ``embedding`` list per line) or CSV / TSV (``emb_0 .. emb_{dim-1}`` columns)."""
    if kind == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = None
        try:
            for frame, vectors in windows:
                table = pa.Table.from_pandas(frame.assign(embedding=list(vectors)), preserve_index=False)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                else:
                    table = _same_schema(table, writer.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        return
    opener = (lambda: gzip.open(tmp, "wt", encoding="utf-8", newline="")) if compression else (
        lambda: open(tmp, "w", encoding="utf-8", newline=""))
    with opener() as handle:
        for number, (frame, vectors) in enumerate(windows):
            if kind == ".jsonl":
                handle.write(frame.assign(embedding=list(vectors)).to_json(orient="records", lines=True,
                                                                           force_ascii=False))
            else:
                columns = pd.DataFrame(vectors, columns=[f"emb_{j}" for j in range(vectors.shape[1])])
                pd.concat([frame, columns], axis=1).to_csv(handle, index=False, header=number == 0,
                                                           sep="\t" if kind == ".tsv" else ",")


def _same_schema(table, schema):
    """A later window cast to the first window's column types (Parquet files have one schema)."""
    try:
        return table.cast(schema)
    except (ValueError, TypeError) as err:  # Arrow's errors are ValueErrors
        raise PoolkitError(f"a column changes type between windows ({' '.join(str(err).split())[:200]}): write "
                           ".jsonl or .csv instead, or make the column's values one type") from None
