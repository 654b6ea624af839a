"""The SNR (noise-robustness) benchmark: generator, analytic baselines, model, runner, CLI."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch

import poolkit
from poolkit_bench import snr, snr_config
from poolkit_bench.commands import parser_for
from poolkit.cli.options import config_from_args
from poolkit_bench.snr_config import PAPER_KS
from poolkit_bench.snr_data import (
    PUBLISHED_BASELINES,
    baseline_mse,
    generate_vectors,
    knn_targets,
    make_knn_centroid,
)
from poolkit_bench.snr_model import SNRModel, evaluate, fit
from poolkit.errors import PoolkitError


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- generator ------------------------------------------------------------------------------------
def test_generator_is_deterministic_and_seed_dependent():
    a = generate_vectors(50, seed=3)
    assert torch.equal(a, generate_vectors(50, seed=3))
    assert not torch.allclose(a, generate_vectors(50, seed=4))


def test_shapes_and_dtypes():
    data = make_knn_centroid(20, ks=(1, 3, 10), num_vectors=10, dim=5, seed=0)
    assert data.x.shape == (20, 10, 5) and data.x.dtype == torch.float32
    assert data.ks == (1, 3, 10)
    assert all(t.shape == (20, 5) and t.dtype == torch.float32 for t in data.targets.values())


def test_features_are_a_per_sample_mix_scaled_by_sqrt_dim():
    x = generate_vectors(400, seed=0).double()
    spread = x.std(dim=1)  # (samples, dim): per-sample column spread
    # normal columns (std 1..3) / 4 reach 0.25..0.75; uniform widths 0.2..3 / 4 give std 0.014..0.22
    assert spread.max() < 1.0
    assert (spread < 0.1).any() and (spread > 0.4).any()
    # parameters differ per sample: the same column's mean varies across samples
    assert x.mean(dim=1)[:, 0].std() > 0.2


def test_knn_targets_match_brute_force():
    x = torch.randn(7, 12, 3)
    targets = knn_targets(x, (1, 4, 11, 12))
    for i in range(7):
        dist = [float((x[i, j] - x[i, 0]).norm()) for j in range(1, 12)]
        order = sorted(range(11), key=dist.__getitem__)
        for k in (1, 4, 11):
            expected = torch.stack([x[i, 1 + j] for j in order[:k]]).mean(dim=0)
            assert torch.allclose(targets[k][i], expected, atol=1e-6)
    # K = N uses the N - 1 other vectors, as the paper's code
    assert torch.allclose(targets[12], x[:, 1:].mean(dim=1), atol=1e-6)


def test_knn_targets_exclude_vector_zero():
    x = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [9.0, 9.0]]])
    targets = knn_targets(x, (1, 2))
    assert torch.equal(targets[1][0], torch.tensor([1.0, 0.0]))
    assert torch.equal(targets[2][0], torch.tensor([0.5, 1.5]))


@pytest.mark.parametrize("bad", [(), (0,), (2, 2), (1.5,)])
def test_bad_ks_raise(bad):
    with pytest.raises(PoolkitError):
        make_knn_centroid(4, ks=bad, num_vectors=8, dim=4)


def test_bad_sizes_raise():
    with pytest.raises(PoolkitError, match="num_vectors"):
        generate_vectors(4, num_vectors=1)
    with pytest.raises(PoolkitError, match="num_samples"):
        generate_vectors(0)
    with pytest.raises(PoolkitError, match="vectors >= 2"):
        knn_targets(torch.zeros(3, 1, 4), (1,))


def test_analytic_baselines_reproduce_the_published_numbers():
    data = make_knn_centroid(8192, seed=0)
    for k in PAPER_KS:
        measured = baseline_mse(data.x, data.targets[k])
        for name, published in PUBLISHED_BASELINES.items():
            assert measured[name] == pytest.approx(published[k], rel=0.05), (name, k)


# -- model ------------------------------------------------------------------------------------------
def test_model_output_shape_and_same_encoder_init_across_poolers():
    a = SNRModel(poolkit.get_pooler("mean", hidden_size=16), layers=2, heads=2, seed=3)
    b = SNRModel(poolkit.get_pooler("mean_max", hidden_size=16), layers=2, heads=2, seed=3)
    with_token = SNRModel(poolkit.get_pooler("cls", hidden_size=16), layers=2, heads=2, seed=3, cls_token=True)
    assert isinstance(a.head, torch.nn.Identity) and b.head.in_features == 32
    for (name, pa), (_, pb), (_, pc) in zip(a.layers.named_parameters(), b.layers.named_parameters(),
                                            with_token.layers.named_parameters()):
        assert torch.equal(pa, pb) and torch.equal(pa, pc), name
    assert b(torch.randn(3, 9, 16)).shape == (3, 16)
    c = SNRModel(poolkit.get_pooler("mean", hidden_size=16), layers=2, heads=2, seed=4)
    assert not torch.equal(a.layers[0].qkv.weight, c.layers[0].qkv.weight)


def test_model_marks_vector_zero():
    model = SNRModel(poolkit.get_pooler("cls", hidden_size=16), layers=0).eval()
    x = torch.zeros(1, 4, 16)
    # with no layers, cls returns LN(x0 + type embedding 0); swapping which type vector 0 gets changes it
    out = model(x)
    with torch.no_grad():
        model.type_embedding.weight[[0, 1]] = model.type_embedding.weight[[1, 0]]
    assert not torch.allclose(out, model(x))


def _encoder_input(model: SNRModel, x: torch.Tensor) -> torch.Tensor:
    """What the encoder's first layer (with no layers: the final LayerNorm) receives."""
    seen = []
    target = model.layers[0] if len(model.layers) else model.norm
    handle = target.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    model(x)
    handle.remove()
    return seen[0]


