"""Streamed ``embed``: windows, resume after an interruption, and several processes (poolkit.training.streaming).

Tolerance: windows batch (and so pad) texts differently from one in-memory pass; padding never changes a
pooled vector, so the two agree to float32 rounding (atol 1e-5)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from poolkit import PoolkitError
from poolkit.models.text_encoder import TextEncoder
from poolkit.training.api import embed
from poolkit.training.streaming import embed_to_file, partial_dir
from tiny_models import WORDS

ATOL = 1e-5
WINDOW = 16
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Killed(BaseException):
    """Stands for the process being killed mid-run (not an Exception: nothing may catch and carry on)."""


@pytest.fixture(scope="module")
def texts():
    """53 texts of 1 to 14 words (more than three windows; lengths vary so every window sorts its rows)."""
    rng = np.random.default_rng(1)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 15)))) for _ in range(53)]


@pytest.fixture
def table(tmp_path, texts):
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": range(len(texts)), "text": texts}).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("source,out", [("csv", "v.npy"), ("parquet", "v.parquet"), ("jsonl", "v.jsonl.gz"),
                                        ("csv", "v.tsv")])
def test_streamed_output_equals_the_in_memory_one(tmp_path, texts, model_dir, source, out):
    data = tmp_path / f"in.{source}"
    frame = pd.DataFrame({"id": range(len(texts)), "text": texts})
    if source == "parquet":  # row groups of 7 rows: windows of 16 are regrouped across them
        frame.to_parquet(data, row_group_size=7)
    elif source == "jsonl":
        frame.to_json(data, orient="records", lines=True)
    else:
        frame.to_csv(data, index=False)
    _, expected, _ = embed(data, model=model_dir, pooler="max", progress=False)
    done = embed_to_file(data, tmp_path / out, model=model_dir, pooler="max", window=WINDOW, progress=False)
    assert (done["rows"], done["windows"], done["dim"]) == (53, 4, 32)
    if out.endswith(".npy"):
        got = np.load(tmp_path / out)
    else:
        written = (pd.read_parquet(tmp_path / out) if out.endswith(".parquet") else
                   pd.read_json(tmp_path / out, lines=True) if ".jsonl" in out else
                   pd.read_csv(tmp_path / out, sep="\t"))
        assert written["id"].tolist() == list(range(53)) and written["text"].tolist() == texts  # input order
        got = (written[[f"emb_{j}" for j in range(32)]].to_numpy() if out.endswith(".tsv")
               else np.stack(written["embedding"]))
    np.testing.assert_allclose(got, expected, atol=ATOL)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([data.name, out])  # no partial folder left


def test_an_interrupted_run_resumes_to_the_same_file(tmp_path, table, model_dir, monkeypatch):
    whole = tmp_path / "whole.npy"
    embed_to_file(table, whole, model=model_dir, window=WINDOW, progress=False)
    out = tmp_path / "v.npy"
    calls, fail_at = [], [3]
    encode = TextEncoder.encode

    def fail_on_third_window(self, window_texts, **options):
        calls.append(len(window_texts))
        if len(calls) in fail_at:
            raise Killed  # killed while the third window is being encoded
        return encode(self, window_texts, **options)

    monkeypatch.setattr(TextEncoder, "encode", fail_on_third_window)
    with pytest.raises(Killed):
        embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    assert not out.exists()  # never a half-written file under the final name
    assert sorted(p.name for p in partial_dir(out).glob("window-*.json")) == ["window-000000.json",
                                                                             "window-000001.json"]
    (partial_dir(out) / "window-000001.npy").write_bytes(b"damaged")  # a finished window that no longer checks out
    calls.clear()
    fail_at.clear()
    done = embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    assert calls == [16, 16, 5] and done["reused"] == 1  # windows 1 (damaged), 2 and 3 redone, window 0 kept
    assert out.read_bytes() == whole.read_bytes() and not partial_dir(out).exists()


def test_a_partial_run_with_other_settings_is_refused_unless_forced(tmp_path, table, model_dir, monkeypatch):
    out = tmp_path / "v.npy"
    encode = TextEncoder.encode
    calls = []

    def fail_on_second_window(self, window_texts, **options):
        calls.append(1)
        if len(calls) == 2:
            raise Killed
        return encode(self, window_texts, **options)

    with monkeypatch.context() as patch:
        patch.setattr(TextEncoder, "encode", fail_on_second_window)
        with pytest.raises(Killed):
            embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    with pytest.raises(PoolkitError, match=r"other settings \(normalize differ\).*force=True"):
        embed_to_file(table, out, model=model_dir, window=WINDOW, normalize=True, progress=False)
    with pytest.raises(PoolkitError, match=r"other settings \(window differ\)"):
        embed_to_file(table, out, model=model_dir, window=WINDOW + 1, progress=False)
    done = embed_to_file(table, out, model=model_dir, window=WINDOW, normalize=True, force=True, progress=False)
    assert done["reused"] == 0
    np.testing.assert_allclose(np.linalg.norm(np.load(out), axis=1), 1.0, atol=1e-5)
    with pytest.raises(PoolkitError, match="force=True"):  # a finished output is not overwritten without force
        embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)


def test_quantized_output_is_the_codes_of_the_float_vectors_over_every_window(tmp_path, table, model_dir, capsys):
    """embed --quantize writes poolkit.quantize's codes of the float32 output: int8 relative to each dimension's range
    over *all* windows (kept beside, catches ranges of the last window only), binary packed; the float windows are
    kept for a resumed run with another kind; tables get the same codes (issue 28: they were refused); an existing
    ranges file is refused before any work."""
    from poolkit import quantize
    from poolkit.cli import main

    floats = tmp_path / "f.npy"
    embed_to_file(table, floats, model=model_dir, window=WINDOW, progress=False)
    vectors = np.load(floats)
    int8 = tmp_path / "q.npy"
    embed_to_file(table, int8, model=model_dir, window=WINDOW, progress=False, quantize="int8")
    ranges = np.load(tmp_path / "q.ranges.npy")
    np.testing.assert_array_equal(ranges, np.stack([vectors.min(0), vectors.max(0)]))
    codes = np.load(int8)
    assert codes.dtype == np.int8 and codes.shape == vectors.shape
    np.testing.assert_array_equal(codes, quantize(vectors, "int8", ranges=ranges))
    packed = tmp_path / "b.npy"
    assert main(["embed", "--data", str(table), "--model", model_dir, "--out", str(packed), "--quantize", "ubinary",
                 "--window", str(WINDOW), "--quiet"]) == 0
    assert "as ubinary codes" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(packed), quantize(vectors, "ubinary"))
    import pandas as pd

    for name, read in (("t.parquet", pd.read_parquet), ("t.jsonl", lambda f: pd.read_json(f, lines=True))):
        embed_to_file(table, tmp_path / name, model=model_dir, window=WINDOW, progress=False, quantize="int8")
        stored = np.stack(read(tmp_path / name)["embedding"].map(np.asarray))  # the table's codes, row by row
        np.testing.assert_array_equal(stored, codes)
        np.testing.assert_array_equal(np.load(tmp_path / "t.ranges.npy"), ranges)
        (tmp_path / "t.ranges.npy").unlink()
    embed_to_file(table, tmp_path / "t.csv", model=model_dir, window=WINDOW, progress=False, quantize="binary")
    frame = pd.read_csv(tmp_path / "t.csv")
    np.testing.assert_array_equal(frame.filter(like="emb_").to_numpy(), quantize(vectors, "binary"))
    (tmp_path / "r.ranges.npy").write_bytes(b"mine")
    with pytest.raises(PoolkitError, match="already exists"):
        embed_to_file(table, tmp_path / "r.npy", model=model_dir, quantize="uint8", progress=False)
    assert (tmp_path / "r.ranges.npy").read_bytes() == b"mine" and not (tmp_path / "r.npy").exists()


def test_an_input_edited_during_the_run_is_refused_and_a_rerun_embeds_the_new_one(tmp_path, table, model_dir,
                                                                                   monkeypatch):
    """Issue 32, item 6: a file edited while embed read it gave rows holding the new text beside the old text's
    vector, exit 0. Now the run refuses to write (the input's digest is checked at the end, and each window's texts
    against its record); the partial run is one of another input, so going on takes `force`."""
    out = tmp_path / "v.parquet"
    encode = TextEncoder.encode
    calls = []

    def edit_after_the_first_window(self, window_texts, **options):
        calls.append(1)
        if len(calls) == 1:
            frame = pd.read_csv(table)
            frame.loc[30, "text"] = "a brand new text"
            frame.to_csv(table, index=False)
        return encode(self, window_texts, **options)

    monkeypatch.setattr(TextEncoder, "encode", edit_after_the_first_window)
    with pytest.raises(PoolkitError, match="changed while it was being embedded: nothing was written"):
        embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    assert not out.exists()
    monkeypatch.setattr(TextEncoder, "encode", encode)
    with pytest.raises(PoolkitError, match=r"holds a run with other settings \(input differ"):
        embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False, force=True)
    fresh = tmp_path / "fresh.parquet"
    embed_to_file(table, fresh, model=model_dir, window=WINDOW, progress=False)
    a, b = pd.read_parquet(out), pd.read_parquet(fresh)
    assert a["text"][30] == "a brand new text"
    np.testing.assert_array_equal(np.stack(a["embedding"]), np.stack(b["embedding"]))


def test_a_window_made_with_other_settings_is_never_kept(tmp_path, table, model_dir, monkeypatch):
    """Issue 32, item 5: a window's record carries the digest of the settings it was made with, so a run with other
    settings that finds it (here by a partial folder whose manifest was rewritten) redoes it."""
    import json as json_module

    out = tmp_path / "v.npy"
    encode, calls = TextEncoder.encode, []

    def killed_on_the_third(self, window_texts, **options):
        calls.append(1)
        if len(calls) == 3:
            raise Killed
        return encode(self, window_texts, **options)

    monkeypatch.setattr(TextEncoder, "encode", killed_on_the_third)
    with pytest.raises(Killed):
        embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    monkeypatch.setattr(TextEncoder, "encode", encode)
    from poolkit.io import MANIFEST

    manifest = partial_dir(out) / MANIFEST  # the partial folder claimed for the other settings
    record = json_module.loads(manifest.read_text())
    record["settings"]["normalize"] = True
    manifest.write_text(json_module.dumps(record))
    done = embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False, normalize=True)
    assert done["reused"] == 0
    np.testing.assert_allclose(np.linalg.norm(np.load(out), axis=1), 1.0, atol=1e-5)


def test_what_a_run_killed_while_writing_the_output_left_is_removed_by_the_next(tmp_path, table, model_dir):
    """Issue 32, item 14: a kill -9 during the final assembly left `.OUT.<random>.tmp` forever. The next run of the
    same output, holding its lock, removes what atomic_write left (`.OUT.poolkit-*.tmp`), and nothing else."""
    out = tmp_path / "v.npy"
    left = tmp_path / ".v.npy.poolkit-k1ll3d00.tmp"
    left.write_bytes(b"half an array")
    theirs = tmp_path / ".v.npy.mine.tmp"
    theirs.write_text("keep")
    embed_to_file(table, out, model=model_dir, window=WINDOW, progress=False)
    assert not left.exists() and theirs.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".v.npy")) == [".v.npy.mine.tmp"]


def test_an_output_that_is_a_folder_is_refused_before_the_work_even_forced(tmp_path, table, model_dir, monkeypatch):
    """Issue 32, item 15: `--out` an existing folder with `--force` failed after all the work (IsADirectoryError at
    the rename). Now refused first, the folder left as it was."""
    folder = tmp_path / "v.npy"
    folder.mkdir()
    (folder / "mine.txt").write_text("keep")
    monkeypatch.setattr(TextEncoder, "encode", lambda *a, **k: pytest.fail("encoded before the output was checked"))
    with pytest.raises(PoolkitError, match="is a folder: poolkit writes a file there and never replaces a folder"):
        embed_to_file(table, folder, model=model_dir, window=WINDOW, progress=False, force=True)
    assert (folder / "mine.txt").read_text() == "keep"
