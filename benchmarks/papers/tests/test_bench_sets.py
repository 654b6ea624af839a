"""``poolkit bench sets``: the synthetic set tasks, the models (zonotope, attention, the Set Transformer and DeepSets
baselines), the TDOF of the trained layers, the per-seed rows and their summary, and a tiny run end to end."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from poolkit_bench import sets, sets_config
from poolkit_bench.sets import make_set_task, per_seed, summarize
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
    # catches a summary over targets instead of seeds, a population std (ddof 0), and seeds dropped from the rows
    runs = [{"task": "statistics", "model": "zonotope x1", "seed": seed, "depth": 1, "width": 8, "params": 10,
             "tdof": 5, "targets": ["mean", "variance"], "test_mse": t, "test_mse_per_target": per}
            for seed, (t, per) in enumerate(((0.2, [0.1, 0.3]), (0.4, [0.3, 0.5])), 1)]
    frame = per_seed(runs)
    assert list(frame.columns) == sets.RUN_COLUMNS and sorted(set(frame["seed"])) == [1, 2] and len(frame) == 6
    summary = summarize(frame).set_index("target")
    assert summary.loc["all", "mse_mean"] == pytest.approx(0.3)
    assert summary.loc["all", "mse_std"] == pytest.approx(0.02 ** 0.5)  # ddof 1
    assert summary.loc["variance", "mse_mean"] == pytest.approx(0.4) and summary.loc["mean", "seeds"] == 2


def test_a_tiny_run_writes_its_results_and_refuses_to_overwrite_them(tmp_path, capsys, one_torch_thread):
    out = tmp_path / "sets"
    args = ["bench", "sets", "--quick", "--tasks", "typed", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert {p.name for p in out.iterdir()} >= {"results.csv", "results.json", "error_vs_params.png", "quadrature.png"}
    results = json.loads((out / "results.json").read_text())
    assert {r["model"] for r in results["runs"]} == set(sets_config.MODELS)
    rows = pd.read_csv(out / "results.csv")
    assert list(rows.columns) == sets.RUN_COLUMNS and set(rows["model"]) == set(sets_config.MODELS)
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
    config = dataclasses.replace(sets_config.QUICK, tasks=("typed",), train=8, val=4, test=4, max_size=5, seeds=1)
    built = []

    def no_training(model, train, val, test, config, seed):
        built.append(model)
        return {"test_mse": 0.0, "test_mse_per_target": [0.0] * train.y.shape[1], "best_epoch": 0, "val_mse": []}

    monkeypatch.setattr(sets, "fit", no_training)
    runs = {run["model"]: run for run in sets._task_runs("typed", config, progress=False)}
    models = {name: model for name, model in zip(runs, built) if isinstance(model, sets.SetModel)}
    k, d = config.generators, config.width
    # the typed task needs K + 1 >= M maps
    assert k == sets_config.DEFAULT.generators and k + 1 >= sets_config.DEFAULT.types
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


def _sets_of(task: str, count: int = 3) -> sets.SetData:
    return make_set_task(task, count, min_size=2, max_size=6, pair_types=sets_config.DEFAULT.pair_types, seed=4)


def test_the_set_transformer_block_has_its_ffn_residuals_and_layer_norms():
    # catches a block without its FFN (or one left out of the parameter count), without either residual, without
    # the LayerNorms, or a Set Transformer whose blocks are not built
    width, data = 8, _sets_of("typed")
    model = sets.SetTransformer(2, data.x.shape[-1], 4, width).eval()
    mab = 4 * width * width + 4 * width + 2 * 2 * width + (2 * width * width + 2 * width) + (2 * width * width + width)
    embed, head = (data.x.shape[-1] + 1) * width, width * width + width + 4 * width + 4
    assert sets.parameter_count(model) == embed + 2 * mab + width + head  # one SAB, the PMA and its seed
    block, h = model.blocks[0], model.embed(data.x)
    with torch.no_grad():
        out = block(h, h, data.mask)
        torch.testing.assert_close(out.mean(dim=-1), torch.zeros(out.shape[:2]), atol=1e-5, rtol=0)  # LayerNorm last
        before = model(data.x, data.mask)
        block.ffn[-1].weight.zero_()
        block.ffn[-1].bias.zero_()
        assert not torch.allclose(model(data.x, data.mask), before, atol=1e-4)  # the FFN reaches the output
        block.attention.out_proj.weight.zero_()
        block.attention.out_proj.bias.zero_()
        # attention and FFN both 0: LN2(LN1(h + 0) + 0) through both residuals (without either one: a constant)
        torch.testing.assert_close(block(h, h, data.mask), block.norm2(block.norm1(h)))


def test_deepsets_is_permutation_invariant_and_ignores_padding():
    # catches a pooling that reads the order of the elements or the padded positions (a plain mean over T)
    data = _sets_of("statistics")
    model = sets.DeepSets(data.x.shape[-1], 4, 16).eval()
    order = torch.randperm(data.x.shape[1])
    padded = torch.cat([data.x, torch.randn(3, 2, data.x.shape[-1])], dim=1)
    with torch.no_grad():
        out = model(data.x, data.mask)
        torch.testing.assert_close(model(data.x[:, order], data.mask[:, order]), out)
        torch.testing.assert_close(model(padded, torch.cat([data.mask, torch.zeros(3, 2, dtype=torch.bool)], 1)), out)


@pytest.mark.parametrize("task", sets_config.TASKS)
def test_the_baselines_are_sized_to_the_zonotope_x1_parameter_count(task):
    # catches baselines left at the benchmark's width (a Set Transformer at width 32 has about twice the parameters)
    # or matched to another model, and a Set Transformer width its heads do not divide
    data, config = _sets_of(task), sets_config.DEFAULT
    shape = (data.x.shape[-1], data.y.shape[1])
    target = sets.parameter_count(sets.build_model("zonotope x1", *shape, config.width, config.generators))
    for name in ("set_transformer", "deepsets"):
        width = sets.matched_width(name, *shape, config)
        assert abs(sets.parameter_count(sets.build_model(name, *shape, width, config.generators)) / target - 1) < 0.1
    assert sets.matched_width("set_transformer", *shape, config) % sets.HEADS == 0


def test_tdof_is_read_from_the_trained_layers(monkeypatch):
    # catches a TDOF measured before training (or on a fresh model): training that moves the zero-initialised gates
    # must raise the zonotope pooler's TDOF from 1 to K + 1; the models without value maps have none
    config = dataclasses.replace(sets_config.QUICK, tasks=("typed",), train=8, val=4, test=6, max_size=5, seeds=1,
                                 models=("zonotope x1", "deepsets"))

    def gates_moved(model, train, val, test, config, seed):
        for module in model.modules():
            if hasattr(module, "value_maps"):
                torch.nn.init.normal_(module.values.gate.weight, std=0.5)
        return {"test_mse": 0.0, "test_mse_per_target": [0.0] * train.y.shape[1], "best_epoch": 0, "val_mse": []}

    monkeypatch.setattr(sets, "fit", gates_moved)
    runs = {run["model"]: run for run in sets._task_runs("typed", config, progress=False)}
    k = config.generators
    assert runs["zonotope x1"]["tdof_layers"] == {"pooler": k + 1} and runs["zonotope x1"]["tdof"] == k + 1
    assert runs["deepsets"]["tdof"] is None and runs["deepsets"]["tdof_layers"] == {}
    untrained = sets.build_model("zonotope x1", 8, 4, config.width, k)
    assert sets.trained_tdof(untrained, _sets_of("typed")) == {"pooler": 1}  # gates 0 at init: one map
