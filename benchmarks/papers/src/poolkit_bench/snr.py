"""``poolkit bench snr``: the noise-robustness benchmark of Brothers, "Robust Noise Attenuation via
Adaptive Pooling of Transformer Outputs" (ICML 2025), Sec. 5.1.

For each K, a transformer encoder plus a pooler learns the centroid of the K nearest neighbours of
vector 0 among N = 128 vectors (SNR = K / N); the test MSE of each pooler is reported beside the two
analytic baselines (mean of all vectors, vector 0). Protocol as the paper's code: the last
``test_ratio`` of the samples is the test set; the rest is cut into ``folds`` contiguous folds, run
``i`` validates on fold ``i % folds``, trains on the others with torch seed ``seed + i`` and reports
the test MSE of its best-validation epoch.

``cls`` here is the paper's CLS: a learned token prepended to the set, marked by the type embedding,
vector 0 unmarked (the paper's ``ClsToken`` in its ``Attenuator``). ``vector0`` reads the encoded
vector 0, the type-marked query; result files written before the CLS token existed call it ``cls``.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from poolkit.cli.options import config_from_args

from .execution import torch_device
from .harness import Stopwatch, results_folder, run_tasks
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs
from .snr_config import PRESETS, QUICK, RESULT_FILES, SNR_POOLERS, SNRConfig, build_pooler
from .snr_data import PUBLISHED_BASELINES, KnnCentroidData, baseline_mse, make_knn_centroid
from .snr_model import SNRModel, fit

BASELINES = ("baseline_mean", "baseline_x0")
COLUMNS = ["pooler", "K", "snr", "mse_mean", "mse_std", "seeds"]


def run_snr(config: SNRConfig = QUICK, out_dir: str | os.PathLike | None = None, *, force: bool = False,
            progress: bool = True) -> pd.DataFrame:
    """Run the benchmark and return one row per (pooler, K): columns :data:`COLUMNS`, the analytic
    baselines as poolers ``baseline_mean`` and ``baseline_x0``. With ``out_dir``, also write
    ``results.csv``, ``results.json`` (settings and every run) and ``mse_vs_snr.png`` there; existing
    results are kept unless ``force``. With ``workers > 1`` the runs go to spawned processes, so a
    script calling this needs the ``if __name__ == "__main__":`` guard."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        clock = Stopwatch()
        runs = run_jobs([(config, task) for task in tasks(config)], config.workers, config.threads, progress)
        frame = summarize(config, runs, baselines(config))
        release_data()
        if out is not None:
            _write_outputs(out, config, frame, runs, clock)
    return frame


def tasks(config: SNRConfig) -> list[tuple[int, int, str]]:
    """Every (run, K, pooler) of ``config``."""
    return [(run, k, name) for run in range(config.seeds) for k in config.ks for name in config.poolers]


@functools.lru_cache(maxsize=4)
def _data(num_samples: int, ks: tuple[int, ...], num_vectors: int, dim: int, seed: int) -> KnnCentroidData:
    return make_knn_centroid(num_samples, ks, num_vectors, dim, seed)


@functools.lru_cache(maxsize=8)
def _runner(config: SNRConfig) -> _Runner:
    return _Runner(config)


def baselines(config: SNRConfig) -> dict[tuple[str, int], float]:
    """{(baseline name, K): MSE} of the analytic baselines on ``config``'s test rows."""
    return _runner(config).baselines()


def release_data() -> None:
    """Drop this process's cached data draws and runners (``--full``'s inputs hold 8 GB on the device)."""
    _runner.cache_clear()
    _data.cache_clear()


class _Runner:
    """One draw of the data, split as the paper's code does, and the training of single runs on it."""

    def __init__(self, config: SNRConfig) -> None:
        self.config = config
        self.device = torch_device(config.device)
        data = _data(config.num_samples, config.ks, config.num_vectors, config.dim, config.data_seed)
        self.x = data.x.to(self.device)
        self.targets = {k: t.to(self.device) for k, t in data.targets.items()}
        self.split = config.num_samples - int(config.num_samples * config.test_ratio)
        self.test = torch.arange(self.split, config.num_samples)

    def baselines(self) -> dict[tuple[str, int], float]:
        return {(name, k): value for k in self.config.ks
                for name, value in baseline_mse(self.x[self.split:], self.targets[k][self.split:]).items()}

    def __call__(self, task: tuple[int, int, str]) -> dict:
        """Train run ``run`` (validating on fold ``run % folds``) of pooler ``name`` on target ``K``."""
        run, k, name = task
        config = self.config
        fold, size, seed = run % config.folds, self.split // config.folds, config.seed + run
        val = torch.arange(fold * size, (fold + 1) * size)
        train = torch.cat((torch.arange(0, fold * size), torch.arange((fold + 1) * size, self.split)))
        tic, cpu = time.perf_counter(), time.process_time()
        model = _build_model(name, config, seed).to(self.device)
        result = fit(model, self.x, self.targets[k], train=train, val=val, test=self.test,
                     epochs=config.epochs, batch_size=config.batch_size, lr=config.lr, seed=seed)
        return {"pooler": name, "K": k, "seed": seed, "fold": fold, "test_mse": result.test_mse,
                "best_epoch": result.best_epoch, "train_loss": result.train_loss, "val_loss": result.val_loss,
                "seconds": round(time.perf_counter() - tic, 3),
                "cpu_seconds": round(time.process_time() - cpu, 3)}


