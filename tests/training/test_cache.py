"""compare's feature cache cannot lie: keyed by content, verified on open, rebuilt when damaged, one encoder per key."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from poolkit.cli import main
from poolkit.io import atomic_write_content, replace_dir
from poolkit.training import features as F
from poolkit.training.features import cache_key, encode_features
from tiny_models import tiny_bert_dir

TEXTS = ["the cat sat on the mat", "a dog ran", "good", "very bad red mat"]


@pytest.fixture
def bert(tmp_path) -> str:
    return tiny_bert_dir(tmp_path / "bert")


def encode(bert, root, texts=TEXTS, **kw):
    return encode_features(texts, bert, max_length=16, cache_dir=root, progress=False, **kw)


def test_new_weights_in_the_same_folder_are_a_cache_miss(bert, tmp_path):
    before = encode(bert, tmp_path / "cache")
    tiny_bert_dir(Path(bert), seed=1)  # other weights, same path
    after = encode(bert, tmp_path / "cache")
    assert after.folder != before.folder
    assert not np.array_equal(np.asarray(after.tokens), np.asarray(before.tokens))


def test_cached_layers_are_the_encoders_own_hidden_states(bert, tmp_path):
    """Every layer (embeddings first) of every text equals what the encoder gives for that text alone, unpadded
    and truncated at max_length, to float16 rounding; rows come back in the order asked, masks mark exactly the
    text's tokens. Encoded in batches of 2 with padding inside each (catches layers out of order, rows in sorted
    order, offsets off by one, padding attended by the encoder, a truncation that differs from the tokenizer's)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    texts = ["the cat sat on the mat and the dog ran fast", "good", "a big red dog", "very bad", "one two three four"]
    cache = encode_features(texts, bert, max_length=8, batch_size=2, cache_dir=tmp_path, progress=False)
    tokenizer, encoder = AutoTokenizer.from_pretrained(bert), AutoModel.from_pretrained(bert).eval()
    rows = [3, 0, 4, 1]
    layers, mask = cache.batch(rows)
    last, last_mask = cache.batch(rows, all_layers=False)
    assert len(layers) == 3 and torch.equal(last[0], layers[-1]) and torch.equal(last_mask, mask)
    for j, row in enumerate(rows):
        ids = tokenizer(texts[row], truncation=True, max_length=8, return_tensors="pt")
        with torch.no_grad():
            own = encoder(**ids, output_hidden_states=True).hidden_states
        n = ids["input_ids"].shape[1]
        assert mask[j].tolist() == [True] * n + [False] * (mask.shape[1] - n)
        for cached, expected in zip(layers, own):
            torch.testing.assert_close(cached[j, :n], expected[0], rtol=2e-3, atol=2e-3)


def test_texts_are_length_prefixed_in_the_key(bert):
    """Lists that join to the same bytes with NUL separators (and have the same count) get different keys."""
    assert cache_key(bert, ["a\0", "b"], 16) != cache_key(bert, ["a", "\0b"], 16)
    assert cache_key(bert, ["ab"], 16) != cache_key(bert, ["a", "b"], 16)
    assert cache_key(bert, TEXTS, 16) != cache_key(bert, TEXTS, 32)
    assert cache_key(bert, TEXTS, 16) == cache_key(bert, list(TEXTS), 16)