def test_paper_cls_marks_its_token_and_leaves_vector_zero_unmarked():
    # catches a prepended token that is not at index 0, a type embedding still marking vector 0, or a model that
    # marks nothing: the token gets type 0, every vector (vector 0 included) type 1
    x = torch.randn(2, 5, 16)
    paper = snr._build_model("cls", snr_config.SNRConfig(layers=1), seed=0).eval()
    types = paper.type_embedding.weight
    h = _encoder_input(paper, x)
    assert h.shape == (2, 6, 16)
    assert torch.allclose(h[:, 0], (paper.cls_token[0, 0] + types[0]).expand(2, 16))
    assert torch.allclose(h[:, 1:], x + types[1])
    ours = snr._build_model("vector0", snr_config.SNRConfig(layers=1), seed=0).eval()
    h = _encoder_input(ours, x)
    assert h.shape == (2, 5, 16) and ours.cls_token is None
    assert torch.allclose(h[:, 0], x[:, 0] + ours.type_embedding.weight[0])


def test_paper_cls_pooler_reads_only_the_prepended_token():
    # with no encoder layers nothing mixes: the output is the LayerNormed token, whatever the vectors; a pooler
    # reading vector 0 (or any vector) would change with them
    model = snr._build_model("cls", snr_config.SNRConfig(layers=0), seed=0).eval()
    out = model(torch.randn(3, 7, 16))
    expected = model.norm(model.cls_token[0, 0] + model.type_embedding.weight[0])
    assert torch.allclose(out, expected.expand(3, 16)) and torch.allclose(out, model(torch.randn(3, 7, 16)))
    with torch.no_grad():
        model.cls_token.add_(torch.linspace(-1, 1, 16))  # a constant shift would vanish in the LayerNorm
    assert not torch.allclose(out, model(torch.randn(3, 7, 16)))


