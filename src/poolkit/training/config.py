"""The settings of compare, a fine-tuning run (``poolkit train``), embed, predict and merge: dataclasses, the source
of the Python API's defaults and of the commands' flags and help (:mod:`poolkit.settings`). Light to import: the CLI
reads them to build its parser."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..data import PADDINGS
from ..errors import PoolkitError
from ..models.backends import BACKENDS
from ..settings import Preset, Presets, check_counts, option

SCHEDULERS = ("linear", "cosine")
#: a fine-tuning run's pooler when none is given (``pooler_spec("mean")``)
DEFAULT_POOLER = {"name": "mean"}
#: which weights a run trains: all; the encoder's self-attention projections + pooler + head; pooler + head
TRAIN_ONLY = ("all", "attention", "head")


#: the token limit when none is given (and the model has the positions for it)
MAX_LENGTH = 256


@dataclass
class ProbeConfig:
    """How every pooler is trained on the cached features (the same for all of them)."""

    folds: int = 5
    #: the K-fold CV repeated this many times, each with its own seeded fold assignment (R x K folds)
    repeats: int = 1
    epochs: int = 20
    batch_size: int = 64
    pooler_lr: float = 1e-3
    weight_decay: float = 0.01
    patience: int = 3
    head_dropout: float = 0.1
    #: share of each fold's training rows held out (stratified) to choose the epoch; with folds = 1, also the
    #: share of all rows held out as the test split
    val_fraction: float = 0.2
    seed: int = 0
    #: retrieval / similarity: train every pooler with a Linear(D, D) after it, started at the identity
    projection: bool = False
    #: torch threads while probing: the ops are small, and one thread was 3-9x faster than two on a
    #: shared 2-core machine (OpenMP threads spinning against other processes).
    threads: int = 1


def precision_option() -> Any:
    """The autocast setting of every command that runs an encoder (train, embed)."""
    return option("auto", "autocast dtype: auto is bf16 or fp16 on CUDA, float32 on CPU", aliases=("--mixed-precision",),
                  metavar="{auto,no,bf16,fp16}")


def check_precision(precision: str) -> None:
    from ..models.encoders import PRECISIONS

    if precision not in PRECISIONS:
        raise PoolkitError(f"`precision` must be one of {', '.join(PRECISIONS)}, got {precision!r}")


@dataclass
class TrainConfig:
    """Every setting of a fine-tuning run (``poolkit train`` options); ``patience=0`` never stops early."""

    model: str | None = None
    #: the pooler spec ``{"name": ..., **options}`` (a name is turned into one): see ``poolkit.pooling.pooler_spec``
    pooler: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_POOLER))
    folds: int = option(1, "K-fold CV, one model per fold (1: one train/test split)", positive=True)
    #: share of each fold's training rows held out (stratified) to choose the checkpoint and stop early; with
    #: folds = 1, also the share of all rows held out as the test split
    val_fraction: float = option(0.2, "share of each fold's training rows that chooses the checkpoint and stops "
                                 "early; with --folds 1 also the share of all rows held out for testing")
    epochs: int = option(3, "epochs", positive=True)
    batch_size: int = option(32, "texts per optimizer step (split across processes)", positive=True)
    encoder_lr: float = option(5e-5, "encoder learning rate, top layer", positive=True)
    pooler_lr: float = option(1e-3, "pooler + head learning rate", positive=True)
    layer_decay: float = option(0.9, "layer-wise learning-rate decay per layer", positive=True)
    weight_decay: float = option(0.01, "AdamW weight decay")
    warmup_ratio: float = option(0.1, "share of the steps that warm the learning rate up")
    scheduler: str = option("linear", "learning-rate schedule after the warm-up", choices=SCHEDULERS)
    grad_accum: int = option(1, "batches accumulated per optimizer step", positive=True)
    max_grad_norm: float = option(1.0, "gradient clipping norm", positive=True)
    precision: str = precision_option()
    max_length: int = option(MAX_LENGTH, "token limit", positive=True)
    patience: int = option(2, "evaluations without improvement before stopping", positive=True)
    eval_every: int | None = None
    seed: int = option(42, "seed of the splits, the weights and the batches")
    train_only: str = option("all", "attention: only self-attention projections + pooler + head (Jin et al. "
                             "2024); head: frozen encoder", choices=TRAIN_ONLY)
    #: > 0: a frozen-head run (LP-FT, Kumar et al. 2022): the pooler and head first train this many epochs on the
    #: frozen encoder, then stay fixed while ``train_only`` trains the encoder (Jin et al. 2024 find that heads
    #: trained together with the encoder hinder the decoupling of task vectors)
    frozen_head: int = option(0, "train the pooler + head EPOCHS epochs on the frozen encoder first, then keep them "
                              "fixed while the encoder trains (LP-FT; for task arithmetic, poolkit merge)",
                              positive=True, metavar="EPOCHS")
    head_dropout: float = option(0.1, "dropout before the head")
    padding: str = "longest"

    def __post_init__(self) -> None:
        if self.pooler == DEFAULT_POOLER:  # its own spec already: the presets stay light (no torch for --help)
            self.pooler = dict(DEFAULT_POOLER)
            return
        from ..pooling import pooler_spec

        self.pooler = pooler_spec(self.pooler)  # an unknown pooler or option fails here, before any data is read

    def to_dict(self) -> dict[str, Any]:
        """The settings, JSON-ready."""
        return json.loads(json.dumps(asdict(self)))

    def check(self) -> None:
        """Raise a one-line PoolkitError naming the first bad setting."""
        rules = [("folds", self.folds >= 1, "at least 1"), ("epochs", self.epochs >= 1, "at least 1"),
                 ("batch_size", self.batch_size >= 1, "at least 1"), ("grad_accum", self.grad_accum >= 1, "at least 1"),
                 ("max_length", self.max_length >= 1, "at least 1"), ("patience", self.patience >= 0, "0 or more"),
                 ("frozen_head", self.frozen_head >= 0, "0 or more"),
                 ("eval_every", self.eval_every is None or self.eval_every >= 1, "at least 1 step"),
                 ("warmup_ratio", 0 <= self.warmup_ratio < 1, "in [0, 1)"),
                 ("layer_decay", 0 < self.layer_decay <= 1, "in (0, 1]"),
                 ("encoder_lr", math.isfinite(self.encoder_lr) and self.encoder_lr > 0, "a finite number > 0"),
                 ("pooler_lr", math.isfinite(self.pooler_lr) and self.pooler_lr > 0, "a finite number > 0"),
                 ("weight_decay", math.isfinite(self.weight_decay) and self.weight_decay >= 0, "a finite number >= 0"),
                 ("max_grad_norm", math.isfinite(self.max_grad_norm) and self.max_grad_norm >= 0,
                  "a finite number >= 0 (0: no clipping)"),
                 ("val_fraction", 0 < self.val_fraction < 1, "in (0, 1)"),
                 ("head_dropout", 0 <= self.head_dropout < 1, "in [0, 1)"),
                 ("scheduler", self.scheduler in SCHEDULERS, f"one of {', '.join(SCHEDULERS)}"),
                 ("train_only", self.train_only in TRAIN_ONLY, f"one of {', '.join(TRAIN_ONLY)}"),
                 ("padding", self.padding in PADDINGS, f"one of {', '.join(PADDINGS)}"),
                 ("seed", isinstance(self.seed, int) and self.seed >= 0, "an integer >= 0")]
        for name, ok, rule in rules:
            if not ok:
                raise PoolkitError(f"`{name}` must be {rule}, got {getattr(self, name)!r}")
        check_precision(self.precision)
        if self.frozen_head and self.train_only == "head":
            raise PoolkitError("`frozen_head` with `train_only` head leaves nothing to train after the head: "
                               "use `train_only` attention or all")


#: the defaults, as the presets the command's flags are generated from
TRAIN_PRESETS = Presets("default", {"default": Preset(TrainConfig())})

#: the output vectors' quantisation kinds of ``embed --quantize`` / ``evaluate --quantize`` (poolkit.quantize)
QUANTIZE_KINDS = ("int8", "uint8", "binary", "ubinary")


@dataclass(frozen=True)
class VectorConfig:
    """What decides the vectors of an encoder + pooler (``TextEncoder``) besides the model and the pooler: what embed,
    evaluate and export-onnx share."""

    max_length: int | None = option(None, "token limit", positive=True, none=f"the model's, {MAX_LENGTH} for MiniLM")
    allow_untrained: bool = option(False, "accept a pooler with random (untrained) weight matrices on a bare encoder")
    dim: int | None = option(None, "keep each vector's first N dimensions (Matryoshka truncation), before any "
                             "normalisation", positive=True, metavar="N", none="all of them")
    prompt: str | None = option(None, "a text put before every text (e.g. 'query: ')", metavar="TEXT",
                                none="the model folder's default prompt, if it names one")
    prompt_name: str | None = option(None, "one of the model folder's named prompts "
                                     "(config_sentence_transformers.json)", metavar="NAME", none="none")
    include_prompt: bool | None = option(None, "keep the prompt's tokens out of the pooled positions (the encoder "
                                         "still attends to them)", flag="--no-include-prompt",
                                         none="what the folder's pooling declares, else included")
    bidirectional_attention: bool = option(False, "decoders: attend both ways, every token seeing the whole text "
                                           "(LLM2Vec / GritLM style; for decoders trained so)")

    def check(self) -> None:
        check_counts(self, tuple(name for name in ("max_length", "dim") if getattr(self, name) is not None))

    def encoder_options(self) -> dict[str, Any]:
        """The ``TextEncoder`` arguments these settings give."""
        return {"max_length": self.max_length, "allow_untrained": self.allow_untrained, "dim": self.dim,
                "prompt": self.prompt, "prompt_name": self.prompt_name, "include_prompt": self.include_prompt,
                "bidirectional_attention": self.bidirectional_attention}


@dataclass(frozen=True)
class EncodeConfig(VectorConfig):
    """How texts go through an encoder + pooler (``TextEncoder``): what embed and evaluate share."""

    batch_size: int = option(32, "texts per batch", positive=True)
    precision: str = precision_option()
    backend: str = option("torch", "what runs the encoder + pooler: torch, or ONNX Runtime on the whole embedder "
                          "exported once into the cache (onnx: float32; onnx-int8: int8 weights)",
                          choices=BACKENDS, metavar="{torch,onnx,onnx-int8}")

    def check(self) -> None:
        super().check()
        check_counts(self, ("batch_size",))
        check_precision(self.precision)
        if self.backend not in BACKENDS:
            raise PoolkitError(f"`backend` must be one of {', '.join(BACKENDS)}, got {self.backend!r}")

    def encoder_options(self) -> dict[str, Any]:
        return {**super().encoder_options(), "precision": self.precision, "backend": self.backend}


@dataclass(frozen=True)
class ExportConfig(VectorConfig):
    """What ``export-onnx`` bakes into the graph: the source of the Python API's defaults and of ``poolkit
    export-onnx`` 's flags and help."""

    normalize: bool = option(False, "L2-normalise every vector inside the graph")
    int8: bool = option(False, "also write model-int8.onnx: the weights quantised to int8 (onnxruntime's dynamic "
                        "quantisation, per output channel: MatMul weights and embedding tables)")


