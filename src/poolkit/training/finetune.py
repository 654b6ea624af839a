"""Fine-tuning encoder + pooler + head (``poolkit train``), on one device or many through Hugging Face accelerate.

The same code runs alone or under ``accelerate launch --num_processes N`` (DDP, multi-GPU / multi-node; on
CPUs: ``torchrun --nproc_per_node N`` or ``accelerate launch --multi_gpu --num_processes N``, gloo). Each global
batch of ``batch_size`` rows is split across the processes (``split_batches``), every process draws the same
length-grouped batch order, and the learning-rate schedule counts optimizer steps, so N processes train like one:
the same up to float noise when dropout is off and the training rows fill whole batches (accelerate completes a
short last batch with repeated rows). DDP looks for unused parameters because encoders compute parts the loss
never reaches (BERT's own CLS pooler). Several nodes need a shared output folder: every process writes its RNG
state there.

Cross-validation follows :mod:`poolkit.training.cv` (no choice made during training sees the rows a fold is
scored on); the fold models are read back by :mod:`poolkit.training.prediction`.

The embedding tasks (retrieval, similarity) run the same loop through its hooks (``_Run.cross_validation``,
``_Fold.loaders`` / ``loss`` / ``validation`` / ``test``, ...): :mod:`poolkit.training.finetune_pairs`.

Regression heads train on targets standardised per column with the fit rows' mean and std (as ``compare``'s
probes); every saved model has that map folded into its head's Linear, so it answers in the targets' units and loads
like any PooledModel. The resume state keeps the standardised weights and the statistics.

Output folder::

    fold_K/             the fold's best model (PooledModel + tokenizer save_pretrained), poolkit_train.json
                        (task, labels, target columns, config, test metrics, how the checkpoint was chosen,
                        history of inner validation metrics; regression: target_mean, target_std of the fit
                        rows) and test_outputs.npz (test_rows and the best model's raw head outputs on them;
                        fit_rows, val_rows); it appears, renamed into place, only when finished
    fold_K.partial/     a fold in training: best/ (best checkpoint so far) and .state/ (resume state of the
                        last finished epoch: weights, optimizer, scheduler, RNG states, progress.json)
    oof.csv             out-of-fold predictions: each fold's test rows (with folds=1: the held-out rows only)
    metrics.json        per fold: test metrics, best_epoch, epochs_run, val_<metric> (inner validation, best
                        epoch), test_<metric>, rows per split; test metrics' mean and sample std over folds
                        (``std_ddof1``, null for one fold); metrics of the pooled out-of-fold outputs; the
                        run's provenance (commit, versions, CPU model and torch's kernel instruction set)
    train.log           epochs, evaluations and metrics (appended as training goes)
    .poolkit_outputs.json  the names above that this run writes: ``--force`` removes these, never other files

The output folder is a :class:`poolkit.io.RunFolder`: the main process locks it for the whole run (a second run
into it is refused), and ``--force`` removes only what earlier train runs wrote there.

Files are written atomically (:mod:`poolkit.io`), only by the main process. ``--resume``
restores the state of the last finished epoch (evaluations after it are redone) and needs the same settings,
data and protocol (folders of poolkit runs that chose checkpoints on the scored rows are refused); it ends with
the result of the uninterrupted run.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from accelerate import Accelerator, PartialState
from accelerate.logging import get_logger
from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs, broadcast_object_list, set_seed
from torch.utils.data import DataLoader, Sampler
from ..progress import progress as progress_bar
from transformers import get_scheduler

from ..data import LengthGroupedBatchSampler, TableData, TextCollator, TextDataset
from ..errors import PoolkitError
from ..io import RunFolder, atomic_write_content, existing_dir, replace_dir, temp_dir
from ..io.runs import FOLD_DIR, TRAIN_META
from ..models import PooledModel
from ..models.encoders import appends_eos, hf_bars_off, load_tokenizer, resolve_model, resolve_precision
from ..models.heads import head_scores
from ..provenance import run_provenance
from .config import TrainConfig
from .cv import check_same, cv_splits, fingerprint, fold_detail
from .metrics import compute_metrics, primary_metric
from .optim import freeze, param_groups
from .probing import _Targets
from .processes import accelerate_state, cpu_launch

META = TRAIN_META
TEST_OUTPUTS = "test_outputs.npz"
RESULTS = ("oof.csv", "metrics.json", "train.log")
FOLD_KEYS = ("fold", "metrics", "best_epoch", "best_step", "epochs_run", "stopped_early", "fit_rows", "val_rows",
             "test_rows", "seconds", "history")

logger = get_logger(__name__)


@dataclass
class Progress:
    """Where a fold's training stands; saved with each epoch's state (progress.json) for ``--resume``."""

    epoch: int = 0
    step: int = 0
    best: float | None = None
    best_epoch: float = 0.0
    best_step: int = 0
    bad: int = 0
    stopped: bool = False
    seconds: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-1 of a module's state (names, dtypes, shapes and bytes, in name order): which base encoder a run started
    from, recorded as ``base_sha1`` and checked by :mod:`poolkit.training.merging`."""
    digest = hashlib.sha1()
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def fit_head_first(model: PooledModel, loader: DataLoader, sampler: LengthGroupedBatchSampler, config: TrainConfig,
                   device: torch.device) -> None:
    """Stage 1 of a frozen-head run (LP-FT, Kumar et al. 2022): the pooler and head alone, ``config.frozen_head``
    epochs on the fit rows with the encoder frozen and in eval mode (AdamW at ``pooler_lr``, constant rate)."""
    freeze(model, "head")
    model.to(device).train()
    model.encoder.eval()
    optimizer = torch.optim.AdamW(param_groups(model, config.encoder_lr, config.pooler_lr, 1.0, config.weight_decay))
    for epoch in range(config.frozen_head):
        sampler.epoch = epoch
        for batch in loader:
            targets = batch.pop("targets").to(device)
            loss = model(**{k: v.to(device) for k, v in batch.items()}, labels=targets).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.train()


