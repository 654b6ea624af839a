"""``poolkit bench mil``: poolers as the MIL pooling of Ilse, Tomczak & Welling, "Attention-based Deep Multiple
Instance Learning" (ICML 2018), on the classic MIL benchmarks (MUSK1, MUSK2, ELEPHANT, ...; :mod:`.mil_data`).

Protocol, one for every pooler: the bags are split by a seeded stratified k-fold (repeat ``r`` draws the split with
``seed + r``); in each outer fold, the learning rate (a small grid) and the number of epochs (checkpoints every
``eval_every``) are chosen on inner stratified hold-outs of the training bags alone, by mean inner accuracy (ties:
lower inner log-loss, then fewer epochs); the model is then trained on the whole training fold with them and scores
the test fold once (accuracy and ROC AUC). Features are standardised with the statistics of the bags being trained
on. The instance MLP's initial weights depend on (dataset, repeat, fold) only, so poolers are compared paired.

A committed run can be extended with more poolers (:func:`extend_mil`, ``--extend DIR``): the same protocol read from
its results.json, every row recording the commit it ran at, and one fold of each earlier pooler re-run first to show
whether the earlier rows still reproduce at this commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from poolkit.cli.options import config_from_args, given_flags
from poolkit.errors import PoolkitError
from poolkit.cli.common import pooler_from_label
from poolkit.provenance import git_commit

from .harness import Stopwatch, restored_threads, results_folder, run_tasks
from .mil_config import DEFAULT, PRESETS, RESULT_FILES, MILConfig
from .mil_data import Bags, load_bags, standardize, stratified_folds
from .mil_model import MILModel, auc, fit, predict, score
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs

ABLATION_BASE = "gated_attention"
COLUMNS = ["dataset", "pooler", "repeat", "fold", "accuracy", "auc", "lr", "epochs", "inner_accuracy", "commit"]
#: What a re-run fold must give again for the earlier rows to count as reproduced.
REPRODUCED = ("accuracy", "auc", "lr", "epochs", "inner_accuracy")
#: Ilse et al. (ICML 2018), Table 1: test accuracy, mean and (their ±) standard error over five repetitions of
#: 10-fold cross-validation. The paper's numbers, not ours.
PAPER = {"attention": {"musk1": (0.892, 0.040), "musk2": (0.858, 0.048), "elephant": (0.868, 0.022)},
         "gated_attention": {"musk1": (0.900, 0.050), "musk2": (0.863, 0.042), "elephant": (0.857, 0.027)}}


def run_mil(config: MILConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *, force: bool = False,
            progress: bool = True) -> pd.DataFrame:
    """Run the benchmark; return one row per (dataset, pooler, repeat, fold) (:data:`COLUMNS`). With ``out_dir``,
    also write results.csv, results.json (settings, provenance, runtime, summary, ablation) and accuracy.png there;
    existing results are kept unless ``force``. ``workers > 1`` spawns processes: a script needs the ``__main__``
    guard."""
    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        for name in config.datasets:  # a missing package or a too-small class fails here, before any work
            stratified_folds(load_bags(name).labels, config.folds, config.seed)
        runs, cost = _timed_tasks(config, _tasks(config, config.poolers), progress)
        frame = _frame(runs)
        if out is not None:
            _write_outputs(out, config, frame, runs, cost)
    return frame


def extend_mil(out_dir: str | os.PathLike, poolers: tuple[str, ...], *, progress: bool = True) -> pd.DataFrame:
    """Add ``poolers`` to the run in ``out_dir`` and rewrite its files with all the rows.

    The protocol (folds, seeds, grids, widths, execution) is the run's own, read from its results.json, so the new
    rows are paired with the earlier ones fold for fold. Rows keep the commit they ran at (``commit``); the earlier
    run's provenance, cost and poolers are kept under ``extended``, with ``reproduced``: fold 0 of the first
    repetition of the smallest dataset re-run here for every earlier pooler, and whether it gave the same
    :data:`REPRODUCED` values (the earlier rows come from that commit's code; where they do not reproduce, the
    two commits' rows are not strictly comparable, and the file says so)."""
    with results_folder(out_dir, RESULT_FILES, extend=True) as out:
        recorded = recorded_config(out)
        before, earlier = json.loads((out / "results.json").read_text()), recorded.poolers
        if not poolers or any(p in earlier for p in poolers):
            raise PoolkitError(f"--extend {out}: name poolers that the run does not hold yet (it has {', '.join(earlier)})")
        config = dataclasses.replace(recorded, poolers=earlier + tuple(poolers)).validated()
        commit = before["provenance"].get("commit")
        old_runs = [{**run, "commit": run.get("commit", commit)} for run in before["runs"]]
        smallest = min(config.datasets, key=lambda d: load_bags(d).features.numel())
        checks = [(smallest, 0, 0, label) for label in earlier]
        fresh, cost = _timed_tasks(config, checks + _tasks(config, tuple(poolers)), progress)
        key = lambda run: (run["dataset"], run["pooler"], run["repeat"], run["fold"])  # noqa: E731
        then = {key(run): run for run in old_runs}
        reproduced = [{"dataset": run["dataset"], "pooler": run["pooler"], "repeat": run["repeat"], "fold": run["fold"],
                       "same": all(run[k] == then[key(run)][k] for k in REPRODUCED),
                       "then": {k: then[key(run)][k] for k in REPRODUCED}, "now": {k: run[k] for k in REPRODUCED}}
                      for run in fresh if run["pooler"] in earlier]
        runs = _in_order(config, old_runs + [run for run in fresh if run["pooler"] not in earlier])
        extended = {"poolers_added": list(poolers), "reproduced": reproduced,
                    "earlier": {k: before[k] for k in ("provenance", "runtime_seconds", "cpu_seconds",
                                                        "load_average_start_end")} | {"poolers": list(earlier)}}
        frame = _frame(runs)
        _write_outputs(out, config, frame, runs, cost, extended)
    return frame


def _timed_tasks(config: MILConfig, tasks: list[tuple[str, int, int, str]], progress: bool) -> tuple[list, dict]:
    """:func:`_run_tasks`, each run stamped with the commit, and its cost (:meth:`.harness.Stopwatch.record`)."""
    clock = Stopwatch()
    commit = git_commit()  # once, not per fold: it runs git twice
    with restored_threads():  # each task sets config.threads
        runs = [{**run, "commit": commit} for run in _run_tasks(config, tasks, progress)]
    return runs, clock.record()


def recorded_config(out_dir: str | os.PathLike) -> MILConfig:
    """The settings of the run written in ``out_dir`` (its results.json)."""
    try:
        settings = json.loads((Path(out_dir) / "results.json").read_text())["settings"]
    except (OSError, KeyError, json.JSONDecodeError) as error:
        raise PoolkitError(f"{out_dir}: no readable results.json with settings there ({error}); make the run first "
                           "with --out")
    return MILConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()})


