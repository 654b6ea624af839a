"""Task arithmetic over ``poolkit train`` runs: merge task vectors into one encoder, each task keeping its own pooler
and head (``poolkit merge``, ``poolkit.merge``).

Ilharco et al., "Editing Models with Task Arithmetic" (ICLR 2023): a run's task vector is its fine-tuned encoder
minus the base encoder it started from, tau_t = theta_t - theta_0 (per fold model, or averaged over the folds), and
the merged encoder is theta_0 + sum_t alpha_t tau_t, with one shared alpha or one per task. Jin et al., "Fine-Tuning
Attention Modules Only" (arXiv 2407.07089) train only W_q, W_k, W_v, W_o (``--train-only attention``) so that the
task vectors interfere less. The sum is formed as (1 - sum_t alpha_t) theta_0 + sum_t alpha_t theta_t in float64:
alpha = 0 gives the base encoder and one run at alpha = 1 its own encoder, bit for bit.

Alpha is chosen on the runs' inner validation rows (the rows each fold chose its checkpoint on; never its test
rows), by the mean over tasks and folds of each task's *skill*, a score where higher is better everywhere: accuracy
(classification), macro-F1 (multilabel), and for regression 1 - RMSE / RMSE of predicting the fit rows' mean
(averaged over the target columns). ``shared``: every alpha of the grid for all tasks; ``per-task``: from the best
shared alpha, one sweep of coordinate search (each task's alpha over the grid in turn, the others fixed).

Output folder, built under a temporary name and renamed into place::

    NAME/fold_K/        task NAME's merged model (PooledModel + tokenizer + poolkit_train.json with the run's task,
                        labels and settings and a ``merged`` record): ``poolkit predict --model OUT/NAME`` averages
                        its folds, ``poolkit embed --model OUT/NAME/fold_K`` embeds with its pooler
    NAME/metrics.json   the merged model's inner-validation metrics per fold (when the data was given)
    merge.json          base, runs, alphas, every searched candidate's validation skill, provenance
"""

from __future__ import annotations

import glob
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import TableData
from ..data.tables import stratified_sample
from ..errors import PoolkitError
from ..io import RunFolder, atomic_write_json, fold_models, publish, temp_dir
from ..models import PooledModel
from ..models.encoders import hf_bars_off, load_encoder, load_tokenizer, resolve_model
from ..settings import config_from
from .config import GRID, SEARCHES, MergeConfig, check_grid
from .cv import data_sha1
from .finetune import META, TEST_OUTPUTS, weights_digest
from .metrics import compute_metrics
from .prediction import model_outputs

#: alphas tried by a search (Ilharco et al. search 0.05 ... 1 in steps of 0.05 on held-out validation data)
RECORD = "merge.json"
#: encoder config fields that must agree between the base and every run
ARCHITECTURE = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size")


def skill(task: str, outputs: np.ndarray, targets: np.ndarray, fit_mean: Sequence[float] | None = None,
          n_classes: int | None = None) -> float:
    """Higher-is-better score of raw head outputs (N, C): accuracy, macro-F1 (multilabel), or for regression
    1 - RMSE / RMSE of always predicting ``fit_mean`` (the fit rows' mean), averaged over target columns."""
    if task == "regression":
        targets = np.asarray(targets, dtype=np.float64).reshape(len(targets), -1)
        rmse = np.sqrt(((np.asarray(outputs, dtype=np.float64) - targets) ** 2).mean(axis=0))
        baseline = np.sqrt(((np.asarray(fit_mean, dtype=np.float64)[None] - targets) ** 2).mean(axis=0))
        return float(np.mean(1 - rmse / baseline))
    metrics = compute_metrics(task, outputs, targets, n_classes)
    return metrics["accuracy" if task == "classification" else "macro_f1"]