class _ShortBatchLast(Sampler[list[int]]):
    """A batch sampler with its short batch moved to the end: accelerate's ``split_batches`` keeps a short batch
    only there (it would drop one met earlier), so one and many processes see the same rows."""

    def __init__(self, sampler: LengthGroupedBatchSampler):
        self.sampler = sampler
        self.batch_size = sampler.batch_size
        self.drop_last = sampler.drop_last

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        return iter(sorted(self.sampler, key=lambda batch: len(batch) < self.batch_size))


def _loader(texts: list[str], targets: np.ndarray | None, tokenizer, batch_size: int, max_length: int,
            padding: str, seed: int | None = None, append_eos: bool = False
            ) -> tuple[LengthGroupedBatchSampler, DataLoader]:
    """Length-grouped DataLoader with dynamic padding: shuffled for training (``seed`` given), else longest first;
    ``append_eos``: as :class:`~poolkit.data.TextCollator`'s."""
    sampler = LengthGroupedBatchSampler([len(t) for t in texts], batch_size, shuffle=seed is not None,
                                        seed=seed or 0)
    batches = _ShortBatchLast(sampler) if seed is not None else sampler
    loader = DataLoader(TextDataset(texts, targets), batch_sampler=batches,
                        collate_fn=TextCollator(tokenizer, max_length, padding, append_eos))
    return sampler, loader


def _infer(model: torch.nn.Module, loader: DataLoader, sampler: LengthGroupedBatchSampler, gather,
           desc: str = "", show: bool = False) -> np.ndarray:
    """Validation head outputs float32 (N, C) in the original row order; ``gather`` collects them across
    processes (accelerate-prepared loaders; ``predict`` batches like TextEncoder instead)."""
    device = next(model.parameters()).device
    training = model.training
    model.eval()
    chunks = []
    with torch.inference_mode():
        for batch in progress_bar(loader, desc=desc, disable=not show, leave=False):
            inputs = {k: v.to(device) for k, v in batch.items() if k != "targets"}
            logits = model(**inputs).logits.float()
            chunks.append(gather(logits).cpu())
    model.train(training)
    return sampler.restore(torch.cat(chunks).numpy())


def _run_folder(out: Path, outputs: list[str]) -> RunFolder:
    """A train run's output folder: to itself (exclusive), resumable; an earlier train run's fold folders (with
    their poolkit_train.json), fold_K.partial folders and result files are of its kind."""
    return RunFolder(out, tuple(glob.escape(name) for name in outputs), exclusive=True, resumable=True,
                     owns=lambda entry: entry.name in RESULTS or re.fullmatch(r"fold_\d+\.partial", entry.name)
                     is not None or (FOLD_DIR.fullmatch(entry.name) is not None and (entry / META).is_file()))


