"""``poolkit bench snr-sweep``: the SNR benchmark (:mod:`.snr`, Brothers, ICML 2025, Sec. 5.1) over training
budgets, encoder depths and seeds, to tell which gaps to the paper come from quick mode's small budget.

Three stages; every choice is made on validation rows, never on the test rows it is scored on:

1. ``lr``: each pooler trains once per rate in ``lrs`` (run 0, K = ``lr_k``, the reference budget); the rate
   with the lowest best-epoch validation MSE is that pooler's rate in every later run.
2. ``budget``: every pooler at every K and every budget (samples x epochs), ``seeds`` runs each and
   ``largest_seeds`` at the largest budget (the paper's variance claim).
3. ``depth``: ``depth_poolers`` at K = ``depth_k`` and the reference budget with each of ``depths`` encoder
   layers, ``seeds`` runs each (the base depth is taken from stage 2).

Each run reports the test MSE of its best-validation epoch, as in :mod:`.snr`.

A committed sweep can be extended to more budgets (:func:`extend_snr_sweep`, ``--extend DIR``): the protocol
(encoder, seeds, folds, execution, each pooler's chosen rate) is read from its results.json, one of its runs is
re-run first and must give the same numbers, and the new cells are added with the commit they ran at.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from poolkit.cli.options import config_from_args, given_flags
from poolkit.errors import PoolkitError
from poolkit.provenance import run_provenance

from .harness import Stopwatch, results_folder
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs
from .snr import BASELINES, PAPER_COLORS, baselines, release_data, run_jobs, tasks
from .snr_config import QUICK, SNRConfig, resolve_snr_name
from .snr_sweep_config import CPU_SWEEP, PLOT, PRESETS, RESULT_FILES, SweepConfig

KEYS = ["stage", "samples", "epochs", "layers", "lr", "pooler", "K"]
COLUMNS = [*KEYS, "budget_x", "snr", "mse_mean", "mse_std", "seeds", "best_last", "cpu_seconds", "commit"]


def run_snr_sweep(sweep: SweepConfig = CPU_SWEEP, out_dir: str | os.PathLike | None = None, *, force: bool = False,
                  progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """Run the three stages; return one row per (stage, budget, layers, lr, pooler, K) (columns :data:`COLUMNS`,
    the analytic baselines as poolers ``baseline_mean`` / ``baseline_x0`` per budget, stage ``baseline``) and the
    metadata (settings, the learning-rate choice, every run). With ``out_dir``, also write results.csv,
    results.json, budget_sweep.png and report.html there (kept unless ``force``)."""
    sweep = sweep.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=sweep) as out:
        clock = Stopwatch()
        runs = []
        lrs = {p: sweep.lrs[0] for p in sweep.poolers}
        choice = {}
        if len(sweep.lrs) > 1:
            runs += _run_stage(sweep, sweep.lr_configs(), progress, "snr-sweep lr")
            for pooler in sweep.poolers:
                val = {r["lr"]: min(r["val_loss"]) for r in runs if r["pooler"] == pooler}
                lrs[pooler] = min(val, key=val.get)
                choice[pooler] = {"lr": lrs[pooler], "val_mse": {str(lr): v for lr, v in val.items()}}
        runs += _run_stage(sweep, sweep.configs(lrs), progress, "snr-sweep")
        meta = run_record("snr-sweep (Brothers, ICML 2025, KNN-centroid noise robustness over budgets)", sweep,
                          clock.record(), quick_budget=[QUICK.num_samples, QUICK.epochs], lr_choice=choice, runs=runs)
        frame = summarize(sweep, runs, meta["provenance"].get("commit"))
        release_data()
        if out is not None:
            _write(out, sweep, frame, meta)
    return frame, meta


def _write(out: Path, sweep: SweepConfig, frame: pd.DataFrame, meta: dict) -> None:
    added = dict.fromkeys(f"{s}x{e}" for ext in meta.get("extensions", []) for s, e in ext["budgets"])
    title = _title(sweep) + (f"\nextended to {', '.join(added)} (some poolers; see results.json)" if added else "")
    write_outputs(out, frame, meta, {"budget sweep": (PLOT, lambda tmp: plot_sweep(frame, tmp, title, sweep.lr_k))},
                  title=title, tables={"results": frame})


def recorded_sweep(out_dir: str | os.PathLike) -> tuple[SweepConfig, dict]:
    """The validated settings of the sweep in ``out_dir`` (its results.json) and that file's contents."""
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        raise PoolkitError(f"--extend {out_dir}: no results.json there; give the folder of a snr-sweep run")
    meta = json.loads(path.read_text())
    settings = meta["settings"]
    tuples = {k: tuple(tuple(b) for b in v) if k == "budgets" else tuple(v) if isinstance(v, list) else v
              for k, v in settings.items() if k != "base"}
    base = SNRConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings["base"].items()})
    return SweepConfig(base=base, **tuples).validated(), meta


