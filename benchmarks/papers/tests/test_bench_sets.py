"""``poolkit bench sets``: the synthetic set tasks, the summary, and a tiny run end to end."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from poolkit_bench import sets
from poolkit_bench.sets import make_set_task, summarize
from poolkit.cli import main


def test_statistics_targets_are_the_real_elements_mean_variance_and_quartiles():
    # catches statistics that count padded elements (zeros) or use another feature
    data = make_set_task("statistics", 5, min_size=3, max_size=9, seed=1)
    assert not bool(data.mask.all())  # some padding to get wrong
    for row in range(5):
        first = data.x[row, data.mask[row], 0].double().numpy()
        want = [first.mean(), first.var(), *np.quantile(first, [0.25, 0.75])]
        np.testing.assert_allclose(data.y[row].numpy(), want, rtol=1e-5, atol=1e-6)
    assert torch.equal(data.x[~data.mask], torch.zeros_like(data.x[~data.mask]))


def test_typed_target_is_a_type_specific_linear_map_and_no_single_map_fits_it():
    # the target is exactly linear in mean_j onehot(t_j) (x) f_j (one map per type) but not in the mean of the elements
    # (one map for all): catches maps shared by the types, sums instead of means, padding that counts
    types, features = 3, 4
    data = make_set_task("typed", 400, min_size=2, max_size=6, features=features, types=types, seed=2)
    onehot, f = data.x[..., :types], data.x[..., types:]
    counts = data.mask.sum(dim=1, keepdim=True)
    per_type = torch.einsum("ntm,ntf->nmf", onehot, f).flatten(1) / counts  # (N, M * F)
    plain = data.x.sum(dim=1) / counts

    def residual(design: torch.Tensor) -> float:
        solution = torch.linalg.lstsq(design.double(), data.y.double()).solution
        return float((design.double() @ solution - data.y.double()).square().mean() / data.y.double().var())

    assert residual(per_type) < 1e-10
    assert residual(plain) > 0.2


def test_summary_is_the_mean_and_sample_std_over_seeds_per_target():
    runs = [{"task": "statistics", "model": "zonotope x1", "depth": 1, "params": 10, "targets": ["mean", "variance"],
             "test_mse": t, "test_mse_per_target": per} for t, per in ((0.2, [0.1, 0.3]), (0.4, [0.3, 0.5]))]
    frame = summarize(runs).set_index("target")
    assert frame.loc["all", "mse_mean"] == pytest.approx(0.3)
    assert frame.loc["all", "mse_std"] == pytest.approx(0.02 ** 0.5)  # ddof 1
    assert frame.loc["variance", "mse_mean"] == pytest.approx(0.4) and frame.loc["mean", "seeds"] == 2


def test_a_tiny_run_writes_its_results_and_refuses_to_overwrite_them(tmp_path, capsys, one_torch_thread):
    out = tmp_path / "sets"
    args = ["bench", "sets", "--quick", "--tasks", "typed", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "error_vs_params.png", "quadrature.png"}
    results = json.loads((out / "results.json").read_text())
    assert {r["model"] for r in results["runs"]} == {"attention x1", "attention x2", "attention x3", "zonotope x1",
                                                     "zonotope x2"}
    assert results["settings"]["preset"] == "quick" and results["provenance"]["torch"] == torch.__version__
    assert {r["grid"] for r in results["quadrature"]} == {"uniform", "random", "clustered"}
    assert "zonotope x1" in capsys.readouterr().out
    assert main(args) == 2  # no --force: the results stay
    assert "--force" in capsys.readouterr().err


def test_pairs_target_is_the_mean_of_the_features_of_elements_with_a_partner_of_their_type():
    # recomputed from the real elements alone: catches padded elements counted as partners, an element counted as its
    # own partner, and a sum over the selected elements divided by their count instead of the set's size
    types = 6
    data = make_set_task("pairs", 60, min_size=2, max_size=7, pair_types=types, seed=3)
    selected = []
    for row in range(60):
        real = data.x[row, data.mask[row]].double()
        kind, f = real[:, :types].argmax(dim=1), real[:, types:]
        paired = (kind[:, None] == kind[None, :]).sum(dim=1) > 1
        torch.testing.assert_close(data.y[row].double(), f[paired].sum(dim=0) / len(real))
        selected.append(paired.float().mean().item())
    assert 0.1 < np.mean(selected) < 0.9 and min(selected) == 0  # some elements have partners, some sets none
    assert torch.equal(data.x[~data.mask], torch.zeros_like(data.x[~data.mask]))


def test_the_zonotope_models_are_built_with_their_generators_and_use_them(monkeypatch):
    # catches zonotope models built with 0 generators (in the pooler, in the set layers, from the run's config or as
    # the default), generators left out of the parameter count, and generators that do not reach the output
    config = dataclasses.replace(sets.QUICK, tasks=("typed",), train=8, val=4, test=4, max_size=5, seeds=1)
    built = []

    def no_training(model, train, val, test, config, seed):
        built.append(model)
        return {"test_mse": 0.0, "test_mse_per_target": [0.0] * train.y.shape[1], "best_epoch": 0, "val_mse": []}

    monkeypatch.setattr(sets, "fit", no_training)
    runs = {run["model"]: run for run in sets._task_runs("typed", config, progress=False)}
    models = dict(zip(runs, built))
    k, d = config.generators, config.width
    assert k == sets.DEFAULT.generators and k + 1 >= sets.DEFAULT.types  # the typed task needs K + 1 >= M maps
    for name, model in models.items():
        zonotope = name.startswith("zonotope")
        assert model.pooler.name == ("zonotope_attention" if zonotope else "attention")
        assert [layer.values.num_generators for layer in model.layers] == [k if zonotope else 0] * len(model.layers)
        if zonotope:
            assert model.pooler.values.num_generators == k and model.pooler.values.full.shape == (k, d, d)
        assert runs[name]["params"] == sets.parameter_count(model)
    per_layer = k * (d * d + d + 1)  # generators and their gate's Linear(d, k)
    assert runs["zonotope x1"]["params"] - runs["attention x1"]["params"] == d * d + per_layer  # + the centre C
    assert runs["zonotope x2"]["params"] - runs["attention x2"]["params"] == d * d + 2 * per_layer
    model = models["zonotope x2"].eval()
    data = make_set_task("typed", 3, min_size=2, max_size=5, seed=0)
    with torch.no_grad():
        for values in (model.pooler.values, model.layers[0].values):
            torch.nn.init.normal_(values.gate.weight, std=0.5)  # what training does to the zero-initialised gates
        before = model(data.x, data.mask)
        for values in (model.pooler.values, model.layers[0].values):
            saved = values.full.clone()
            values.full.mul_(2.0)
            assert not torch.allclose(model(data.x, data.mask), before, atol=1e-4)  # each generator set is used
            values.full.copy_(saved)
