"""``poolkit bench task-arithmetic``: do attention-only task vectors merge with less interference than full
fine-tuning's, and than those of fine-tuning in the tangent space?

Jin et al., "Fine-Tuning Attention Modules Only: Enhancing Weight Disentanglement in Task Arithmetic" (arXiv
2407.07089) fine-tune only the attention projections W_q, W_k, W_v, W_o and report that the task vectors then add
with less interference (Ilharco et al.'s task arithmetic, ICLR 2023), close to NTK linearisation without its cost,
and that task-specific heads hinder the decoupling. Ortiz-Jimenez et al., "Task Arithmetic in the Tangent Space"
(NeurIPS 2023) fine-tune the linearised model f_lin(x; theta) = f(x; theta_0) + J_theta f(x; theta_0) (theta -
theta_0) and report better weight disentanglement and task addition than non-linear fine-tuning. Here, on real text
tasks that ship with poolkit's built-in sets and the packaged MiniLM as the base, per seed and fine-tuning mode:

- ``all``: every encoder weight, pooler + head trained with it;
- ``attention``: W_q, W_k, W_v, W_o only (``--train-only attention``), pooler + head trained with them;
- ``attention_frozen_head``: the same, the pooler + head first trained on the frozen base and then fixed
  (``--frozen-head``);
- ``linearized``: every encoder weight as in ``all``, the encoder replaced by its first-order Taylor expansion at
  the base (:func:`linearize`; the pooler + head, trained with it, stay non-linear on top), in training and when
  its merged vectors are scored.

Each task is fine-tuned alone (``poolkit train``: one split, checkpoint on inner validation rows); then the task
vectors of all tasks are merged (``poolkit.training.merging``) with one shared alpha chosen on the tasks' inner
validation rows. Scored on each task's test rows: the single-task model, the merged model and the task's own vector
alone at the chosen alpha: absolute scores (accuracy, RMSE) and a normalised skill where higher is better everywhere
(accuracy, or 1 - RMSE / RMSE of predicting the fit rows' mean); what merging costs, merged minus single-task skill
(a difference: the papers' ratio "normalised accuracy" blows up for a task whose single-task skill is near 0, as a
regression barely better than its mean is); the interference, how much adding the other tasks' vectors changes a
task's predictions (:func:`changed`: the share of test rows whose predicted class changes, or for regression the
RMS change over the fit rows' target std), raw and divided by the L2 norm of what merging adds to the task's own
model, alpha times the sum of the other tasks' vectors over the encoder's weights; and Ortiz-Jimenez et al.'s
weight-disentanglement error, its Eq. 4 term of each task, the same distance between the merged model and the
task's own vector alone at one shared alpha, averaged over :data:`XI_ALPHAS` (their xi sums these terms over the
tasks).
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from poolkit.cli.options import config_from_args

from .harness import Stopwatch, results_folder, run_tasks
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs
from .task_arithmetic_config import DEFAULT, MODES, PRESETS, RESULT_FILES, TaskArithmeticConfig

#: the shared alphas the disentanglement error is averaged over: the task vectors' sum at half and full strength
XI_ALPHAS = (0.5, 1.0)
COLUMNS = ["mode", "seed", "task", "kind", "metric", "finetuned", "merged", "own", "finetuned_skill", "merged_skill",
           "own_skill", "change", "interference", "tau_norm", "added_norm", "interference_per_norm",
           "disentanglement_error", "alpha", "trainable_params", "train_seconds"]
#: What the papers report, qualitatively: their models, tasks and training budgets are far larger than this
#: benchmark's, so only the direction of each finding is compared.
PAPER = {"attention_vs_all": "attention-only fine-tuning gives task vectors whose sum keeps more of each task's "
         "accuracy than full fine-tuning's (better weight disentanglement)",
         "heads": "task-specific heads trained with the encoder hinder the decoupling",
         "linearized_vs_all": "fine-tuning the linearised model gives task vectors with a lower weight-disentanglement "
         "error and a better task addition than non-linear fine-tuning, at some single-task accuracy",
         "linearized_vs_attention": "attention-only fine-tuning comes close to NTK linearisation's weight "
         "disentanglement without its cost in single-task and merged accuracy"}


def task_name(spec: str) -> str:
    """A data spec's short name: ``builtin:wordnet-depth`` -> ``wordnet-depth``, ``/x/toy.csv`` -> ``toy``."""
    return spec.removeprefix("builtin:") if spec.startswith("builtin:") else Path(spec).name.split(".")[0]


