"""``poolkit bench snr``: the noise-robustness benchmark of Brothers, "Robust Noise Attenuation via
Adaptive Pooling of Transformer Outputs" (ICML 2025), Sec. 5.1.

For each K, a transformer encoder plus a pooler learns the centroid of the K nearest neighbours of
vector 0 among N = 128 vectors (SNR = K / N); the test MSE of each pooler is reported beside the two
analytic baselines (mean of all vectors, vector 0). Protocol as the paper's code: the last
``test_ratio`` of the samples is the test set; the rest is cut into ``folds`` contiguous folds, run
``i`` validates on fold ``i % folds``, trains on the others with torch seed ``seed + i`` and reports
the test MSE of its best-validation epoch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..errors import PoolkitError
from .snr_data import PAPER_KS, PUBLISHED_BASELINES, check_ks, baseline_mse, make_knn_centroid
from .snr_model import SNRModel, fit

DEFAULT_POOLERS = ("adapool", "mean", "max", "cls")
BASELINES = ("baseline_mean", "baseline_x0")
RESULT_FILES = ("results.csv", "results.json", "mse_vs_snr.png")
COLUMNS = ["pooler", "K", "snr", "mse_mean", "mse_std", "seeds"]


@dataclass(frozen=True)
class SNRConfig:
    """Every setting of a benchmark run. The defaults are ``--quick``; :data:`FULL` is the paper's."""

    poolers: tuple[str, ...] = DEFAULT_POOLERS
    ks: tuple[int, ...] = PAPER_KS
    seeds: int = 3
    num_samples: int = 4000
    num_vectors: int = 128
    dim: int = 16
    layers: int = 2
    heads: int = 1
    ff: int = 64
    dropout: float = 0.1
    lr: float = 2e-3
    batch_size: int = 100
    epochs: int = 12
    folds: int = 5
    test_ratio: float = 0.1
    data_seed: int = 42
    seed: int = 1
    threads: int | None = None
    preset: str = "quick"

    def validated(self) -> SNRConfig:
        """This config with ``poolers`` resolved ("all" = every token pooler); bad values raise."""
        import poolkit

        for name in ("seeds", "num_samples", "num_vectors", "dim", "layers", "heads", "ff", "batch_size",
                     "epochs", "folds"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "layers" else 1):
                raise PoolkitError(f"{name} must be a positive int, got {value!r}")
        if self.folds < 2:
            raise PoolkitError(f"folds must be at least 2 (one validates, the rest train), got {self.folds}")
        if self.dim % self.heads:
            raise PoolkitError(f"dim {self.dim} is not divisible by heads {self.heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise PoolkitError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not 0.0 < self.test_ratio < 1.0:
            raise PoolkitError(f"test_ratio must be in (0, 1), got {self.test_ratio!r}")
        if not self.lr > 0:
            raise PoolkitError(f"lr must be positive, got {self.lr!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise PoolkitError(f"threads must be a positive int or None, got {self.threads!r}")
        test = int(self.num_samples * self.test_ratio)
        if test < 1 or (self.num_samples - test) // self.folds < 1:
            raise PoolkitError(f"num_samples={self.num_samples} is too few for a test split of "
                               f"{self.test_ratio} and {self.folds} folds")
        names = list(self.poolers)
        if not names:
            raise PoolkitError("no poolers given; name some, or 'all'")
        if "all" in names:
            names = [n for n in names if n != "all"] + poolkit.list_poolers(kind="token")
        resolved = []
        for name in names:
            pooler = build_pooler(name, self)  # unknown names raise with suggestions
            if pooler.kind != "token":
                raise PoolkitError(f"pooler {name!r} pools over layers; this benchmark needs a token pooler")
            if pooler.name not in resolved:
                resolved.append(pooler.name)
        ks = check_ks(self.ks)
        if max(ks) > self.num_vectors:
            raise PoolkitError(f"K must be at most num_vectors={self.num_vectors}, got {max(ks)}")
        return dataclasses.replace(self, poolers=tuple(resolved), ks=ks)


QUICK = SNRConfig()
#: The paper's settings (its experiments/noise-robustness configs): 1M samples, 12 layers, 8 heads,
#: Adam 5e-4, batch 750, 100 epochs, 5 folds -- sized for a GPU.
FULL = SNRConfig(seeds=5, num_samples=1_000_000, layers=12, heads=8, lr=5e-4, batch_size=750,
                 epochs=100, preset="full")


def build_pooler(name: str, config: SNRConfig):
    """A poolkit pooler for the benchmark. AdaPool's query is vector 0 and it has as many heads as the
    encoder, as in the paper; other poolers use their defaults."""
    import poolkit
    from poolkit.pooling.base import resolve_name

    options = {"query_index": 0, "num_heads": config.heads} if resolve_name(name) == "adapool" else {}
    return poolkit.get_pooler(name, hidden_size=config.dim, **options)


def run_snr(config: SNRConfig = QUICK, out_dir: str | os.PathLike | None = None, *, force: bool = False,
            progress: bool = True) -> pd.DataFrame:
    """Run the benchmark and return one row per (pooler, K): columns :data:`COLUMNS`, the analytic
    baselines as poolers ``baseline_mean`` and ``baseline_x0``. With ``out_dir``, also write
    ``results.csv``, ``results.json`` (settings and every run) and ``mse_vs_snr.png`` there; existing
    results are kept unless ``force``."""
    config = config.validated()
    out = None if out_dir is None else _prepare_out_dir(Path(out_dir), force)
    started = time.perf_counter()
    previous_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        runs, baselines = _run_all(config, progress)
    finally:
        torch.set_num_threads(previous_threads)
    frame = summarize(config, runs, baselines)
    if out is not None:
        _write_outputs(out, config, frame, runs, baselines, time.perf_counter() - started)
    return frame


def _run_all(config: SNRConfig, progress: bool) -> tuple[list[dict], dict[tuple[str, int], float]]:
    from tqdm.auto import tqdm

    data = make_knn_centroid(config.num_samples, config.ks, config.num_vectors, config.dim, config.data_seed)
    split = config.num_samples - int(config.num_samples * config.test_ratio)
    fold_size = split // config.folds
    test_x = data.x[split:]
    baselines = {(name, k): value for k in config.ks
                 for name, value in baseline_mse(test_x, data.targets[k][split:]).items()}
    runs = []
    bar = tqdm(total=config.seeds * len(config.ks) * len(config.poolers), disable=not progress or None,
               desc="snr", unit="run")
    for run in range(config.seeds):
        fold = run % config.folds
        val = torch.arange(fold * fold_size, (fold + 1) * fold_size)
        train = torch.cat((torch.arange(0, fold * fold_size), torch.arange((fold + 1) * fold_size, split)))
        for k in config.ks:
            y = data.targets[k]
            for name in config.poolers:
                bar.set_postfix_str(f"{name} K={k} seed={config.seed + run}")
                tic = time.perf_counter()
                result = fit(_build_model(name, config, config.seed + run),
                             (data.x[train], y[train]), (data.x[val], y[val]), (test_x, y[split:]),
                             epochs=config.epochs, batch_size=config.batch_size, lr=config.lr,
                             seed=config.seed + run)
                runs.append({"pooler": name, "K": k, "seed": config.seed + run, "fold": fold,
                             "test_mse": result.test_mse, "best_epoch": result.best_epoch,
                             "train_loss": result.train_loss, "val_loss": result.val_loss,
                             "seconds": round(time.perf_counter() - tic, 3)})
                bar.update()
    bar.close()
    return runs, baselines


def _build_model(name: str, config: SNRConfig, seed: int) -> SNRModel:
    """Seeded so that the encoder starts identical whichever pooler follows it."""
    torch.manual_seed(seed)
    return SNRModel(build_pooler(name, config), dim=config.dim, layers=config.layers, heads=config.heads,
                    ff=config.ff, dropout=config.dropout)


def summarize(config: SNRConfig, runs: list[dict], baselines: dict[tuple[str, int], float]) -> pd.DataFrame:
    """Per (pooler, K): mean and sample std (ddof 1; 0 for one seed) of the test MSE over seeds."""
    rows = []
    for name in config.poolers:
        for k in config.ks:
            mses = np.array([r["test_mse"] for r in runs if r["pooler"] == name and r["K"] == k])
            std = float(mses.std(ddof=1)) if len(mses) > 1 else 0.0
            rows.append([name, k, k / config.num_vectors, float(mses.mean()), std, len(mses)])
    for name in BASELINES:
        for k in config.ks:
            rows.append([name, k, k / config.num_vectors, baselines[(name, k)], 0.0, 1])
    return pd.DataFrame(rows, columns=COLUMNS)


# -- outputs ------------------------------------------------------------------------------------
def _prepare_out_dir(out: Path, force: bool) -> Path:
    if out.exists() and not out.is_dir():
        raise PoolkitError(f"--out {out} exists and is not a directory")
    existing = [name for name in RESULT_FILES if (out / name).exists()]
    if existing and not force:
        raise PoolkitError(f"{out} already holds {', '.join(existing)}; pass --force to overwrite or "
                           "choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Write through ``write(tmp_path)`` to a temp file beside ``path``, then rename over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_outputs(out: Path, config: SNRConfig, frame: pd.DataFrame, runs: list[dict],
                   baselines: dict[tuple[str, int], float], seconds: float) -> None:
    meta = {
        "benchmark": "snr (Brothers, ICML 2025, KNN-centroid noise robustness)",
        "settings": dataclasses.asdict(config),
        "runtime_seconds": round(seconds, 1),
        "torch": torch.__version__,
        "threads": config.threads or torch.get_num_threads(),
        "platform": platform.platform(),
        "published_baselines": {name: {str(k): v for k, v in by_k.items()}
                                for name, by_k in PUBLISHED_BASELINES.items()},
        "runs": runs,
    }
    _atomic_write(out / "results.csv", lambda tmp: frame.to_csv(tmp, index=False))
    _atomic_write(out / "results.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1) + "\n"))
    _atomic_write(out / "mse_vs_snr.png", lambda tmp: plot_results(frame, tmp, title=_title(config)))


def _title(config: SNRConfig) -> str:
    return (f"KNN-centroid, N={config.num_vectors}, {config.layers} layers, {config.num_samples} samples, "
            f"{config.seeds} seeds ({config.preset})")


def plot_results(frame: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """MSE vs SNR on log-log axes in the paper's style: a line and a shaded +-std band per pooler, the
    analytic baselines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=150)
    learned = frame[~frame["pooler"].isin(BASELINES)]
    for name, group in learned.groupby("pooler", sort=False):
        line, = ax.plot(group["snr"], group["mse_mean"], lw=2, alpha=0.8, marker="o", ms=3, label=name)
        low = (group["mse_mean"] - group["mse_std"]).clip(lower=group["mse_mean"] * 0.05)
        ax.fill_between(group["snr"], low, group["mse_mean"] + group["mse_std"], color=line.get_color(),
                        alpha=0.15, lw=0)
    labels = {"baseline_mean": "mean-of-all baseline", "baseline_x0": "vector-0 baseline"}
    for name, group in frame[frame["pooler"].isin(BASELINES)].groupby("pooler", sort=False):
        ax.plot(group["snr"], group["mse_mean"], ls="--", lw=1.5, alpha=0.5, color="grey" if
                name == "baseline_mean" else "black", label=labels[name])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5 * learned["mse_mean"].min() if len(learned) else None)
    ax.set_xlabel("signal-to-noise ratio K / N")
    ax.set_ylabel("test MSE")
    ax.set_title(title, fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def format_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per K, one column per pooler, cells ``mean ± std`` (baselines: the value)."""
    cells = frame.assign(cell=[f"{m:.4f}" if p in BASELINES else f"{m:.4f} ± {s:.4f}"
                               for p, m, s in zip(frame["pooler"], frame["mse_mean"], frame["mse_std"])])
    table = cells.pivot(index=["K", "snr"], columns="pooler", values="cell")
    return table[list(dict.fromkeys(frame["pooler"]))].reset_index()


# -- CLI ----------------------------------------------------------------------------------------
def add_snr_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``poolkit bench snr``; unset ones come from the --quick (default) or --full preset."""
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", dest="preset", action="store_const", const="quick", default="quick",
                       help="CPU-sized run (default): 4000 samples, 2 layers, 1 head, 12 epochs, 3 seeds")
    scale.add_argument("--full", dest="preset", action="store_const", const="full",
                       help="the paper's scale (1M samples, 12 layers, 8 heads, 100 epochs, 5 folds); GPU")
    parser.add_argument("--poolers", nargs="+", metavar="NAME",
                        help=f"token poolers to compare, or 'all' (default: {' '.join(DEFAULT_POOLERS)})")
    parser.add_argument("--seeds", type=int, help="runs per (pooler, K); run i validates on fold i %% folds")
    parser.add_argument("--ks", type=int, nargs="+", metavar="K", help="neighbour counts (default: 1 2 ... 128)")
    for flag, kind, what in (("--samples", int, "samples drawn (the last test-ratio of them are the test set)"),
                             ("--layers", int, "encoder layers"), ("--heads", int, "attention heads"),
                             ("--epochs", int, "epochs per run"), ("--batch-size", int, "minibatch size"),
                             ("--lr", float, "Adam learning rate"), ("--folds", int, "contiguous folds"),
                             ("--data-seed", int, "seed of the generated data"),
                             ("--seed", int, "training seed of run 0 (run i uses seed + i)"),
                             ("--threads", int, "torch CPU threads")):
        parser.add_argument(flag, type=kind, help=what)
    parser.add_argument("--out", metavar="DIR", help="write results.csv, results.json and mse_vs_snr.png here")
    parser.add_argument("--force", action="store_true", help="overwrite existing results in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


_ARG_FIELDS = {"poolers": "poolers", "seeds": "seeds", "ks": "ks", "samples": "num_samples",
               "layers": "layers", "heads": "heads", "epochs": "epochs", "batch_size": "batch_size",
               "lr": "lr", "folds": "folds", "data_seed": "data_seed", "seed": "seed", "threads": "threads"}


def config_from_args(args: argparse.Namespace) -> SNRConfig:
    """The preset chosen by --quick/--full with the explicitly given options applied."""
    base = FULL if getattr(args, "preset", "quick") == "full" else QUICK
    changes = {field: getattr(args, arg) for arg, field in _ARG_FIELDS.items()
               if getattr(args, arg, None) is not None}
    for field in ("poolers", "ks"):
        if field in changes:
            changes[field] = tuple(changes[field])
    return dataclasses.replace(base, **changes)


def run_snr_command(args: argparse.Namespace) -> int:
    """``poolkit bench snr``: run, print the table, write --out. Bad input raises PoolkitError."""
    from rich.console import Console
    from rich.table import Table

    config = config_from_args(args)
    started = time.perf_counter()
    frame = run_snr(config, args.out, force=args.force, progress=not args.no_progress)
    table = Table(title=f"SNR benchmark: test MSE, mean ± std over {config.seeds} seeds ({config.preset})")
    shown = format_table(frame)
    for column in shown.columns:
        table.add_column(str(column), justify="right")
    for row in shown.itertuples(index=False):
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    console = Console()
    console.print(table)
    console.print(f"took {time.perf_counter() - started:.0f} s" + (f"; wrote {args.out}" if args.out else ""))
    return 0