def damage(folder: Path, how: str) -> None:
    tokens = folder / "tokens.npy"
    if how == "truncated":
        tokens.write_bytes(tokens.read_bytes()[: tokens.stat().st_size // 2])
    elif how == "zeroed":
        data = bytearray(tokens.read_bytes())
        data[200:] = bytes(len(data) - 200)  # same size, the header kept
        tokens.write_bytes(bytes(data))
    elif how == "missing":
        (folder / "offsets.npy").unlink()
    elif how == "empty meta":
        (folder / "meta.json").write_text("")
    elif how == "meta without checksums":  # a version-1 meta.json
        meta = json.loads((folder / "meta.json").read_text())
        del meta["files"]
        (folder / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("how", ["truncated", "zeroed", "missing", "empty meta", "meta without checksums"])
def test_a_damaged_cache_is_rebuilt_saying_so(bert, tmp_path, capsys, how):
    good = encode(bert, tmp_path / "cache")
    expected = np.array(good.tokens)
    damage(good.folder, how)
    capsys.readouterr()
    rebuilt = encode(bert, tmp_path / "cache")
    err = capsys.readouterr().err
    assert f"feature cache {good.folder} is damaged" in err and "rebuilding it" in err
    assert rebuilt.folder == good.folder and np.array_equal(np.asarray(rebuilt.tokens), expected)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [good.folder.name, good.folder.name + ".lock"]


def test_staging_left_by_a_killed_run_is_removed_and_a_live_one_kept(bert, tmp_path):
    from poolkit.io import temp_dir

    root = tmp_path / "cache"
    root.mkdir()
    dead, live = "deadbeef" * 4, "cafe" * 8
    (temp_dir(root / dead) / "tokens.npy").write_bytes(b"partial")  # a killed run's half-written cache
    temp_dir(root / live)
    (root / "user_data.tmp").mkdir()  # issue 32, item 3: a user's folder that only looks like staging
    (root / "user_data.tmp" / "notes.txt").write_text("mine")
    (root / f"{'ab' * 16}.tmp").mkdir()  # a cache key's name, but poolkit did not make it
    with FileLock(root / f"{live}.lock"):  # a run still building its cache
        encode(bert, root)
        assert not (root / f"{dead}.tmp").exists() and (root / f"{live}.tmp").is_dir()
    assert (root / "user_data.tmp" / "notes.txt").read_text() == "mine" and (root / f"{'ab' * 16}.tmp").is_dir()


def test_cache_list_and_clear_touch_only_caches(bert, tmp_path, capsys):
    """Issue 32, item 2: `cache clear --cache-dir d` deleted every folder in d (a user's myproject/, photos/) and
    `cache list` called them caches. Now only folders named by a cache key that hold only a cache's files count."""
    from poolkit.cli import main

    root = tmp_path / "cache"
    built = encode(bert, root)
    for name, files in (("myproject", ["main.py"]), ("photos", []), ("build.tmp", ["x.o"]),
                        ("ab" * 16, ["notes.txt"])):
        (root / name).mkdir()
        for file in files:
            (root / name / file).write_text("mine")
    listed = F.list_caches(root)
    assert [entry["path"] for entry in listed] == [built.folder]
    assert main(["cache", "list", "--cache-dir", str(root)]) == 0
    assert "myproject" not in capsys.readouterr().out
    del built
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert F.list_caches(root) == []
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(["ab" * 16, "build.tmp", "myproject",
                                                                           "photos"])
    assert (root / "myproject" / "main.py").read_text() == "mine"


def test_two_runs_at_once_encode_once(bert, tmp_path, monkeypatch):
    calls, real = [], F._encode

    def slow_encode(*args):
        calls.append(1)
        threading.Event().wait(0.5)  # the other run arrives while this one encodes
        return real(*args)

    monkeypatch.setattr(F, "_encode", slow_encode)
    results = []
    runs = [threading.Thread(target=lambda: results.append(encode(bert, tmp_path / "cache"))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert len(calls) == 1 and len(results) == 2 and results[0].folder == results[1].folder


def test_no_cache_reads_and_writes_nothing(bert, tmp_path):
    cached = encode(bert, tmp_path / "cache")
    fresh = encode(bert, tmp_path / "other", cache=False)
    assert not (tmp_path / "other").exists() and fresh.folder != cached.folder
    assert np.array_equal(np.asarray(fresh.tokens), np.asarray(cached.tokens))
    folder = fresh.folder
    del fresh
    import gc

    gc.collect()
    assert not folder.exists()


def test_cache_list_and_clear(bert, tmp_path, capsys):
    root = tmp_path / "cache"
    encode(bert, root)
    encode(bert, root, texts=TEXTS[:2])
    from poolkit.io import temp_dir

    temp_dir(root / ("0123" * 8))  # staging of a killed run
    assert main(["cache", "list", "--cache-dir", str(root)]) == 0
    listed = capsys.readouterr().out
    assert "2 cache(s)" in listed and "4 texts" in listed and "2 texts" in listed
    assert f"format v{F.CACHE_VERSION}" in listed
    assert main(["cache", "clear", "--cache-dir", str(root)]) == 0
    assert "removed 2 cache(s)" in capsys.readouterr().out
    assert not [p for p in root.iterdir() if p.suffix != ".lock"]


def test_compare_no_cache_flag(bert, tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{w} cat sat,{i % 2}\n" for i, w in enumerate(["good", "bad"] * 6)))
    assert main(["compare", "--data", str(data), "--model", bert, "--poolers", "mean", "--folds", "2", "--epochs", "1",
                 "--out", str(tmp_path / "c"), "--cache-dir", str(tmp_path / "cache"), "--no-cache"]) == 0
    assert not (tmp_path / "cache").exists()


def test_outputs_are_flushed_before_they_are_renamed(tmp_path, monkeypatch):
    events = []
    fsync, rename, replace = os.fsync, os.rename, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 fsync(fd)))
    monkeypatch.setattr(os, "rename", lambda a, b: (events.append(("rename", str(a))), rename(a, b)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("rename", str(a))), replace(a, b)))
    tmp = tmp_path / "ckpt.tmp"
    tmp.mkdir()
    (tmp / "weights").write_bytes(b"w")
    replace_dir(tmp, tmp_path / "ckpt")
    atomic_write_content(tmp_path / "out.csv", "a,b\n")
    flushed = [path for kind, path in events if kind == "fsync"]
    renamed = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert str(tmp / "weights") in flushed[: renamed[0]]
    assert any(path.endswith(".tmp") and "out.csv" in path for path in flushed)
    assert str(tmp_path) in flushed  # the parent folder, so the rename itself survives a crash


def test_a_lean_cache_gives_the_full_caches_pooled_features(bert, tmp_path):
    """Per-layer summaries serve the poolers whose token stage is cls / last / mean / sum / mean_sqrt_len (alone or
    under a layer pooler); the others read token states (the last layer, or all under a layer pooler). Each pooler
    gives what it gives on the full cache, to float16 rounding (catches a summary of the wrong layer, rows in the
    wrong order, padding inside a summary, sum stored as mean, a layer pooler handed only the last layer)."""
    import torch

    from poolkit import PoolkitError
    from poolkit.pooling import build_pooler

    texts = ["the cat sat on the mat and the dog ran fast", "good", "a big red dog", "very bad", "one two three"]
    specs = ["cls", "last", "mean", "sum", "mean_sqrt_len", "max", "gem", {"name": "attention", "attn_size": 8},
             {"name": "weighted_layer", "token_pooler": "mean"}, "mean_layers",
             {"name": "attention_layers", "token_pooler": "sum"}, {"name": "weighted_layer", "token_pooler": "max"}]
    full = encode(bert, tmp_path / "full", texts=texts, batch_size=2)
    lean = encode(bert, tmp_path / "lean", texts=texts, batch_size=2, poolers=specs)
    assert [s["name"] for s in lean.meta["plan"]["summaries"]] == ["cls", "last", "mean", "sum", "mean_sqrt_len"]
    assert lean.meta["plan"]["token_layers"] == "all"  # weighted_layer over max mixes every layer's tokens
    rows = [3, 0, 4, 1]
    for spec in specs:
        pooler = build_pooler(spec, 32, 2).eval()
        with torch.no_grad():
            expected, got = pooler(*full.inputs(rows, pooler)), pooler(*lean.inputs(rows, pooler))
        torch.testing.assert_close(got, expected, rtol=2e-3, atol=2e-3, msg=str(spec))
        served = lean.inputs(rows, pooler)[1].shape == (4, 1)
        summarised = {"cls", "last", "mean", "sum", "mean_sqrt_len"}  # linear, parameter-free, 1 token -> itself
        assert served == (pooler.name in summarised or getattr(pooler, "token", pooler).name in summarised), spec

    small = encode(bert, tmp_path / "small", texts=texts, poolers=["cls", "max"], summaries=["mean"])
    assert small.tokens.shape[0] == 1 and small.bytes_per_text() < full.bytes_per_text()  # the last layer only
    assert [s["name"] for s in small.meta["plan"]["summaries"]] == ["mean", "cls"]
    with pytest.raises(PoolkitError, match="keeps last token layers"):
        small.batch(rows, all_layers=True)


def test_int8_token_states_are_within_half_a_step_of_the_states(bert, tmp_path):
    """int8 token states dequantise to within half a quantisation step (each vector's largest magnitude / 254) of
    the float16 ones, and the summaries do not change (catches a scale per layer instead of per token, scales
    stored for the wrong rows, no rounding, the dequantisation left out)."""
    import torch

    from poolkit.pooling import build_pooler

    texts = ["the cat sat on the mat and the dog ran fast", "good", "a big red dog", "very bad", "one two three"]
    poolers = ["mean", {"name": "weighted_layer", "token_pooler": "max"}]
    half = encode(bert, tmp_path / "fp16", texts=texts, batch_size=2, poolers=poolers)
    int8 = encode(bert, tmp_path / "int8", texts=texts, batch_size=2, poolers=poolers, token_dtype="int8")
    assert int8.tokens.dtype == np.int8 and int8.bytes_per_text() < half.bytes_per_text()
    rows = [3, 0, 4, 1]
    (exact, mask), (approx, _) = half.batch(rows), int8.batch(rows)
    for e, a in zip(exact, approx):
        step = e.abs().amax(-1, keepdim=True) / 127
        assert ((a - e).abs()[mask] <= (step / 2 + 2e-3 * e.abs())[mask]).all()
        assert (a - e).abs()[mask].max() > 0  # quantised, not a float16 copy
    mean = build_pooler("mean", 32, 2)
    assert torch.equal(mean(*int8.inputs(rows, mean)), mean(*half.inputs(rows, mean)))


def test_a_token_cap_keeps_each_texts_first_tokens_and_whole_summaries(bert, tmp_path):
    """With a cap of 3, the token states are each text's first 3 (or fewer) tokens, equal to the uncapped cache's
    (catches the cap applied to the wrong end, offsets still counting every token, a row's tokens shifted), while
    the summaries still pool every token (catches summaries pooled from the capped states) and the texts' lengths,
    which group training batches, stay theirs (catches a cap that changes the batches of every pooler)."""
    import torch

    from poolkit import PoolkitError

    texts = ["the cat sat on the mat and the dog ran fast", "good", "a big red dog", "very bad", "one two three"]
    poolers = ["mean", "max"]
    whole = encode(bert, tmp_path / "whole", texts=texts, batch_size=2, poolers=poolers)
    capped = encode(bert, tmp_path / "capped", texts=texts, batch_size=2, poolers=poolers, token_cap=3)
    np.testing.assert_array_equal(np.diff(capped.offsets), np.minimum(whole.lengths, 3))
    np.testing.assert_array_equal(capped.lengths, whole.lengths)  # training batches group rows as without a cap
    assert capped.meta["plan"]["token_cap"] == 3 and capped.bytes_per_text() < whole.bytes_per_text()
    rows = [3, 0, 4, 1]
    (first, _), (kept, mask) = whole.batch(rows, all_layers=False), capped.batch(rows, all_layers=False)
    torch.testing.assert_close(kept[0][mask], first[0][:, :3][mask])
    (key,) = whole.summaries
    np.testing.assert_array_equal(capped.summaries[key], whole.summaries[key])
    with pytest.raises(PoolkitError, match="`cache_max_tokens` must be at least 1"):
        encode(bert, tmp_path / "zero", texts=texts, poolers=poolers, token_cap=0)




def test_a_full_disk_is_one_line_before_encoding_and_leaves_no_staging(bert, tmp_path, monkeypatch):
    """Issue 32 item 13: a full disk while the cache was built gave "Bus error" (exit 135) and left a staging folder.
    Catches the free-space check skipped, blocks not reserved before the memmaps are written, and staging left."""
    import errno
    import shutil
    from collections import namedtuple

    root = tmp_path / "cache"
    usage, disk_usage = namedtuple("usage", "total used free"), shutil.disk_usage
    monkeypatch.setattr(F.shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 1000, 1000))
    forward = []
    monkeypatch.setattr(F, "_stored_tokens", lambda *a: forward.append(1) or pytest.fail("encoded"))
    with pytest.raises(F.PoolkitError, match=r"the feature cache needs [\d.]+ KiB and .* has 1000 B free: free"):
        encode(bert, root)
    assert [p for p in root.iterdir() if p.suffix != ".lock"] == []
    monkeypatch.setattr(F.shutil, "disk_usage", disk_usage)

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(F.os, "posix_fallocate", full)  # the space went between the check and the write
    with pytest.raises(F.PoolkitError, match="no space left for the feature cache's tokens.npy"):
        encode(bert, root)
    assert [p for p in root.iterdir() if p.suffix != ".lock"] == [] and forward == []
    monkeypatch.undo()
    assert encode(bert, root).tokens.shape[1] > 0  # with room, the same call builds it


def test_a_read_only_cache_folder_is_read_and_never_written(bert, tmp_path, monkeypatch, capsys):
    # issue 32 item 15: a read-only cache folder gave a PermissionError traceback. Catches a shared read-only
    # cache refused although it holds the features (or a lock file tried there), and a miss in it that starts
    # encoding or says nothing useful. (os.access is patched: root writes anywhere, so chmod cannot show it.)
    from poolkit.io import runs

    root = tmp_path / "shared"
    built = encode(bert, root)
    before = sorted(p.name for p in root.iterdir())
    real = os.access
    monkeypatch.setattr(runs.os, "access", lambda path, mode: False if Path(path) == root else real(path, mode))
    again = encode(bert, root)
    assert np.array_equal(np.asarray(again.tokens), np.asarray(built.tokens))
    assert sorted(p.name for p in root.iterdir()) == before  # no lock, no staging
    with pytest.raises(F.PoolkitError, match=r"`cache_dir` .*shared cannot be written: no write permission in .*"
                                             r"\(it holds no cache for these texts and settings\)"):
        encode(bert, root, texts=TEXTS[:2])
    table = tmp_path / "t.csv"
    table.write_text("text,label\n" + "".join(f"text {i} here,{i % 2}\n" for i in range(12)))
    code = main(["compare", "--data", str(table), "--model", bert, "--poolers", "mean", "--folds", "2",
                 "--cache-dir", str(root), "--out", str(tmp_path / "board")])
    assert code == 2 and capsys.readouterr().err.count("\n") == 1
    assert sorted(p.name for p in root.iterdir()) == before and not (tmp_path / "board").exists()