def merged_state(base: dict[str, torch.Tensor], tuned: Sequence[dict[str, torch.Tensor]],
                 alphas: Sequence[float]) -> dict[str, torch.Tensor]:
    """theta_0 + sum_t alpha_t (theta_t - theta_0) of encoder states (float tensors; others are the base's), formed
    as (1 - sum alpha) theta_0 + sum alpha_t theta_t in float64 and cast back to each tensor's dtype."""
    if len(tuned) != len(alphas):
        raise PoolkitError(f"{len(alphas)} alpha(s) for {len(tuned)} task vector(s): give one, or one per run")
    rest = 1.0 - float(sum(alphas))
    merged = {}
    for name, theta in base.items():
        if not theta.is_floating_point():
            merged[name] = theta
            continue
        total = rest * theta.double()
        for alpha, state in zip(alphas, tuned):
            total += float(alpha) * state[name].double()
        merged[name] = total.to(theta.dtype)
        if not bool(torch.isfinite(merged[name]).all()):
            raise PoolkitError(f"alphas {', '.join(f'{a:g}' for a in alphas)} make the merged {name} NaN or inf in "
                               f"{theta.dtype}: use alphas of the order of 1 (the task vectors' own scale)")
    return merged


@dataclass
class _Task:
    """One run: its name, fold models (encoder states kept apart, pooler + head on the shared encoder), metadata,
    and the rows of each fold (fit / val / test) when its data was given."""

    name: str
    run: Path
    folds: list[Path]
    metas: list[dict[str, Any]]
    models: list[PooledModel] = field(default_factory=list)
    tuned: list[dict[str, torch.Tensor]] = field(default_factory=list)
    data: TableData | None = None
    rows: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def task(self) -> str:
        return self.metas[0]["task"]

    def score(self, k: int, outputs: np.ndarray, split: str) -> float:
        """Skill of fold ``k``'s ``outputs`` on its ``split`` rows (val or test)."""
        meta = self.metas[k]
        targets = self.data.targets[self.rows[k][split]]
        n_classes = len(meta["label_names"]) if self.task == "classification" else None
        return skill(self.task, outputs, targets, meta.get("target_mean"), n_classes)


def _matching_data(data: str | Path | TableData, meta: dict[str, Any], run: Path) -> TableData:
    """The table a run was trained on: ``data`` loaded as the run read it, or the stratified sample of it that a
    ``--limit`` drew (the run's row count and seed); refused when neither matches the run's recorded hash."""
    from .api import load

    table = load(data, text_col=meta["text_col"], target_col=meta["target_cols"], task=meta["task"])
    if data_sha1(table) == meta["data_sha1"]:
        return table
    rows = meta["fit_rows"] + meta["val_rows"] + meta["test_rows"]
    if rows < len(table):
        sample = stratified_sample(table, rows, meta["config"]["seed"])
        if data_sha1(sample) == meta["data_sha1"]:
            return sample
    name = data.source if isinstance(data, TableData) else data
    raise PoolkitError(f"{name} is not the table {run} was trained on (its texts or targets differ): pass the data "
                       "file each run was trained on, in the order of `runs`")


def _run_name(run: Path) -> str:
    return run.parent.name if (run / META).is_file() else run.name


