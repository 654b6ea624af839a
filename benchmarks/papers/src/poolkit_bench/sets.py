"""``poolkit bench sets``: one zonotope-attention layer against one and several standard attention layers, a Set
Transformer and DeepSets on synthetic set tasks, and the quadrature-pooling convergence study (:mod:`.quadrature`).

Tasks (generated here, seeded):

- ``statistics`` ("aggregate statistical"): a set of 8-32 vectors drawn around a per-set location and scale; the
  targets are the set's mean, variance and 0.25 / 0.75 quantiles of feature 0. Weighted means of the elements
  suffice, so one standard attention layer should do about as well as the zonotope.
- ``typed`` ("high-rank sparse combinatorial"): each element carries a type among M (one-hot) and features f; the
  target is the set's mean of A_type f, a type-specific linear map of the features. One attention layer applies
  one value map to all elements, so it cannot apply M different ones; the zonotope's gated maps can (K + 1 >= M).
- ``pairs`` ("high-rank sparse combinatorial", a selection that depends on element pairs): each element carries a
  type among P (one-hot; P = ``pair_types``, many, so that some types occur once in a set and some more often)
  and features f; the target is sum_j [another element of the set has j's type] f_j / n: the mean of the
  features of the elements that have a partner of their type. Whether an element counts depends on the others,
  which self-attention compares two at a time; the zonotope pooler's gates read one element (or the set's mean).

Models: a linear embedding, L residual set-attention layers (:class:`poolkit.ZonotopeSetAttention`; with no
generators, standard single-head self-attention), a pooler (``attention`` or ``zonotope_attention``), an MLP head.
The baselines, each at the width whose parameter count is nearest zonotope x1's (:func:`matched_width`):
``set_transformer`` (Lee et al. 2019, *Set Transformer*: an SAB block, multi-head self-attention and a row-wise
FFN, each with a residual and a LayerNorm, then PMA pooling with one seed vector, then the MLP head) and
``deepsets`` (Zaheer et al. 2017, *Deep Sets*: rho(mean_j phi(x_j)), phi an MLP per element, rho the MLP head).
Every model has the same budget (epochs, batch, Adam learning rate); the epoch is chosen on validation sets and
the test sets are scored once. Reported per seed: test MSE on standardised targets (1 = predicting the training
mean), overall and per target, and the trained model's TDOF (:func:`poolkit.tdof` on the first ``tdof_sets``
test sets' inputs to each layer with value maps); summarised as the mean and sample std over seeds, against
depth (attention layers, the pooler's included) and parameter count.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from poolkit.cli.options import config_from_args
from poolkit.errors import PoolkitError
from poolkit.pooling import get_pooler
from poolkit.nn import ZonotopeSetAttention, tdof

from . import quadrature
from .harness import Stopwatch, restored_threads, results_folder
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs
from .sets_config import DEFAULT, MODELS, PRESETS, RESULT_FILES, TASKS, SetsConfig

STATISTICS = ("mean", "variance", "q25", "q75")
#: the Set Transformer's heads (its widths are multiples of them)
HEADS = 4
#: results.csv: one row per (task, model, seed, target); ``tdof`` empty where no layer has value maps
RUN_COLUMNS = ["task", "model", "seed", "depth", "width", "params", "tdof", "target", "mse"]
COLUMNS = ["task", "model", "depth", "width", "params", "target", "mse_mean", "mse_std", "seeds"]


# -- data -------------------------------------------------------------------------------------------
@dataclass
class SetData:
    """Sets x (N, T, F) with mask (N, T) and targets y (N, O)."""

    x: Tensor
    mask: Tensor
    y: Tensor

    def rows(self, index: slice | Tensor) -> SetData:
        return SetData(self.x[index], self.mask[index], self.y[index])


def make_set_task(task: str, count: int, *, min_size: int = 8, max_size: int = 32, features: int = 4,
                  types: int = 4, pair_types: int = 16, seed: int = 0) -> SetData:
    """``count`` sets of ``min_size``..``max_size`` elements for ``task`` (see the module docstring); one draw, so
    the typed task's maps A_type are shared by all its sets. Padded elements are 0."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(min_size, max_size + 1, (count,), generator=gen)
    mask = torch.arange(max_size) < sizes[:, None]
    if task == "statistics":
        location, scale = torch.randn(count, 1, 1, generator=gen), 0.5 + torch.rand(count, 1, 1, generator=gen)
        x = location + scale * torch.randn(count, max_size, features, generator=gen)
        first = x[..., 0].masked_fill(~mask, float("nan"))
        mean = first.nanmean(dim=1)
        variance = (first - mean[:, None]).square().nanmean(dim=1)
        quartiles = torch.nanquantile(first, torch.tensor([0.25, 0.75]), dim=1)
        y = torch.stack([mean, variance, *quartiles], dim=1)
    elif task == "typed":
        maps = torch.randn(types, features, features, generator=gen) / features ** 0.5  # A_type: (M, O, F)
        kind = torch.randint(types, (count, max_size), generator=gen)
        f = torch.randn(count, max_size, features, generator=gen)
        x = torch.cat([nn.functional.one_hot(kind, types).float(), f], dim=-1)
        mapped = torch.einsum("ntof,ntf->nto", maps[kind], f) * mask[..., None]
        y = mapped.sum(dim=1) / sizes[:, None]
    elif task == "pairs":
        kind = torch.randint(pair_types, (count, max_size), generator=gen)
        f = torch.randn(count, max_size, features, generator=gen)
        same = (kind[:, :, None] == kind[:, None, :]) & mask[:, :, None] & mask[:, None, :]
        paired = (same.sum(dim=2) > 1) & mask  # a real element with another real one of its type
        x = torch.cat([nn.functional.one_hot(kind, pair_types).float(), f], dim=-1)
        y = (f * paired[..., None]).sum(dim=1) / sizes[:, None]
    else:
        raise PoolkitError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    return SetData(x * mask[..., None], mask, y)