def changed(task: str, own: np.ndarray, merged: np.ndarray, fit_std: list[float] | None) -> float:
    """How much adding the other tasks' vectors moved a task's predictions: the share of rows whose class changes
    (classification; multilabel: any label), or the RMS change over the fit rows' target std (regression)."""
    if task == "regression":
        return float(np.mean(np.sqrt(((own - merged) ** 2).mean(axis=0)) / np.asarray(fit_std)))
    if task == "multilabel":
        return float(((own > 0) != (merged > 0)).any(axis=1).mean())
    return float((own.argmax(axis=1) != merged.argmax(axis=1)).mean())


#: ``predict(alphas, tasks)``: the outputs of tasks (index -> (N, C); None: every task) with the encoder at
#: theta_0 + sum_t alphas[t] tau_t
Predict = Callable[[list[float], list[int] | None], dict[int, np.ndarray]]


def probe(predict: Predict, n: int, alpha: float) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Every task's outputs merged at one shared ``alpha``, and each task's with its own vector alone at ``alpha``."""
    return predict([alpha] * n, None), {t: predict([alpha if s == t else 0.0 for s in range(n)], [t])[t]
                                        for t in range(n)}


def disentanglement_error(predict: Predict, kinds: list[str], fit_stds: list, alphas=XI_ALPHAS) -> list[float]:
    """Each task's term of Ortiz-Jimenez et al.'s weight-disentanglement error (NeurIPS 2023, Eq. 4) with
    alpha_1 = ... = alpha_T = alpha: the :func:`changed` distance between the merged model's outputs and the task's
    own vector alone, on its rows, averaged over ``alphas``; xi is their sum over the tasks."""
    terms = []
    for alpha in alphas:
        merged, own = probe(predict, len(kinds), alpha)
        terms.append([changed(kind, own[t], merged[t], fit_stds[t]) for t, kind in enumerate(kinds)])
    return np.mean(terms, axis=0).tolist()


def vector_norms(base: dict, tuned: list[dict], alpha: float) -> tuple[list[float], list[float]]:
    """Per task, over the encoder's float weights in float64: ||tau_t||_2, and ||alpha sum_{s != t} tau_s||_2, what
    merging at ``alpha`` adds to the task's own model."""
    own, added = np.zeros(len(tuned)), np.zeros(len(tuned))
    for name, theta in base.items():
        if theta.is_floating_point():
            taus = [state[name].double() - theta.double() for state in tuned]
            total = sum(taus)
            own += [float(tau.square().sum()) for tau in taus]
            added += [float((total - tau).square().sum()) for tau in taus]
    return np.sqrt(own).tolist(), (alpha * np.sqrt(added)).tolist()


def linearize(encoder: torch.nn.Module) -> torch.nn.Module:
    """``encoder`` made its first-order Taylor expansion at its present weights theta_0, in place (Ortiz-Jimenez et
    al., NeurIPS 2023): its forward returns f(x; theta_0) + J_theta f(x; theta_0) (theta - theta_0), torch.func.jvp of
    a frozen copy at theta_0 along the live weights minus theta_0, so that training, merging and saving move and keep
    theta under its usual names. The copy runs eager attention (SDPA on CPU has no forward-mode derivative)."""
    from torch.func import functional_call, jvp
    from transformers.modeling_outputs import BaseModelOutput

    base = copy.deepcopy(encoder).requires_grad_(False)
    base.set_attn_implementation("eager")
    names, theta0 = zip(*base.named_parameters())

    def forward(*args, **kwargs):
        base.train(encoder.training)
        live = dict(encoder.named_parameters())

        def states(*params):
            out = functional_call(base, dict(zip(names, params)), args, kwargs)
            return (out.last_hidden_state, *(out.hidden_states or ()))

        value, change = jvp(states, theta0, tuple(live[n] - p for n, p in zip(names, theta0)))
        first, *hidden = [v + c for v, c in zip(value, change)]
        return BaseModelOutput(last_hidden_state=first, hidden_states=tuple(hidden) or None)

    encoder.forward = forward
    return encoder


