"""Fine-tuning (poolkit.training.finetune) on a tiny random-init BERT; the toy task: does a text say good or bad."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from dist_worker import toy_config, toy_data
from poolkit import PoolkitError
from poolkit.data import TableData
from poolkit.models import PooledModel
from poolkit.io.files import TMP_MARK
from poolkit.io import atomic_write_content, existing_dir, replace_dir, temp_dir
from poolkit.io import locked_dir
from poolkit.training import cv, finetune
from poolkit.training.config import TrainConfig
from poolkit.training.finetune import META, fit
from poolkit.training.prediction import predict_outputs as predict
from poolkit.training.optim import freeze, param_groups

#: 1 fold (26 fit / 6 validation / 8 test rows of 40), 3 epochs: the regression runs
REGRESSION = toy_config(None, epochs=3)
ATTENTION = re.compile(r"encoder\.encoder\.layer\.\d+\.attention\.(self\.(query|key|value)|output\.dense)\.")


pytestmark = pytest.mark.usefixtures("accelerate_on_one_cpu_thread")


@pytest.fixture(scope="module")
def reference(model_dir, tmp_path_factory) -> tuple[Path, dict]:
    """One uninterrupted 2-fold run: its folder and the metrics fit returned."""
    out = tmp_path_factory.mktemp("runs") / "reference"
    return out, fit(toy_config(model_dir, folds=2), toy_data(), out, progress=False)


def comparable(summary: dict) -> dict:
    """metrics.json without the timings and the provenance (its date)."""
    folds = [{k: v for k, v in fold.items() if k != "seconds"} for fold in summary["folds"]]
    return {**{k: v for k, v in summary.items() if k not in ("seconds", "provenance")}, "folds": folds}


def test_run_writes_the_output_layout(reference):
    out, summary = reference
    assert sorted(p.name for p in out.iterdir()) == [".poolkit_outputs.json", "fold_0", "fold_1", "metrics.json",
                                                     "oof.csv", "train.log"]
    for k in (0, 1):
        fold = out / f"fold_{k}"
        assert {"config.json", "model.safetensors", "tokenizer.json", META, "test_outputs.npz"} <= {
            p.name for p in fold.iterdir()}
        meta = json.loads((fold / META).read_text())
        assert (meta["task"], meta["label_names"], meta["target_cols"], meta["text_col"]) == (
            "classification", ["neg", "pos"], ["label"], "text")
        assert meta["config"]["folds"] == 2 and meta["fold"] == k
        model = PooledModel.from_pretrained(fold)
        assert (model.config.task, model.config.num_labels) == ("classification", 2)
    assert json.loads((out / "metrics.json").read_text()) == summary
    assert summary["provenance"]["cpu"] and summary["provenance"]["cpu_capability"]  # the machine it ran on
    assert summary["primary_metric"] == "accuracy" and summary["n_folds"] == 2 and len(summary["folds"]) == 2
    assert set(summary["mean"]) == set(summary["std_ddof1"]) == {"accuracy", "macro_f1", "log_loss"}
    accuracies = [fold["metrics"]["accuracy"] for fold in summary["folds"]]
    assert summary["std_ddof1"]["accuracy"] == pytest.approx(np.std(accuracies, ddof=1))  # sample, not population
    log = (out / "train.log").read_text()
    assert "fold 1 epoch 4 step 16" in log and "17,868 of 17,868 parameters trainable" in log
    assert "fold 1: 16 fit / 4 validation (checkpoint choice) / 20 test rows" in log


def test_training_beats_the_untrained_model(reference):
    out, summary = reference
    # An untrained head outputs near-zero logits: chance accuracy and log-loss ln 2 on two balanced classes.
    assert summary["oof"]["accuracy"] >= 0.8
    assert summary["oof"]["log_loss"] < np.log(2) - 0.05
    for fold in summary["folds"]:
        losses = [h["train_loss"] for h in fold["history"]]
        assert len(losses) == 4 and losses[-1] < losses[0] - 0.1


def test_k_fold_predicts_every_row_once(reference):
    out, summary = reference
    oof = pd.read_csv(out / "oof.csv")
    assert oof["row"].tolist() == list(range(40))
    assert sorted(oof.groupby("fold").size().tolist()) == [20, 20]
    data = toy_data()
    assert oof["label"].tolist() == [data.label_names[t] for t in data.targets]
    probs = oof[["prob_neg", "prob_pos"]].to_numpy()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    assert oof["pred_label"].tolist() == [("neg", "pos")[i] for i in probs.argmax(axis=1)]
    assert (oof["pred_label"] == oof["label"]).mean() == pytest.approx(summary["oof"]["accuracy"])


def test_the_checkpoint_is_chosen_on_rows_its_fold_is_not_scored_on(reference):
    """Each fold's fit, validation and test rows are disjoint; the best epoch's validation log-loss is the saved
    model's on the validation rows, and oof.csv holds that model's outputs on the test rows, scored once."""
    out, summary = reference
    data, oof = toy_data(), pd.read_csv(out / "oof.csv").set_index("row")
    for fold in summary["folds"]:
        k = fold["fold"]
        split = np.load(out / f"fold_{k}" / "test_outputs.npz")
        fit_rows, val_rows, test_rows = split["fit_rows"], split["val_rows"], split["test_rows"]
        assert (len(fit_rows), len(val_rows), len(test_rows)) == (fold["fit_rows"], fold["val_rows"], fold["test_rows"])
        assert sorted([*fit_rows, *val_rows, *test_rows]) == list(range(len(data)))  # disjoint, all rows
        assert sorted(oof.index[oof["fold"] == k]) == sorted(test_rows)
        model, tokenizer = PooledModel.from_pretrained(out / f"fold_{k}").eval(), AutoTokenizer.from_pretrained(
            out / f"fold_{k}")
        with torch.no_grad():  # mean pooling: padding changes no output, so one padded batch is exact
            probs = model(**tokenizer(data.texts, padding=True, return_tensors="pt")).logits.softmax(-1).numpy()
        best = next(h for h in fold["history"] if h["epoch"] == fold["best_epoch"])
        val_loss = -np.log(probs[val_rows, data.targets[val_rows]]).mean()
        assert val_loss == pytest.approx(best["log_loss"], abs=1e-5)
        assert fold["val_accuracy"] == best["accuracy"] == (probs[val_rows].argmax(1) == data.targets[val_rows]).mean()
        scored = oof.loc[test_rows]
        np.testing.assert_allclose(scored[["prob_neg", "prob_pos"]], probs[test_rows], atol=1e-5)
        assert fold["test_accuracy"] == fold["metrics"]["accuracy"] == (scored["pred_label"] == scored["label"]).mean()
        assert fold["metrics"]["log_loss"] == pytest.approx(-np.log(probs[test_rows, data.targets[test_rows]]).mean(),
                                                            abs=1e-5)


def test_resume_refuses_a_run_that_chose_checkpoints_on_its_scored_rows(reference, model_dir, tmp_path):
    out = tmp_path / "old"
    shutil.copytree(reference[0], out)
    meta = json.loads((out / "fold_0" / META).read_text())
    del meta["cv_protocol"]  # as poolkit wrote it before the inner validation split
    (out / "fold_0" / META).write_text(json.dumps(meta))
    with pytest.raises(PoolkitError, match=r"^cannot resume .*fold_0: an earlier poolkit trained it, choosing "
                                           r"checkpoints on the rows it scored; `force=True` to start over[^\n]*$"):
        fit(toy_config(model_dir, folds=2), toy_data(), out, resume=True, progress=False)


def test_same_seed_gives_identical_results(reference, model_dir, tmp_path):
    out, summary = reference
    again = fit(toy_config(model_dir, folds=2), toy_data(), tmp_path / "again", progress=False)
    assert comparable(again) == comparable(summary)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again" / "oof.csv"), pd.read_csv(out / "oof.csv"))


def interrupt_after_saves(monkeypatch, n: int) -> None:
    """Raise KeyboardInterrupt right after the n-th saved epoch state, as Ctrl-C there would."""
    save, saves = finetune._Fold.save_state, []

    def save_then_stop(self):
        save(self)
        saves.append(1)
        if len(saves) == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(finetune._Fold, "save_state", save_then_stop)


def test_resume_ends_like_the_uninterrupted_run(reference, model_dir, tmp_path, monkeypatch):
    out, config, data = tmp_path / "run", toy_config(model_dir, folds=2), toy_data()
    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        interrupt_after_saves(patch, 5)  # fold 0 saves after epochs 1-3 and finishes; fold 1 stops after epoch 2
        fit(config, data, out, progress=False)
    assert (out / "fold_0" / META).is_file() and not (out / "fold_1").exists()
    assert json.loads((out / "fold_1.partial" / ".state" / "progress.json").read_text())["epoch"] == 2
    with pytest.raises(PoolkitError, match="force=True.*resume=True"):
        fit(config, data, out, progress=False)
    finished = (out / "fold_0" / "model.safetensors").stat().st_mtime_ns

    resumed = fit(config, data, out, resume=True, progress=False)
    assert comparable(resumed) == comparable(reference[1])
    pd.testing.assert_frame_equal(pd.read_csv(out / "oof.csv"), pd.read_csv(reference[0] / "oof.csv"))
    assert (out / "fold_0" / "model.safetensors").stat().st_mtime_ns == finished
    log = (out / "train.log").read_text()
    assert "fold 0: already trained, skipped" in log and "fold 1: resumed after epoch 2 (step 8)" in log
    assert not (out / "fold_1.partial").exists()
    with pytest.raises(PoolkitError, match=r"settings differ \(--encoder-lr 0.002 -> 0.1\)"):
        fit(replace(config, encoder_lr=0.1), data, out, resume=True, progress=False)


def toy_regression() -> tuple[TableData, int, int]:
    """toy_data's texts with two targets: 1000 +- 50 (good / bad) and -3 +- 0.1, the second 1000 in one inner
    validation row and one test row (the strata read the first target only, so the splits do not move): (data,
    validation outlier row, test outlier row) for a 1-fold run."""
    data = toy_data()
    z = np.where(data.targets == 1, 1.0, -1.0)
    data = TableData(data.texts, np.stack([1000 + 50 * z, -3 + 0.1 * z], axis=1).astype(np.float32), "regression",
                     None, ("big", "small"), "text", "toy")
    (_, val_rows, test_rows), = cv.cv_splits(data, 1, REGRESSION.val_fraction, REGRESSION.seed)
    data.targets[[val_rows[0], test_rows[0]], 1] = 1000.0
    return data, val_rows[0], test_rows[0]


@pytest.fixture(scope="module")
def regression_reference(model_dir, tmp_path_factory) -> tuple[Path, dict]:
    """One uninterrupted 1-fold, 3-epoch run on toy_regression: its folder and metrics."""
    out = tmp_path_factory.mktemp("runs") / "regression"
    return out, fit(replace(REGRESSION, model=model_dir), toy_regression()[0], out, progress=False)


def test_target_statistics_come_from_the_fit_rows_and_saved_models_answer_in_target_units(regression_reference):
    """poolkit_train.json's target_mean / target_std are the fit rows' per-column mean and population std: an
    outlier in a validation or test row moves neither (catches statistics over all rows or the fold's training rows,
    ddof 1, columns swapped). The saved model's own outputs reproduce the best epoch's validation rmse and oof.csv's
    test predictions (catches a saved head left in standardised units, validation metrics in standardised units)."""
    out, summary = regression_reference
    data, val_outlier, test_outlier = toy_regression()
    meta = json.loads((out / "fold_0" / META).read_text())
    split = np.load(out / "fold_0" / "test_outputs.npz")
    fit_rows, val_rows, test_rows = split["fit_rows"], split["val_rows"], split["test_rows"]
    assert val_outlier in val_rows and test_outlier in test_rows
    np.testing.assert_allclose(meta["target_mean"], data.targets[fit_rows].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(meta["target_std"], data.targets[fit_rows].std(axis=0), rtol=1e-6)
    assert meta["target_std"][1] == pytest.approx(0.1, rel=0.05)  # the outliers (1000) would make it hundreds
    model, tokenizer = PooledModel.from_pretrained(out / "fold_0").eval(), AutoTokenizer.from_pretrained(out / "fold_0")
    with torch.no_grad():  # mean pooling: padding changes no output, so one padded batch is exact
        outputs = model(**tokenizer(data.texts, padding=True, return_tensors="pt")).logits.numpy()
    fold = summary["folds"][0]
    best = next(h for h in fold["history"] if h["epoch"] == fold["best_epoch"])
    assert np.sqrt(((outputs[val_rows] - data.targets[val_rows]) ** 2).mean()) == pytest.approx(best["rmse"], rel=1e-5)
    oof = pd.read_csv(out / "oof.csv").set_index("row").loc[test_rows]
    np.testing.assert_allclose(oof[["pred_big", "pred_small"]], outputs[test_rows], rtol=1e-5, atol=1e-4)


def test_resumed_regression_run_ends_like_the_uninterrupted_one(regression_reference, model_dir, tmp_path,
                                                                monkeypatch):
    """Interrupted after epoch 1 and resumed: the same metrics and predictions bit for bit (catches a resume that
    standardises the restored weights again, or saves them folded into target units). A state saved before targets
    were standardised (no statistics in progress.json) is refused."""
    out, config, data = tmp_path / "run", replace(REGRESSION, model=model_dir), toy_regression()[0]
    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        interrupt_after_saves(patch, 1)
        fit(config, data, out, progress=False)
    old = tmp_path / "old"
    shutil.copytree(out, old)
    progress = json.loads((old / "fold_0.partial" / ".state" / "progress.json").read_text())
    del progress["target_mean"], progress["target_std"]
    (old / "fold_0.partial" / ".state" / "progress.json").write_text(json.dumps(progress))
    with pytest.raises(PoolkitError, match=r"^cannot resume .*fold_0.partial: an earlier poolkit trained it on "
                                           r"unstandardised regression targets; `force=True` to start over$"):
        fit(config, data, old, resume=True, progress=False)
    resumed = fit(config, data, out, resume=True, progress=False)
    assert "fold 0: resumed after epoch 1" in (out / "train.log").read_text()
    assert comparable(resumed) == comparable(regression_reference[1])
    pd.testing.assert_frame_equal(pd.read_csv(out / "oof.csv"), pd.read_csv(regression_reference[0] / "oof.csv"))


def test_non_empty_out_dir_needs_force(reference, model_dir, tmp_path):
    with pytest.raises(PoolkitError, match="already holds .*: pass `force=True` to start over, `resume=True` to "
                       "continue"):
        fit(toy_config(model_dir), toy_data(), reference[0], progress=False)
    out = tmp_path / "forced"
    (out / "fold_3").mkdir(parents=True)  # a fold of an earlier poolkit run (before manifests)
    (out / "fold_3" / META).write_text("{}")
    (out / "fold_3.partial").mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "fold_assignments.csv").write_text("row,fold\n0,1\n")  # the user's own fold_* files
    (out / "fold_data").mkdir()
    (out / "fold_data" / "a.csv").write_text("x")
    config = toy_config(model_dir, epochs=1, grad_accum=2, eval_every=2)  # 32 rows / 4 = 8 batches = 4 steps
    summary = fit(config, toy_data(), out, force=True, progress=False)
    assert not (out / "fold_3").exists() and not (out / "fold_3.partial").exists()
    assert (out / "notes.txt").read_text() == "mine" and (out / "fold_data" / "a.csv").read_text() == "x"
    assert (out / "fold_assignments.csv").read_text() == "row,fold\n0,1\n"
    assert [h["step"] for h in summary["folds"][0]["history"]] == [2, 4]
    # folds=1: 8 of 40 rows held out for testing, 6 of the other 32 choose the checkpoint
    assert len(pd.read_csv(out / "oof.csv")) == summary["folds"][0]["test_rows"] == 8
    assert (summary["folds"][0]["fit_rows"], summary["folds"][0]["val_rows"]) == (26, 6)
    assert summary["std_ddof1"]["accuracy"] is None  # one fold has no spread, not a spread of 0


def test_force_removes_only_the_earlier_runs_outputs_and_a_run_locks_its_folder(reference, model_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference[0], out)  # a finished 2-fold run, with its manifest
    (out / "fold_1_notes.txt").write_text("mine")
    (out / ".notes.tmp").write_text("mine too")  # not one of poolkit's temporary names
    fit(toy_config(model_dir, epochs=1), toy_data(), out, force=True, progress=False)  # now one fold
    assert sorted(p.name for p in out.glob("fold_*")) == ["fold_0", "fold_1_notes.txt"]  # fold_1: the old run's
    assert (out / ".notes.tmp").read_text() == "mine too"
    with locked_dir(out), pytest.raises(PoolkitError, match="another poolkit run is writing to"):
        fit(toy_config(model_dir, epochs=1), toy_data(), out, force=True, progress=False)
    assert (out / "fold_0" / META).is_file()  # the refused run removed nothing


def test_non_finite_outputs_end_the_run_keeping_the_last_good_checkpoint(model_dir, tmp_path, monkeypatch):
    infer, calls = finetune._infer, []

    def nan_from_the_second_evaluation(*args, **kwargs):
        calls.append(1)
        outputs = infer(*args, **kwargs)
        return outputs * np.nan if len(calls) >= 2 else outputs

    monkeypatch.setattr(finetune, "_infer", nan_from_the_second_evaluation)
    out = tmp_path / "nan"
    with pytest.raises(PoolkitError, match=r"fold 0 epoch 2: training with the mean pooler gave non-finite outputs "
                                           r".*learning rate is likely too high.*last good checkpoint kept in"):
        fit(toy_config(model_dir, epochs=3), toy_data(), out, progress=False)
    best = json.loads((out / "fold_0.partial" / ".state" / "progress.json").read_text())
    assert best["best_epoch"] == 1 and (out / "fold_0.partial" / "best" / "model.safetensors").is_file()
    assert not (out / "metrics.json").exists() and not (out / "fold_0").exists()


def test_atomic_writes_leave_no_temporary_files(reference, tmp_path, monkeypatch):
    leftovers = [p for p in reference[0].rglob("*") if p.name.endswith((".tmp", ".old", ".partial"))]
    assert leftovers == []

    dest = tmp_path / "ckpt"
    dest.mkdir()
    (dest / "w").write_text("old")
    tmp = temp_dir(dest)
    (tmp / "w").write_text("new")
    replace_dir(tmp, dest)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"] and (dest / "w").read_text() == "new"
    (dest / TMP_MARK).touch()  # a crash between replace_dir's two renames: the result parked, marked as poolkit's
    dest.rename(tmp_path / "ckpt.old")
    assert existing_dir(dest) == tmp_path / "ckpt.old"

    target = tmp_path / "metrics.json"
    atomic_write_content(target, "old")

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        atomic_write_content(target, "new")
    assert target.read_text() == "old"


def test_train_only_attention_trains_attention_pooler_and_head_only(model_dir, tmp_path):
    model = PooledModel.from_encoder(model_dir, pooler="attention", task="classification", num_labels=2)
    trainable, total = freeze(model, "attention")
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {n for n, _ in model.named_parameters() if ATTENTION.match(n) or n.startswith(("pooler.", "head."))}
    assert names == expected and any(n.startswith("pooler.") for n in names)
    assert trainable == sum(p.numel() for n, p in model.named_parameters() if n in expected) < total
    freeze(model, "head")
    assert all(not p.requires_grad for p in model.encoder.parameters())
    assert all(p.requires_grad for p in model.head.parameters())

    out = tmp_path / "attention"
    fit(toy_config(model_dir, epochs=2, train_only="attention"), toy_data(), out, progress=False)
    before = load_file(Path(model_dir) / "model.safetensors")
    after = load_file(out / "fold_0" / "model.safetensors")
    changed = {n for n, w in before.items() if not torch.equal(w, after[f"encoder.{n}"])}
    assert changed == {n[len("encoder."):] for n in expected if n.startswith("encoder.")}
    assert "(train_only=attention)" in (out / "train.log").read_text()


def test_layerwise_learning_rates_follow_the_documented_rule(model_dir):
    model = PooledModel.from_encoder(model_dir, pooler="attention", task="regression", num_labels=1)
    groups = param_groups(model, lr=1.0, pooler_lr=7.0, layer_decay=0.5, weight_decay=0.1)
    rate = {name: (g["lr"], g["weight_decay"]) for g in groups for name in g["names"]}
    assert sorted(rate) == sorted(n for n, _ in model.named_parameters())
    for name, param in model.named_parameters():
        layer = re.search(r"\.layer\.(\d+)\.", name)
        if not name.startswith("encoder."):
            lr = 7.0
        elif layer:
            lr = 0.5 ** (1 - int(layer.group(1)))  # 2 layers: the top one gets lr
        else:
            lr = 0.25 if "embeddings" in name else 1.0
        assert rate[name] == (lr, 0.0 if param.ndim == 1 else 0.1), name
    assert rate["encoder.embeddings.LayerNorm.weight"] == (0.25, 0.0)
    assert rate["encoder.encoder.layer.0.attention.self.query.weight"] == (0.5, 0.1)
    freeze(model, "head")
    assert {n for g in param_groups(model, 1.0, 7.0) for n in g["names"]} == {
        n for n, _ in model.named_parameters() if not n.startswith("encoder.")}


def test_predict_restores_order_and_averages_folds(reference, tmp_path):
    out = reference[0]
    texts = toy_data(n=11, seed=5).texts
    probs, info = predict(out, texts, batch_size=4, progress=False)
    assert info == {"task": "classification", "label_names": ["neg", "pos"], "target_cols": ["label"], "n_models": 2}
    expected = np.zeros((2, len(texts), 2))
    for k, fold in enumerate(("fold_0", "fold_1")):  # one text at a time, no batching or sorting
        model, tokenizer = PooledModel.from_pretrained(out / fold).eval(), AutoTokenizer.from_pretrained(out / fold)
        with torch.no_grad():
            for i, text in enumerate(texts):
                expected[k, i] = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0].numpy()
    np.testing.assert_allclose(probs, expected.mean(axis=0), atol=1e-5)
    one, info = predict(out / "fold_1", texts, batch_size=4, progress=False)  # one fold folder: that model alone
    assert info["n_models"] == 1
    np.testing.assert_allclose(one, expected[1], atol=1e-5)
    with pytest.raises(PoolkitError, match="no trained model in .*: expected fold_\\*/ folders"):
        predict(tmp_path, texts)
    run = tmp_path / "run"
    shutil.copytree(out, run)
    (run / "fold_1").rename(run / "fold_1.partial")  # fold 1 in training (metrics.json of an earlier run kept)
    with pytest.raises(PoolkitError, match=r"unfinished run \(1 of 2 folds trained, fold_1.partial unfinished\)"):
        predict(run, texts)
    one, info = predict(run, texts, batch_size=4, progress=False, allow_incomplete=True)
    assert info["n_models"] == 1
    np.testing.assert_allclose(one, expected[0], atol=1e-5)


def test_config_carries_one_pooler_spec(reference):
    assert TrainConfig(pooler="Attention").pooler == {"name": "attention"}
    assert TrainConfig(pooler={"name": "attention", "attn_size": 8}).to_dict()["pooler"] == {"name": "attention",
                                                                                           "attn_size": 8}
    with pytest.raises(PoolkitError, match="has no option 'atn_size'"):  # at construction, before any data is read
        TrainConfig(pooler={"name": "attention", "atn_size": 8})
    assert not [f for f in TrainConfig().to_dict() if f.startswith("_") or f.startswith("pooling")]
    out, summary = reference
    assert summary["config"]["pooler"] == {"name": "mean"}
    saved = PooledModel.from_pretrained(out / "fold_0").config.pooler  # the full spec, sized to the encoder
    assert (saved["name"], saved["hidden_size"]) == ("mean", 32)


def test_evaluate_scores_a_run_fold_by_fold(reference, tmp_path):
    # catches folds averaged as one model, a std over a single value, a fold picked by position instead of its name,
    # and the run's trained pooler replaced by a fresh one
    from poolkit.training.evaluation import evaluate

    out, _ = reference
    table = pd.DataFrame({"text": ["good film", "bad film", "great plot"], "pair": ["a joy", "a bore", "a joy"],
                          "score": [1.0, 0.0, 0.8]})
    both = evaluate(table, "similarity", model=out, progress=False)
    folds = [evaluate(table, "similarity", model=out, fold=k, progress=False)["metrics"] for k in (0, 1)]
    assert [f["fold"] for f in both["folds"]] == ["fold_0", "fold_1"]
    assert [f["metrics"] for f in both["folds"]] == folds
    assert both["metrics"]["pearson"] == pytest.approx(np.mean([f["pearson"] for f in folds]))
    assert both["std_ddof1"]["pearson"] == pytest.approx(np.std([f["pearson"] for f in folds], ddof=1))
    assert both["pooler"] == PooledModel.from_pretrained(out / "fold_0").pooler.get_config()
    with pytest.raises(PoolkitError, match="has no fold_5: its folds are fold_0, fold_1"):
        evaluate(table, "similarity", model=out, fold=5)


def test_evaluate_scores_a_classification_run_by_each_folds_head(reference, tmp_path):
    # catches folds averaged into one model, the head replaced by neighbours, and the table's labels numbered by
    # their own order instead of the model's (a table of one class is a fine test set: the model knows the others)
    from sklearn.metrics import accuracy_score, log_loss

    from poolkit.training.evaluation import evaluate

    out, _ = reference
    data = toy_data(n=16, seed=9)
    names = np.array(["neg", "pos"])
    table = tmp_path / "new.csv"
    pd.DataFrame({"text": data.texts, "label": names[data.targets]}).to_csv(table, index=False)
    result = evaluate(table, "classification", model=out, progress=False)
    assert result["method"] == "head" and [f["fold"] for f in result["folds"]] == ["fold_0", "fold_1"]
    for fold in result["folds"]:
        probs, _ = predict(out / fold["fold"], data.texts, progress=False)
        assert fold["metrics"]["accuracy"] == pytest.approx(accuracy_score(data.targets, probs.argmax(axis=1)))
        assert fold["metrics"]["log_loss"] == pytest.approx(log_loss(data.targets, probs, labels=[0, 1]), rel=1e-4)
    positives = tmp_path / "pos.csv"
    rows = data.targets == 1
    pd.DataFrame({"text": np.array(data.texts)[rows], "label": "pos"}).to_csv(positives, index=False)
    one = evaluate(positives, "classification", model=out / "fold_0", progress=False)
    probs, _ = predict(out / "fold_0", list(np.array(data.texts)[rows]), progress=False)
    assert one["metrics"]["accuracy"] == pytest.approx(float((probs.argmax(axis=1) == 1).mean()))
    with pytest.raises(PoolkitError, match="predicts classification, not regression: pass `task` classification"):
        evaluate(table, "regression", model=out)
    with pytest.raises(PoolkitError, match="a trained model's head reads its own pooler: leave `pooler` out"):
        evaluate(table, "classification", model=out, pooler="max")
    knn = evaluate(table, "classification", model=out / "fold_0", method="knn", neighbours=3, progress=False)
    assert knn["method"] == "knn" and knn["pooler"]["name"] == "mean"  # the fold's own pooler, its head unused


def test_evaluate_scores_a_regression_run_in_its_targets_units(regression_reference):
    from poolkit.training.evaluation import evaluate
    from poolkit.training.metrics import regression_metrics

    out, _ = regression_reference
    data = toy_regression()[0]
    result = evaluate(data, "regression", model=out, progress=False)
    values, _ = predict(out, data.texts, progress=False)
    assert result["metrics"] == pytest.approx(regression_metrics(values, data.targets), rel=1e-5)


def test_predict_refuses_label_names_that_do_not_fit_the_weights(reference, tmp_path):
    # issue 32, item 15: a fold's label_names cut to one gave an IndexError; two folds naming their classes in
    # another order were averaged and labelled by the last fold (a silent wrong answer)
    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    texts = toy_data(n=4, seed=2).texts
    meta = run / "fold_0" / META
    record = json.loads(meta.read_text())
    meta.write_text(json.dumps({**record, "label_names": ["neg"]}))
    with pytest.raises(PoolkitError, match="fold_0/poolkit_train.json names 1 output but the model's head has 2"):
        predict(run, texts, progress=False)
    meta.write_text(json.dumps({**record, "label_names": ["pos", "neg"]}))
    with pytest.raises(PoolkitError, match="fold_1 and .*fold_0 name different outputs in their poolkit_train.json"):
        predict(run, texts, progress=False)
    probs, info = predict(run / "fold_0", texts, progress=False)  # one fold alone is read as its file says
    assert info["label_names"] == ["pos", "neg"] and probs.shape == (4, 2)


def test_a_saved_model_whose_weights_do_not_fit_its_config_is_refused_in_one_line(reference, tmp_path):
    # issue 32, item 15: a tensor of another shape gave transformers' RuntimeError after its load report; a tensor
    # left out was started at random and predicted with (a silent wrong answer)
    from safetensors.torch import save_file

    fold = tmp_path / "fold_0"
    shutil.copytree(reference[0] / "fold_0", fold)
    weights = load_file(fold / "model.safetensors")
    texts = toy_data(n=3, seed=4).texts
    save_file({**weights, "head.weight": torch.zeros(3, weights["head.weight"].shape[1])}, fold / "model.safetensors")
    with pytest.raises(PoolkitError, match="fold_0: some of the model's weights have other shapes than its config"):
        predict(fold, texts, progress=False)
    save_file({k: v for k, v in weights.items() if k != "head.weight"}, fold / "model.safetensors")
    with pytest.raises(PoolkitError, match=r"fold_0: 1 of the model's weights are not in its files \(head.weight\)"):
        predict(fold, texts, progress=False)


def test_evaluate_refuses_a_table_whose_classes_are_numbered_otherwise(reference):
    # a TableData numbers its classes itself: scored against a head of another order, every label would be swapped
    from poolkit.training.evaluation import evaluate

    data = toy_data(n=8, seed=3)
    swapped = TableData(data.texts, 1 - data.targets, "classification", ["pos", "neg"], ("label",), "text", "toy")
    with pytest.raises(PoolkitError, match=r"labels \(pos, neg\) are not the model's, in its order \(neg, pos\)"):
        evaluate(swapped, "classification", model=reference[0])


def test_a_refit_trains_on_every_row_for_its_share_of_the_folds_schedule(model_dir, tmp_path):
    # catches a refit that holds rows out, that trains whole epochs past its stop, that schedules its learning rate
    # over the refit's own epochs instead of the folds' (the rate would be elsewhere at the stop), and a stop at 0
    # that trains anyway
    data, config = toy_data(), toy_config(model_dir, folds=2, epochs=4)
    half = fit(config, data, tmp_path / "half", progress=False, refit_epochs=1.5)
    steps_per_epoch = 40 // config.batch_size
    assert (half["fit_rows"], half["val_rows"], half["test_rows"], half["n_folds"]) == (40, 0, 0, 1)
    assert half["steps"] == round(1.5 * steps_per_epoch) == half["history"][-1]["step"]
    assert sorted(p.name for p in (tmp_path / "half").iterdir()) == [".poolkit_outputs.json", "fold_0", "train.log"]
    weights = load_file(tmp_path / "half" / "fold_0" / "model.safetensors")
    # the same steps under a 2-epoch schedule: the learning rate decays sooner, so other weights
    shorter = fit(replace(config, epochs=2), data, tmp_path / "short", progress=False, refit_epochs=1.5)
    assert shorter["steps"] == half["steps"]
    other = load_file(tmp_path / "short" / "fold_0" / "model.safetensors")
    assert any(not torch.equal(weights[k], other[k]) for k in weights)
    untrained = fit(config, data, tmp_path / "none", progress=False, refit_epochs=0)
    model = PooledModel.from_pretrained(tmp_path / "none" / "fold_0")
    assert untrained["steps"] == 0 and finetune.weights_digest(model.encoder) == untrained["base_sha1"]
    scores, info = predict(tmp_path / "half" / "fold_0", data.texts[:5], progress=False)
    assert scores.shape == (5, 2) and info["task"] == "classification"
    with pytest.raises(PoolkitError, match="`refit_epochs` must be between 0 and `epochs` \\(4\\)"):
        fit(config, data, tmp_path / "over", progress=False, refit_epochs=5)