def target_names(task: str, outputs: int) -> list[str]:
    return list(STATISTICS) if task == "statistics" else [f"y{i}" for i in range(outputs)]


# -- models -----------------------------------------------------------------------------------------
def mlp_head(width: int, outputs: int) -> nn.Sequential:
    """Every model's head (DeepSets' rho): Linear -> GELU -> Linear."""
    return nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, outputs))


class SetModel(nn.Module):
    """Linear embedding -> (depth - 1) residual set-attention layers -> pooler -> MLP head: (N, T, F) -> (N, O)."""

    def __init__(self, kind: str, depth: int, in_features: int, outputs: int, width: int, generators: int) -> None:
        super().__init__()
        layer_generators = generators if kind == "zonotope" else 0
        self.embed = nn.Linear(in_features, width)
        self.layers = nn.ModuleList(ZonotopeSetAttention(width, num_generators=layer_generators)
                                    for _ in range(depth - 1))
        self.pooler = (get_pooler("zonotope_attention", width, num_generators=generators, attn_size=width)
                       if kind == "zonotope" else get_pooler("attention", width, attn_size=width))
        self.head = mlp_head(width, outputs)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = h + layer(h, mask)
        return self.head(self.pooler(h, mask))


class AttentionBlock(nn.Module):
    """Lee et al. 2019's MAB(Q, Z): H = LayerNorm(Q + MultiheadAttention(Q, Z, Z)), out = LayerNorm(H + rFF(H)),
    rFF = Linear(D, 2D) -> ReLU -> Linear(2D, D); padded elements of Z are masked out of the keys."""

    def __init__(self, width: int, heads: int = HEADS) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width))

    def forward(self, q: Tensor, z: Tensor, mask: Tensor) -> Tensor:
        h = self.norm1(q + self.attention(q, z, z, key_padding_mask=~mask, need_weights=False)[0])
        return self.norm2(h + self.ffn(h))