@dataclass(frozen=True)
class EmbedConfig(EncodeConfig):
    """How ``embed`` encodes and what it accepts: the source of the Python API's defaults and of ``poolkit embed``'s
    flags and help."""

    normalize: bool = option(False, "L2-normalise every vector (for cosine similarity)")
    allow_nonfinite: bool = option(False, "write vectors holding NaN or inf (refused otherwise)")
    quantize: str | None = option(None, "write quantised codes (in .npy or a table's embedding column): int8 / uint8 "
                                  "(each dimension's range over the vectors, kept beside as OUT.ranges.npy) or "
                                  "binary / ubinary (one bit per dimension, 8 to a byte)", choices=QUANTIZE_KINDS,
                                  metavar="KIND", none="float32")

    def check(self) -> None:
        super().check()
        if self.quantize is not None and self.quantize not in QUANTIZE_KINDS:
            raise PoolkitError(f"`quantize` must be one of {', '.join(QUANTIZE_KINDS)}, got {self.quantize!r}")

    def encoder_options(self) -> dict[str, Any]:
        return {**super().encoder_options(), "normalize": self.normalize}


#: ``embed``'s rows per window: memory holds one window's texts, tokens and vectors; each is length-sorted on its own.
WINDOW = 8192
#: ``evaluate --quantize``: candidates kept per result for rescoring in float32 (sentence-transformers'
#: ``rescore_multiplier``)
RESCORE = 4
#: evaluate on a table of texts and targets: how it is scored (a trained head, or k-nearest neighbours of the
#: embeddings), and how many neighbours vote for a row
EVALUATE_METHODS = ("head", "knn")
NEIGHBOURS = 10
EMBED_PRESETS = Presets("default", {"default": Preset(EmbedConfig())})
#: ``evaluate`` encodes as embed does (its vectors are compared by cosine: no normalize, no non-finite ones)
EVALUATE_PRESETS = Presets("default", {"default": Preset(EncodeConfig())})
EXPORT_PRESETS = Presets("default", {"default": Preset(ExportConfig())})


