"""``poolkit bench operator``: the Burgers solver against its exact solution, the initial conditions' field, the
periodic quadrature weights, continuum attention's use of them, the FNO's grid independence, the matched sizes, and
a tiny run end to end."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from poolkit_bench import neural_operator, neural_operator_config
from poolkit_bench.operator_data import (GRF_SCALE, GRF_SHIFT, IC_MODES, clustered_grid, cole_hopf, interpolate,
                                         random_initial_conditions, solve_burgers, subsample)
from poolkit_bench.operator_model import (AttentionOperator, ContinuumAttention, SpectralConv1d, build_model,
                                          matched_width, parameter_count, periodic_weights)
from poolkit.cli import main
from poolkit.errors import PoolkitError


def test_the_solver_matches_the_cole_hopf_solution():
    # the exact solution from a sine: catches a wrong sign or factor on the nonlinear term, a wrong viscosity
    # factor, and a step that does not reach t_end
    u0 = torch.sin(2 * math.pi * torch.arange(256, dtype=torch.float64) / 256)[None]
    for nu, t in ((0.05, 0.5), (0.02, 1.0)):
        exact = cole_hopf(1.0, nu, t, 256)
        solved = solve_burgers(u0, nu, t_end=t)[0]
        assert (solved - exact).abs().max() < 1e-7, nu
        assert (exact - u0[0]).abs().max() > 0.1  # the solution has moved: a solver that returns u0 fails
    with pytest.raises(PoolkitError, match="nu > 0"):
        solve_burgers(u0, 0.0)


def test_the_initial_conditions_have_the_field_s_mode_variances_and_no_mean():
    # catches a std on the wrong scale (per-mode variances off by a constant or a power of k) and a constant mode
    u0 = random_initial_conditions(4000, 256, seed=3)
    coefficients = torch.fft.rfft(u0) / 256  # c_k = (a_k - i b_k) / sqrt(2): E|c_k|^2 = std_k^2
    assert coefficients[:, 0].abs().max() < 1e-12
    for k in (1, 2, 5):
        std = GRF_SCALE / (4 * math.pi ** 2 * k ** 2 + GRF_SHIFT)
        assert coefficients[:, k].abs().square().mean().sqrt() == pytest.approx(std, rel=0.05), k
    assert coefficients[:, IC_MODES + 1:].abs().max() < 1e-12  # modes above the drawn ones are empty
    assert torch.equal(random_initial_conditions(2, 256, seed=3), random_initial_conditions(2, 256, seed=3))
    assert not torch.equal(random_initial_conditions(2, 256, seed=3), random_initial_conditions(2, 256, seed=4))
    with pytest.raises(PoolkitError, match="fine >="):
        random_initial_conditions(2, 64)


def test_subsampling_and_the_fourier_interpolant_agree_on_grid_points():
    u1 = random_initial_conditions(3, 256, seed=1)
    coarse = subsample(u1, 64)
    torch.testing.assert_close(coarse, u1[:, ::4])
    torch.testing.assert_close(interpolate(u1, torch.arange(64, dtype=torch.float64) / 64), coarse)
    x = clustered_grid(64, 0.8)
    assert bool((x.diff() > 0).all()) and x.min() >= 0 and x.max() < 1
    with pytest.raises(PoolkitError, match="divide"):
        subsample(u1, 100)


def test_periodic_weights_are_half_the_distance_between_neighbours_around_the_circle():
    # catches the open-interval trapezoid rule (end weights halved, the wrap-around gap dropped), and weights that
    # depend on the order the points come in
    uniform = torch.arange(8, dtype=torch.float64)[None] / 8
    torch.testing.assert_close(periodic_weights(uniform), torch.full((1, 8), 1 / 8, dtype=torch.float64))
    x = torch.tensor([[0.1, 0.2, 0.5, 0.9]], dtype=torch.float64)
    # neighbours around the circle: 0.1 between 0.9 (wrapped) and 0.2; 0.9 between 0.5 and 1.1
    torch.testing.assert_close(periodic_weights(x), torch.tensor([[0.15, 0.2, 0.35, 0.3]], dtype=torch.float64))
    order = torch.tensor([2, 0, 3, 1])
    torch.testing.assert_close(periodic_weights(x[:, order]), periodic_weights(x)[:, order])


def test_continuum_attention_weights_each_key_by_its_quadrature_weight():
    # recomputed from the formula, and a duplicated key (its weight split in two) changing nothing: catches weights
    # ignored, weights that scale the logits, and weights added without the log
    torch.manual_seed(0)
    layer = ContinuumAttention(8, 2).double()
    h = torch.randn(1, 6, 8, dtype=torch.float64)
    w = torch.tensor([[0.1, 0.3, 0.1, 0.2, 0.2, 0.1]], dtype=torch.float64)
    q, k, v = layer.qkv(h).view(1, 6, 3, 2, 4).permute(2, 0, 3, 1, 4)
    scores = torch.exp(q @ k.transpose(-1, -2) / 2) * w[:, None, None, :]
    mixed = (scores / scores.sum(-1, keepdim=True)) @ v
    torch.testing.assert_close(layer(h, w), layer.out(mixed.transpose(1, 2).reshape(1, 6, 8)))
    doubled_h = torch.cat([h, h[:, :1]], dim=1)
    doubled_w = torch.cat([w[:, :1] / 2, w[:, 1:], w[:, :1] / 2], dim=1)
    torch.testing.assert_close(layer(doubled_h, doubled_w)[:, :6], layer(h, w))
    assert not torch.allclose(layer(doubled_h)[:, :6], layer(h))  # plain softmax counts the copy twice
    torch.testing.assert_close(layer(h, torch.full((1, 6), 1 / 6, dtype=torch.float64)), layer(h))


def test_the_attention_operator_reads_a_refined_grid_as_the_same_function():
    # a point added between every two (the samples of the same function) leaves the output at the old points
    # nearly unchanged with quadrature weights; catches an operator whose weights do not reach its attention
    torch.manual_seed(0)
    model = AttentionOperator(16, 2, 2).double().eval()
    fine = torch.arange(256, dtype=torch.float64)[None] / 256
    u = torch.sin(2 * math.pi * fine) + 0.5 * torch.cos(4 * math.pi * fine)
    clustered = torch.sort(torch.cat([fine[:, ::2], fine[:, 1::2][:, :64]], dim=1)).values  # dense on [0, 1/2)
    ux = torch.sin(2 * math.pi * clustered) + 0.5 * torch.cos(4 * math.pi * clustered)
    with torch.no_grad():
        reference = model(u[:, ::2], fine[:, ::2])
        on_both = torch.isin(clustered, fine[:, ::2])
        weighted = model(ux, clustered)[on_both]
        plain = model(ux, clustered, quadrature=False)[on_both]
    assert (weighted - reference[0]).abs().max() < 0.1 * (plain - reference[0]).abs().max()


def test_the_spectral_convolution_gives_a_band_limited_function_the_same_values_at_any_resolution():
    # catches an FFT normalisation that scales with the number of points ('ortho' or 'forward')
    torch.manual_seed(0)
    layer = SpectralConv1d(3, 4)
    x = torch.arange(64) / 64
    h = torch.stack([torch.sin(2 * math.pi * k * x) for k in (1, 2, 3)])[None]
    torch.testing.assert_close(layer(h)[..., ::2], layer(h[..., ::2]))


def test_the_fno_is_sized_to_the_attention_operator_s_parameter_count():
    sizes = dict(layers=3, heads=4, fno_layers=4, modes=16)
    width = matched_width(32, **sizes)
    attention = parameter_count(build_model("attention", 32, **sizes))
    fno = parameter_count(build_model("fno", width, **sizes))
    step = parameter_count(build_model("fno", width + 1, **sizes)) - fno
    assert abs(fno - attention) <= step and abs(fno - attention) / attention < 0.1
    layer = SpectralConv1d(2, 3)
    assert parameter_count(layer) == 2 * 2 * 2 * 3  # complex weights count their two parts


def test_a_tiny_run_writes_every_model_s_scores_on_every_grid(tmp_path, capsys, one_torch_thread):
    out = tmp_path / "operator"
    args = ["bench", "operator", "--quick", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "error_vs_resolution.png"}
    rows = pd.read_csv(out / "results.csv")
    assert list(rows.columns) == neural_operator.COLUMNS
    quick = neural_operator_config.QUICK
    cells = set(zip(rows["model"], rows["grid"], rows["resolution"]))
    uniform = {(m, "uniform", r) for m in ("attention", "fno") for r in quick.test_resolutions}
    clustered = {(m, "clustered", r) for m in ("attention", neural_operator.UNWEIGHTED)
                 for r in quick.clustered_resolutions}
    assert cells == uniform | clustered  # the FNO never on a non-uniform grid
    assert len(rows) == quick.seeds * len(cells)
    results = json.loads((out / "results.json").read_text())
    assert all(len(run["val_rel_l2"]) == quick.epochs for run in results["runs"])
    assert "attention_unweighted" in capsys.readouterr().out
    assert main(args) == 2  # no --force: the results stay


@pytest.mark.parametrize("flags, named", [(["--train-resolution", "100"], "train_resolution"),
                                          (["--width", "10", "--heads", "4"], "width"),
                                          (["--test-resolutions", "16", "48"], "test_resolutions")])
def test_bad_settings_exit_2_naming_the_setting(flags, named, capsys):
    assert main(["bench", "operator", "--quick", *flags, "--no-progress"]) == 2
    assert named in capsys.readouterr().err
