"""Task arithmetic (poolkit.training.merging, ``poolkit merge``) and the fine-tuning options it needs
(``--train-only attention``, ``--frozen-head``), on the tiny BERT of tests/dist_worker.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from dist_worker import toy_config, toy_data
from poolkit import PoolkitError
from poolkit.cli import main as cli_main
from poolkit.data import TableData
from poolkit.data.tables import stratified_sample
from poolkit.models import PooledModel
from poolkit.training import finetune
from poolkit.training.config import MergeConfig
from poolkit.training.cv import data_sha1
from poolkit.training.finetune import fit
from poolkit.training.merging import RECORD, TaskArithmetic, merge, merged_state, skill
from tiny_models import tiny_bert_dir

pytestmark = pytest.mark.usefixtures("accelerate_on_one_cpu_thread")
#: BERT's attention projections W_q, W_k, W_v, W_o
ATTENTION = re.compile(r"encoder\.layer\.\d+\.attention\.(self\.(query|key|value)|output\.dense)\.")


def count_data(n: int = 40) -> TableData:
    """A second toy task, regression: how many words a text has."""
    base = toy_data(n, seed=1)
    targets = np.array([[len(t.split())] for t in base.texts], dtype=np.float32)
    return TableData(base.texts, targets, "regression", None, ("words",), "text", "toy-count")


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory) -> dict[str, Path]:
    """Two tasks fine-tuned from the tiny BERT: 'good' all parameters, 'count' attention only with a frozen head."""
    root = tmp_path_factory.mktemp("merge_runs")
    fit(toy_config(model_dir, epochs=2), toy_data(), root / "good", progress=False)
    fit(toy_config(model_dir, epochs=2, train_only="attention", frozen_head=2), count_data(), root / "count",
        progress=False)
    return {"good": root / "good", "count": root / "count"}


def encoder_state(folder: Path) -> dict[str, torch.Tensor]:
    return PooledModel.from_pretrained(folder).encoder.state_dict()


def hidden(encoder: torch.nn.Module, tokenizer, texts: list[str]) -> torch.Tensor:
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        return encoder.eval()(**batch).last_hidden_state


def test_alpha_zero_gives_the_base_encoders_outputs_exactly(runs, model_dir, tmp_path):
    # catches a merge that ignores alpha, averages the fine-tuned encoders, or saves the runs' own encoders
    merge([runs["good"], runs["count"]], tmp_path / "m", base=model_dir, alpha=0.0, progress=False)
    tokenizer, texts = AutoTokenizer.from_pretrained(model_dir), toy_data(8).texts
    want = hidden(AutoModel.from_pretrained(model_dir), tokenizer, texts)
    for name in ("good", "count"):
        merged = PooledModel.from_pretrained(tmp_path / "m" / name / "fold_0")
        assert torch.equal(hidden(merged.encoder, tokenizer, texts), want)


def test_one_run_at_alpha_one_is_that_runs_encoder_exactly(runs, model_dir, tmp_path):
    # catches base + (tuned - base) formed in float32 (off by rounding) and a saved model missing the merged weights
    merge([runs["good"]], tmp_path / "m", base=model_dir, alpha=1.0, progress=False)
    merged, tuned = encoder_state(tmp_path / "m" / "good" / "fold_0"), encoder_state(runs["good"] / "fold_0")
    assert merged.keys() == tuned.keys() and all(torch.equal(merged[k], tuned[k]) for k in tuned)
    base = AutoModel.from_pretrained(model_dir).state_dict()
    assert not all(torch.equal(base[k], tuned[k]) for k in tuned)  # the run did move the encoder


def test_merged_state_adds_scaled_task_vectors_per_task():
    # catches the mean of the task vectors instead of their sum, and per-task alphas applied to the wrong task
    base = {"w": torch.tensor([1.0, 2.0]), "ids": torch.tensor([0, 1])}
    a, b = {"w": torch.tensor([2.0, 2.0]), "ids": base["ids"]}, {"w": torch.tensor([1.0, 5.0]), "ids": base["ids"]}
    assert torch.allclose(merged_state(base, [a, b], [0.5, 0.5])["w"], torch.tensor([1.5, 3.5]))
    assert torch.allclose(merged_state(base, [a, b], [1.0, 0.0])["w"], a["w"])
    assert torch.equal(merged_state(base, [a, b], [0.3, 0.3])["ids"], base["ids"])
    with pytest.raises(PoolkitError, match="make the merged w NaN or inf in torch.float32"):
        merged_state(base, [a], [1e39])  # finite in float64, inf once cast back (issue 32, item 9)


def test_predict_refuses_a_model_whose_outputs_are_not_finite(runs, tmp_path):
    """Issue 32, item 9: a fold model with an inf weight gave NaN probabilities and the first label for every row,
    exit 0; now predict refuses in one line and writes nothing."""
    import shutil

    from safetensors.torch import load_file, save_file

    from poolkit.training.api import predict

    broken = tmp_path / "broken"
    shutil.copytree(runs["good"], broken)
    weights = broken / "fold_0" / "model.safetensors"
    state = load_file(str(weights))
    head = next(name for name in state if name.startswith("head") and name.endswith("weight"))
    state[head] = torch.full_like(state[head], float("inf"))
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(PoolkitError, match="gives NaN or inf outputs for"):
        predict(broken / "fold_0", ["a text", "another text"], progress=False)


def test_skill_is_higher_is_better_and_zero_for_the_fit_mean():
    # catches RMSE left unnormalised (lower is better) and a baseline taken from the scored rows instead of the fit mean
    targets = np.array([[1.0], [3.0]])
    assert skill("regression", targets, targets, [2.0]) == 1.0
    assert skill("regression", np.full((2, 1), 2.0), targets, [2.0]) == 0.0
    assert skill("regression", np.full((2, 1), 2.0), targets, [0.0]) > 0.0
    assert skill("classification", np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 1]), n_classes=2) == 0.5


def test_the_search_scores_validation_rows_only_and_the_merge_serves_predict_and_embed(runs, model_dir, tmp_path,
                                                                                       monkeypatch):
    # catches an alpha chosen on the test rows, and merged folders that predict / embed cannot load
    splits = []
    scored = TaskArithmetic.outputs

    def spy(self, alphas, split, tasks=None):
        splits.append(split)
        return scored(self, alphas, split, tasks)

    monkeypatch.setattr(TaskArithmetic, "outputs", spy)
    record = merge([runs["good"], runs["count"]], tmp_path / "m", base=model_dir, search="per-task",
                   data=[toy_data(), count_data()], grid=[0.5, 1.0], progress=False)
    assert set(splits) == {"val"}
    assert {tuple(c["alphas"]) for c in record["candidates"]} >= {(0.5, 0.5), (1.0, 1.0)}
    best = max(record["candidates"], key=lambda c: c["skill"])
    assert list(record["alphas"].values()) == best["alphas"]
    saved = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert saved["alphas"] == record["alphas"] and saved["provenance"]["commit"] == record["provenance"]["commit"]
    texts = tmp_path / "texts.csv"
    pd.DataFrame({"text": toy_data(6).texts}).to_csv(texts, index=False)
    assert cli_main(["predict", "--model", str(tmp_path / "m" / "good"), "--data", str(texts),
                     "--out", str(tmp_path / "p.csv")]) == 0
    assert list(pd.read_csv(tmp_path / "p.csv")["prediction"].unique()) != []
    assert cli_main(["predict", "--model", str(tmp_path / "m" / "count"), "--data", str(texts),
                     "--out", str(tmp_path / "c.csv")]) == 0
    assert "pred_words" in pd.read_csv(tmp_path / "c.csv")
    assert cli_main(["embed", "--model", str(tmp_path / "m" / "count" / "fold_0"), "--data", str(texts),
                     "--out", str(tmp_path / "e.npy"), "--quiet"]) == 0
    assert np.load(tmp_path / "e.npy").shape == (6, 32)


@pytest.mark.parametrize("other, says", [
    ({"seed": 1}, "different base encoder"),
    ({"hidden": 48}, "different encoder architecture from --base .*: hidden_size 32 vs 48")])
def test_runs_of_another_base_are_refused_in_one_line(runs, tmp_path, capsys, other, says):
    # catches a merge that only compares shapes (same architecture, other weights) or crashes on other shapes
    base = tiny_bert_dir(tmp_path / "other", **other)
    capsys.readouterr()
    code = cli_main(["merge", "--base", base, "--runs", str(runs["good"]), "--alpha", "0.5",
                     "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert code == 2 and re.search(says, err) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_merge_refuses_bad_requests(runs, model_dir, tmp_path, capsys):
    # catches a search without the validation data, data that is not the run's, a folder of the user's taken without
    # --force, and --force deleting what poolkit did not write
    with pytest.raises(PoolkitError, match="pass `data`"):
        merge([runs["good"]], base=model_dir, search="shared")
    with pytest.raises(PoolkitError, match="is not the table"):
        merge([runs["good"]], base=model_dir, search="shared", data=[toy_data(40, seed=5)])
    with pytest.raises(PoolkitError, match="one finite number or one per run"):
        merge([runs["good"], runs["count"]], base=model_dir, alpha=[0.1, 0.2, 0.3])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    argv = ["merge", "--base", model_dir, "--runs", str(runs["good"]), "--alpha", "0.5", "--out", str(tmp_path / "mine")]
    assert cli_main(argv) == 2 and "already holds notes.txt: pass --force" in capsys.readouterr().err
    assert cli_main([*argv, "--force"]) == 0
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep" and (tmp_path / "mine" / RECORD).is_file()


def test_train_only_attention_changes_no_weight_outside_the_attention_projections(runs, model_dir):
    # catches LayerNorms, FFN, embeddings or BERT's own pooler trained under --train-only attention, and (frozen head)
    # a head that kept training after its first stage
    base = AutoModel.from_pretrained(model_dir).state_dict()
    tuned = encoder_state(runs["count"] / "fold_0")
    moved = {k for k in tuned if not torch.equal(tuned[k], base[k])}
    projections = {k for k in tuned if ATTENTION.search(k)}
    assert moved == projections and len(projections) == 2 * 4 * 2  # 2 layers x 4 projections x (weight, bias)
    meta = json.loads((runs["count"] / "fold_0" / finetune.META).read_text())
    assert meta["trainable_params"] == sum(tuned[k].numel() for k in projections)


def test_frozen_head_is_trained_first_then_fixed(model_dir, tmp_path, monkeypatch):
    # catches a head left at its random start (no first stage) and a head that keeps training with the encoder
    heads = []
    first = finetune.fit_head_first

    def record(model, *args):
        first(model, *args)
        heads.append({k: v.detach().clone() for k, v in model.head.state_dict().items()})

    monkeypatch.setattr(finetune, "fit_head_first", record)
    config = toy_config(model_dir, epochs=1, train_only="attention", frozen_head=1)
    fit(config, toy_data(), tmp_path / "r", progress=False)
    saved = PooledModel.from_pretrained(tmp_path / "r" / "fold_0").head.state_dict()
    assert len(heads) == 1 and all(torch.equal(saved[k], heads[0][k]) for k in saved)
    fresh = PooledModel.from_encoder(model_dir, task="classification", num_labels=2).head.weight
    assert not torch.allclose(saved["weight"], fresh, atol=0.05)
    with pytest.raises(PoolkitError, match="nothing to train"):
        replace(config, train_only="head").check()


def test_fold_models_merge_fold_by_fold_or_averaged(runs, model_dir, tmp_path):
    # catches --fold-pairing average taking one fold's encoder instead of the mean, and fold K merged with another count
    fit(toy_config(model_dir, folds=2, epochs=1), toy_data(), tmp_path / "two", progress=False)
    merger = TaskArithmetic(model_dir, [tmp_path / "two"], config=MergeConfig(fold_pairing="average"))
    merger.load_merged([1.0])
    folds = [encoder_state(tmp_path / "two" / f"fold_{k}") for k in (0, 1)]
    for name, value in merger.encoder.state_dict().items():
        if value.is_floating_point():
            assert torch.allclose(value, (folds[0][name] + folds[1][name]) / 2, atol=1e-6)
    with pytest.raises(PoolkitError, match="different fold counts"):
        TaskArithmetic(model_dir, [tmp_path / "two", runs["good"]])


def test_the_sample_of_a_limit_run_is_found_in_the_whole_table(model_dir, tmp_path):
    # catches a search that scores a --limit run's rows against the whole table (its row indices would point at
    # other texts)
    whole = toy_data(60)
    config = toy_config(model_dir, epochs=1)
    fit(config, stratified_sample(whole, 40, config.seed), tmp_path / "r", progress=False)
    found = TaskArithmetic(model_dir, [tmp_path / "r"], [whole]).tasks[0].data
    assert len(found) == 40 and data_sha1(found) == json.loads((tmp_path / "r" / "fold_0" / finetune.META).read_text())[
        "data_sha1"]


@pytest.mark.parametrize("name", ["../other", "/abs/path", ".hidden", "a.tmp", "x.old", RECORD, ""])
def test_task_names_that_would_reach_outside_out_are_refused_before_any_work(runs, model_dir, tmp_path, name):
    # issue 32 item 1: `merge --names a ../runs/other` overwrote the other run's metrics.json and weights, and an
    # absolute name wrote outside --out. Catches a name check that lets a path, a hidden or staging name through
    out = tmp_path / "merged"
    with pytest.raises(PoolkitError, match="cannot name a folder in `out`"):
        merge([runs["good"], runs["count"]], out, base=model_dir, alpha=0.5, names=["a", name])
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
