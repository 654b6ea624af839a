"""``poolkit bench operator``: attention over functions (continuum attention; Calvello, Kovachki, Levine & Stuart,
"Continuum Attention for Neural Operators", arXiv 2406.06486) against a Fourier neural operator (Li et al., ICLR
2021) on 1-D viscous Burgers' equation, trained at one resolution and tested at coarser and finer ones.

Data (:mod:`.operator_data`): ``train + val + test`` initial conditions from Li et al.'s Gaussian random field,
solved to T = 1 on a fine grid; the models see u(., 0) and u(., 1) subsampled to ``train_resolution`` points.
Models (:mod:`.operator_model`): ``attention`` (the attention neural operator, its attention weighted with
poolkit's trapezoid weights made periodic) and ``fno``, at the width whose parameter count is nearest the
attention operator's (:func:`~.operator_model.matched_width`). Every (model, seed) run trains with Adam on the
relative L2 error at the training resolution, chooses its epoch on the validation samples at that resolution, and
scores the test samples once on each test grid: uniform grids of ``test_resolutions`` points (the
discretisation-invariance claim: one operator, any grid) and non-uniform (clustered) grids of
``clustered_resolutions`` points, where the FNO cannot run (its FFT needs equal spacing) and the trained attention
operator is scored with its quadrature weights and without them (``attention_unweighted``: plain softmax, the same
trained network; on the uniform training grid the two are the same function, since equal weights cancel).
The error of a sample is sqrt(sum_j w_j (pred - u)^2 / sum_j w_j u^2), w the periodic trapezoid weights (on a
uniform grid, the plain relative L2 error); a run's score is its mean over the test samples.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import time
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor, nn

from poolkit.cli.options import config_from_args

from .execution import torch_device
from .harness import Stopwatch, results_folder, run_tasks
from .neural_operator_config import DEFAULT, PRESETS, RESULT_FILES, OperatorConfig
from .operator_data import burgers_pairs, clustered_grid, interpolate, subsample
from .operator_model import build_model, matched_width, parameter_count, periodic_weights
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs

#: the trained attention operator scored without its quadrature weights (a row name, not a trained model)
UNWEIGHTED = "attention_unweighted"
GRIDS = ("uniform", "clustered")
#: results.csv: one row per (model, seed, grid, resolution)
COLUMNS = ["model", "seed", "grid", "resolution", "width", "params", "rel_l2"]


# -- data -------------------------------------------------------------------------------------------
@dataclass
class Grid:
    """Samples (u0, u1) of n functions at the points x (P,) in [0, 1): (n, P) each, float32."""

    x: Tensor
    u0: Tensor
    u1: Tensor

    def rows(self, index: slice) -> Grid:
        return Grid(self.x, self.u0[index], self.u1[index])

    def to(self, device: torch.device) -> Grid:
        return Grid(self.x.to(device), self.u0.to(device), self.u1.to(device))


def make_grids(config: OperatorConfig) -> dict:
    """The run's data: ``train`` and ``val`` at the training resolution, and ``tests`` {(grid, resolution): Grid} of
    the test samples; inputs and targets divided by their training samples' std (one number each, so every grid
    sees the same scaling)."""
    u0, u1 = burgers_pairs(config.train + config.val + config.test, config.fine, config.nu, seed=config.data_seed,
                           cfl=config.cfl)
    u0, u1 = u0 / u0[:config.train].std(), u1 / u1[:config.train].std()

    def uniform(resolution: int) -> Grid:
        x = torch.arange(resolution, dtype=torch.float64) / resolution
        return Grid(x.float(), subsample(u0, resolution).float(), subsample(u1, resolution).float())

    fit_grid = uniform(config.train_resolution)
    test_rows = slice(config.train + config.val, None)
    tests = {("uniform", r): uniform(r).rows(test_rows) for r in config.test_resolutions}
    for r in config.clustered_resolutions:
        x = clustered_grid(r, config.clustered_strength)
        tests["clustered", r] = Grid(x.float(), interpolate(u0[test_rows], x).float(),
                                     interpolate(u1[test_rows], x).float())
    return {"train": fit_grid.rows(slice(0, config.train)),
            "val": fit_grid.rows(slice(config.train, config.train + config.val)), "tests": tests}


# -- training ---------------------------------------------------------------------------------------
def relative_l2(prediction: Tensor, target: Tensor, weights: Tensor) -> Tensor:
    """Per sample sqrt(sum_j w_j (pred - u)^2 / sum_j w_j u^2): (n, P) each, weights (P,) -> (n,)."""
    return ((weights * (prediction - target).square()).sum(-1) / (weights * target.square()).sum(-1)).sqrt()


def predict(model: nn.Module, grid: Grid, quadrature: bool = True, chunk: int = 50) -> Tensor:
    """The model's output on every sample of ``grid`` (n, P), in chunks (attention at fine grids is P^2)."""
    model.eval()
    with torch.no_grad():
        return torch.cat([model(u, grid.x.expand(len(u), -1), quadrature=quadrature) for u in grid.u0.split(chunk)])


