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
    with pytest.raises(PoolkitError, match="either `resume=True` .* or `force=True`"):
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
    with pytest.raises(PoolkitError, match=r"already holds results.csv: pass `force=True` to start over, or choose"):
        folder.check()
    with pytest.raises(PoolkitError, match=r"already holds notes\.txt, results\.csv: pass `force=True`"):  # no manifest
        RunFolder(out, ("results.csv",), exclusive=True).check()


def test_a_forced_run_that_fails_keeps_the_earlier_results(tmp_path):
    # a run that cannot resume keeps its predecessor's entries until it has written its own: catches a force that
    # deletes the earlier results up front (a crash would leave none), and one that keeps entries of its kind that
    # the new run does not write again
    out = tmp_path / "out"
    owns = lambda e: e.name.endswith("plot.png")  # noqa: E731
    with RunFolder(out, ("results.csv", "old_plot.png"), owns=owns).claim():
        (out / "results.csv").write_text("old")
        (out / "old_plot.png").write_text("old")
    folder = RunFolder(out, ("results.csv", "plot.png"), owns=owns)
    with pytest.raises(RuntimeError):
        with folder.claim(force=True):
            raise RuntimeError("the run failed")
    assert (out / "results.csv").read_text() == "old" and (out / "old_plot.png").exists()
    with folder.claim(force=True):
        (out / "results.csv").write_text("new")
        (out / "plot.png").write_text("new")
    assert _names(out) == [MANIFEST, "plot.png", "results.csv"] and (out / "results.csv").read_text() == "new"
    assert json.loads((out / MANIFEST).read_text())["outputs"] == ["results.csv", "plot.png"]


def test_a_folder_of_the_users_in_the_way_is_refused_even_forced(tmp_path):
    # merge task names are the user's: catches a force (or a publish) that replaces a same-named folder poolkit did
    # not write, and a publish that would remove a folder parked under .old
    out = tmp_path / "out"
    (out / "sst2").mkdir(parents=True)
    (out / "sst2" / "data.csv").write_text("mine")
    with pytest.raises(PoolkitError, match="holds sst2, which poolkit did not write there"):
        RunFolder(out, ("sst2", "merge.json"), exclusive=True).check(force=True)
    tmp = tmp_path / "new"
    (tmp / "task").mkdir(parents=True)
    (out / "task.old").mkdir()
    with pytest.raises(PoolkitError, match="holds task.old: move it away"):
        publish(tmp, out)
    assert (out / "sst2" / "data.csv").read_text() == "mine" and (out / "task.old").is_dir()


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
    folder = RunFolder(out, ("fold_0", "metrics.json"), exclusive=True, resumable=True,
                       owns=lambda e: e.name.startswith("fold_"))
    with folder.claim(force=True):
        pass
    assert _names(out) == [MANIFEST, "fold_data.csv", "notes.txt"]  # listed but another kind / of its kind, unlisted
    assert (tmp_path / "outside.txt").read_text() == "keep"
    assert json.loads((out / MANIFEST).read_text())["outputs"] == ["fold_0", "metrics.json"]


def test_without_a_manifest_force_removes_the_entries_of_its_kind(tmp_path):
    # folders of a poolkit that kept no manifest: catches a force that then removes nothing (stale fold models would
    # be averaged with the new ones) or everything
    out = tmp_path / "old"
    out.mkdir()
    for name in ("fold_3", "notes.txt", "metrics.json"):
        (out / name).write_text("x")
    with RunFolder(out, ("metrics.json",), exclusive=True, resumable=True,
                   owns=lambda e: e.name == "fold_3").claim(force=True):
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
    folder = RunFolder(out, ("window-*",), exclusive=True, resumable=True)
    with folder.claim(settings={"window": 8, "model": "m"}):
        (out / "window-000.npy").write_text("x")
    with folder.claim(resume=True, settings={"model": "m", "window": 8}):
        assert (out / "window-000.npy").exists()
    with pytest.raises(PoolkitError, match=r"other settings \(window differ\).*`force=True` to start over"):
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


def test_a_resume_never_drops_a_name_from_the_manifest(tmp_path):
    # catches a claim that rewrites the manifest to this run's outputs alone: a later --force would then miss the
    # entries of the earlier run (fold_3 of a 4-fold run resumed as 3 folds)
    out = tmp_path / "run"
    owns = lambda e: e.name.startswith("fold_")  # noqa: E731
    with RunFolder(out, ("fold_0", "fold_3"), exclusive=True, resumable=True, owns=owns).claim():
        (out / "fold_3").write_text("x")
    with RunFolder(out, ("fold_0",), exclusive=True, resumable=True, owns=owns).claim(resume=True):
        pass
    assert json.loads((out / MANIFEST).read_text())["outputs"] == ["fold_0", "fold_3"]
    with RunFolder(out, ("fold_0",), exclusive=True, resumable=True, owns=owns).claim(force=True):
        pass
    assert _names(out) == [MANIFEST]