def _frame(runs: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{key: run[key] for key in COLUMNS} for run in runs], columns=COLUMNS)


# -- one outer fold ---------------------------------------------------------------------------------------
def build_model(in_features: int, label: str, widths: tuple[int, ...], seed: int) -> MILModel:
    """Seeded: the instance MLP's weights depend on ``seed`` only, not on the pooler."""
    torch.manual_seed(seed)
    return MILModel(in_features, pooler_from_label(label), widths)


def select(config: MILConfig, train: Bags, label: str, seed: int) -> dict:
    """The learning rate and epochs of the best mean accuracy on inner hold-outs of ``train`` (the outer training
    fold's bags, the only bags this sees); ties: lower inner log-loss, then fewer epochs, then the earlier lr."""
    from sklearn.model_selection import StratifiedShuffleSplit

    splitter = StratifiedShuffleSplit(config.inner_splits, test_size=config.inner_fraction, random_state=seed)
    inner = [standardize(train.subset(a), train.subset(b))
             for a, b in splitter.split(np.zeros(len(train)), train.labels.numpy())]
    candidates = []
    for lr in config.lrs:
        curves = []
        for split, (inner_train, inner_val) in enumerate(inner):
            model = build_model(train.features.shape[1], label, config.widths, seed + split)
            curves.append(fit(model, inner_train, epochs=config.epochs, batch_size=config.batch_size, lr=lr,
                              weight_decay=config.weight_decay, seed=seed + split, evaluate=inner_val,
                              eval_every=config.eval_every))
        for points in zip(*curves):
            candidates.append({"lr": lr, "epochs": points[0].epoch,
                               "inner_accuracy": float(np.mean([p.accuracy for p in points])),
                               "inner_loss": float(np.mean([p.loss for p in points]))})
    return max(candidates, key=lambda c: (c["inner_accuracy"], -c["inner_loss"], -c["epochs"]))


