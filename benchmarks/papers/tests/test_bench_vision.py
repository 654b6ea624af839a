"""``poolkit bench vision``: the IDX reader, augmentation, the CNN with every pooler, SAC's loss, the frozen-backbone
variant, the paired summary, a tiny end-to-end run and its CLI."""

from __future__ import annotations

import dataclasses
import gzip
import json
import struct

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from poolkit_bench import vision, vision_config
from poolkit_bench.reporting import versus_baseline
from poolkit_bench.vision_data import augment, load_images, read_idx
from poolkit_bench.vision_model import Backbone, map_sizes
from poolkit.cli import main as cli_main
from poolkit.errors import PoolkitError
from poolkit.io import MANIFEST

TINY = vision_config.VisionConfig(dataset="digits", sizes=(60,), val_size=40, poolers=("gap", "flex", "gmp+sac"),
                                  seeds=2, epochs=1, batch_size=32, pad=1, workers=1, preset="test")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    return bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


# -- data ---------------------------------------------------------------------------------------------
def test_read_idx_reads_a_hand_built_file(tmp_path):
    # catches little-endian dimensions, a wrong header offset, a dtype ignored, and .gz not unpacked
    images = np.arange(12, dtype=np.uint8).reshape(2, 3, 2) * 20
    (tmp_path / "a-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images, 0x08)))
    assert np.array_equal(read_idx(tmp_path / "a-idx3-ubyte.gz"), images)
    ints = np.array([-70000, 5, 1 << 20], dtype=">i4")
    (tmp_path / "b-idx1").write_bytes(idx_bytes(ints, 0x0C))
    got = read_idx(tmp_path / "b-idx1")
    assert got.tolist() == [-70000, 5, 1 << 20] and got.shape == (3,)
    (tmp_path / "short").write_bytes(idx_bytes(images, 0x08)[:-1])
    with pytest.raises(PoolkitError, match="truncated"):
        read_idx(tmp_path / "short")
    (tmp_path / "png").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(PoolkitError, match="not an IDX file"):
        read_idx(tmp_path / "png")


def test_fashion_mnist_loads_from_a_folder_and_names_the_package_when_missing(tmp_path):
    # catches images not scaled to [0, 1], labels as the wrong split, and a missing folder failing with a traceback
    with pytest.raises(PoolkitError, match="apt-get install dataset-fashion-mnist"):
        load_images("fashion-mnist", tmp_path)
    pixels = {"train": np.full((3, 4, 5), 255, np.uint8), "t10k": np.zeros((2, 4, 5), np.uint8)}
    for split, labels in (("train", [1, 2, 3]), ("t10k", [7, 9])):
        (tmp_path / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(pixels[split], 0x08)))
        (tmp_path / f"{split}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(idx_bytes(np.array(labels, np.uint8), 0x08)))
    images = load_images("fashion-mnist", tmp_path)
    assert images.train_x.shape == (3, 1, 4, 5) and float(images.train_x.max()) == 1.0
    assert images.test_x.shape == (2, 1, 4, 5) and images.test_y.tolist() == [7, 9]
    assert images.train_y.tolist() == [1, 2, 3] and images.flip


def test_augment_shifts_by_at_most_pad_and_flips_whole_rows():
    # catches a crop that rescales or wraps around, shifts beyond the padding, and flips of the wrong axis
    x = torch.zeros(200, 1, 6, 6)
    x[:, 0, 2, 3] = 1.0
    gen = torch.Generator().manual_seed(0)
    out = augment(x, gen, pad=1, flip=False)
    rows, cols = (out[:, 0] == 1).nonzero()[:, 1:].T
    assert out.sum().item() == 200 and set(rows.tolist()) == {1, 2, 3} and set(cols.tolist()) == {2, 3, 4}
    ramp = torch.arange(36.0).view(1, 1, 6, 6).expand(200, 1, 6, 6)
    flipped = augment(ramp, gen, pad=0, flip=True)
    same = (flipped == ramp).flatten(1).all(1)
    mirrored = (flipped == ramp.flip(-1)).flatten(1).all(1)
    assert bool((same | mirrored).all()) and 60 < int(mirrored.sum()) < 140


# -- model --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [28, 8, 9])
def test_backbone_maps_have_the_sizes_flex_and_sac_are_built_for(size):
    # catches map_sizes disagreeing with the network (a stage without pooling, ceil instead of floor)
    maps = Backbone((4, 6, 8))(torch.rand(2, 1, size, size))
    assert [tuple(m.shape[1:]) for m in maps] == [(c, h, w) for c, (h, w) in zip((4, 6, 8), map_sizes(size, size, 3))]


@pytest.mark.parametrize("name", vision_config.DEFAULT_POOLERS)
def test_every_benchmark_pooler_gives_class_logits_after_the_cnn(name):
    # catches a pooler that does not read the (B, C, H, W) map (wrong width into the head) and flex not sized to it
    runner = vision._Runner(dataclasses.replace(TINY, widths=(4, 6, 8), poolers=(name,)).validated())
    model = runner.build(name, seed=0)
    x = runner.images.train_x[:5]
    assert model(x).shape == (5, 10)
    assert model.head.pooler(model.backbone(x)[-1]).shape == (5, 8)
    if name.startswith("flex"):
        assert model.head.pooler.logits.shape[1:] == runner.sizes[-1] == (2, 2)


def test_sac_adds_its_weighted_losses_only_when_chosen():
    # catches auxiliary losses left out of training, added to a model without SAC, or their schedule ignored
    runner = vision._Runner(dataclasses.replace(TINY, widths=(4, 6, 8), sac_weight=0.5).validated())
    x, y = runner.images.train_x[:16], runner.images.train_y[:16]
    sac, plain = runner.build("flex+sac", seed=0).eval(), runner.build("flex", seed=0).eval()
    assert plain.aux is None and sac.aux is not None
    with torch.no_grad():
        maps = sac.backbone(x)
        main = F.cross_entropy(sac.head(maps[-1]), y)
        aux = sum(0.5 * F.cross_entropy(logits, y) for logits in sac.aux.logits(maps[:-1]))
        assert torch.allclose(sac.loss(x, y, 0.0), main + aux)
        assert torch.allclose(sac.loss(x, y, 1.0), main)  # linear schedule: no auxiliary loss at the end
        assert torch.allclose(plain.loss(x, y, 0.0), F.cross_entropy(plain(x), y))
    before = [h.weight.clone() for h in sac.aux.heads]
    vision.fit(sac, (x, y), (x, y), (x, y), epochs=1, batch_size=8, lr=1e-2, weight_decay=0.0, seed=0)
    assert all(not torch.equal(b, h.weight) for b, h in zip(before, sac.aux.heads))  # its classifiers trained


def test_flex_reg_is_flex_with_its_penalty_in_the_loss_and_dropout_in_training():
    # catches flex_reg built as plain flex (no l2 / dropout), and its L2 penalty left out of the training loss
    runner = vision._Runner(dataclasses.replace(TINY, widths=(4, 6, 8), poolers=("flex_reg",)).validated())
    model = runner.build("flex_reg", seed=0)
    pooler = model.head.pooler
    assert (pooler.name, pooler.l2, pooler.weight_dropout) == ("flex", 2.5e-4, 0.25)
    with torch.no_grad():
        pooler.logits.normal_()
    x, y = runner.images.train_x[:16], runner.images.train_y[:16]
    model.eval()
    with torch.no_grad():
        plain = F.cross_entropy(model(x), y)
        assert torch.allclose(model.loss(x, y, 0.0), plain + 2.5e-4 * pooler.logits.pow(2).sum())
    maps = model.backbone(x)[-1].detach()
    pooler.train()
    assert not torch.equal(pooler(maps), pooler.eval()(maps))  # weights dropped in training only


def test_the_frozen_variant_leaves_the_backbone_as_gap_trained_it(monkeypatch):
    # catches a post-hoc run that fine-tunes the backbone or updates its BatchNorm statistics, and one whose
    # pooler is not trained on the backbone's maps
    config = dataclasses.replace(TINY, poolers=("gap", "flex"), widths=(4, 6, 8)).validated()
    runner, calls = vision._Runner(config), []

    def spy(model, train, *args, **kwargs):
        result = fit(model, train, *args, **kwargs)
        calls.append((model, {k: v.clone() for k, v in model.state_dict().items()}, train[0].shape))
        return result

    fit = vision.fit
    monkeypatch.setattr(vision, "fit", spy)
    runs = runner((60, 1, "gap"))
    assert [(r["variant"], r["pooler"]) for r in runs] == [("scratch", "gap"), ("frozen", "gap"), ("frozen", "flex")]
    (gap_model, trained, _), frozen_calls = calls[0], calls[1:]
    backbone_after = gap_model.backbone.state_dict()
    assert all(torch.equal(trained[f"backbone.{k}"], v) for k, v in backbone_after.items())
    assert all(shape == (60, 8, 2, 2) for _, _, shape in frozen_calls)  # the last map, not images
    flex_head, flex_state, _ = frozen_calls[1]
    assert not torch.equal(flex_state["pooler.logits"], torch.zeros_like(flex_state["pooler.logits"]))


# -- summary, run, CLI --------------------------------------------------------------------------------
def test_summary_pairs_each_seed_with_gap_and_flags_noise():
    # catches an unpaired difference (gap's std would enter), population std, and a noise flag on a steady gain
    rows = [("gap", s, a) for s, a in ((1, .80), (2, .90), (3, .70))] + \
           [("flex", s, a) for s, a in ((3, .73), (1, .83), (2, .93))] + \
           [("gmp", s, a) for s, a in ((1, .85), (2, .87), (3, .71))]
    frame = pd.DataFrame([("scratch", p, 100, s, a, 0) for p, s, a in rows], columns=vision.COLUMNS)
    summary = vision.summarize(frame).set_index("pooler")
    assert summary.loc["gap", "std"] == pytest.approx(0.1)  # ddof 1
    assert summary.loc["flex", "diff_mean"] == pytest.approx(0.03) and summary.loc["flex", "diff_std"] < 1e-12
    assert not summary.loc["flex", "inside_noise"]
    assert summary.loc["gmp", "diff_std"] == pytest.approx(np.std([.05, -.03, .01], ddof=1))
    assert summary.loc["gmp", "inside_noise"] and not summary.loc["gap", "inside_noise"]
    vs_flex = vision.summarize(frame, baseline="flex").set_index("pooler")  # another pooler as the baseline
    assert vs_flex.loc["gmp", "diff_mean"] == pytest.approx(np.mean([.85 - .83, .87 - .93, .71 - .73]))
    assert vs_flex.loc["flex", "diff_mean"] == 0 and not vs_flex.loc["flex", "inside_noise"]
    # the printout's flag is one comparison's own interval: it says it is unadjusted (the pages adjust over a family)
    cells = {row.pooler: versus_baseline(row, "gap") for row in vision.summarize(frame).itertuples(index=False)}
    assert cells["gmp"].endswith(" (noise, unadjusted)") and "noise" not in cells["flex"] and cells["gap"] == ""


def test_a_tiny_run_writes_its_files_and_refuses_to_overwrite(tmp_path):
    # catches a missing output, a csv out of step with the json, curves not per epoch, and overwriting old results
    frame = vision.run_vision(TINY, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*vision_config.RESULT_FILES, MANIFEST])
    csv = pd.read_csv(tmp_path / "results.csv")
    meta = json.loads((tmp_path / "results.json").read_text())
    # 2 seeds x (3 from scratch + gap and flex on the frozen backbone; SAC has no post-hoc form)
    assert len(csv) == len(frame) == len(meta["runs"]) == 10
    assert sorted(csv["accuracy"]) == sorted(r["accuracy"] for r in meta["runs"])
    assert all(len(r["val_accuracy"]) == len(r["train_loss"]) == 1 for r in meta["runs"])
    assert meta["settings"]["poolers"] == ["gap", "flex", "gmp+sac"] and "commit" in json.dumps(meta["provenance"])
    cell = csv[(csv["variant"] == "frozen") & (csv["pooler"] == "flex")]["accuracy"]
    summary = {(s["variant"], s["pooler"]): s for s in meta["summary"]}
    assert summary[("frozen", "flex")]["mean"] == pytest.approx(cell.mean())
    # attention.png's maps: each pooler's own weights over the last map of the first test images (gap: uniform)
    maps = {name: np.array(m) for name, m in meta["attention_maps"]["maps"].items()}
    assert list(maps) == ["gap", "flex", "gmp+sac"] and all(m.shape[0] == vision.EXAMPLES for m in maps.values())
    np.testing.assert_allclose(maps["gap"], 1 / maps["gap"][0].size, rtol=1e-3)
    assert not np.allclose(maps["gmp+sac"], maps["gap"]) and np.allclose(maps["flex"].sum(axis=(1, 2)), 1, atol=1e-3)
    assert "maps" not in json.dumps(meta["runs"]) and (tmp_path / "report.html").read_text().count("<img") == 2
    with pytest.raises(PoolkitError, match="force=True"):
        vision.run_vision(TINY, tmp_path, progress=False)


def test_cli_runs_and_refuses_to_overwrite_without_force(tmp_path, capsys):
    # catches the subcommand not wired, --force ignored, and bad input ending in a traceback
    args = ["bench", "vision", "--quick", "--sizes", "50", "--val-size", "30", "--epochs", "1", "--seeds", "1",
            "--poolers", "gap,gem", "--no-frozen", "--no-progress", "--out", str(tmp_path)]
    assert cli_main(args) == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == 2
    assert cli_main(args) == 2 and "--force" in capsys.readouterr().err
    assert cli_main(args + ["--force"]) == 0
    assert cli_main(args[:-2] + ["--sizes", "5000", "--out", str(tmp_path / "b")]) == 2
    assert "lower --sizes" in capsys.readouterr().err
    assert cli_main(args[:-2] + ["--poolers", "flexx", "--out", str(tmp_path / "c")]) == 2
