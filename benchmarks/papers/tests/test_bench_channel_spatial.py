"""``poolkit bench channel-spatial``: blocks placed after the chosen stages without disturbing the backbone's seeding,
the fine-grained subset, the ordering summary, the speed table, config errors, a tiny end-to-end run and its CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from poolkit_bench import channel_spatial as cs
from poolkit_bench import channel_spatial_config as cs_config
from poolkit_bench.vision_data import Images
from poolkit_bench.vision_model import Backbone
from poolkit.blocks import Block, list_blocks
from poolkit.cli import main as cli_main
from poolkit.errors import PoolkitError
from poolkit.io import MANIFEST

TINY = cs_config.ChannelSpatialConfig(dataset="digits", sizes=(60,), epochs=(1,), val_size=40, blocks=("none", "cbam"),
                               fine_blocks=("none", "ca_sa", "sa_ca"), fine_classes=(3, 5, 8, 9), fine_size=40,
                               fine_epochs=1, widths=(4, 6, 8), reduction=2, seeds=2, batch_size=32, pad=1,
                               timing_batch=8, timing_rounds=1, workers=1, preset="test")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_blocks_follow_the_chosen_stages_and_leave_the_backbone_as_seeded():
    # catches a block drawn before the backbone (every block would then train a differently initialised CNN, and the
    # differences would not be paired), blocks at the wrong stages, and a 'none' model that is not the vision CNN
    runner = cs._Runner(dataclasses.replace(TINY, stages=(0, 2)).validated())
    plain, cbam = runner.build("none", seed=3, num_classes=10), runner.build("ca_sa", seed=3, num_classes=10)
    assert [isinstance(stage[-1], Block) for stage in cbam.backbone.stages] == [True, False, True]
    assert [stage[-1].channels for stage in cbam.backbone.stages if isinstance(stage[-1], Block)] == [4, 8]
    conv_weights = [k for k in plain.state_dict() if k.endswith("0.weight")]
    assert all(torch.equal(plain.state_dict()[k], cbam.state_dict()[k]) for k in conv_weights)
    torch.manual_seed(3)
    reference = Backbone((4, 6, 8), runner.mean, runner.std)
    x = runner.images["all"].train_x[:4]
    torch.testing.assert_close(plain.backbone(x)[-1], reference(x)[-1])
    assert cbam(x).shape == (4, 10)
    assert cbam.backbone.stages[0][-1].get_config()["reduction"] == 2  # the run's reduction reaches the blocks


def test_class_subset_keeps_only_the_chosen_classes_relabelled_in_order():
    # catches labels left as the original ids (the 4-way head would get label 6) and images of other classes kept
    x = torch.arange(8.0).view(8, 1, 1, 1)
    y = torch.tensor([0, 1, 2, 6, 4, 6, 9, 2])
    images = Images("toy", x, y, x[:4], y[:4], num_classes=10, flip=True)
    subset = cs.class_subset(images, (6, 2, 0))
    assert subset.train_y.tolist() == [2, 1, 0, 0, 1] and subset.train_x.flatten().tolist() == [0, 2, 3, 5, 7]
    assert subset.test_y.tolist() == [2, 1, 0] and subset.num_classes == 3 and subset.flip
    with pytest.raises(PoolkitError, match="has classes 0..9"):
        cs.class_subset(images, (3, 10))


def test_ordering_is_sa_ca_paired_against_ca_sa_on_the_fine_task():
    # catches the difference taken the wrong way round, unpaired, or from the ten-class task
    rows = [("fine", "ca_sa", s, a) for s, a in ((1, .80), (2, .90), (3, .70))] + \
           [("fine", "sa_ca", s, a) for s, a in ((3, .72), (1, .82), (2, .92))] + \
           [("all", "sa_ca", s, .10) for s in (1, 2, 3)] + [("all", "ca_sa", s, .90) for s in (1, 2, 3)]
    frame = pd.DataFrame([(t, b, 100, 4, s, a, 0) for t, b, s, a in rows], columns=cs.COLUMNS)
    got = cs.ordering(frame)
    assert got["better"] == "sa_ca" and got["diff_mean"] == pytest.approx(0.02) and got["diff_std"] < 1e-12
    assert not got["inside_noise"] and got["size"] == 100
    assert cs.ordering(frame[frame["block"] != "sa_ca"]) is None


def test_speed_counts_each_blocks_parameters_and_times_every_block_alike():
    # catches parameters counted for one stage only, and a ratio against the wrong baseline
    runner = cs._Runner(TINY.validated())
    speed = runner.speed().set_index("block")
    assert list(speed.index) == ["none", "ca_sa", "sa_ca"]
    model = runner.build("ca_sa", seed=1, num_classes=10)
    inserted = sum(p.numel() for stage in model.backbone.stages for p in stage[-1].parameters()
                   if isinstance(stage[-1], Block))
    assert speed.loc["ca_sa", "block_params"] == inserted > 0 and speed.loc["none", "block_params"] == 0
    assert speed.loc["none", "vs_none"] == 1.0 and (speed["forward_ms"] > 0).all()
    ratio = speed.loc["ca_sa", "forward_ms"] / speed.loc["none", "forward_ms"]
    assert speed.loc["ca_sa", "vs_none"] == pytest.approx(ratio)


@pytest.mark.parametrize("change, match", [
    ({"epochs": (2, 3)}, r"one per size \(1\)"),
    ({"stages": (3,)}, "stages must be distinct stage indices 0..2"),
    ({"blocks": ("none", "cbma")}, "Did you mean 'cbam'"),
    ({"blocks": ("cbam", "ca_sa")}, "blocks must be distinct"),
    ({"fine_classes": (3,)}, "two or more distinct class ids"),
    ({"sizes": (5000,)}, "lower --sizes"),
    ({"reduction": 0}, "`reduction` must be an int >= 1"),
])
def test_bad_settings_fail_in_one_line(change, match):
    # catches per-size epochs silently broadcast or truncated, aliases counted as two blocks, and a stage that does
    # not exist failing deep inside the model
    with pytest.raises(PoolkitError, match=match):
        cs._Runner(dataclasses.replace(TINY, **change).validated())


def test_a_tiny_run_writes_its_files_and_the_same_seed_gives_the_same_numbers(tmp_path):
    # catches a missing output, a csv out of step with the json, a size column missing, nondeterministic runs, and
    # overwriting old results
    frame, speed = cs.run_channel_spatial(TINY, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*cs_config.RESULT_FILES, MANIFEST])
    csv = pd.read_csv(tmp_path / "results.csv")
    meta = json.loads((tmp_path / "results.json").read_text())
    assert len(csv) == len(meta["runs"]) == 2 * (2 + 3) and list(csv.columns) == cs.COLUMNS
    assert sorted(csv["size"].unique()) == [40, 60] and set(csv["task"]) == {"all", "fine"}
    assert set(csv[csv["task"] == "all"]["block"]) == {"none", "ca_sa"}  # the alias, canonical
    assert meta["ordering"]["better"] == "sa_ca" and len(meta["speed"]) == len(speed) == 3
    assert "commit" in json.dumps(meta["provenance"]) and meta["settings"]["epochs"] == [1]
    runner = cs._Runner(TINY.validated())
    again = runner(("fine", 40, TINY.seed + 1, "sa_ca"))[0]
    first = csv[(csv["task"] == "fine") & (csv["block"] == "sa_ca") & (csv["seed"] == TINY.seed + 1)].iloc[0]
    assert again["accuracy"] == first["accuracy"]
    assert np.allclose(again["train_loss"], [r for r in meta["runs"] if r["task"] == "fine" and r["block"] == "sa_ca"
                                             and r["seed"] == TINY.seed + 1][0]["train_loss"])
    with pytest.raises(PoolkitError, match="force=True"):
        cs.run_channel_spatial(TINY, tmp_path, progress=False)


def test_cli_runs_and_bad_input_exits_2(tmp_path, capsys):
    # catches the subcommand not wired, 'skip' not skipping the fine-grained task, and bad input with a traceback
    args = ["bench", "channel-spatial", "--quick", "--sizes", "50", "--val-size", "30", "--epochs", "1", "--seeds", "1",
            "--blocks", "none,sa", "--fine-blocks", "skip", "--widths", "4", "6", "--stages", "1", "--no-progress",
            "--out", str(tmp_path)]
    assert cli_main(args) == 0
    assert pd.read_csv(tmp_path / "results.csv")["block"].tolist() == ["none", "sa"]
    assert "sa" in capsys.readouterr().out
    assert cli_main(args) == 2 and "--force" in capsys.readouterr().err
    assert cli_main(args[:-2] + ["--blocks", "cbma", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'cbam'" in err and "Traceback" not in err


def test_every_preset_validates_and_full_runs_every_block():
    # catches a preset that only fails when someone runs it (e.g. --full on a GPU), and 'all' not expanding
    for preset in cs_config.PRESETS.values():
        config = preset.validated()
        assert config.blocks[0] == "none" and len(config.epochs) == len(config.sizes)
    full = cs_config.FULL.validated()
    assert full.blocks[1:] == tuple(list_blocks()) and len(full.blocks) == 19
    assert cs_config.DEFAULT.validated().blocks == cs_config.DEFAULT_BLOCKS


def test_the_verdict_follows_the_paired_differences():
    # catches 'holds' printed for a pick that is best by mean only, and a pick detectably below none called noise
    from pages import channel_spatial as render

    def verdict(pick_accuracy):
        accuracy = {"none": (.70, .80, .90), "residual": (.71, .81, .91), "ca_msa": pick_accuracy}
        frame = pd.DataFrame([("all", b, 500, 4, s, a, 0) for b, values in accuracy.items()
                              for s, a in zip((1, 2, 3), values)], columns=cs.COLUMNS)
        return render.render_verdicts(cs.summarize_runs(frame), render.Verdicts(render.comparisons(frame)))

    assert "**the guidance holds here**" in verdict((.72, .82, .92))  # steadily above none and residual
    assert "**detectably below no attention**, against the guidance" in verdict((.69, .79, .89))
    assert "**not supported**" in verdict((.73, .79, .92))  # the best mean, but not steadily above anything