def run_fold(config: MILConfig, bags: Bags, repeat: int, fold: int, label: str) -> dict:
    """One (dataset, repeat, fold, pooler): select on the training fold, retrain on all of it, score the test fold."""
    tic, cpu = time.perf_counter(), time.process_time()
    train_index, test_index = stratified_folds(bags.labels, config.folds, config.seed + repeat)[fold]
    seed = config.seed + 1000 * repeat + fold
    chosen = select(config, bags.subset(train_index), label, seed)
    train, test = standardize(bags.subset(train_index), bags.subset(test_index))
    model = build_model(train.features.shape[1], label, config.widths, seed)
    fit(model, train, epochs=chosen["epochs"], batch_size=config.batch_size, lr=chosen["lr"],
        weight_decay=config.weight_decay, seed=seed)
    probability = predict(model, test).numpy()
    return {"dataset": bags.name, "pooler": label, "repeat": repeat, "fold": fold,
            "accuracy": score(model, test).accuracy, "auc": auc(test.labels.numpy(), probability), **chosen,
            "test_bags": len(test), "seconds": round(time.perf_counter() - tic, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3)}


# -- running every task -------------------------------------------------------------------------------
def _task(config: MILConfig, task: tuple[str, int, int, str]) -> dict:
    """One task in this process (the datasets are read once per process), on ``threads`` torch threads."""
    torch.set_num_threads(config.threads)
    name, repeat, fold, label = task
    return run_fold(config, load_bags(name), repeat, fold, label)


def _tasks(config: MILConfig, poolers: tuple[str, ...]) -> list[tuple[str, int, int, str]]:
    """Every (dataset, repeat, fold, pooler) of ``poolers``, the largest dataset first so that the workers finish
    together."""
    order = sorted(config.datasets, key=lambda d: -load_bags(d).features.numel())
    return [(d, r, f, p) for d in order for r in range(config.repeats) for f in range(config.folds) for p in poolers]


def _run_tasks(config: MILConfig, tasks: list[tuple[str, int, int, str]], progress: bool) -> list[dict]:
    """Run ``tasks``; each is seeded on its own, so the results do not depend on ``workers``. Returned in a fixed
    order."""
    runs = run_tasks(functools.partial(_task, config), tasks, workers=config.workers, progress=progress, desc="mil",
                     unit="fold")
    return _in_order(config, runs)


def _in_order(config: MILConfig, runs: list[dict]) -> list[dict]:
    """Runs sorted by the config's dataset and pooler order, then repeat and fold."""
    rank = {"dataset": config.datasets.index, "pooler": config.poolers.index}
    return sorted(runs, key=lambda r: (rank["dataset"](r["dataset"]), rank["pooler"](r["pooler"]), r["repeat"],
                                       r["fold"]))