@dataclass(frozen=True)
class PredictConfig:
    """How ``predict`` runs a trained model: the source of the Python API's defaults and of ``poolkit predict``'s flags
    and help."""

    batch_size: int = option(64, "texts per batch", positive=True)
    max_length: int | None = option(None, "token limit", positive=True, none="the one it was trained with")
    allow_incomplete: bool = option(False, "average the finished folds of an unfinished run (refused otherwise)")

    def check(self) -> None:
        check_counts(self, ("batch_size",) + (("max_length",) if self.max_length is not None else ()))


PREDICT_PRESETS = Presets("default", {"default": Preset(PredictConfig())})

#: merge's alpha grid, searches and fold modes
GRID = tuple(round(0.1 * i, 1) for i in range(1, 11))
SEARCHES = ("shared", "per-task")
FOLD_MODES = ("per-fold", "average")


@dataclass(frozen=True)
class MergeConfig:
    """How merge pairs the runs' folds, which alphas a search tries and how it scores: the source of the Python API's
    defaults and of ``poolkit merge``'s flags and help."""

    grid: tuple[float, ...] = option(GRID, "alphas a search tries", positive=True, metavar="A")
    fold_pairing: str = option("per-fold", "per-fold: fold K merges the runs' fold K models; average: each run's task "
                               "vector is the mean over its folds", choices=FOLD_MODES)
    batch_size: int = option(64, "texts per batch when a search scores", positive=True)

    def check(self) -> None:
        if self.fold_pairing not in FOLD_MODES:
            raise PoolkitError(f"unknown `fold_pairing` {self.fold_pairing!r}: use one of {', '.join(FOLD_MODES)}")
        check_counts(self, ("batch_size",))
        check_grid(self.grid)