def fit_linearized(settings, table, out: Path) -> dict:
    """``poolkit train``'s fit with each fold's encoder linearised at the base before its first step."""
    from poolkit.training.finetune import _Run, fit_run

    class Linearized(_Run):
        def new_fold(self, k, rows, work):
            fold = super().new_fold(k, rows, work)
            linearize(fold.accelerator.unwrap_model(fold.model).encoder)
            return fold

    return fit_run(Linearized, settings, table, out, resume=False, force=False, progress=False)


def _run_job(config: TaskArithmeticConfig, tables: list, job: tuple[int, str]) -> tuple[list[dict], dict]:
    """:func:`run_mode` for one (seed, mode), in a scratch folder of its own."""
    seed, mode = job
    with tempfile.TemporaryDirectory(prefix="poolkit-task-arithmetic-") as scratch:
        return run_mode(config, tables, mode, seed, Path(scratch))


def run_mode(config: TaskArithmeticConfig, tables: list, mode: str, seed: int, scratch: Path) -> tuple[list[dict],
                                                                                                        dict]:
    """Fine-tune every task in ``mode``, merge all task vectors (alpha searched on the validation rows) and score
    each task's test rows: one row per task (:data:`COLUMNS`) and the run's details (the search's candidates)."""
    from poolkit.training.config import TrainConfig
    from poolkit.training.finetune import TEST_OUTPUTS, fit
    from poolkit.training.merging import TaskArithmetic
    from poolkit.training.metrics import primary_metric, compute_metrics

    train_only, frozen_head, linear = MODES[mode]
    runs, trained = [], []
    for spec, table in zip(config.tasks, tables):
        settings = TrainConfig(model=config.model, pooler="mean", folds=1, epochs=config.epochs,
                               batch_size=config.batch_size, encoder_lr=config.encoder_lr, pooler_lr=config.pooler_lr,
                               layer_decay=1.0, max_length=config.max_length, patience=0, seed=seed,
                               train_only=train_only, frozen_head=config.head_epochs if frozen_head else 0)
        run = scratch / task_name(spec)
        tic = time.perf_counter()
        summary = fit_linearized(settings, table, run) if linear else fit(settings, table, run, progress=False)
        trained.append((summary, time.perf_counter() - tic))
        runs.append(run)
    merger = TaskArithmetic(config.model, runs, tables)
    if linear:
        linearize(merger.encoder)  # still the base: merged vectors are scored in the linearised form
    alphas, tried = merger.search(config.grid)
    outputs: dict[tuple, dict[int, np.ndarray]] = {}

    def predict(alphas: list[float], tasks: list[int] | None) -> dict[int, np.ndarray]:
        key = (tuple(alphas), tasks and tuple(tasks))
        if key not in outputs:
            outputs[key] = {t: outs[0] for t, outs in merger.outputs(alphas, "test", tasks).items()}
        return outputs[key]

    kinds = [task.task for task in merger.tasks]
    stds = [task.metas[0].get("target_std") for task in merger.tasks]
    merged, own = probe(predict, len(kinds), alphas[0])
    xi = disentanglement_error(predict, kinds, stds)
    norms, added = vector_norms(merger.base, [task.tuned[0] for task in merger.tasks], alphas[0])
    rows = []
    for t, task in enumerate(merger.tasks):
        summary, seconds = trained[t]
        finetuned = np.load(task.folds[0] / TEST_OUTPUTS)["outputs"]
        metric = primary_metric(task.task, task.data.n_outputs).name
        targets = task.data.targets[task.rows[0]["test"]]
        n_classes = len(task.metas[0]["label_names"]) if task.task == "classification" else None
        scored = (("finetuned", finetuned), ("merged", merged[t]), ("own", own[t]))
        absolute = {name: compute_metrics(task.task, out, targets, n_classes)[metric] for name, out in scored}
        skills = {f"{name}_skill": task.score(0, out, "test") for name, out in scored}
        interference = changed(task.task, own[t], merged[t], stds[t])
        rows.append({"mode": mode, "seed": seed, "task": task.name, "kind": task.task, "metric": metric, **absolute,
                     **skills, "change": skills["merged_skill"] - skills["finetuned_skill"],
                     "interference": interference, "tau_norm": norms[t], "added_norm": added[t],
                     "interference_per_norm": interference / added[t], "disentanglement_error": xi[t],
                     "alpha": alphas[t], "trainable_params": summary["trainable_params"],
                     "train_seconds": round(seconds, 2)})
    details = {"mode": mode, "seed": seed, "alpha": alphas[0],
               "candidates": [{"alpha": row["alphas"][0], "val_skill": row["skill"],
                               "val_skills": dict(zip([t.name for t in merger.tasks], row["skills"]))}
                              for row in tried],
               "best_epochs": {t.name: t.metas[0]["best_epoch"] for t in merger.tasks}}
    return rows, details