class TaskArithmetic:
    """The base encoder and the runs' fold models in memory: merged encoders for any alphas, scored per task on its
    inner validation or test rows, saved as PooledModels.

    ``runs``: ``poolkit train`` folders (or fold_K folders); ``data``: per run, the table it was trained on (a path,
    ``builtin:NAME`` or a TableData; needed to score, i.e. for a search); ``folds``: ``per-fold`` (fold K merges the
    runs' fold K models; the runs need the same fold count) or ``average`` (each run's task vector averaged over its
    folds), and the batch size, in ``config``."""

    def __init__(self, base: str | None, runs: Sequence[str | Path], data: Sequence[Any] | None = None,
                 names: Sequence[str] | None = None, config: MergeConfig = MergeConfig(),
                 progress: bool = False) -> None:
        config.check()
        folds = config.fold_pairing
        if not runs:
            raise PoolkitError("no runs to merge: pass `runs` RUN_A RUN_B ... (poolkit train `out` folders)")
        runs = [Path(r) for r in runs]
        names = list(names) if names is not None else [_run_name(r) for r in runs]
        if len(names) != len(runs) or len(set(names)) != len(names):
            raise PoolkitError(f"the runs need distinct names, one each (got {names}): pass `names` A B ...")
        bad = [n for n in names if not isinstance(n, str) or n in ("", ".", "..", RECORD) or "/" in n or "\\" in n
               or n.startswith(".") or n.endswith((".tmp", ".old"))]
        if bad:
            raise PoolkitError(f"task names {bad} cannot name a folder in `out` (no '/', no leading '.', not {RECORD}, "
                               "not ending in .tmp or .old): pass `names` A B ...")
        if data is not None and len(data) != len(runs):
            raise PoolkitError(f"`data` needs one table per run: {len(data)} given for {len(runs)} runs")
        self.base_path = resolve_model(base)
        self.fold_mode, self.batch_size, self.progress = folds, config.batch_size, progress
        with hf_bars_off():
            self.encoder = load_encoder(self.base_path).eval()
        self.base = {k: v.detach().clone() for k, v in self.encoder.state_dict().items()}
        self.base_sha1 = weights_digest(self.encoder)
        self.tasks = []
        for i, (name, run) in enumerate(zip(names, runs)):
            fold_dirs = fold_models(run)
            task = _Task(name, run, fold_dirs, [json.loads((f / META).read_text()) for f in fold_dirs])
            for fold, meta in zip(fold_dirs, task.metas):
                with hf_bars_off():
                    model = PooledModel.from_pretrained(fold)
                self._check_architecture(run, model)
                self._check_base(run, meta)
                task.tuned.append({k: v.detach() for k, v in model.encoder.state_dict().items()})
                model.encoder = self.encoder  # every task's pooler + head reads the one (merged) encoder
                task.models.append(model.eval())
                if data is not None:
                    saved = np.load(fold / TEST_OUTPUTS)
                    task.rows.append({split: saved[f"{split}_rows"] for split in ("fit", "val", "test")})
            if data is not None:
                task.data = _matching_data(data[i], task.metas[0], run)
            self.tasks.append(task)
        counts = {t.name: len(t.folds) for t in self.tasks}
        if folds == "per-fold" and len(set(counts.values())) > 1:
            raise PoolkitError(f"the runs have different fold counts ({counts}): merge fold K with fold K needs the "
                               "same count; use `folds` average")
        if folds == "average":
            for task in self.tasks:  # the mean of the fold encoders: theta_0 + the mean task vector
                task.tuned = [{k: torch.stack([s[k].double() for s in task.tuned]).mean(0).to(v.dtype)
                               if v.is_floating_point() else v for k, v in task.tuned[0].items()}]

    def _check_base(self, run: Path, meta: dict[str, Any]) -> None:
        """Refuse a run fine-tuned from another base: its recorded base weights' hash (or, for a run made before
        poolkit recorded it, its base's path) must be the base's."""
        recorded = meta.get("base_sha1")
        same = (recorded == self.base_sha1 if recorded is not None
                else resolve_model(meta["config"].get("model")) == self.base_path)
        if not same:
            was = meta.get("base_model") or resolve_model(meta["config"].get("model"))
            raise PoolkitError(f"{run} was fine-tuned from a different base encoder ({was}) than `base` "
                               f"{self.base_path} (its base weights differ): pass the encoder it was trained from")

    def _check_architecture(self, run: Path, model: PooledModel) -> None:
        """Refuse a run whose encoder has another architecture (config fields, parameter names or shapes)."""
        ours, theirs = self.encoder.config.to_dict(), model.encoder.config.to_dict()
        for key in ARCHITECTURE:
            if ours.get(key) != theirs.get(key):
                raise PoolkitError(f"{run} has a different encoder architecture from `base` {self.base_path}: "
                                   f"{key} {theirs.get(key)!r} vs {ours.get(key)!r}; merge runs of one base")
        state = model.encoder.state_dict()
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        if shapes != {k: tuple(v.shape) for k, v in self.base.items()}:
            raise PoolkitError(f"{run} has a different encoder architecture from `base` {self.base_path}: its "
                               "parameter names or shapes differ; merge runs of one base")
        changed = [k for k, v in state.items() if not v.is_floating_point() and not torch.equal(v, self.base[k])]
        if changed:
            raise PoolkitError(f"{run} has a different encoder from `base` {self.base_path}: its non-float buffer "
                               f"{changed[0]} differs; merge runs of one base")

    @property
    def n_folds(self) -> int:
        return max(len(t.folds) for t in self.tasks)

    def alphas_for(self, alpha: float | Sequence[float]) -> list[float]:
        """One alpha per task from a shared one or a list of one per task."""
        alphas = [float(alpha)] * len(self.tasks) if np.isscalar(alpha) else [float(a) for a in alpha]
        if len(alphas) != len(self.tasks) or not all(np.isfinite(alphas)):
            raise PoolkitError(f"`alpha` takes one finite number or one per run ({len(self.tasks)}), got {alpha!r}")
        return alphas

    def load_merged(self, alphas: Sequence[float], k: int = 0) -> None:
        """Put the merged encoder of fold ``k`` (per-fold) or of the fold-averaged task vectors into every model."""
        tuned = [t.tuned[0 if self.fold_mode == "average" else k] for t in self.tasks]
        self.encoder.load_state_dict(merged_state(self.base, tuned, alphas))

    def outputs(self, alphas: Sequence[float], split: str, tasks: Sequence[int] | None = None
                ) -> dict[int, list[np.ndarray]]:
        """Raw head outputs of each task (index -> per fold) on its ``split`` rows (fit, val or test) with the
        encoder merged by ``alphas``."""
        chosen = range(len(self.tasks)) if tasks is None else tasks
        if any(self.tasks[t].data is None for t in chosen):
            raise PoolkitError("scoring merged models needs each run's data: pass `data`, one table per run")
        result: dict[int, list[np.ndarray]] = {t: [] for t in chosen}
        for k in range(self.n_folds):
            self.load_merged(alphas, k)
            for t in chosen:
                task = self.tasks[t]
                if k < len(task.folds):
                    texts = [task.data.texts[i] for i in task.rows[k][split]]
                    length = task.metas[k]["config"]["max_length"]
                    result[t].append(model_outputs(task.models[k], load_tokenizer(str(task.folds[k])), texts, length,
                                                   self.batch_size, f"{task.name} {split}", self.progress))
        return result

    def skills(self, alphas: Sequence[float], split: str = "val") -> list[float]:
        """Each task's skill on its ``split`` rows, averaged over its folds."""
        outputs = self.outputs(alphas, split)
        return [float(np.mean([self.tasks[t].score(k, out, split) for k, out in enumerate(outs)]))
                for t, outs in outputs.items()]

    def search(self, grid: Sequence[float] = GRID, per_task: bool = False) -> tuple[list[float], list[dict]]:
        """The alphas with the best mean validation skill over tasks (the first of ties), and every candidate tried
        ({alphas, skill, skills}): the grid shared by all tasks, then (``per_task``) one coordinate sweep."""
        check_grid(grid)
        tried: list[dict] = []

        def score(alphas: list[float]) -> float:
            for row in tried:
                if row["alphas"] == alphas:
                    return row["skill"]
            skills = self.skills(alphas, "val")
            tried.append({"alphas": alphas, "skill": float(np.mean(skills)), "skills": skills})
            return tried[-1]["skill"]

        n = len(self.tasks)
        best = max(([float(a)] * n for a in grid), key=score)
        if per_task:
            for t in range(n):
                best = max(([*best[:t], float(a), *best[t + 1:]] for a in grid), key=score)
        return best, tried

    def save(self, out: Path, alphas: Sequence[float], record: dict[str, Any]) -> None:
        """Every task's merged fold models, their validation metrics and ``merge.json`` into ``out`` (built in a
        temporary folder beside it, each entry then moved into place)."""
        tmp = temp_dir(out)
        val = self.outputs(alphas, "val") if all(t.data is not None for t in self.tasks) else None
        for k in range(self.n_folds):
            self.load_merged(alphas, k)
            for t, task in enumerate(self.tasks):
                if k >= len(task.folds):
                    continue
                dest = tmp / task.name / f"fold_{k}"
                with hf_bars_off():
                    task.models[k].save_pretrained(dest)
                load_tokenizer(str(task.folds[k])).save_pretrained(dest)
                meta = {key: task.metas[k][key] for key in ("task", "label_names", "target_cols", "text_col", "fold",
                                                            "n_folds", "config", "target_mean", "target_std",
                                                            "data_sha1") if key in task.metas[k]}
                meta["merged"] = {"base": self.base_path, "base_sha1": self.base_sha1, "run": str(task.folds[k]),
                                  "alphas": dict(zip([x.name for x in self.tasks], alphas)),
                                  "fold_mode": self.fold_mode}
                if val is not None:
                    meta["merged"]["val_metrics"] = self._metrics(t, k, val[t][k])
                atomic_write_json(dest / META, meta)
        for t, task in enumerate(self.tasks):
            folds = [self._metrics(t, k, out) for k, out in enumerate(val[t])] if val is not None else None
            atomic_write_json(tmp / task.name / "metrics.json",
                              {"task": task.task, "merged": True, "n_folds": len(task.folds), "val_metrics": folds})
        atomic_write_json(tmp / RECORD, record)
        publish(tmp, out)

    def _metrics(self, t: int, k: int, outputs: np.ndarray) -> dict[str, float]:
        """Validation metrics and skill of task ``t``'s fold ``k`` outputs."""
        task = self.tasks[t]
        n_classes = len(task.metas[k]["label_names"]) if task.task == "classification" else None
        return {**compute_metrics(task.task, outputs, task.data.targets[task.rows[k]["val"]], n_classes),
                "skill": task.score(k, outputs, "val")}