def test_paper_cls_cannot_tell_which_vector_is_vector_zero():
    # vector 0 unmarked and no positions: moving vector 0 elsewhere in the set leaves the paper's CLS output as it
    # was, while the type-marked vector0 variant sees the change (a CLS model marking vector 0 would too)
    x = torch.randn(4, 9, 16)
    moved = x.roll(3, dims=1)
    for name, same in (("cls", True), ("vector0", False)):
        model = snr._build_model(name, snr_config.SNRConfig(layers=2, heads=2), seed=1).eval()
        with torch.no_grad():
            assert torch.allclose(model(x), model(moved), atol=1e-5) is same, name


def test_benchmark_pooler_names():
    # 'cls' (and its registry alias 'first') is the paper's prepended token; 'vector0' is the old, type-marked one
    config = dataclasses.replace(TINY, poolers=("cls", "vector0", "first", "mean")).validated()
    assert config.poolers == ("cls", "vector0", "mean")
    assert "vector0" in snr_config.SNRConfig(poolers=("all",)).validated().poolers
    assert snr_config.build_pooler("attention", snr_config.QUICK).get_config()["attn_size"] == snr_config.QUICK.ff


@pytest.mark.parametrize("name", poolkit.list_poolers(kind="token"))
def test_tiny_training_lowers_the_loss(name):
    config = snr_config.SNRConfig(layers=1, heads=1)
    data = make_knn_centroid(64, ks=(4,), num_vectors=24, seed=5)
    xy = (data.x, data.targets[4])
    rows = torch.arange(64)
    model = snr._build_model(name, config, seed=0)
    before = evaluate(model, *xy, rows, batch_size=64)
    result = fit(model, *xy, train=rows, val=rows, test=rows, epochs=12, batch_size=16, lr=6e-3, seed=0)
    assert result.test_mse < 0.5 * before, (before, result.test_mse)
    assert result.train_loss[-1] < result.train_loss[0]


# -- runner -----------------------------------------------------------------------------------------
TINY = snr_config.SNRConfig(poolers=("adapool", "mean"), ks=(1, 4), seeds=2, num_samples=120, num_vectors=16,
                     layers=1, heads=2, epochs=2, batch_size=32, workers=1)


def test_run_snr_table_files_and_overwrite_guard(tmp_path):
    frame = snr.run_snr(TINY, tmp_path / "out", progress=False)
    assert list(frame.columns) == snr.COLUMNS
    assert list(frame["pooler"].unique()) == ["adapool", "mean", "baseline_mean", "baseline_x0"]
    assert list(frame["K"]) == [1, 4] * 4
    assert list(frame["snr"]) == [1 / 16, 4 / 16] * 4
    assert list(frame["seeds"]) == [2] * 4 + [1] * 4

    out = tmp_path / "out"
    assert pd.read_csv(out / "results.csv").equals(frame)
    meta = json.loads((out / "results.json").read_text())
    assert meta["settings"]["seeds"] == 2 and meta["settings"]["poolers"] == ["adapool", "mean"]
    assert len(meta["runs"]) == 2 * 2 * 2 and {r["fold"] for r in meta["runs"]} == {0, 1}
    # each pooler cell is the mean and sample std (ddof 1) of its runs' test MSE (two seeds that differ)
    runs = pd.DataFrame(meta["runs"]).groupby(["pooler", "K"])["test_mse"].agg(["mean", "std"])
    cells = frame[frame["pooler"].isin(["adapool", "mean"])].set_index(["pooler", "K"])
    assert (runs["std"] > 0).all()
    pd.testing.assert_series_equal(cells["mse_mean"], runs.loc[cells.index, "mean"], check_names=False)
    pd.testing.assert_series_equal(cells["mse_std"], runs.loc[cells.index, "std"], check_names=False)
    assert (out / "mse_vs_snr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*tmp"))

    with pytest.raises(PoolkitError, match="force=True"):
        snr.run_snr(TINY, out, progress=False)
    again = snr.run_snr(TINY, out, force=True, progress=False)
    pd.testing.assert_frame_equal(again, frame)  # seeded: bit-for-bit the same
    assert snr._runner.cache_info().currsize == 0  # the data draw is not kept after the run