def run_task_arithmetic(config: TaskArithmeticConfig = DEFAULT, out_dir: str | os.PathLike | None = None, *,
                        force: bool = False, progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """Every (seed, mode): one row per task (:data:`COLUMNS`) and the results' metadata (settings, summary, the alpha
    searches). With ``out_dir``, also write :data:`RESULT_FILES` there; existing results are kept unless ``force``."""
    from poolkit.training.api import load

    config = config.validated()
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        clock = Stopwatch()
        tables = [load(spec, limit=config.rows, seed=config.data_seed) for spec in config.tasks]
        jobs = [(config.seed + i, mode) for i in range(config.seeds) for mode in config.modes]
        runs = run_tasks(functools.partial(_run_job, config, tables), jobs, threads=config.threads, progress=progress,
                         desc="task-arithmetic", unit="run")
        rows = [row for run_rows, _ in runs for row in run_rows]
        details = [run_details for _, run_details in runs]
        frame = pd.DataFrame(rows, columns=COLUMNS)
        meta = run_record(
            "task-arithmetic (merging task vectors of full, attention-only and linearised fine-tuning; Jin et al., "
            "arXiv 2407.07089; Ortiz-Jimenez et al., NeurIPS 2023; Ilharco et al., ICLR 2023)", config, clock.record(),
            xi_alphas=list(XI_ALPHAS),
            data={task_name(spec): {"source": table.source, "rows": len(table), "task": table.task}
                  for spec, table in zip(config.tasks, tables)},
            published=PAPER, summary=summarize(frame).to_dict(orient="records"),
            modes=mode_summary(frame).to_dict(orient="records"), runs=details)
        if out is not None:
            title = (f"{config.preset}: {config.rows} rows per task, {config.epochs} epoch(s), length "
                     f"{config.max_length}, {config.seeds} seeds")
            write_outputs(out, frame, meta,
                          {"task arithmetic": ("task_arithmetic.png", lambda tmp: plot(frame, tmp, title))})
    return frame, meta


def _mean_std(values: pd.Series) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan")


#: the measures a mode is read on, per seed as the mean over tasks
PER_SEED = ("finetuned_skill", "merged_skill", "change", "interference", "interference_per_norm",
            "disentanglement_error")


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, task): every score's mean and sample std over seeds."""
    rows = []
    for (mode, task), group in frame.groupby(["mode", "task"], sort=False):
        row = {"mode": mode, "task": task, "kind": group["kind"].iloc[0], "metric": group["metric"].iloc[0],
               "seeds": len(group)}
        for column in ("finetuned", "merged", "own", "finetuned_skill", "merged_skill", "own_skill", "change",
                       *PER_SEED, "tau_norm", "alpha"):
            row[f"{column}_mean"], row[f"{column}_std"] = _mean_std(group[column])
        rows.append(row)
    return pd.DataFrame(rows)