@contextmanager
def _claim_out_dir(out: Path, resume: bool, force: bool, state: PartialState, outputs: list[str]):
    """The run folder (:class:`poolkit.io.RunFolder`) checked on every process, then claimed by the main one for
    the run; every process learns the main one's outcome, so none is left waiting at a barrier."""
    folder = _run_folder(out, outputs)
    folder.check(force=force, resume=resume)
    state.wait_for_everyone()  # every process has looked before the main one clears
    with ExitStack() as held:
        error = None
        if state.is_main_process:
            try:
                held.enter_context(folder.claim(force=force, resume=resume))
            except PoolkitError as err:
                error = str(err)
            except OSError as err:
                error = f"could not prepare output folder {out}: {err}"
        if state.num_processes > 1:
            error = broadcast_object_list([error])[0]
        if error is not None:
            raise PoolkitError(error)
        yield


@contextmanager
def _log_to(path: Path, main: bool):
    """Append this module's INFO log to ``path`` (main process only)."""
    base = logging.getLogger(__name__)
    level, handler = base.level, logging.FileHandler(path, encoding="utf-8", delay=True) if main else None
    if handler:
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        base.addHandler(handler)
    base.setLevel(logging.INFO)
    try:
        yield
    finally:
        base.setLevel(level)
        if handler:
            base.removeHandler(handler)
            handler.close()


def fit(config: TrainConfig, data: TableData, out_dir: str | Path, resume: bool = False, force: bool = False,
        progress: bool = True, refit_epochs: float | None = None) -> dict[str, Any]:
    """Fine-tune one model per fold and write the output folder (see the module doc); returns metrics.json's dict.

    ``resume`` continues an interrupted run in ``out_dir`` (finished folds are skipped, a fold in training
    restarts from its last finished epoch) and ends as the uninterrupted run would; ``force`` starts over.

    ``refit_epochs`` (compare's export of a fine-tuned winner, AutoGluon's ``refit_full``): instead of the folds, one
    model trained on every row for that many epochs of the ``config.epochs`` schedule (the median of the epochs its
    folds chose: the learning rate is where theirs was at their checkpoints), with no row to validate or test on;
    the folder holds ``fold_0/`` (its poolkit_train.json records no metrics) and train.log, and the fold's meta is
    returned.
    """
    return fit_run(_Run, config, data, out_dir, resume, force, progress, refit_epochs)


def fit_run(run_class: type, config: TrainConfig, data: Any, out_dir: str | Path, resume: bool, force: bool,
            progress: bool, refit_epochs: float | None = None) -> dict[str, Any]:
    """:func:`fit` with the fold loop of ``run_class`` (a :class:`_Run`, or the embedding tasks' subclass)."""
    config.check()
    if refit_epochs is not None and not (0 <= refit_epochs <= config.epochs and not resume):
        raise PoolkitError(f"`refit_epochs` must be between 0 and `epochs` ({config.epochs}), without `resume`; got "
                           f"{refit_epochs}")
    state = accelerate_state()
    if config.batch_size % state.num_processes:
        raise PoolkitError(f"`batch_size` {config.batch_size} must be a multiple of the {state.num_processes} "
                           "processes: each global batch is split across them")
    out = Path(out_dir)
    run = run_class(config, data, out, progress and state.is_main_process, state)  # checks model and splits first
    if refit_epochs is not None:
        run.splits = [run.every_unit()]
    outputs = [*(f"fold_{k}{end}" for k in range(len(run.splits)) for end in ("", ".partial")), *RESULTS]
    with _claim_out_dir(out, resume, force, state, outputs), _log_to(out / "train.log", state.is_main_process), \
            hf_bars_off():
        return run.fit(resume) if refit_epochs is None else run.refit(refit_epochs)


