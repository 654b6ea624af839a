"""The one run-folder model (poolkit.io.runs): refusals before any work, --force removing only what earlier runs of
the same kind wrote and listed, one run per folder, resume settings, publishing a finished folder."""

from __future__ import annotations

import json

import pytest

from poolkit.errors import PoolkitError
from poolkit.io import MANIFEST, RunFolder, publish


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_file_in_the_way_is_refused_before_anything_is_made(tmp_path):
    # catches a run that makes folders (or writes a manifest) before it refuses
    (tmp_path / "file").write_text("x")
    with pytest.raises(PoolkitError, match="is a file: pass a folder path"):
        RunFolder(tmp_path / "file", ("a",)).check()
    with pytest.raises(PoolkitError, match="cannot be created: .*file is a file"):
        with RunFolder(tmp_path / "file" / "below", ("a",)).claim():
            pass
    with pytest.raises(PoolkitError, match="either --resume .* or --force"):
        RunFolder(tmp_path / "new", ("a",)).check(force=True, resume=True)
    assert _names(tmp_path) == ["file"]


def test_outputs_in_the_way_need_force_and_other_files_stay(tmp_path):
    # catches a run that overwrites its earlier results without force, one that refuses a folder for files that are
    # not its outputs, and one whose manifest does not name what it writes
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    folder = RunFolder(out, ("results.csv", "plot.png"))
    with folder.claim() as claimed:  # notes.txt is not in the way of a non-exclusive run
        (claimed / "results.csv").write_text("1")
    assert json.loads((out / MANIFEST).read_text()) == {"outputs": ["results.csv", "plot.png"]}
    with pytest.raises(PoolkitError, match=r"already holds results.csv: pass --force to start over, or choose"):
        folder.check()
    with folder.claim(force=True):
        assert _names(out) == [MANIFEST, "notes.txt"]  # the earlier results removed, the user's file kept
    with pytest.raises(PoolkitError, match=r"already holds \.poolkit_outputs\.json, notes\.txt: pass --force"):
        RunFolder(out, ("results.csv",), exclusive=True).check()


def test_force_removes_only_what_earlier_runs_of_this_kind_listed(tmp_path):
    # catches a force that trusts the manifest alone (a planted or foreign name, a path outside the folder), one that
    # removes entries of its kind no manifest listed, and one that leaves an earlier run's temporary files behind
    out = tmp_path / "run"
    (out / "fold_0").mkdir(parents=True)
    (out / "fold_1").mkdir()
    for name in ("metrics.json", ".fold_1.x1y2.tmp", "notes.txt", "fold_data.csv"):
        (out / name).write_text("x")
    (tmp_path / "outside.txt").write_text("keep")
    (out / MANIFEST).write_text(json.dumps({"outputs": ["fold_0", "fold_1", "metrics.json", "notes.txt",
                                                        "../outside.txt"]}))
    folder = RunFolder(out, ("fold_0", "metrics.json"), exclusive=True, owns=lambda e: e.name.startswith("fold_"))
    with folder.claim(force=True):
        pass
    assert _names(out) == [MANIFEST, "fold_data.csv", "notes.txt"]
    assert (tmp_path / "outside.txt").read_text() == "keep"
    assert json.loads((out / MANIFEST).read_text())["outputs"] == ["fold_0", "metrics.json"]


def test_without_a_manifest_force_removes_the_entries_of_its_kind(tmp_path):
    # folders of a poolkit that kept no manifest: catches a force that then removes nothing (stale fold models would
    # be averaged with the new ones) or everything
    out = tmp_path / "old"
    out.mkdir()
    for name in ("fold_3", "notes.txt", "metrics.json"):
        (out / name).write_text("x")
    with RunFolder(out, ("metrics.json",), exclusive=True, owns=lambda e: e.name == "fold_3").claim(force=True):
        pass
    assert _names(out) == [MANIFEST, "notes.txt"]


def test_one_run_per_folder(tmp_path):
    # catches a lock that is not taken, or not released when the run ends
    folder = RunFolder(tmp_path / "out", ("a",))
    with folder.claim():
        with pytest.raises(PoolkitError, match="another poolkit run is writing to"):
            with RunFolder(tmp_path / "out", ("b",)).claim():
                pass
    with RunFolder(tmp_path / "out", ("b",)).claim():
        pass


def test_resume_takes_only_a_run_with_the_same_settings(tmp_path):
    # catches a resume that continues a run made with other settings, or one whose settings were never recorded
    out = tmp_path / "partial"
    folder = RunFolder(out, ("window-*",), exclusive=True)
    with folder.claim(settings={"window": 8, "model": "m"}):
        (out / "window-000.npy").write_text("x")
    with folder.claim(resume=True, settings={"model": "m", "window": 8}):
        assert (out / "window-000.npy").exists()
    with pytest.raises(PoolkitError, match=r"other settings \(window differ\).*--force to start over"):
        with folder.claim(resume=True, settings={"window": 16, "model": "m"}):
            pass
    (out / MANIFEST).unlink()
    with pytest.raises(PoolkitError, match=r"other settings \(unrecorded differ\)"):
        with folder.claim(resume=True, settings={"window": 8, "model": "m"}):
            pass
    with folder.claim(force=True, settings={"window": 16, "model": "m"}):
        assert _names(out) == [MANIFEST]


def test_publish_moves_each_entry_into_place_and_keeps_the_rest(tmp_path):
    # catches a publish that replaces the whole folder (deleting the user's files), leaves an old entry in place of
    # its new version, or keeps the temporary folder
    out, tmp = tmp_path / "out", tmp_path / "out.tmp"
    (out / "task").mkdir(parents=True)
    (out / "task" / "old.bin").write_text("old")
    (out / "notes.txt").write_text("mine")
    (tmp / "task").mkdir(parents=True)
    (tmp / "task" / "new.bin").write_text("new")
    (tmp / "merge.json").write_text("{}")
    publish(tmp, out)
    assert _names(out) == ["merge.json", "notes.txt", "task"] and _names(out / "task") == ["new.bin"]
    assert not tmp.exists()


def test_clear_leaves_what_poolkit_did_not_write(tmp_path):
    out = tmp_path / "partial"
    folder = RunFolder(out, ("window-*",), exclusive=True)
    with folder.claim():
        (out / "window-000.npy").write_text("x")
    folder.clear()
    assert not out.exists()
    with folder.claim():
        (out / "window-000.npy").write_text("x")
    (out / "mine.txt").write_text("keep")
    folder.clear()
    assert _names(out) == ["mine.txt"]