def extend_snr_sweep(out_dir: str | os.PathLike, budgets: tuple[tuple[int, int], ...],
                     poolers: tuple[str, ...] | None = None, ks: tuple[int, ...] | None = None, *,
                     progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """Add ``budgets`` for ``poolers`` at ``ks`` (default: all of the run's) to the sweep in ``out_dir``, with
    that run's own protocol, and rewrite its files with every row.

    Each pooler keeps the rate the run chose for it on validation rows (stage 1 is not re-run), ``seeds`` runs
    per cell and its base depth. First the run's first budget-stage run at its reference
    budget is re-run here; if its losses and test MSE differ from the recorded ones, the settings or the code
    changed and nothing is run (PoolkitError). New runs record their commit; each extension is listed under
    ``extensions`` (budgets, poolers, the check, cost, provenance); ``settings`` stay the original run's."""
    with results_folder(out_dir, RESULT_FILES, extend=True) as out:
        sweep, before = recorded_sweep(out)
        poolers = sweep.poolers if poolers is None else tuple(dict.fromkeys(resolve_snr_name(p) for p in poolers))
        budgets = tuple((int(s), int(e)) for s, e in budgets)
        ks = sweep.ks if ks is None else tuple(dict.fromkeys(int(k) for k in ks))
        if not ks or not set(ks) <= set(sweep.ks):
            raise PoolkitError(f"--extend {out}: --ks must be some of the run's K ({', '.join(map(str, sweep.ks))}), "
                               f"got {', '.join(map(str, ks)) or 'none'}")
        had = {(r["stage"], r["samples"], r["epochs"], r["pooler"]) for r in before["runs"]}
        clash = [f"{p} at {s}x{e}" for s, e in budgets for p in poolers if ("budget", s, e, p) in had]
        if not budgets or not poolers or not set(poolers) <= set(sweep.poolers) or clash or len(set(budgets)) < len(
                budgets):
            raise PoolkitError(f"--extend {out}: give distinct new --budgets for some of the run's poolers "
                               f"({', '.join(sweep.poolers)}); already there: {', '.join(clash) or 'none'}")
        lrs = {p: before["lr_choice"].get(p, {"lr": sweep.lrs[0]})["lr"] for p in sweep.poolers}
        provenance = run_provenance()
        clock, commit = Stopwatch(), before["provenance"].get("commit")
        old = [{**run, "commit": run.get("commit", commit)} for run in before["runs"]]
        check = next(r for r in old if r["stage"] == "budget" and (r["samples"], r["epochs"]) == sweep.budgets[
            sweep.reference] and r["layers"] == sweep.base.layers)
        config = sweep._config(check["pooler"], check["lr"], check["samples"], check["epochs"], check["layers"],
                               sweep.ks, sweep.seeds).validated()
        task = (check["seed"] - sweep.base.seed, check["K"], check["pooler"])
        again = run_jobs([(config, task)], 1, sweep.base.threads, False)[0]
        fields = ("test_mse", "best_epoch", "val_loss", "train_loss")
        reproduced = {"pooler": check["pooler"], "K": check["K"], "samples": check["samples"],
                      "epochs": check["epochs"], "seed": check["seed"], "then": {f: check[f] for f in fields},
                      "now": {f: again[f] for f in fields}}
        if any(again[f] != check[f] for f in fields):
            release_data()
            raise PoolkitError(f"--extend {out}: its run of {check['pooler']} at K = {check['K']} does not "
                               f"reproduce here (test MSE {check['test_mse']:.6g} then, {again['test_mse']:.6g} now): "
                               "the settings or the code differ from the run's; run a new sweep instead of extending "
                               "this one")
        configs = [("budget", sweep._config(p, lrs[p], s, e, sweep.base.layers, ks, sweep.seeds))
                   for s, e in budgets for p in poolers]
        fresh = [{**run, "commit": provenance.get("commit")} for run in _run_stage(sweep, configs, progress,
                                                                                   "snr-sweep extend")]
        release_data()
        runs = old + fresh
        extension = {"budgets": [list(b) for b in budgets], "poolers": list(poolers), "ks": list(ks),
                     "lrs": {p: lrs[p] for p in poolers},
                     "reproduced": reproduced, "runtime_seconds": round(clock.seconds(), 1),
                     "cpu_seconds": round(sum(r["cpu_seconds"] for r in fresh) + again["cpu_seconds"], 1),
                     "provenance": provenance}
        meta = {**before, "extensions": [*before.get("extensions", []), extension], "runs": runs}
        every = dataclasses.replace(sweep, budgets=tuple(dict.fromkeys(
            (r["samples"], r["epochs"]) for r in runs if r["stage"] == "budget")))
        frame = summarize(every, runs, provenance.get("commit"))
        _write(out, sweep, frame, meta)
    return frame, meta


def _run_stage(sweep: SweepConfig, configs: list[tuple[str, SNRConfig]], progress: bool, desc: str) -> list[dict]:
    """Every run of ``configs``, the costliest first (so the last ones to finish are short); each run's dict gets
    its stage, budget, layers and rate."""
    jobs = [(stage, config, task) for stage, config in configs for task in tasks(config)]
    jobs.sort(key=lambda j: -j[1].num_samples * j[1].epochs * max(j[1].layers, 1))
    base = sweep.base
    runs = run_jobs([(config, task) for _, config, task in jobs], base.workers, base.threads, progress, desc)
    return [{"stage": stage, "samples": config.num_samples, "epochs": config.epochs, "layers": config.layers,
             "lr": config.lr, **run} for (stage, config, _), run in zip(jobs, runs)]


def summarize(sweep: SweepConfig, runs: list[dict], commit: str | None = None) -> pd.DataFrame:
    """Per (stage, samples, epochs, layers, lr, pooler, K): mean and sample std (ddof 1; 0 for one run) of the
    test MSE, runs, runs whose best epoch was the last, their CPU seconds and the commit they ran at (a run
    without one: ``commit``); then the analytic baselines, computed at ``commit``."""
    table = pd.DataFrame(runs).assign(last=lambda f: [b == len(v) - 1 for b, v in zip(f["best_epoch"], f["val_loss"])])
    table["commit"] = table["commit"].fillna(commit or "") if "commit" in table else commit or ""
    grouped = table.groupby(KEYS, sort=False)
    frame = grouped["test_mse"].agg(mse_mean="mean", mse_std="std", seeds="count").reset_index()
    frame["mse_std"] = frame["mse_std"].fillna(0.0)
    frame["best_last"] = grouped["last"].sum().to_numpy()
    frame["cpu_seconds"] = grouped["cpu_seconds"].sum().round(1).to_numpy()
    frame["commit"] = grouped["commit"].first().to_numpy()
    rows = []
    for samples, epochs in sweep.budgets:
        config = dataclasses.replace(sweep.base, num_samples=samples, epochs=epochs).validated()
        for (name, k), value in baselines(config).items():
            rows.append(["baseline", samples, epochs, 0, 0.0, name, k, value, 0.0, 1, 0, 0.0, commit or ""])
    frame = pd.concat([frame, pd.DataFrame(rows, columns=[*KEYS, "mse_mean", "mse_std", "seeds", "best_last",
                                                          "cpu_seconds", "commit"])], ignore_index=True)
    frame["budget_x"] = frame["samples"] * frame["epochs"] / (QUICK.num_samples * QUICK.epochs)
    frame["snr"] = frame["K"] / sweep.base.num_vectors
    order = {name: i for i, name in enumerate(("lr", "budget", "depth", "baseline", *sweep.poolers, *BASELINES))}
    frame = frame.sort_values(["stage", "budget_x", "layers", "lr", "pooler", "K"], kind="stable",
                              key=lambda col: col.map(order) if col.name in ("stage", "pooler") else col)
    return frame[COLUMNS].reset_index(drop=True)


def _title(sweep: SweepConfig) -> str:
    budgets = ", ".join(f"{s}x{e}" for s, e in sweep.budgets)
    return (f"KNN-centroid budget sweep: N={sweep.base.num_vectors}, budgets (samples x epochs) {budgets}, "
            f"{sweep.base.layers} layer(s), {sweep.seeds} seeds ({sweep.largest_seeds} at the largest)")


def budget_paths(budget: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The budget rows on two paths that meet at quick mode's budget: ``epochs`` (the sweep's budgets and, above
    quick mode, more epochs on its samples) and ``samples`` (quick mode's epochs on more samples); an empty path
    is left out. Two budgets of one multiple (4000x32, 16000x8) lie on different paths."""
    more_data = (budget["epochs"] == QUICK.epochs) & (budget["samples"] >= QUICK.num_samples)
    beyond = more_data & (budget["samples"] > QUICK.num_samples)
    paths = {"epochs": budget[~beyond], "samples": budget[more_data]}
    return {name: rows for name, rows in paths.items() if rows["budget_x"].nunique() > 1}


def plot_sweep(frame: pd.DataFrame, path: str | os.PathLike, title: str = "", k_shown: int | None = None) -> None:
    """Left: mean / AdaPool test MSE against the budget (multiples of quick mode), one line per K and path (more
    epochs solid, more samples dashed). Right: each pooler's test MSE against the budget at K = ``k_shown`` (the
    samples path dashed, the analytic baselines grey and black)."""
    plt = pyplot()
    budget = frame[frame["stage"] == "budget"]
    styles = {"epochs": ("-", "more epochs"), "samples": ("--", "more samples")}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=150)
    k_shown = k_shown if k_shown in set(budget["K"]) else budget["K"].iloc[0]
    k_colors = {k: f"C{i}" for i, k in enumerate(sorted(budget["K"].unique()))}
    for name, rows in budget_paths(budget).items():
        style, label = styles[name]
        cells = rows.set_index(["pooler", "K", "budget_x"])["mse_mean"]
        for k in sorted(rows["K"].unique()):
            at = rows[rows["K"] == k].groupby("budget_x")["pooler"].agg(set)
            xs = sorted(x for x, names in at.items() if {"mean", "adapool"} <= names)
            if len(xs) > 1:
                left.plot(xs, [cells["mean", k, x] / cells["adapool", k, x] for x in xs], marker="o", ls=style,
                          color=k_colors[k], label=f"K = {k}, {label}")
        for pooler, group in rows[rows["K"] == k_shown].groupby("pooler", sort=False):
            group = group.sort_values("budget_x")
            right.errorbar(group["budget_x"], group["mse_mean"], yerr=group["mse_std"], marker="o", ms=3, capsize=2,
                           ls=style, label=pooler if name == "epochs" else None, color=PAPER_COLORS.get(pooler))
    left.axhline(1.0, color="grey", lw=1, ls=":")
    left.set_xscale("log", base=2)
    left.set_xlabel("training budget (samples x epochs, multiples of --quick)")
    left.set_ylabel("test MSE of mean / adapool")
    if left.get_legend_handles_labels()[0]:  # no line where no path has two budgets (quick mode)
        left.legend(fontsize=6)
    base = frame[(frame["stage"] == "baseline") & (frame["K"] == k_shown)]
    base = base[(base["epochs"] != QUICK.epochs) | (base["samples"] <= QUICK.num_samples)]
    base = base.assign(budget_x=base["budget_x"].clip(upper=budget["budget_x"].max())).sort_values("budget_x")
    for name, group in base.groupby("pooler", sort=False):
        right.plot(group["budget_x"], group["mse_mean"], ls=":", lw=1, color="grey" if name == BASELINES[0] else
                   "black", label=name)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("training budget (multiples of --quick; dashed: more samples)")
    right.set_ylabel(f"test MSE at K = {k_shown}")
    right.legend(fontsize=6, ncol=2)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.2)
    save_figure(fig, path, title)


# -- CLI ------------------------------------------------------------------------------------------------------
def run_snr_sweep_command(args: argparse.Namespace) -> int:
    """``poolkit bench snr-sweep``: run, print the budget table, write --out. Bad input raises PoolkitError."""
    clock = Stopwatch()
    sweep = config_from_args(args, PRESETS)
    if args.extend:
        given = [flag for flag in given_flags(args, PRESETS) if flag not in ("--budgets", "--poolers", "--ks")]
        if given or not args.budgets:
            raise PoolkitError("--extend takes the protocol of the sweep it extends: give only --budgets, --poolers "
                               f"and --ks (got {' '.join(given) or 'no --budgets'})")
        frame, _ = extend_snr_sweep(args.extend, sweep.budgets, sweep.poolers if args.poolers else None,
                                    sweep.ks if args.ks else None, progress=not args.no_progress)
    else:
        frame, _ = run_snr_sweep(sweep, args.out, force=args.force, progress=not args.no_progress)
    shown = frame[frame["stage"] == "budget"].pivot_table(index=["budget_x", "K"], columns="pooler",
                                                          values="mse_mean", sort=False)
    print_table("SNR budget sweep: test MSE (mean over seeds) by budget (multiples of --quick) and K",
                ["budget", "K", *shown.columns],
                [[f"{budget:g}x", str(k), *(f"{v:.4g}" if np.isfinite(v) else "" for v in row)]
                 for (budget, k), row in shown.iterrows()], clock, args.out or args.extend)
    return 0