def mode_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per mode: the mean over tasks of each :data:`PER_SEED` measure, per seed, then mean and sample std over seeds;
    and the change's difference to ``all``'s, paired by seed (positive: merging costs this mode less)."""
    per_seed = frame.groupby(["mode", "seed"], sort=False)[list(PER_SEED)].mean()
    rows = []
    for mode, group in per_seed.groupby(level="mode", sort=False):
        row = {"mode": mode, "seeds": len(group)}
        for column in group.columns:
            row[f"{column}_mean"], row[f"{column}_std"] = _mean_std(group[column])
        if "all" in per_seed.index.get_level_values("mode"):
            diff = (group["change"].droplevel("mode") - per_seed.loc["all", "change"]).dropna()
            row["change_vs_all_mean"], row["change_vs_all_std"] = _mean_std(diff)
        rows.append(row)
    return pd.DataFrame(rows)


def plot(frame: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Per task: single-task (open) and merged (filled) test skill of every mode, mean +- std over seeds; the
    interference of the other tasks' vectors per unit norm of what they add; the disentanglement error."""
    plt = pyplot()

    summary = summarize(frame)
    tasks, modes = list(dict.fromkeys(frame["task"])), list(dict.fromkeys(frame["mode"]))
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), dpi=150)
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        part = summary[summary["mode"] == mode].set_index("task").reindex(tasks)
        at = np.arange(len(tasks)) + (i - (len(modes) - 1) / 2) * width
        colour = f"C{i}"
        axes[0].errorbar(at, part["finetuned_skill_mean"], yerr=part["finetuned_skill_std"].fillna(0), fmt="o",
                         mfc="none", color=colour, capsize=3)
        axes[0].errorbar(at, part["merged_skill_mean"], yerr=part["merged_skill_std"].fillna(0), fmt="o",
                         color=colour, capsize=3, label=mode)
        for ax, column in ((axes[1], "interference_per_norm"), (axes[2], "disentanglement_error")):
            ax.bar(at, part[f"{column}_mean"], width, yerr=part[f"{column}_std"].fillna(0), color=colour, capsize=3,
                   label=mode)
    for ax, label in ((axes[0], "test skill (open: single task, filled: merged)"),
                      (axes[1], "interference per unit L2 norm added"),
                      (axes[2], "disentanglement error (alphas " + ", ".join(f"{a:g}" for a in XI_ALPHAS) + ")")):
        ax.set_xticks(np.arange(len(tasks)), tasks, fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path, title)


# -- CLI ----------------------------------------------------------------------------------------------
def run_task_arithmetic_command(args: argparse.Namespace) -> int:
    """``poolkit bench task-arithmetic``: run, print the summary, write --out."""
    clock = Stopwatch()
    config = config_from_args(args, PRESETS)
    _, meta = run_task_arithmetic(config, args.out, force=args.force, progress=not args.no_progress)
    print_table(f"task arithmetic ({config.preset}): test skill, mean ± std over {config.seeds} seeds",
                ["mode", "task", "metric", "single task", "merged", "skill change", "interference", "per norm",
                 "xi term", "alpha"],
                [[row.mode, row.task, row.metric, f"{row.finetuned_mean:.3f} ± {row.finetuned_std:.3f}",
                  f"{row.merged_mean:.3f} ± {row.merged_std:.3f}", f"{row.change_mean:+.3f} ± {row.change_std:.3f}",
                  f"{row.interference_mean:.3f} ± {row.interference_std:.3f}",
                  f"{row.interference_per_norm_mean:.3f} ± {row.interference_per_norm_std:.3f}",
                  f"{row.disentanglement_error_mean:.3f} ± {row.disentanglement_error_std:.3f}",
                  f"{row.alpha_mean:.2f}"]
                 for row in pd.DataFrame(meta["summary"]).itertuples(index=False)], clock, args.out)
    return 0