# -- summary --------------------------------------------------------------------------------------------
def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, pooler): accuracy and AUC over all test folds; each repetition's cross-validated accuracy (the
    mean over its folds) and, as the paper reports, their mean and standard error over repetitions (NaN for one);
    and the standard error over folds (the only spread a single repetition has)."""
    rows = []
    for (dataset, label), group in frame.groupby(["dataset", "pooler"], sort=False):
        per_repeat = group.groupby("repeat")["accuracy"].mean()
        folds = group["accuracy"]
        rows.append({"dataset": dataset, "pooler": label, "repeats": len(per_repeat), "folds": len(folds),
                     "accuracy": float(per_repeat.mean()),
                     "sem_repeats": float(per_repeat.std(ddof=1) / np.sqrt(len(per_repeat)))
                     if len(per_repeat) > 1 else float("nan"),
                     "sem_folds": float(folds.std(ddof=1) / np.sqrt(len(folds))) if len(folds) > 1 else float("nan"),
                     "auc": float(group["auc"].mean())})
    return pd.DataFrame(rows)


def paired_differences(frame: pd.DataFrame, base: str = ABLATION_BASE, folds: int | None = None) -> pd.DataFrame:
    """Each pooler against ``base`` on the same (dataset, repeat, fold): the mean per-fold accuracy difference, its
    std, and a 95% interval from the corrected resampled t-test of Nadeau & Bengio (2003), whose variance factor
    1/n + 1/(k-1) allows for k-fold training sets overlapping; ``inside_noise`` when the interval holds 0. Per
    dataset and over all datasets together ("all")."""
    from scipy import stats

    folds = folds or int(frame["fold"].max()) + 1
    keys = ["dataset", "repeat", "fold"]
    reference = frame[frame["pooler"] == base].set_index(keys)["accuracy"]
    rows = []
    for label in dict.fromkeys(frame["pooler"]):
        if label == base:
            continue
        diff = (frame[frame["pooler"] == label].set_index(keys)["accuracy"] - reference).dropna()
        for dataset, part in [*diff.groupby(level="dataset", sort=False), ("all", diff)]:
            n = len(part)
            std = float(part.std(ddof=1)) if n > 1 else float("nan")
            half = float(stats.t.ppf(0.975, n - 1) * std * np.sqrt(1 / n + 1 / (folds - 1))) if n > 1 else float("nan")
            rows.append({"pooler": label, "dataset": dataset, "pairs": n, "diff_mean": float(part.mean()),
                         "diff_std": std, "ci95": half, "wins": int((part > 0).sum()), "losses": int((part < 0).sum()),
                         "inside_noise": bool(not abs(part.mean()) > half)})
    return pd.DataFrame(rows)


# -- outputs --------------------------------------------------------------------------------------------
def _write_outputs(out: Path, config: MILConfig, frame: pd.DataFrame, runs: list[dict], cost: dict,
                   extended: dict | None = None) -> None:
    summary = summarize(frame)
    meta = run_record(
        "mil (poolers as MIL pooling; Ilse, Tomczak & Welling, ICML 2018)", config, cost,
        data={name: {"bags": len(b), "positive": int(b.labels.sum()), "instances": int(b.offsets[-1]),
                     "features": int(b.features.shape[1]), "largest_bag": int(b.sizes.max())}
              for name, b in ((name, load_bags(name)) for name in config.datasets)},
        published=PAPER, summary=summary.to_dict(orient="records"),
        ablation=paired_differences(frame, folds=config.folds).to_dict(orient="records")
        if ABLATION_BASE in config.poolers else [],
        **({"extended": extended} if extended else {}), runs=runs)
    write_outputs(out, frame, meta, {"accuracy": ("accuracy.png", lambda tmp: plot_results(
        summary, tmp, title=_title(config)))}, title=_title(config), tables={"summary": summary})


def _title(config: MILConfig) -> str:
    return (f"MIL ({config.preset}): {config.folds}-fold CV x {config.repeats}, MLP {'-'.join(map(str, config.widths))}"
            f", lr from {list(config.lrs)} and epochs <= {config.epochs} chosen on inner splits")


def plot_results(summary: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Test accuracy per pooler, one panel per dataset: ours (mean, error bar the standard error over repetitions,
    or over folds with one repetition) and the paper's attention / gated attention (mean ± its standard error)."""
    plt = pyplot()

    datasets = list(dict.fromkeys(summary["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.6 * len(datasets), 4.2), dpi=150, squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        part = summary[summary["dataset"] == dataset].reset_index(drop=True)
        spread = part["sem_repeats"].where(part["repeats"] > 1, part["sem_folds"])
        ax.errorbar(part.index, part["accuracy"], yerr=spread.fillna(0), fmt="o", ms=4, capsize=3, label="poolkit")
        paper = [(i, *PAPER[label][dataset]) for i, label in enumerate(part["pooler"])
                 if dataset in PAPER.get(label, {})]
        if paper:
            where, mean, sem = zip(*paper)
            ax.errorbar(np.array(where) + 0.25, mean, yerr=sem, fmt="s", ms=4, capsize=3, color="grey",
                        label="Ilse et al. 2018 (the paper's)")
        ax.set_xticks(part.index, part["pooler"].str.replace("gated_attention:scorer=", "gated:"), rotation=40,
                      ha="right", fontsize=7)
        ax.set_ylabel("test accuracy")
        ax.set_title(dataset, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


# -- CLI ------------------------------------------------------------------------------------------------
def run_mil_command(args: argparse.Namespace) -> int:
    """``poolkit bench mil``: run, print the summary, write --out. Bad input raises PoolkitError."""
    clock = Stopwatch()
    config = config_from_args(args, PRESETS)
    if args.extend:
        given = [flag for flag in given_flags(args, PRESETS) if flag != "--poolers"]
        if given or not args.poolers:
            raise PoolkitError(f"--extend takes the protocol of the run it extends: give only --poolers (got "
                               f"{' '.join(given) or 'no --poolers'})")
        frame = extend_mil(args.extend, config.poolers, progress=not args.no_progress)
        config = recorded_config(args.extend)
    else:
        frame = run_mil(config, args.out, force=args.force, progress=not args.no_progress)
    spread = "standard error over repetitions" if config.repeats > 1 else "standard error over folds"
    rows = []
    for row in summarize(frame).itertuples(index=False):
        sem = row.sem_repeats if config.repeats > 1 else row.sem_folds
        paper = PAPER.get(row.pooler, {}).get(row.dataset)
        rows.append([row.dataset, row.pooler, f"{row.accuracy:.3f} ± {sem:.3f}", f"{row.auc:.3f}",
                     f"{paper[0]:.3f} ± {paper[1]:.3f}" if paper else ""])
    print_table(f"MIL benchmark ({config.preset}): test accuracy, mean ± {spread}; AUC",
                ["dataset", "pooler", "accuracy", "AUC", "paper (Ilse et al. 2018)"], rows, clock,
                args.out or args.extend)
    return 0