def score(model: nn.Module, grid: Grid, quadrature: bool = True) -> float:
    """Mean relative L2 error over the samples of ``grid``."""
    weights = periodic_weights(grid.x[None].double())[0].to(grid.u1)
    return relative_l2(predict(model, grid, quadrature), grid.u1, weights).mean().item()


def fit(model: nn.Module, train: Grid, val: Grid, config: OperatorConfig, seed: int) -> dict:
    """Adam on the mean relative L2 error (Li et al.'s loss) for ``config.epochs`` epochs; the model is left at
    the epoch with the lowest validation error (0-based ``best_epoch``; ``val_rel_l2``: the curve)."""
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    order = torch.Generator().manual_seed(seed)
    weights = periodic_weights(train.x[None].double())[0].to(train.u1)
    best = (float("inf"), -1, None)
    curve = []
    for epoch in range(config.epochs):
        model.train()
        for batch in torch.randperm(len(train.u0), generator=order).split(config.batch_size):
            optimiser.zero_grad()
            prediction = model(train.u0[batch], train.x.expand(len(batch), -1))
            relative_l2(prediction, train.u1[batch], weights).mean().backward()
            optimiser.step()
        error = score(model, val)
        curve.append(round(error, 6))
        if error < best[0]:
            best = (error, epoch, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[2])
    return {"best_epoch": best[1], "val_rel_l2": curve}


def run_task(config: OperatorConfig, data: dict, task: tuple[str, int]) -> dict:
    """One (model, seed): trained, then scored once on each test grid (the FNO on the uniform ones only; the
    attention operator on the clustered ones with and without its weights)."""
    name, seed = task
    device = torch_device(config.device)
    width = config.width if name == "attention" else matched_width(config.width, **config.sizes())
    torch.manual_seed(seed)
    model = build_model(name, width, **config.sizes()).to(device)
    tic = time.perf_counter()
    result = fit(model, data["train"].to(device), data["val"].to(device), config, seed)
    scores = []
    for (grid, resolution), samples in data["tests"].items():
        samples = samples.to(device)
        if grid == "uniform":
            scores.append({"model": name, "grid": grid, "resolution": resolution, "rel_l2": score(model, samples)})
        elif name == "attention":
            scores += [{"model": shown, "grid": grid, "resolution": resolution,
                        "rel_l2": score(model, samples, quadrature=weighted)}
                       for shown, weighted in ((name, True), (UNWEIGHTED, False))]
    return {"model": name, "seed": seed, "width": width, "params": parameter_count(model), **result,
            "scores": scores, "seconds": round(time.perf_counter() - tic, 1)}