class SetTransformer(nn.Module):
    """Lee et al. 2019: linear embedding -> (depth - 1) SAB = MAB(X, X) -> PMA = MAB(S, X) with one learned seed S
    (as in the authors' code, without PMA's extra rFF) -> MLP head: (N, T, F) -> (N, O)."""

    def __init__(self, depth: int, in_features: int, outputs: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList(AttentionBlock(width) for _ in range(depth - 1))
        self.seed = nn.Parameter(torch.randn(1, 1, width) * width ** -0.5)
        self.pool = AttentionBlock(width)
        self.head = mlp_head(width, outputs)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h, h, mask)
        return self.head(self.pool(self.seed.expand(len(h), -1, -1), h, mask)[:, 0])


class DeepSets(nn.Module):
    """Zaheer et al. 2017: rho(mean_j phi(x_j)) over the real elements, phi = three Linear layers with ReLU between,
    rho the MLP head: (N, T, F) -> (N, O)."""

    def __init__(self, in_features: int, outputs: int, width: int) -> None:
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(in_features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, width))
        self.pool = get_pooler("mean", width)
        self.rho = mlp_head(width, outputs)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.rho(self.pool(self.phi(x), mask))


def build_model(name: str, in_features: int, outputs: int, width: int, generators: int) -> nn.Module:
    """The model ``name`` of :data:`MODELS` at ``width``."""
    kind, depth = MODELS[name]
    if kind == "set_transformer":
        return SetTransformer(depth, in_features, outputs, width)
    if kind == "deepsets":
        return DeepSets(in_features, outputs, width)
    return SetModel(kind, depth, in_features, outputs, width, generators)


def matched_width(name: str, in_features: int, outputs: int, config: SetsConfig) -> int:
    """``config.width`` for the attention and zonotope models; for a baseline, the width (the Set Transformer's a
    multiple of :data:`HEADS`) whose parameter count is nearest zonotope x1's at ``config.width``."""
    if MODELS[name][0] in ("attention", "zonotope"):
        return config.width

    def count(width: int) -> int:
        return parameter_count(build_model(name, in_features, outputs, width, config.generators))

    target = parameter_count(build_model("zonotope x1", in_features, outputs, config.width, config.generators))
    step = HEADS if MODELS[name][0] == "set_transformer" else 1
    width = step
    while count(width) < target:
        width += step
    return min((w for w in (width - step, width) if w > 0), key=lambda w: abs(count(w) - target))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def fit(model: nn.Module, train: SetData, val: SetData, test: SetData, config: SetsConfig, seed: int) -> dict:
    """Adam on the MSE for ``config.epochs`` epochs; the test MSE (overall and per target) of the epoch with the
    lowest validation MSE."""
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    order = torch.Generator().manual_seed(seed)
    best = (float("inf"), -1, None)
    val_curve = []
    for epoch in range(config.epochs):
        model.train()
        for batch in torch.randperm(len(train.y), generator=order).split(config.batch_size):
            optimiser.zero_grad()
            nn.functional.mse_loss(model(train.x[batch], train.mask[batch]), train.y[batch]).backward()
            optimiser.step()
        val_mse = _errors(model, val).mean().item()
        val_curve.append(round(val_mse, 5))
        if val_mse < best[0]:
            best = (val_mse, epoch, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[2])
    per_target = _errors(model, test)
    return {"test_mse": per_target.mean().item(), "test_mse_per_target": per_target.tolist(), "best_epoch": best[1],
            "val_mse": val_curve}


def _errors(model: nn.Module, data: SetData) -> Tensor:
    """MSE per target: (O,)."""
    model.eval()
    with torch.no_grad():
        return (model(data.x, data.mask) - data.y).square().mean(dim=0)


def trained_tdof(model: nn.Module, data: SetData) -> dict[str, int]:
    """:func:`poolkit.tdof` of each layer of ``model`` with value maps ({module name: TDOF}; empty for none), on
    the inputs that layer gets from the sets ``data`` in the model's forward pass."""
    layers = {name: module for name, module in model.named_modules() if hasattr(module, "value_maps")}
    inputs = {}
    hooks = [module.register_forward_pre_hook(lambda _, args, name=name: inputs.__setitem__(name, args))
             for name, module in layers.items()]
    model.eval()
    try:
        with torch.no_grad():
            model(data.x, data.mask)
    finally:
        for hook in hooks:
            hook.remove()
    return {name: tdof(layer, *inputs[name]) for name, layer in layers.items()}