def test_fold_models_refuses_the_folds_of_two_runs(tmp_path):
    # stale folds of an earlier run with more folds would be averaged in silently
    from poolkit.io import fold_models

    for k, n in ((0, 2), (1, 2), (2, 3)):
        (tmp_path / f"fold_{k}").mkdir()
        (tmp_path / f"fold_{k}" / "poolkit_train.json").write_text(json.dumps({"n_folds": n}))
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(PoolkitError, match="more than one run .*fold_2 3"):
        fold_models(tmp_path)
    (tmp_path / "fold_2" / "poolkit_train.json").write_text(json.dumps({"n_folds": 2}))
    assert [p.name for p in fold_models(tmp_path)] == ["fold_0", "fold_1", "fold_2"]


def test_an_embed_partial_folder_of_poolkit_02_resumes_with_the_same_settings(tmp_path):
    # 0.2 kept the settings in manifest.json: catches finished windows thrown away (or refused) although the settings
    # are the same, and windows of other settings reused
    from poolkit.training.streaming import _claim_partial

    partial = tmp_path / "out.npy.partial"
    partial.mkdir()
    (partial / "manifest.json").write_text(json.dumps({"window": 8}))
    (partial / "window-000000.npy").write_text("x")
    with _claim_partial(partial, {"window": 8}, force=False):
        assert (partial / "window-000000.npy").exists()
    (partial / MANIFEST).unlink()
    with pytest.raises(PoolkitError, match="other settings"):
        with _claim_partial(partial, {"window": 16}, force=False):
            pass
    with _claim_partial(partial, {"window": 16}, force=True):
        assert _names(partial) == [MANIFEST]


def test_a_folder_poolkit_did_not_make_is_never_taken_for_its_temporary_one(tmp_path):
    # catches a temp_dir that removes whatever sits at <dest>.tmp (a user's own "results.tmp" folder, or a file)
    from poolkit.io import replace_dir, temp_dir
    from poolkit.io.files import TMP_MARK

    dest = tmp_path / "results"
    theirs = tmp_path / "results.tmp"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(PoolkitError, match=r"results.tmp exists and poolkit did not make it: move it away"):
        temp_dir(dest)
    assert (theirs / "notes.txt").read_text() == "mine"
    theirs.rename(tmp_path / "elsewhere")
    (tmp_path / "results.tmp").write_text("a file")
    with pytest.raises(PoolkitError, match="poolkit did not make it"):
        temp_dir(dest)
    (tmp_path / "results.tmp").unlink()
    # poolkit's own stale folder (a run stopped while building it) is cleared; the mark never reaches the result
    stale = temp_dir(dest)
    (stale / "half-written").write_text("x")
    tmp = temp_dir(dest)
    assert sorted(p.name for p in tmp.iterdir()) == [TMP_MARK]
    (tmp / "model.bin").write_text("new")
    replace_dir(tmp, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["model.bin"] and not tmp.exists()


def test_a_users_old_folder_is_never_removed_and_poolkits_parked_one_is(tmp_path):
    """Issue 32, item 3: `merge --out results` removed a user's results.old/ (replace_dir parks the previous result
    there). Now a foreign results.old is refused before the work (temp_dir) and at the rename; the folder poolkit
    parks carries its mark, so a run that crashed between the renames leaves one the next run may remove."""
    from poolkit.io import existing_dir, made_by_poolkit, replace_dir, temp_dir

    dest = tmp_path / "results"
    dest.mkdir()
    (dest / "model.bin").write_text("first")
    theirs = tmp_path / "results.old"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(PoolkitError, match="results.old exists and poolkit did not make it"):
        temp_dir(dest)
    theirs.rename(tmp_path / "elsewhere")
    tmp = temp_dir(dest)
    (tmp / "model.bin").write_text("second")
    theirs.mkdir()  # appears while the run works
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(PoolkitError, match="results.old exists and poolkit did not make it"):
        replace_dir(tmp, dest)
    assert (theirs / "notes.txt").read_text() == "mine" and (dest / "model.bin").read_text() == "first"
    assert existing_dir(tmp_path / "missing") is None
    (tmp_path / "missing.old").mkdir()  # a user's folder is not taken for a parked result
    assert existing_dir(tmp_path / "missing") is None
    theirs.rename(tmp_path / "elsewhere2")
    replace_dir(tmp, dest)
    assert (dest / "model.bin").read_text() == "second" and not theirs.exists() and not made_by_poolkit(dest)


def test_publish_moves_no_temporary_mark_into_the_run_folder(tmp_path):
    from poolkit.io import temp_dir

    out = tmp_path / "out"
    out.mkdir()
    tmp = temp_dir(out)
    (tmp / "record.json").write_text("{}")
    publish(tmp, out)
    assert sorted(p.name for p in out.iterdir()) == ["record.json"]