class _Run:
    """One ``fit`` call: the folds, then oof.csv and metrics.json."""

    def __init__(self, config: TrainConfig, data: TableData, out: Path, show: bool, state: PartialState):
        self.config, self.data, self.out, self.show, self.state = config, data, out, show, state
        self.model_path = resolve_model(config.model)
        self.tokenizer = load_tokenizer(config.model)
        self.metric = primary_metric(data.task, data.n_outputs)
        self.n_classes = len(data.label_names) if data.task == "classification" else None
        self.fingerprint = self.data_fingerprint()
        self.splits = self.cross_validation()

    def data_fingerprint(self) -> dict[str, Any]:
        """What a resume must match (:func:`poolkit.training.cv.fingerprint`)."""
        return fingerprint(self.config, self.data)

    def cross_validation(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(fit, validation, test) rows per fold (:func:`poolkit.training.cv.cv_splits`)."""
        return cv_splits(self.data, self.config.folds, self.config.val_fraction, self.config.seed)

    def every_unit(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A refit's (fit, validation, test): every row (or unit) fit on, none to validate or test on."""
        empty = np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate(self.splits[0])), empty, empty

    def new_fold(self, k: int, rows: tuple[np.ndarray, np.ndarray, np.ndarray], work: Path) -> _Fold:
        """What trains fold ``k`` on its (fit, validation, test) rows, in ``work``."""
        return _Fold(self, k, *rows, work)

    def refit(self, epochs: float) -> dict[str, Any]:
        """One model on every row for ``epochs`` epochs of the schedule (see :func:`fit`) -> its meta."""
        work = self.out / "fold_0.partial"
        meta = self.new_fold(0, self.splits[0], work).refit(epochs)
        if self.state.is_main_process:
            os.rename(work / "best", self.out / "fold_0")
            shutil.rmtree(work)
        self.state.wait_for_everyone()
        return meta

    def fit(self, resume: bool) -> dict[str, Any]:
        start = time.perf_counter()
        logger.info(f"{'resuming' if resume else 'training'}: {len(self.data)} rows, {self.data.task}, "
                    f"{len(self.splits)} fold(s), model {self.model_path}, config {self.fingerprint['config']}")
        results = [self.fold(k, rows, resume) for k, rows in enumerate(self.splits)]
        summary = self.summary(results, time.perf_counter() - start)
        if self.state.is_main_process:
            self.write_results(results, summary)
        name, std = self.metric.name, summary["std_ddof1"][self.metric.name]
        spread = f" (sample std {std:.4f})" if std is not None else ""
        logger.info(f"done: test {name} {summary['mean'][name]:.4f}{spread} in {summary['seconds']:.1f}s")
        self.state.wait_for_everyone()
        return summary

    def fold(self, k: int, rows: tuple[np.ndarray, np.ndarray, np.ndarray], resume: bool) -> dict[str, Any]:
        """Train fold ``k`` (or read it back when already finished): its meta plus rows and outputs."""
        final, work = self.out / f"fold_{k}", self.out / f"fold_{k}.partial"
        if self.state.is_main_process and not final.exists() and (work / "best" / META).is_file():
            os.rename(work / "best", final)  # finished, but interrupted before it was moved into place
        self.state.wait_for_everyone()
        if (final / META).is_file():
            meta = json.loads((final / META).read_text())
            check_same(meta, self.fingerprint, final)
            logger.info(f"fold {k}: already trained, skipped")
        else:
            meta = self.new_fold(k, rows, work).train(resume)
            if self.state.is_main_process:
                os.rename(work / "best", final)
                shutil.rmtree(work)
            self.state.wait_for_everyone()
        saved = np.load(final / TEST_OUTPUTS)
        return {**meta, "rows": saved["test_rows"], **({"outputs": saved["outputs"]} if "outputs" in saved else {})}

    def out_of_fold(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        """metrics.json's ``oof``: the metrics of all out-of-fold outputs together."""
        rows = np.concatenate([r["rows"] for r in results])
        outputs = np.concatenate([r["outputs"] for r in results])
        return {"oof": compute_metrics(self.data.task, outputs, self.data.targets[rows], self.n_classes)}

    def write_results(self, results: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """oof.csv and metrics.json (main process)."""
        atomic_write_content(self.out / "oof.csv", self.oof_frame(results).to_csv(index=False))
        atomic_write_content(self.out / "metrics.json", json.dumps(summary, indent=2) + "\n")

    def summary(self, results: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
        """metrics.json: per-fold results, the test metrics' mean and sample std (ddof 1; None for one fold) over
        folds, metrics of all out-of-fold outputs together."""
        values = {m: [r["metrics"][m] for r in results] for m in results[0]["metrics"]}
        name = self.metric.name
        return {
            "task": self.data.task, "primary_metric": name,
            "higher_is_better": self.metric.higher_is_better, "n_folds": len(results),
            "mean": {m: float(np.mean(v)) for m, v in values.items()},
            "std_ddof1": {m: float(np.std(v, ddof=1)) if len(v) > 1 else None for m, v in values.items()},
            **self.out_of_fold(results),
            "folds": [{**{key: r[key] for key in FOLD_KEYS}, **fold_detail(r, name)} for r in results],
            "trainable_params": results[0]["trainable_params"], "total_params": results[0]["total_params"],
            "n_rows": len(self.data), "config": self.fingerprint["config"], "seconds": seconds,
            "provenance": run_provenance(),
        }

    def oof_frame(self, results: list[dict[str, Any]]) -> pd.DataFrame:
        """One line per test row of each fold: row, fold, target(s), prediction column(s) -- see fit's docs."""
        rows = np.concatenate([r["rows"] for r in results])
        scores = head_scores(self.data.task, np.concatenate([r["outputs"] for r in results]))
        frame = {"row": rows, "fold": np.concatenate([np.full(len(r["rows"]), r["fold"]) for r in results])}
        targets, names, cols = self.data.targets[rows], self.data.label_names, self.data.target_cols
        if self.data.task == "regression":
            for j, col in enumerate(cols):
                frame[col], frame[f"pred_{col}"] = targets[:, j], scores[:, j]
        elif self.data.task == "classification":
            frame[cols[0]] = np.asarray(names)[targets]
            frame[f"pred_{cols[0]}"] = np.asarray(names)[scores.argmax(axis=1)]
            frame.update({f"prob_{name}": scores[:, c] for c, name in enumerate(names)})
        else:
            frame.update({f"true_{name}": targets[:, c].astype(int) for c, name in enumerate(names)})
            frame.update({f"prob_{name}": scores[:, c] for c, name in enumerate(names)})
        return pd.DataFrame(frame).sort_values("row", kind="stable")


class _Fold:
    """Training of one fold: accelerate-prepared model, optimizer, schedule and loaders; evaluation on the inner
    validation rows, checkpoints; the test rows are predicted once, by the best checkpoint."""

    def __init__(self, run: _Run, k: int, fit: np.ndarray, val: np.ndarray, test: np.ndarray, work: Path):
        config, data = run.config, run.data
        self.run, self.k, self.work, self.config = run, k, work, config
        self.fit_rows, self.val_rows, self.test_rows = fit, val, test
        self.accelerator = Accelerator(
            cpu=cpu_launch(), mixed_precision=resolve_precision(config.precision, run.state.device),
            gradient_accumulation_steps=config.grad_accum,
            dataloader_config=DataLoaderConfiguration(split_batches=True),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
        set_seed(config.seed + k)
        model = PooledModel.from_encoder(run.model_path, pooler=config.pooler, task=data.task,
                                         num_labels=data.n_outputs, label_names=data.label_names,
                                         head_dropout=config.head_dropout)
        self.base_sha1 = weights_digest(model.encoder)
        train_loader, loaders = self.loaders(model)
        self.trainable, self.total = freeze(model, config.train_only, train_head=not config.frozen_head)
        optimizer = torch.optim.AdamW(param_groups(model, config.encoder_lr, config.pooler_lr, config.layer_decay,
                                                   config.weight_decay))
        self.total_steps = math.ceil(len(train_loader) / config.grad_accum) * config.epochs
        scheduler = get_scheduler(config.scheduler, optimizer, num_warmup_steps=round(config.warmup_ratio *
                                  self.total_steps), num_training_steps=self.total_steps)
        prepared = self.accelerator.prepare(model, optimizer, train_loader, *loaders.values(), scheduler)
        self.model, self.optimizer, self.train_loader, self.scheduler = *prepared[:3], prepared[-1]
        for name, loader in zip(loaders, prepared[3:-1]):
            setattr(self, name, loader)
        self.progress = Progress()
        self.loss_sum, self.loss_count = torch.zeros((), device=self.accelerator.device), 0

    def loaders(self, model: PooledModel) -> tuple[DataLoader, dict[str, DataLoader]]:
        """The fit rows' training loader (the head trained first when ``frozen_head``) and the loaders of the
        validation and test rows (``val_loader``, ``test_loader``), with their samplers and the training targets
        kept on the fold."""
        run, config, data = self.run, self.config, self.run.data
        # regression: standardised on the fit rows (a zero-initialised head starts at their mean)
        self.targets = _Targets(data, self.fit_rows)
        eos = appends_eos(model.pooler, run.tokenizer)  # as TextEncoder and predict run the saved model
        self.sampler, train_loader = _loader([data.texts[i] for i in self.fit_rows],
                                             self.targets.values[self.fit_rows].numpy(), run.tokenizer,
                                             config.batch_size, config.max_length, config.padding,
                                             seed=config.seed + self.k, append_eos=eos)
        if config.frozen_head and existing_dir(self.work / ".state") is None:  # a resumed fold reloads its head
            started = time.perf_counter()
            fit_head_first(model, train_loader, self.sampler, config, self.accelerator.device)
            logger.info(f"fold {self.k}: pooler + head trained {config.frozen_head} epoch(s) on the frozen encoder "
                        f"({time.perf_counter() - started:.1f}s), fixed from now on")
        (self.val_sampler, val_loader), (self.test_sampler, test_loader) = (
            _loader([data.texts[i] for i in rows], None, run.tokenizer, config.batch_size, config.max_length,
                    config.padding, append_eos=eos) for rows in (self.val_rows, self.test_rows))
        return train_loader, {"val_loader": val_loader, "test_loader": test_loader}

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One training batch's loss."""
        targets = batch.pop("targets")
        return self.model(**batch, labels=targets).loss

    def validation(self) -> tuple[dict[str, float], bool]:
        """The inner validation rows' metrics, and whether every output was finite (the same on every process)."""
        outputs = self.targets.outputs(_infer(self.model, self.val_loader, self.val_sampler,
                                              self.accelerator.gather_for_metrics, f"fold {self.k} validation",
                                              self.run.show))
        if not np.isfinite(outputs).all():
            return {}, False
        return compute_metrics(self.run.data.task, outputs, self.run.data.targets[self.val_rows],
                               self.run.n_classes), True

    def test(self) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """The test rows' metrics (by the best weights, loaded) and the arrays test_outputs.npz keeps beside the rows:
        the raw head outputs."""
        outputs = _infer(self.model, self.test_loader, self.test_sampler, self.accelerator.gather_for_metrics,
                         f"fold {self.k} test", self.run.show)
        data = self.run.data
        return compute_metrics(data.task, outputs, data.targets[self.test_rows], self.run.n_classes), \
            {"outputs": outputs}

    #: whether the model before any training (epoch 0) is a candidate of the checkpoint choice: not with a new head
    start_is_a_candidate = False

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def target_stats(self) -> dict[str, list[float]]:
        """Regression: each target column's mean and std on the fit rows (recorded; a resume must match); else {}."""
        if self.run.data.task != "regression":
            return {}
        return {"target_mean": self.targets.mean.tolist(), "target_std": self.targets.std.tolist()}

    def model_state(self) -> dict[str, torch.Tensor]:
        """The unwrapped model's weights answering in the targets' units (the head folds in ``std * out + mean``);
        the live training weights are left as they are."""
        model = self.accelerator.unwrap_model(self.model)
        if self.run.data.task != "regression":
            return model.state_dict()
        return model.state_dict_with_affine_head(torch.from_numpy(self.targets.std),
                                                 torch.from_numpy(self.targets.mean))

    def train(self, resume: bool) -> dict[str, Any]:
        """Train (from the saved state when resuming), then predict the test rows with the best weights."""
        config, progress = self.config, self.progress
        saved = existing_dir(self.work / ".state") if resume else None
        if saved:
            loaded = json.loads((saved / "progress.json").read_text())
            check_same(loaded.pop("fingerprint"), self.run.fingerprint, self.work)
            if {key: loaded.pop(key) for key in ("target_mean", "target_std") if key in loaded} != self.target_stats:
                raise PoolkitError(f"cannot resume {self.work}: an earlier poolkit trained it on unstandardised "
                                   "regression targets; `force=True` to start over")
            self.accelerator.load_state(str(saved))
            self.progress = progress = Progress(**loaded)
            logger.info(f"fold {self.k}: resumed after epoch {progress.epoch} (step {progress.step})")
        else:
            self.empty_work()
        self.accelerator.wait_for_everyone()
        logger.info(f"fold {self.k}: {len(self.fit_rows)} fit / {len(self.val_rows)} validation (checkpoint choice) / "
                    f"{len(self.test_rows)} test rows; "
                    f"{self.trainable:,} of {self.total:,} parameters trainable (train_only={config.train_only}); "
                    f"{self.total_steps} optimizer steps, {self.accelerator.num_processes} process(es), "
                    f"mixed precision {self.accelerator.mixed_precision}")
        started, seconds = time.perf_counter(), progress.seconds
        if self.start_is_a_candidate and not saved:
            self.evaluate(0)  # the model as it starts may stay the best
        while progress.epoch < config.epochs and not progress.stopped:
            self.epoch()
            progress.seconds = seconds + time.perf_counter() - started
            if progress.epoch < config.epochs and not progress.stopped:
                self.save_state()
        return self.finish()

    def epoch(self, stop: int | None = None) -> None:
        """One pass over the fit rows; evaluations at the end or every ``eval_every`` optimizer steps (``stop``, a
        refit's: none, and the pass ends at that optimizer step)."""
        config, progress, accelerator = self.config, self.progress, self.accelerator
        self.sampler.epoch = progress.epoch  # the batch order is a function of (seed, epoch): resumes redraw it
        self.model.train()
        bar = progress_bar(self.train_loader, desc=f"fold {self.k} epoch {progress.epoch + 1}/{config.epochs}",
                   disable=not self.run.show, leave=False)
        for i, batch in enumerate(bar):
            with accelerator.accumulate(self.model):
                loss = self.loss(batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients and config.max_grad_norm:
                    accelerator.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad()
            self.loss_sum += loss.detach().float()
            self.loss_count += 1
            if self.run.show:
                bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
            if accelerator.sync_gradients:
                progress.step += 1
                if stop is not None:
                    if progress.step == stop:
                        break
                elif config.eval_every and (progress.step % config.eval_every == 0 or
                                            progress.step == self.total_steps):
                    self.evaluate(progress.epoch + (i + 1) / len(self.train_loader))
                    if progress.stopped:
                        break
        progress.epoch += 1
        if stop is None and not config.eval_every:
            self.evaluate(progress.epoch)

    def mean_train_loss(self) -> float | None:
        """The training loss averaged over the batches since it was last read (every process's), or None before
        any batch."""
        trained = self.loss_count > 0  # not at epoch 0 (the same on every process)
        train_loss = self.accelerator.reduce(self.loss_sum / max(self.loss_count, 1), "mean").item() if trained \
            else None
        self.loss_sum.zero_()
        self.loss_count = 0
        return train_loss

    def evaluate(self, epoch: float) -> None:
        """Inner validation metrics; keep the best checkpoint; count evaluations without improvement (early stop)."""
        progress, metric = self.progress, self.run.metric
        metrics, finite = self.validation()
        train_loss = self.mean_train_loss()
        if not ((train_loss is None or math.isfinite(train_loss)) and finite):  # the same on every process
            kept = (f"last good checkpoint kept in {self.work / 'best'}" if progress.best is not None
                    else "no checkpoint")
            raise PoolkitError(f"fold {self.k} epoch {epoch:g}: training with the {self.config.pooler['name']} "
                               f"pooler gave non-finite outputs (train loss {train_loss:.4g}); the learning rate is "
                               f"likely too high: lower `encoder_lr` / `pooler_lr` ({kept})")
        score = metrics[metric.name]
        improved = progress.best is None or math.isnan(progress.best) or metric.better(score, progress.best)
        progress.history.append({"epoch": round(epoch, 4), "step": progress.step, "train_loss": train_loss, **metrics})
        if improved:
            progress.best, progress.best_epoch, progress.best_step = score, round(epoch, 4), progress.step
            progress.bad = 0
            self.save_best()
        else:
            progress.bad += 1
            progress.stopped = 0 < self.config.patience <= progress.bad
        shown = " ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        loss = f"train_loss {train_loss:.4f} " if train_loss is not None else "(untrained) "
        logger.info(f"fold {self.k} epoch {epoch:g} step {progress.step}: {loss}{shown}"
                    f"{' (best)' if improved else ''}{' -> early stop' if progress.stopped else ''}")

    def save_best(self) -> None:
        """The model (in the targets' units) and tokenizer to ``best/``, built in a temporary folder and renamed into
        place."""
        if self.main:
            tmp = temp_dir(self.work / "best")
            self.accelerator.unwrap_model(self.model).save_pretrained(tmp, state_dict=self.model_state())
            self.run.tokenizer.save_pretrained(tmp)
            replace_dir(tmp, self.work / "best")
        self.accelerator.wait_for_everyone()

    def save_state(self) -> None:
        """accelerate's state (standardised weights, optimizer, scheduler, RNGs; every process) + progress.json (with
        the target statistics) to ``.state/``."""
        dest = self.work / ".state"
        tmp = temp_dir(dest, create=self.main)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(str(tmp))
        self.accelerator.wait_for_everyone()
        if self.main:
            state = {**asdict(self.progress), "fingerprint": self.run.fingerprint, **self.target_stats}
            atomic_write_content(tmp / "progress.json", json.dumps(state))
            replace_dir(tmp, dest)
        self.accelerator.wait_for_everyone()

    def meta(self) -> dict[str, Any]:
        """poolkit_train.json's keys that do not depend on a test: the data's, the run's, the rows, the parameters,
        the base encoder, the target statistics, the time and the history."""
        data, progress = self.run.data, self.progress
        return {"task": data.task, "label_names": data.label_names, "target_cols": list(data.target_cols),
                "text_col": data.text_col, "fold": self.k, "n_folds": self.config.folds, **self.run.fingerprint,
                "fit_rows": len(self.fit_rows), "val_rows": len(self.val_rows), "test_rows": len(self.test_rows),
                "trainable_params": self.trainable, "total_params": self.total, "base_model": self.run.model_path,
                "base_sha1": self.base_sha1, **self.target_stats, "seconds": progress.seconds,
                "history": progress.history}

    def empty_work(self) -> None:
        """The fold's work folder made afresh, empty (main process)."""
        if self.main:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work.mkdir(parents=True)

    def refit(self, epochs: float) -> dict[str, Any]:
        """Train on the fit rows (every row: none to validate or test on) until ``epochs`` epochs of the schedule
        have passed (0: the model as it starts), save the weights reached to ``best/`` with poolkit_train.json."""
        config, progress = self.config, self.progress
        stop = round(epochs * self.total_steps / config.epochs)
        self.empty_work()
        self.accelerator.wait_for_everyone()
        logger.info(f"refit: {len(self.fit_rows)} rows, {epochs:g} of the schedule's {config.epochs} epochs "
                    f"({stop} of {self.total_steps} optimizer steps), no validation or test rows; "
                    f"{self.trainable:,} of {self.total:,} parameters trainable (train_only={config.train_only}), "
                    f"{self.accelerator.num_processes} process(es)")
        started = time.perf_counter()
        while progress.step < stop:
            self.epoch(stop)
            train_loss = self.mean_train_loss()
            progress.history.append({"epoch": round(progress.step * config.epochs / self.total_steps, 4),
                                     "step": progress.step, "train_loss": train_loss})
            logger.info(f"refit step {progress.step}: train_loss {train_loss:.4f}")
        progress.seconds = time.perf_counter() - started
        self.save_best()
        meta = {**self.meta(), "n_folds": 1, "refit_epochs": epochs, "steps": stop}
        if self.main:
            atomic_write_content(self.work / "best" / META, json.dumps(meta, indent=2) + "\n")
        self.accelerator.wait_for_everyone()
        self.accelerator.free_memory()
        return meta

    def finish(self) -> dict[str, Any]:
        """Reload the best weights (in the targets' units: the live model now answers in them too), predict the test
        rows once, write test_outputs.npz and poolkit_train.json."""
        best = self.work / "best"
        self.accelerator.unwrap_model(self.model).load_state_dict(PooledModel.from_pretrained(best).state_dict())
        metrics, arrays = self.test()
        progress, name = self.progress, self.run.metric.name
        meta = {**self.meta(), "metrics": metrics, "best_epoch": progress.best_epoch, "best_step": progress.best_step,
                "epochs_run": progress.epoch, "stopped_early": progress.stopped, f"val_{name}": progress.best,
                f"test_{name}": metrics[name]}
        if self.main:
            buffer = io.BytesIO()
            np.savez(buffer, test_rows=self.test_rows, fit_rows=self.fit_rows, val_rows=self.val_rows, **arrays)
            atomic_write_content(best / TEST_OUTPUTS, buffer.getvalue())
            atomic_write_content(best / META, json.dumps(meta, indent=2) + "\n")
        self.accelerator.wait_for_everyone()
        self.accelerator.free_memory()  # drop accelerate's references to this fold's model and optimizer
        logger.info(f"fold {self.k}: best validation {name} {progress.best:.4f} at epoch {progress.best_epoch:g}; "
                    f"test {name} {metrics[name]:.4f}")
        return meta
