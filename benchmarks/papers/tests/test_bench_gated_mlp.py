"""``poolkit bench gated-mlp``: the feed-forward variants (their formulas, matched parameters and symmetries), the
classifier's padding, the encoded splits, the epoch kept, and a tiny run end to end."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from poolkit_bench import gated_mlp, gated_mlp_config
from poolkit_bench.gated_mlp_config import FFNS
from poolkit_bench.gated_mlp_model import FeedForward, TextClassifier, ffn_parameters, symmetry_gaps
from poolkit.cli import main


@pytest.fixture(scope="module")
def quick_texts():
    return gated_mlp.encode_texts(gated_mlp_config.QUICK.validated())


@pytest.mark.parametrize("dim, mlp_hidden", [(64, 256), (16, 24), (48, 100)])
def test_every_variant_has_the_mlp_s_parameter_count_to_within_one_hidden_unit(dim, mlp_hidden):
    # catches gated forms at the MLP's width (1.5x its parameters) and a width rule that drifts with the size
    counts = {ffn: sum(p.numel() for p in FeedForward(ffn, dim, mlp_hidden).parameters()) for ffn in FFNS}
    one_unit = 3 * dim + 2  # what one gated hidden unit costs
    assert all(abs(count - counts["gelu_mlp"]) <= one_unit for count in counts.values()), counts


def test_each_variant_computes_its_own_hidden_units():
    # recomputed from the layer's own maps: catches the activation on the wrong factor count (none, both) and a
    # softmax over the wrong axis
    torch.manual_seed(0)
    x = torch.randn(5, 7, 16)
    expected = {"gelu_mlp": lambda g, v: F.gelu(g), "glu": lambda g, v: F.gelu(g) * v, "bilinear": lambda g, v: g * v,
                "both": lambda g, v: F.gelu(g) * F.gelu(v),
                "bilinear_attention": lambda g, v: torch.softmax(g * v, dim=-1)}
    for ffn, form in expected.items():
        layer = FeedForward(ffn, 16, 24)
        g, v = layer.gate(x), None if layer.value is None else layer.value(x)
        torch.testing.assert_close(layer.hidden(x), form(g, v), msg=ffn)
        torch.testing.assert_close(layer(x), layer.out(form(g, v)), msg=ffn)
    weights = FeedForward("bilinear_attention", 16, 24).hidden(x)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(5, 7))  # normalised over the units


def test_the_symmetry_gaps_show_which_symmetry_each_variant_breaks():
    # the paper's reading: one-factor GELU breaks exchange and scaling, GELU on both breaks scaling only, the plain
    # bilinear forms keep both; catches a gap measured on unchanged weights (always 0) or on the wrong factor
    gaps = {ffn: symmetry_gaps(ffn) for ffn in FFNS}
    assert gaps["gelu_mlp"] == {"exchange": None, "scaling": None}
    for ffn in ("bilinear", "bilinear_attention"):
        assert gaps[ffn]["exchange"] < 1e-12 and gaps[ffn]["scaling"] < 1e-12, ffn
    assert gaps["glu"]["exchange"] > 0.1 and gaps["glu"]["scaling"] > 0.01
    assert gaps["both"]["exchange"] < 1e-12 and gaps["both"]["scaling"] > 0.01


def test_the_classifier_ignores_padding_and_its_ffn_parameters_are_the_blocks():
    # catches attention without the key mask and pooling over padded positions
    torch.manual_seed(0)
    model = TextClassifier("glu", vocab=30, classes=3, dim=16, heads=2, layers=2, mlp_hidden=24, max_length=12).eval()
    ids = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]])
    mask = ids > 0
    wide = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask), model(wide, wide > 0))
        torch.testing.assert_close(model(ids[:1, :3], mask[:1, :3]), model(ids, mask)[:1])
    assert ffn_parameters(model) == 2 * sum(p.numel() for p in FeedForward("glu", 16, 24).parameters())


def test_the_encoded_rows_are_split_disjoint_and_stratified_with_fit_only_vocabulary(quick_texts):
    # catches overlapping splits, an unstratified split, and a vocabulary counted on validation or test rows
    texts = quick_texts
    parts = [set(texts.splits[name].tolist()) for name in ("fit", "val", "test")]
    assert sum(map(len, parts)) == len(texts.labels) == len(set.union(*parts))
    assert [len(p) for p in parts] == [360, 120, 120]
    shares = [np.bincount(texts.labels[texts.splits[name]], minlength=texts.classes) / len(texts.splits[name])
              for name in ("fit", "test")]
    assert np.abs(shares[0] - shares[1]).max() < 0.05
    fit_ids = set(texts.ids[texts.splits["fit"]].flatten().tolist())
    assert fit_ids >= set(range(2, texts.vocab)) and texts.ids.max() == texts.vocab - 1
    assert (texts.ids[texts.splits["test"]] == 1).any()  # a token only the test rows have is unknown
    lengths = texts.mask.sum(dim=1)
    assert torch.equal(texts.mask, torch.arange(texts.ids.shape[1]) < lengths[:, None])  # padding at the end only


def test_the_epoch_kept_is_the_lowest_validation_loss(quick_texts, one_torch_thread):
    # catches the last epoch kept, and the best chosen on training loss
    config = dataclasses.replace(gated_mlp_config.QUICK, epochs=4, lr=3e-2).validated()
    run = gated_mlp.train_one(config, quick_texts, ("glu", 0))
    assert run["best_epoch"] == int(np.argmin(run["val_loss"])) and len(run["val_loss"]) == 4
    assert run["ffn_params"] == 816 and run["hidden"] == 16


def test_a_tiny_run_writes_its_results_and_refuses_to_overwrite_them(tmp_path, capsys, one_torch_thread):
    out = tmp_path / "gated"
    args = ["bench", "gated-mlp", "--quick", "--ffns", "gelu_mlp", "glu", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "gated_mlp.png"}
    rows = pd.read_csv(out / "results.csv")
    assert list(rows.columns) == gated_mlp.COLUMNS and sorted(zip(rows["ffn"], rows["seed"])) == [
        ("gelu_mlp", 0), ("gelu_mlp", 1), ("glu", 0), ("glu", 1)]
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["preset"] == "quick" and set(results["symmetries"]) == {"gelu_mlp", "glu"}
    assert results["split_rows"] == {"fit": 360, "val": 120, "test": 120}
    assert "glu" in capsys.readouterr().out
    assert main(args) == 2  # no --force: the results stay
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize("flags, named", [(["--dim", "10", "--heads", "4"], "dim"), (["--lr", "0"], "lr"),
                                          (["--rows", "300"], "--rows")])
def test_bad_settings_exit_2_naming_the_setting_before_training(flags, named, capsys, tmp_path):
    # --rows 300 of the embedded set leaves classes with a single row: a one-line error, not sklearn's traceback
    assert main(["bench", "gated-mlp", "--quick", *flags, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "gated-mlp", "--quick", "--ffns", "relu"])
    assert exit_.value.code == 2 and "--ffns" in capsys.readouterr().err
