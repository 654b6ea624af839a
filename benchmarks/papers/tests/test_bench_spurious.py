"""``poolkit bench spurious``: the generator's exact group counts and geometry, DFR's use of the reweighting rows only,
attention weights as distributions, a tiny run end to end, its repeatability and its CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from poolkit_bench import spurious, spurious_config
from poolkit_bench.spurious_config import CUES
from poolkit_bench.spurious_data import (GARMENT, LABEL_CLASSES, assign_cues, cue_patch, make_spurious_data,
                                         planned_counts)
from poolkit_bench.vision_data import Images
from poolkit.cli import main as cli_main
from poolkit.errors import PoolkitError
from poolkit.io import MANIFEST

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fake_fashion(per_class: int = 40, test_per_class: int = 30) -> Images:
    """Fashion-MNIST's shape with random garments: class c's images hold the value (c + 1) / 20 in a blob."""
    gen = torch.Generator().manual_seed(0)

    def split(n):
        y = torch.arange(10).repeat_interleave(n)
        x = torch.zeros(len(y), 1, GARMENT, GARMENT)
        x[:, :, 4:24, 6:22] = ((y + 1) / 20)[:, None, None, None] * (0.5 + torch.rand(len(y), 1, 20, 16, generator=gen))
        return x.clamp(max=1.0), y

    (train_x, train_y), (test_x, test_y) = split(per_class), split(test_per_class)
    return Images("fashion-mnist", train_x, train_y, test_x, test_y, num_classes=10, flip=True)


SIZES = dict(train_per_label=60, val_per_label=20, reweight_per_group=8, test_per_group=10)


# -- generator ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("agreement", [0.95, 0.99, 0.5])
def test_group_counts_are_exact_and_agreement_is_per_label(agreement):
    # catches Bernoulli-drawn cues (counts off by noise), agreement pooled over both labels instead of per label,
    # minority groups swapped (cue = label for the minority), and reweight / test sets that are not balanced
    data = make_spurious_data(fake_fashion(), agreement=agreement, **SIZES, seed=3)
    for split, per_label, p in ((data.train, 60, agreement), (data.val, 20, agreement), (data.reweight, 16, 0.5),
                                (data.test, 20, 0.5)):
        assert split.counts() == planned_counts(per_label, p)
        for label in (0, 1):
            agree = int((split.cue[split.y == label] == label).sum())
            assert agree == round(p * per_label)
    assert planned_counts(2000, 0.95) == [1900, 100, 100, 1900] and planned_counts(2000, 0.99) == [1980, 20, 20, 1980]


def test_assign_cues_is_exact_for_odd_label_sizes():
    # catches a cue count rounded over all rows instead of per label
    labels = np.array([0] * 7 + [1] * 13)
    cues = assign_cues(labels, 0.8, np.random.default_rng(0))
    assert int((cues[:7] == 0).sum()) == round(0.8 * 7) and int((cues[7:] == 1).sum()) == round(0.8 * 13)


def test_garment_and_cue_never_overlap_and_each_holds_its_own_pixels():
    # catches overlapping boxes, a patch painted over by the garment (or the reverse), boxes that do not say where
    # the pixels are, cue textures swapped, and garments of the wrong label's classes
    images = fake_fashion()
    data = make_spurious_data(images, agreement=0.9, **SIZES, canvas=56, patch=14, seed=1)
    for split, pool in ((data.train, images.train_y), (data.test, images.test_y)):
        g, c = split.garment_box, split.cue_box
        apart = (c[:, 2] <= g[:, 0]) | (c[:, 0] >= g[:, 2]) | (c[:, 3] <= g[:, 1]) | (c[:, 1] >= g[:, 3])
        assert bool(apart.all())
        assert bool(((g[:, 2] - g[:, 0]) == GARMENT).all()) and bool(((c[:, 2] - c[:, 0]) == 14).all())
        for i in range(len(split.y)):
            canvas = split.x[i, 0]
            t, left, b, r = c[i].tolist()
            assert torch.equal(canvas[t:b, left:r], torch.from_numpy(cue_patch("stripes", int(split.cue[i]), 14)[0]))
            t, left, b, r = g[i].tolist()
            assert torch.equal(canvas[t:b, left:r], images.train_x[split.source[i], 0] if pool is images.train_y
                               else images.test_x[split.source[i], 0])
            outside = canvas.clone()
            outside[t:b, left:r] = 0
            outside[c[i, 0]:c[i, 2], c[i, 1]:c[i, 3]] = 0
            assert float(outside.abs().sum()) == 0.0  # nothing else on the canvas
        assert all(int(pool[s]) in LABEL_CLASSES[int(y)] for s, y in zip(split.source, split.y))
    assert len(CUES["stripes"]) == 2 and not np.array_equal(cue_patch("stripes", 0, 8), cue_patch("stripes", 1, 8))


def test_the_colour_cue_differs_in_hue_only_on_the_same_draws_as_stripes():
    # catches a colour cue that is also a brightness cue (a grey-level CNN could read it), a garment tinted by the
    # channel of its cue, a canvas of one channel, and draws that depend on the kind of cue (the two runs would then
    # differ in garments and places as well as in the cue)
    images = fake_fashion()
    stripes = make_spurious_data(images, agreement=0.9, **SIZES, seed=2)
    colour = make_spurious_data(images, agreement=0.9, **SIZES, seed=2, cue="colour")
    for a, b in ((stripes.train, colour.train), (stripes.test, colour.test)):
        assert b.x.shape == (len(a.y), 3, *a.x.shape[2:])
        for name in ("y", "cue", "garment_box", "cue_box", "source"):
            assert torch.equal(getattr(a, name), getattr(b, name))
        for i in range(len(b.y)):
            t, left, bottom, r = b.garment_box[i].tolist()
            garment = b.x[i, :, t:bottom, left:r]
            assert torch.equal(garment, a.x[i, :, t:bottom, left:r].expand(3, -1, -1))  # grey: equal channels
            t, left, bottom, r = b.cue_box[i].tolist()
            patch = b.x[i, :, t:bottom, left:r]
            assert torch.equal(patch, torch.from_numpy(cue_patch("colour", int(b.cue[i]), 14)))
    red, green = cue_patch("colour", 0, 6), cue_patch("colour", 1, 6)
    assert (red[0] == 1).all() and (green[1] == 1).all() and red[1:].sum() == green[[0, 2]].sum() == 0
    assert red.sum(0).tolist() == green.sum(0).tolist()  # the same brightness
    with pytest.raises(PoolkitError, match="cue must be one of stripes, colour"):
        make_spurious_data(images, agreement=0.9, **SIZES, cue="red")


def test_splits_share_no_garment_and_the_positions_vary():
    # catches a reweighting set drawn from training images (DFR's held-out rows would leak) and a fixed position
    # (flex could then learn to drop the cue)
    data = make_spurious_data(fake_fashion(), agreement=0.95, **SIZES, seed=0)
    sources = [set(s.source.tolist()) for s in (data.train, data.val, data.reweight)]
    assert sum(map(len, sources)) == len(set().union(*sources)) == 120 + 40 + 32
    assert len({tuple(b) for b in data.train.cue_box[:, :2].tolist()}) > 30
    assert len({tuple(b) for b in data.train.garment_box[:, :2].tolist()}) > 30


def test_same_seed_same_data_and_another_seed_other_data():
    # catches unseeded draws (numpy's or torch's global generator)
    images = fake_fashion()
    a, b = (make_spurious_data(images, agreement=0.95, **SIZES, seed=4) for _ in range(2))
    c = make_spurious_data(images, agreement=0.95, **SIZES, seed=5)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.cue, b.test.cue)
    assert not torch.equal(a.train.x, c.train.x)


@pytest.mark.parametrize("change, match", [
    (dict(agreement=1.2), "agreement"), (dict(canvas=50), "canvas of at least 56"),
    (dict(train_per_label=500), "too few"), (dict(test_per_group=0), "test_per_group"),
])
def test_bad_generator_settings_name_the_fix(change, match):
    options = dict(agreement=0.95, **SIZES) | change
    with pytest.raises(PoolkitError, match=match):
        make_spurious_data(fake_fashion(), **options)


# -- protocol -----------------------------------------------------------------------------------------
TINY = spurious_config.SpuriousConfig(agreements=(0.9,), train_per_label=40, val_per_label=10, reweight_per_group=4,
                               test_per_group=5, widths=(4, 6, 8), epochs=1, dfr_retrains=3, head_epochs=2,
                               head_batch_size=8, head_lrs=(1e-2,), head_weight_decays=(0.01, 0.1), seeds=2, threads=1,
                               preset="test")


@pytest.fixture
def fake_images(monkeypatch):
    images = fake_fashion()
    monkeypatch.setattr(spurious, "load_images", lambda name, root=None: images)
    return images


def reweight_rows(count_per_group: int = 6, channels: int = 5, grid: int = 3, seed: int = 0):
    """Maps whose first channel carries the label: (4 * count, C, grid, grid), labels, groups."""
    gen = torch.Generator().manual_seed(seed)
    groups = np.repeat(np.arange(4), count_per_group)
    y = torch.from_numpy(groups // 2)
    maps = torch.rand(len(y), channels, grid, grid, generator=gen)
    maps[:, 0] += 2.0 * y[:, None, None]
    return maps, y, groups


def test_halves_split_every_group_in_two_disjoint_parts():
    # catches halves that overlap (tuning scored on its own rows) and halves that miss a group
    groups = np.repeat(np.arange(4), [6, 7, 6, 8])
    first, second = spurious.halves(groups, seed=0)
    assert not set(first) & set(second) and sorted([*first, *second]) == list(range(len(groups)))
    assert np.bincount(groups[first]).tolist() == [3, 3, 3, 4] and np.bincount(groups[second]).tolist() == [3, 4, 3, 4]


def test_dfr_and_the_heads_are_fitted_on_the_reweighting_rows_only(monkeypatch):
    # catches any fit (scaler, C choice, retrains, head training or selection) that reads the test maps: poisoned
    # (NaN) test rows would change or break what was fitted
    from sklearn.linear_model import LogisticRegression

    maps, y, groups = reweight_rows()
    clean, poisoned = torch.rand(10, 5, 3, 3), torch.full((10, 5, 3, 3), float("nan"))
    seen = []
    fit_logistic = LogisticRegression.fit
    monkeypatch.setattr(LogisticRegression, "fit",
                        lambda self, x, t: (seen.append(len(x)), fit_logistic(self, x, t))[1])
    a = spurious.retrain_on_frozen(TINY, (maps, y, groups), clean, seed=3)
    b = spurious.retrain_on_frozen(TINY, (maps, y, groups), poisoned, seed=3)
    dfr_a, dfr_b = a["dfr"][1], b["dfr"][1]
    assert np.array_equal(dfr_a.coef, dfr_b.coef) and dfr_a.intercept == dfr_b.intercept and dfr_a.c == dfr_b.c
    assert np.isfinite(dfr_a.coef).all() and np.allclose(dfr_a.mean, maps.mean(dim=(2, 3)).numpy().mean(0))
    for name in spurious.RETRAINED:
        state_a, state_b = a[name][1].state_dict(), b[name][1].state_dict()
        assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
        assert a[name][2] == b[name][2]  # the same hyper-parameters chosen
    # per call: one fit per C on half of the 24 rows, then the retrains on 80% of each group of 6 (4 rows x 4 groups)
    assert seen[:len(TINY.dfr_cs) + TINY.dfr_retrains] == [12] * len(TINY.dfr_cs) + [16] * TINY.dfr_retrains


def test_dfr_averages_its_retrains_and_finds_the_core_feature():
    # catches the last retrain kept instead of the mean and a C chosen on something other than the tuning scores
    maps, y, groups = reweight_rows(count_per_group=20, seed=1)
    features = maps.mean(dim=(2, 3)).numpy()
    head = spurious.fit_dfr(features, y.numpy(), groups, cs=(1.0, 0.1), retrains=4, subsample=0.5, seed=0)
    assert head.c == max(head.tuning, key=head.tuning.get) and set(head.tuning) == {1.0, 0.1}
    assert abs(head.coef[0]) > 0 and float((head.predict(features) == y.numpy()).mean()) > 0.95
    single = spurious.fit_dfr(features, y.numpy(), groups, cs=(head.c,), retrains=1, subsample=0.5, seed=0)
    assert not np.array_equal(single.coef, head.coef)


@pytest.mark.parametrize("method", [*spurious.RETRAINED, "erm"])
def test_pooling_weights_are_distributions_over_positions(method):
    # catches weights over channels instead of positions, unnormalised scores, and negative weights
    maps = torch.rand(3, 8, 4, 5) * 3
    head = None if method == "erm" else spurious.build_head(method, 8, (4, 5), seed=0)
    if method == "flex":
        head.pooler.logits.data.normal_()  # a trained, non-uniform map
    weights = spurious.pooling_weights(method, head, maps)
    assert weights.shape == (3, 4, 5) and bool((weights >= 0).all())
    assert torch.allclose(weights.sum(dim=(1, 2)), torch.ones(3))
    assert (method == "erm") == bool(torch.allclose(weights, torch.full_like(weights, 1 / 20)))


def test_mass_shares_count_the_cells_whose_centre_lies_in_each_box():
    # catches rows and columns swapped, exclusive ends taken as inclusive, and a sum instead of a mean over images
    weights = torch.zeros(2, 4, 4)
    weights[0, 0, 3] = 1.0  # cell centre (row 4, col 28) on a 32 px canvas
    weights[1] = 1 / 16
    cue = torch.tensor([[0, 24, 8, 32], [0, 24, 8, 32]])
    garment = torch.tensor([[8, 0, 32, 24], [8, 0, 32, 24]])
    cue_mass, garment_mass = spurious.mass_shares(weights, (cue, garment), canvas=32)
    assert cue_mass == pytest.approx((1.0 + 1 / 16) / 2) and garment_mass == pytest.approx((0 + 9 / 16) / 2)


def test_scores_and_the_sanity_check():
    # catches the worst group taken over labels instead of groups and a sanity flag that ignores the gap
    y, groups = np.array([0, 0, 0, 0, 1, 1]), np.array([0, 0, 1, 1, 3, 2])
    pred = np.array([0, 0, 0, 1, 1, 0])
    assert spurious.group_accuracies(pred, y, groups) == [1.0, 0.5, 0.0, 1.0]
    assert spurious.worst_group(pred, y, groups) == 0.0
    frame = pd.DataFrame([{"agreement": a, "seed": s, "method": "erm", "average": 0.9, "worst_group": w}
                          for a, w in ((0.95, 0.85), (0.99, 0.7)) for s in (1, 2)])
    check = spurious.sanity(frame)
    assert not check["0.95"]["ok"] and check["0.99"]["ok"] and check["0.99"]["mean_gap_points"] == pytest.approx(20)


def test_a_tiny_run_writes_its_files_repeats_itself_and_refuses_to_overwrite(tmp_path, fake_images):
    # catches a missing output, a csv out of step with the json, group counts that are not the planned ones,
    # unseeded training (same seed, other numbers) and overwriting old results
    frame, meta = spurious.run_spurious(TINY, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*spurious_config.RESULT_FILES, MANIFEST])
    csv = pd.read_csv(tmp_path / "results.csv")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(csv) == 2 * len(spurious.METHODS) and list(csv["method"][:5]) == list(spurious.METHODS)
    assert saved["group_counts"]["0.9"]["train"] == planned_counts(40, 0.9) == [36, 4, 4, 36]
    assert saved["group_counts"]["0.9"]["reweight"] == [4, 4, 4, 4] and "0.9" in saved["sanity"]
    cell = csv[csv["method"] == "attention2d"]["worst_group"]
    summary = {(s["agreement"], s["method"]): s for s in saved["summary"]}
    assert summary[(0.9, "attention2d")]["worst_group_mean"] == pytest.approx(cell.mean())
    assert "commit" in saved["provenance"] and saved["settings"]["seeds"] == 2
    again, _ = spurious.run_spurious(TINY, None, progress=False)
    pd.testing.assert_frame_equal(frame, again)
    with pytest.raises(PoolkitError, match="force=True"):
        spurious.run_spurious(TINY, tmp_path, progress=False)


def test_a_tiny_run_on_the_colour_cue_trains_on_three_channels(tmp_path, fake_images):
    # catches a backbone with one input channel (the run would fail on RGB canvases) and a cue setting the data
    # ignore (the json would name a cue the images did not carry)
    config = spurious_config.SpuriousConfig(**{**vars(TINY), "seeds": 1, "cue": "colour"})
    frame, meta = spurious.run_spurious(config, tmp_path, progress=False)
    assert len(frame) == len(spurious.METHODS) and frame["worst_group"].between(0, 1).all()
    assert meta["settings"]["cue"] == "colour" and tuple(meta["labels"]["cue"]) == CUES["colour"]
    assert "colour cue" in meta["benchmark"]
    stripes, _ = spurious.run_spurious(spurious_config.SpuriousConfig(**{**vars(TINY), "seeds": 1}), None,
                                       progress=False)
    assert not np.allclose(frame["cue_mass"], stripes["cue_mass"])  # another cue, another trained network


def test_cli_runs_and_names_bad_input(tmp_path, fake_images, capsys):
    # catches the subcommand not wired, --force ignored, and bad input ending in a traceback
    args = ["bench", "spurious", "--quick", "--train-per-label", "30", "--val-per-label", "10",
            "--reweight-per-group", "4", "--test-per-group", "5", "--widths", "4", "6", "--epochs", "1", "--seeds", "1",
            "--head-epochs", "1", "--dfr-retrains", "2", "--threads", "1", "--no-progress", "--out", str(tmp_path)]
    assert cli_main(args) == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(spurious.METHODS)
    assert cli_main(args) == 2 and "--force" in capsys.readouterr().err
    assert cli_main(args[:-2] + ["--agreements", "1.5", "--out", str(tmp_path / "b")]) == 2
    assert "agreements" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse's choices: one line, exit 2
        cli_main(args[:-2] + ["--cue", "texture", "--out", str(tmp_path / "c")])
    assert exit_.value.code == 2 and "'colour'" in capsys.readouterr().err


def test_summary_pairs_each_seed_with_dfr():
    # catches an unpaired difference (DFR's spread would enter), population std, and a noise flag on a steady gain
    rows = [(m, s, w) for m, ws in (("dfr", (.8, .9, .7)), ("flex", (.83, .93, .73)), ("erm", (.5, .95, .6)))
            for s, w in zip((1, 2, 3), ws)]
    frame = pd.DataFrame([{"agreement": 0.95, "seed": s, "method": m, "worst_group": w, "average": w + .05,
                           "cue_mass": 0.1, "garment_mass": 0.3} for m, s, w in rows])
    summary = spurious.summarize(frame).set_index("method")
    assert summary.loc["dfr", "worst_group_std"] == pytest.approx(0.1)
    assert summary.loc["flex", "vs_dfr_mean"] == pytest.approx(0.03) and summary.loc["flex", "vs_dfr_std"] < 1e-12
    assert not summary.loc["flex", "inside_noise"] and summary.loc["erm", "inside_noise"]


def test_fit_without_val_or_test_keeps_the_last_epoch():
    # catches a best-epoch selection that runs without a validation split, and a test score made up without test rows
    from poolkit_bench.vision_model import fit

    head = spurious.build_head("flex", 4, (2, 2), seed=0)
    maps, y = torch.rand(16, 4, 2, 2), torch.arange(16) % 2
    result = fit(head, (maps, y), None, None, epochs=3, batch_size=8, lr=1e-2, weight_decay=0.0, seed=0)
    assert result.best_epoch == 2 and result.val_accuracy == [] and np.isnan(result.test_accuracy)
    assert len(result.train_loss) == 3


def test_dfr_retrains_draw_the_same_share_of_every_group(monkeypatch):
    # catches retrain rows drawn from all reweighting rows at random (ignoring groups), a share of each group's own
    # size instead of the smallest's, rows repeated within a draw, and one draw reused by every retrain
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    sizes = [20, 6, 9, 30]  # unbalanced: a draw that ignores the groups comes out unbalanced too
    groups = np.repeat(np.arange(4), sizes)
    y = groups // 2
    features = np.random.default_rng(0).normal(size=(len(y), 3))
    features[:, 0] += 2.0 * y
    whole = StandardScaler().fit(features).transform(features)  # the retrains' standardisation
    drawn = []
    fit_logistic = LogisticRegression.fit
    monkeypatch.setattr(LogisticRegression, "fit", lambda self, x, t: (drawn.append(x), fit_logistic(self, x, t))[1])
    spurious.fit_dfr(features, y, groups, cs=(1.0, 0.1), retrains=4, subsample=0.5, seed=0)
    retrains = drawn[2:]  # after one tuning fit per C
    assert len(retrains) == 4
    picks = [[int(np.abs(whole - row).sum(1).argmin()) for row in x] for x in retrains]
    for x, rows in zip(retrains, picks):
        np.testing.assert_allclose(x, whole[rows])  # each fitted row is one reweighting row
        assert np.bincount(groups[rows], minlength=4).tolist() == [3, 3, 3, 3]  # int(0.5 * 6) from every group
        assert len(set(rows)) == len(rows)
    assert len({tuple(sorted(rows)) for rows in picks}) == 4  # a fresh subsample per retrain


def test_dfr_is_l1_logistic_regression_with_liblinear(monkeypatch):
    # catches an L2 penalty (penalty="l2" or l1_ratio=0): a strongly regularised L1 fit zeroes the weights of
    # pure-noise features, where L2 only shrinks them; also catches a solver other than liblinear
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    groups = np.repeat(np.arange(4), 12)
    y = groups // 2
    features = np.random.default_rng(0).normal(size=(len(y), 9))
    features[:, 0] += 2.0 * y  # feature 0 carries the label, features 1..8 are noise
    solvers = []
    fit_logistic = LogisticRegression.fit
    monkeypatch.setattr(LogisticRegression, "fit",
                        lambda self, x, t: (solvers.append(self.solver), fit_logistic(self, x, t))[1])
    head = spurious.fit_dfr(features, y, groups, cs=(0.1,), retrains=3, subsample=0.8, seed=0)
    assert head.coef[0] > 0.3 and np.array_equal(head.coef[1:], np.zeros(8))
    assert set(solvers) == {"liblinear"}
    monkeypatch.undo()
    l2 = LogisticRegression(C=0.1, l1_ratio=0.0, solver="liblinear").fit(StandardScaler().fit_transform(features), y)
    assert (np.abs(l2.coef_[0]) > 1e-3).all()  # the data tells the two apart: L2 leaves every noise weight non-zero