def _run_folder(out: Path, names: Sequence[str]) -> RunFolder:
    """A merge's output folder: to itself (exclusive), holding a folder per task and merge.json; an earlier merge's
    task folders (their metrics.json says merged) are of its kind."""
    return RunFolder(out, (*(glob.escape(name) for name in names), RECORD), exclusive=True, owns=_merged_task)


def _merged_task(entry: Path) -> bool:
    try:
        return entry.is_dir() and json.loads((entry / "metrics.json").read_text()).get("merged") is True
    except (OSError, ValueError, AttributeError):
        return False


def merge(runs: Sequence[str | Path], out: str | Path | None = None, *, base: str | None = None,
          alpha: float | Sequence[float] | None = None, search: str | None = None, data: Sequence[Any] | None = None,
          names: Sequence[str] | None = None, force: bool = False, progress: bool = True,
          **settings: Any) -> dict[str, Any]:
    """Merge the task vectors of ``runs`` (``poolkit train`` folders fine-tuned from ``base``, default the packaged
    MiniLM) with ``alpha`` (one, or one per run) or the alphas a ``search`` (shared | per-task) picks on the runs'
    inner validation rows (needs ``data``: per run, the table it was trained on). ``settings``: MergeConfig's fields
    (grid, fold_pairing, batch_size). Writes ``out`` (see the module doc) when given; returns merge.json's record: alphas,
    the search's candidates, validation skill per task."""
    from ..provenance import run_provenance

    config = config_from(MergeConfig, "merge", settings)
    config.check()
    if (alpha is None) == (search is None):
        raise PoolkitError("give either `alpha` (one, or one per run) or `alpha_search`, not both or neither")
    if search is not None and search not in SEARCHES:
        raise PoolkitError(f"unknown `alpha_search` {search!r}: use one of {', '.join(SEARCHES)}")
    if search is not None and data is None:
        raise PoolkitError("`alpha_search` scores alphas on each run's inner validation rows: pass `data`, the table "
                           "each run was trained on, in the order of `runs`")
    if out is not None:
        out = Path(out)
        RunFolder(out, (), exclusive=True).check(force=force)  # before any model is read
    merger = TaskArithmetic(base, runs, data, names, config, progress)
    if search is not None:
        alphas, tried = merger.search(config.grid, per_task=search == "per-task")
    else:
        alphas, tried = merger.alphas_for(alpha), []
    names = [t.name for t in merger.tasks]
    record = {"base": merger.base_path, "base_sha1": merger.base_sha1, "fold_mode": config.fold_pairing,
              "runs": {t.name: str(t.run) for t in merger.tasks}, "alphas": dict(zip(names, alphas)),
              "chosen_by": f"{search} search on the inner validation rows" if search else "given",
              "grid": list(config.grid) if search else None,
              "candidates": [{**row, "skills": dict(zip(names, row["skills"]))} for row in tried],
              "provenance": run_provenance()}
    if search is None and data is not None:
        record["val_skill"] = dict(zip(names, merger.skills(alphas, "val")))
    elif tried:
        record["val_skill"] = next(dict(zip(names, r["skills"])) for r in tried if r["alphas"] == alphas)
    if out is not None:
        with _run_folder(out, [t.name for t in merger.tasks]).claim(force=force):
            merger.save(out, alphas, record)
    return record