# -- the run ----------------------------------------------------------------------------------------
def run_neural_operator(config: OperatorConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *,
                        force: bool = False, progress: bool = True) -> pd.DataFrame:
    """Every (model, seed) run; the rows of results.csv (:func:`per_seed`). With ``out_dir``, also results.json
    (settings, cost, provenance, every run with its validation curve), the plot and report.html; existing results
    are kept unless ``force``. ``workers > 1`` spawns processes: a script needs the ``__main__`` guard."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        clock = Stopwatch()
        tic = time.perf_counter()
        data = make_grids(config)
        data_seconds = round(time.perf_counter() - tic, 1)
        tasks = [(name, seed) for seed in range(config.seed, config.seed + config.seeds) for name in config.models]
        runs = run_tasks(functools.partial(run_task, config, data), tasks, workers=config.workers,
                         threads=config.threads, progress=progress, desc="operator", unit="run")
        frame = per_seed(runs)
        if out is not None:
            meta = run_record("operator (continuum attention vs FNO on 1-D Burgers, across resolutions)", config,
                              clock.record(), data_seconds=data_seconds,
                              last_epoch_runs=sum(r["best_epoch"] == config.epochs - 1 for r in runs), runs=runs)
            summary = summarize(frame)
            write_outputs(out, frame, meta, {
                "error vs resolution": ("error_vs_resolution.png", lambda tmp: plot_errors(summary, config, tmp))},
                title=f"operator ({config.preset})", tables={"summary": summary})
    return frame


def per_seed(runs: list[dict]) -> pd.DataFrame:
    """One row per (model, seed, grid, resolution), columns :data:`COLUMNS`."""
    rows = [[s["model"], run["seed"], s["grid"], s["resolution"], run["width"], run["params"], s["rel_l2"]]
            for run in runs for s in run["scores"]]
    return pd.DataFrame(rows, columns=COLUMNS)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (model, grid, resolution): the mean and sample std (ddof 1; 0 for one seed) of rel L2 over seeds."""
    groups = frame.groupby(["model", "grid", "resolution"], sort=False)
    summary = groups.agg(params=("params", "first"), rel_l2_mean=("rel_l2", "mean"), rel_l2_std=("rel_l2", "std"),
                         seeds=("seed", "count")).reset_index()
    return summary.fillna({"rel_l2_std": 0.0})


def plot_errors(summary: pd.DataFrame, config: OperatorConfig, path: str | os.PathLike) -> None:
    """Test rel L2 against resolution (log-log), one line per (model, grid), the training resolution dotted."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.0), dpi=150)
    for (model, grid), rows in summary.groupby(["model", "grid"], sort=False):
        ax.errorbar(rows["resolution"], rows["rel_l2_mean"], yerr=rows["rel_l2_std"], capsize=3,
                    marker="o" if grid == "uniform" else "s", linestyle="-" if grid == "uniform" else "--",
                    label=f"{model}, {grid} grid")
    ax.axvline(config.train_resolution, color="grey", linestyle=":", label="training resolution")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("test resolution (points)")
    ax.set_ylabel("test relative L2 error")
    ax.set_title("1-D Burgers: trained at one resolution, tested at others", fontsize=9)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=6)
    save_figure(fig, path)


# -- CLI --------------------------------------------------------------------------------------------
def run_neural_operator_command(args: argparse.Namespace) -> int:
    """``poolkit bench operator``: run, print the summary, write --out."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    summary = summarize(run_neural_operator(config, args.out, force=args.force, progress=not args.no_progress))
    cells = [[row.model, row.grid, str(row.resolution), f"{row.params:,}",
              f"{row.rel_l2_mean:.4f} ± {row.rel_l2_std:.4f}", str(row.seeds)] for row in summary.itertuples()]
    print_table(f"operator ({config.preset}): test relative L2, mean ± std over {config.seeds} seeds",
                ["model", "grid", "resolution", "params", "rel L2", "seeds"], cells, clock, args.out)
    return 0