# -- the run ----------------------------------------------------------------------------------------
def run_sets(config: SetsConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *, force: bool = False,
             progress: bool = True) -> pd.DataFrame:
    """Every (task, model, seed) run and the quadrature study; the per-seed rows (:func:`per_seed`). With
    ``out_dir``, also those rows as results.csv, results.json (settings, provenance, every run, the quadrature rows),
    the two plots and report.html (with the :func:`summarize` table); existing results are kept unless ``force``."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force) as out:
        clock = Stopwatch()
        with restored_threads(config.threads):
            runs = [run for task in config.tasks for run in _task_runs(task, config, progress)]
        rows = quadrature.convergence(config.quadrature_sizes, seed=config.data_seed)
        frame = per_seed(runs)
        summary = summarize(frame)
        if out is not None:
            meta = run_record("sets (zonotope attention vs stacked attention, Set Transformer, DeepSets; quadrature "
                              "pooling)", config, clock.record(), runs=runs, quadrature=rows)
            write_outputs(out, frame, meta, {
                "error vs parameters": ("error_vs_params.png", lambda tmp: plot_errors(summary, tmp)),
                "quadrature": ("quadrature.png", lambda tmp: plot_quadrature(rows, tmp))},
                title=f"sets ({config.preset})", tables={"summary": summary, "quadrature": pd.DataFrame(rows)})
    return frame


def _task_runs(task: str, config: SetsConfig, progress: bool) -> list[dict]:
    data = make_set_task(task, config.train + config.val + config.test, min_size=config.min_size,
                         max_size=config.max_size, features=config.features, types=config.types,
                         pair_types=config.pair_types, seed=config.data_seed)
    # Targets standardised with the training rows' statistics: an MSE of 1 is predicting their mean.
    centre, spread = data.y[:config.train].mean(dim=0), data.y[:config.train].std(dim=0)
    data.y = (data.y - centre) / spread
    train, val = data.rows(slice(0, config.train)), data.rows(slice(config.train, config.train + config.val))
    test = data.rows(slice(config.train + config.val, None))
    names = target_names(task, data.y.shape[1])
    shape = (data.x.shape[-1], data.y.shape[1])
    widths = {name: matched_width(name, *shape, config) for name in config.models}
    runs = []
    for seed in range(config.seed, config.seed + config.seeds):
        for model_name in config.models:
            torch.manual_seed(seed)
            model = build_model(model_name, *shape, widths[model_name], config.generators)
            tic = time.perf_counter()
            result = fit(model, train, val, test, config, seed)
            layers_tdof = trained_tdof(model, test.rows(slice(0, config.tdof_sets)))
            runs.append({"task": task, "model": model_name, "depth": MODELS[model_name][1],
                         "width": widths[model_name], "params": parameter_count(model), "seed": seed,
                         "targets": names, **result, "tdof": max(layers_tdof.values(), default=None),
                         "tdof_layers": layers_tdof, "seconds": round(time.perf_counter() - tic, 2)})
            if progress:
                print(f"sets: {task:10s} {model_name:15s} seed {seed}: test MSE {result['test_mse']:.4f} "
                      f"(best epoch {result['best_epoch']}, TDOF {runs[-1]['tdof']}, {runs[-1]['seconds']:.0f} s)",
                      flush=True)
    return runs


def per_seed(runs: list[dict]) -> pd.DataFrame:
    """One row per run and target ('all': the mean over targets), columns :data:`RUN_COLUMNS`; ``tdof``, the largest
    over the model's layers with value maps, is read from the trained model."""
    rows = [[run["task"], run["model"], run["seed"], run["depth"], run["width"], run["params"], run["tdof"], target,
             mse] for run in runs
            for target, mse in zip(["all", *run["targets"]], [run["test_mse"], *run["test_mse_per_target"]])]
    return pd.DataFrame(rows, columns=RUN_COLUMNS).astype({"tdof": "Int64"})


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (task, model, target) of the per-seed rows (:func:`per_seed`): mean and sample std (ddof 1) over seeds;
    columns :data:`COLUMNS`."""
    groups = frame.groupby(["task", "model", "target"], sort=False)
    summary = groups.agg(depth=("depth", "first"), width=("width", "first"), params=("params", "first"),
                         mse_mean=("mse", "mean"), mse_std=("mse", "std"), seeds=("seed", "count")).reset_index()
    return summary.fillna({"mse_std": 0.0})[COLUMNS]


# -- plots ------------------------------------------------------------------------------------------
def plot_errors(summary: pd.DataFrame, path: str | os.PathLike) -> None:
    """Test MSE against parameter count (the :func:`summarize` table), one panel per task, one colour per kind of
    model, the attention and zonotope models joined in order of depth."""
    plt = pyplot()
    overall = summary[summary["target"] == "all"]
    kinds = overall["model"].map(lambda name: MODELS[name][0])
    tasks = list(dict.fromkeys(overall["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.0), dpi=150, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for kind, colour in (("attention", "#1f77b4"), ("zonotope", "#d62728"), ("set_transformer", "#2ca02c"),
                             ("deepsets", "#9467bd")):
            rows = overall[(overall["task"] == task) & (kinds == kind)]
            if rows.empty:
                continue
            ax.errorbar(rows["params"], rows["mse_mean"], yerr=rows["mse_std"], marker="o", color=colour,
                        capsize=3, label=kind)
            for _, row in rows.iterrows():
                ax.annotate(f"x{row['depth']}", (row["params"], row["mse_mean"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=7)
        _log_log(ax, "parameters", "test MSE (standardised targets)", f"{task} (xN: N attention layers)")
    save_figure(fig, path)


def plot_quadrature(rows: list[dict], path: str | os.PathLike) -> None:
    """Error against sample count on log-log axes: one panel per pooler, one colour per grid, solid with the
    trapezoid weights and dashed without, the n^-2 rate dotted."""
    plt = pyplot()
    frame = pd.DataFrame(rows)
    poolers = list(dict.fromkeys(frame["pooler"]))
    fig, axes = plt.subplots(1, len(poolers), figsize=(5.2 * len(poolers), 4.0), dpi=150, squeeze=False)
    for ax, pooler in zip(axes[0], poolers):
        for grid, colour in zip(quadrature.GRIDS, ("#1f77b4", "#2ca02c", "#d62728")):
            for weighted, style in ((True, "-"), (False, "--")):
                part = frame[(frame["pooler"] == pooler) & (frame["grid"] == grid) & (frame["weighted"] == weighted)]
                ax.plot(part["n"], part["error"], style, marker="o", ms=3, color=colour,
                        label=f"{grid}, {'trapezoid weights' if weighted else 'unweighted'}")
        sizes = np.array(sorted(set(frame["n"])), dtype=float)
        ax.plot(sizes, sizes[0] ** 2 * 1e-2 / sizes ** 2, ":", color="grey", label="n^-2")
        _log_log(ax, "samples n", "max |pooled - integral value|", f"{pooler} pooling of a sampled smooth function",
                 x_base=2)
    save_figure(fig, path)


def _log_log(ax, xlabel: str, ylabel: str, title: str, x_base: int = 10) -> None:
    ax.set_xscale("log", base=x_base)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=6)


# -- CLI --------------------------------------------------------------------------------------------
def run_sets_command(args: argparse.Namespace) -> int:
    """``poolkit bench sets``: run, print the summary, write --out."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    summary = summarize(run_sets(config, args.out, force=args.force, progress=not args.no_progress))
    shown = summary[summary["target"] == "all"].drop(columns="target")
    cells = [[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row] for row in shown.itertuples(index=False)]
    print_table(f"sets ({config.preset}): test MSE, mean ± std over {config.seeds} seeds", shown.columns, cells,
                clock, args.out)
    return 0