def _run_job(job: tuple[SNRConfig, tuple[int, int, str]]) -> dict:
    config, task = job
    return _runner(config)(task)


def run_jobs(jobs: list[tuple[SNRConfig, tuple[int, int, str]]], workers: int, threads: int | None,
             progress: bool = True, desc: str = "snr") -> list[dict]:
    """Run each (validated config, (run, K, pooler)) job, in this process or in ``workers`` spawned ones
    (each drawing the same data); every run is seeded on its own, so the results do not depend on
    ``workers``. ``threads`` torch threads per process (None: torch's default)."""
    return run_tasks(_run_job, jobs, workers=workers, threads=threads, progress=progress, desc=desc, unit="run")


def _build_model(name: str, config: SNRConfig, seed: int) -> SNRModel:
    """Seeded weights (the encoder's independent of the pooler) and dropout."""
    torch.manual_seed(seed)
    return SNRModel(build_pooler(name, config), dim=config.dim, layers=config.layers, heads=config.heads,
                    ff=config.ff, dropout=config.dropout, seed=seed, cls_token=SNR_POOLERS.get(name, ("", False))[1])


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
def _write_outputs(out: Path, config: SNRConfig, frame: pd.DataFrame, runs: list[dict], clock: Stopwatch) -> None:
    meta = run_record("snr (Brothers, ICML 2025, KNN-centroid noise robustness)", config, clock.record(),
                      published_baselines={name: {str(k): v for k, v in by_k.items()}
                                           for name, by_k in PUBLISHED_BASELINES.items()}, runs=runs)
    write_outputs(out, frame, meta, {"MSE vs SNR": ("mse_vs_snr.png", lambda tmp: plot_results(
        frame, tmp, title=_title(config)))}, title=_title(config), tables={"results": frame})


def _title(config: SNRConfig) -> str:
    return (f"KNN-centroid ({config.preset}): N={config.num_vectors}, samples={config.num_samples}, "
            f"layers={config.layers}, heads={config.heads}, epochs={config.epochs}, seeds={config.seeds}")


#: The paper's colours (its analysis/plot_noise_robustness.py); other poolers take matplotlib's cycle.
PAPER_COLORS = {"mean": "#669eff", "max": "#ff3e3e", "adapool": "#0bd100", "cls": "#ffa200"}


def plot_results(frame: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """MSE vs SNR on log-log axes in the paper's style: a line and a shaded +-std band per pooler, the
    analytic baselines dashed."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=150)
    learned = frame[~frame["pooler"].isin(BASELINES)]
    for name, group in learned.groupby("pooler", sort=False):
        line, = ax.plot(group["snr"], group["mse_mean"], lw=2, alpha=0.8, marker="o", ms=3, label=name,
                        color=PAPER_COLORS.get(name))
        low = (group["mse_mean"] - group["mse_std"]).clip(lower=group["mse_mean"] * 0.05)
        ax.fill_between(group["snr"], low, group["mse_mean"] + group["mse_std"], color=line.get_color(),
                        alpha=0.15, lw=0)
    labels = {"baseline_mean": "mean-of-all baseline", "baseline_x0": "vector-0 baseline"}
    for name, group in frame[frame["pooler"].isin(BASELINES)].groupby("pooler", sort=False):
        ax.plot(group["snr"], group["mse_mean"], ls="--", lw=1.5, alpha=0.5, color="grey" if
                name == "baseline_mean" else "black", label=labels[name])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = frame.drop_duplicates("K")
    ax.set_xticks(ticks["snr"], [f"{k}/{round(k / s)}" for k, s in zip(ticks["K"], ticks["snr"])], fontsize=7)
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_ylim(bottom=0.5 * learned["mse_mean"].min() if len(learned) else None)
    ax.set_xlabel("signal-to-noise ratio K / N")
    ax.set_ylabel("test MSE")
    ax.set_title(title, fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, ncol=2)
    save_figure(fig, path)


def format_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per K, one column per pooler, cells ``mean ± std`` (baselines, and poolers run with one seed: the value
    alone, since one seed has no spread to show)."""
    def number(v: float, floor: float = 1e-3) -> str:  # 4 decimals, or 2 digits below ``floor``
        return f"{v:.4f}" if v >= floor or v == 0 else f"{v:.1e}"

    cells = frame.assign(cell=[number(m) if p in BASELINES or n < 2 else f"{number(m)} ± {number(s, 1e-4)}"
                               for p, m, s, n in zip(frame["pooler"], frame["mse_mean"], frame["mse_std"],
                                                     frame["seeds"])])
    table = cells.pivot(index=["K", "snr"], columns="pooler", values="cell")
    return table[list(dict.fromkeys(frame["pooler"]))].reset_index()


# -- CLI ----------------------------------------------------------------------------------------
def run_snr_command(args: argparse.Namespace) -> int:
    """``poolkit bench snr``: run, print the table, write --out. Bad input raises PoolkitError."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    frame = run_snr(config, args.out, force=args.force, progress=not args.no_progress)
    shown = format_table(frame)
    spread = f"mean ± std over {config.seeds} seeds" if config.seeds > 1 else "one seed (no spread)"
    print_table(f"SNR benchmark: test MSE, {spread} ({config.preset})", shown.columns,
                [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in shown.itertuples(index=False)],
                clock, args.out)
    return 0