def check_grid(grid) -> None:
    """A search's alphas: at least one, every one finite."""
    if not len(grid) or not all(math.isfinite(a) for a in grid):
        raise PoolkitError(f"the alpha grid needs finite numbers, got {list(grid)!r}")


MERGE_PRESETS = Presets("default", {"default": Preset(MergeConfig())})


#: ``compare`` without data: the embedded WordNet subset, sized to fit in 10 minutes on 2 CPU cores.
QUICK_DEFAULTS = {"folds": 3, "epochs": 8}


@dataclass(frozen=True)
class CompareConfig:
    """Every setting of ``compare`` beside its data and poolers: the source of the Python API's defaults and of
    ``poolkit compare``'s flags and help."""

    model: str | None = None
    folds: int | None = option(None, "K-fold CV", positive=True,
                               none=f"{ProbeConfig.folds}; {QUICK_DEFAULTS['folds']} on the embedded default data")
    repeats: int = option(ProbeConfig.repeats, "repeat the K-fold CV R times, each with its own seeded fold "
                          "assignment: R x K fold metrics per row, for the tests of each row against the best "
                          "(fine-tuning uses the first repeat's folds)", positive=True, metavar="R")
    sizes: tuple[int, ...] = option((), "learning curve: train every pooler again with each fold's training rows "
                                    "subsampled to each N (comma or space separated; the test rows kept), into "
                                    "learning_curve.csv / .png", names=True, positive=True, metavar="N")
    epochs: int | None = option(None, "max epochs per fold", positive=True,
                                none=f"{ProbeConfig.epochs}; {QUICK_DEFAULTS['epochs']} on the embedded default")
    batch_size: int = option(ProbeConfig.batch_size, "texts per batch of a pooler + head", positive=True)
    pooler_lr: float = option(ProbeConfig.pooler_lr, "pooler + head learning rate (frozen rows and fine-tuning)",
                              positive=True)
    patience: int = option(ProbeConfig.patience, "epochs without improvement before a fold stops", positive=True)
    max_length: int | None = option(None, "token limit", positive=True,
                                    none=f"{MAX_LENGTH}, or the model's positions when fewer")
    seed: int = option(ProbeConfig.seed, "seed of the folds, the heads and the explained texts")
    cache_dir: str | None = option(None, "feature cache folder", none="$POOLKIT_CACHE/features or "
                                   "~/.cache/poolkit/features")
    cache: bool = option(True, "encode afresh: read and write no feature cache", flag="--no-cache")
    cache_dtype: str = option("float16", "dtype of the cached token states (int8: half the bytes, at the accuracy "
                              "cost measured in docs/scale.md)", choices=("float16", "int8"))
    cache_max_tokens: int | None = option(None, "cache the token states of each text's first N tokens only (max, "
                                          "gem, attention, ... see those; cls / mean / layer poolers over them still "
                                          "pool every token); the accuracy cost is measured in docs/scale.md",
                                          positive=True, metavar="N", none="every token")
    baseline: bool = option(True, "leave out the tuned linear baseline row (logistic / ridge regression on "
                            "mean-pooled features, regularisation chosen on each fold's inner split)",
                            flag="--no-baseline")
    projection: bool = option(False, "retrieval / similarity: train every pooler with a linear projection after it "
                              "(started at the identity; parameter-free poolers keep their zero-shot row too)")
    finetune_top: int = option(0, "then fine-tune the encoder end-to-end with the K best poolers", metavar="K")
    finetune_epochs: int = option(3, "epochs of each fine-tuning", positive=True)
    encoder_lr: float = option(5e-5, "encoder learning rate when fine-tuning", positive=True,
                               aliases=("--finetune-lr",))
    trust_remote_code: bool = False

    def for_data(self, quick: bool) -> CompareConfig:
        """With folds and epochs settled: the embedded default data's (quick) or a table's."""
        return replace(self, folds=self.folds or (QUICK_DEFAULTS["folds"] if quick else ProbeConfig.folds),
                       epochs=self.epochs or (QUICK_DEFAULTS["epochs"] if quick else ProbeConfig.epochs))

    def finetuning(self, pooler: dict[str, Any], val_fraction: float) -> TrainConfig:
        """The fine-tuning of ``finetune_top`` with ``pooler`` (and the export's refit of such a row): these
        folds, epochs and rates, the probes' share of inner validation rows (their splits)."""
        return TrainConfig(model=self.model, pooler=pooler, folds=self.folds, epochs=self.finetune_epochs,
                           encoder_lr=self.encoder_lr, pooler_lr=self.pooler_lr, max_length=self.max_length,
                           val_fraction=val_fraction, seed=self.seed)


COMPARE_PRESETS = Presets("default", {"default": Preset(CompareConfig())})