def test_results_do_not_depend_on_the_number_of_workers():
    one = snr.run_snr(dataclasses.replace(TINY, ks=(2,), seeds=1), progress=False)
    two = snr.run_snr(dataclasses.replace(TINY, ks=(2,), seeds=1, workers=2), progress=False)
    pd.testing.assert_frame_equal(one, two)
    # issue 32, item 12: one seed has no spread, so the table shows no "± 0.0000"
    assert not any("±" in str(cell) for cell in snr.format_table(one).to_numpy().ravel())


def test_baselines_in_the_run_match_the_generator():
    frame = snr.run_snr(snr_config.SNRConfig(poolers=("mean",), ks=(2,), seeds=1, num_samples=200,
                                      num_vectors=16, layers=0, epochs=1, workers=1), progress=False)
    data = make_knn_centroid(200, ks=(2,), num_vectors=16, seed=42)
    expected = baseline_mse(data.x[180:], data.targets[2][180:])
    got = frame.set_index("pooler")["mse_mean"]
    assert got["baseline_mean"] == pytest.approx(expected["baseline_mean"])
    assert got["baseline_x0"] == pytest.approx(expected["baseline_x0"])


def test_all_means_every_token_pooler():
    config = snr_config.SNRConfig(poolers=("all",)).validated()
    assert set(config.poolers) == set(poolkit.list_poolers(kind="token")) | {"vector0"}


@pytest.mark.parametrize("change, match", [
    ({"poolers": ("nope",)}, "unknown pooler"),
    ({"poolers": ("mean_layers",)}, "token pooler"),
    ({"poolers": ()}, "no poolers"),
    ({"folds": 1}, "folds"),
    ({"ks": (1, 200)}, "at most"),
    ({"heads": 3}, "divisible"),
    ({"num_samples": 5}, "too few"),
    ({"test_ratio": 1.5}, "test_ratio"),
    ({"lr": 0.0}, "lr"),
    ({"workers": 0}, "workers"),
    ({"device": "tpu9"}, "device"),
])
def test_bad_config_raises(change, match):
    with pytest.raises(PoolkitError, match=match):
        dataclasses.replace(TINY, **change).validated()


def test_out_must_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PoolkitError, match="is a file: pass a folder path"):
        snr.run_snr(TINY, tmp_path / "file", progress=False)


# -- CLI --------------------------------------------------------------------------------------------
def _parse(argv):
    return parser_for("snr").parse_args(argv)


def _config(argv):
    return config_from_args(_parse(argv), snr_config.PRESETS)


def test_presets_and_overrides():
    assert _config([]) == snr_config.QUICK
    full = _config(["--full"])
    assert (full.layers, full.heads, full.batch_size, full.epochs) == (12, 8, 750, 100)
    assert (full.folds, full.seeds, full.lr, full.num_samples) == (5, 5, 5e-4, 1_000_000)
    custom = _config(["--full", "--poolers", "mean", "cls", "--seeds", "2", "--ks", "1", "8", "--layers", "3"])
    assert custom.poolers == ("mean", "cls") and custom.ks == (1, 8)
    assert (custom.seeds, custom.layers, custom.epochs) == (2, 3, 100)
    assert (full.workers, full.device, snr_config.QUICK.device) == (1, "auto", "cpu")
    with pytest.raises(SystemExit):
        _parse(["--quick", "--full"])


def test_run_snr_command_prints_the_table(tmp_path, capsys):
    args = _parse(["--poolers", "mean", "--seeds", "1", "--ks", "1", "2", "--samples", "60",
                   "--vectors", "12", "--layers", "0", "--epochs", "1", "--workers", "1",
                   "--out", str(tmp_path), "--no-progress"])
    assert snr.run_snr_command(args) == 0
    printed = capsys.readouterr().out
    assert "baseline_mean" in printed and "baseline_x0" in printed and "mean" in printed
    assert (tmp_path / "results.csv").exists()
    with pytest.raises(PoolkitError):
        snr.run_snr_command(args)
