"""``poolkit bench gated-mlp``: does the asymmetric (one-factor) activation of a gated MLP give the better
transformer, against the MLP, the bilinear layer, an activation on both factors and a bilinear-attention form?

Breslow, "Gated MLPs as Symmetry-Broken Rank-1 Bilinear Attention" (arXiv 2606.22172) reads each hidden unit of a
gated MLP as a rank-1 bilinear form with a non-linearity on one factor, which breaks the exchange symmetry of the
two factors and, for a non-homogeneous activation, their inverse-scaling symmetry; it offers this as why gated MLPs
work well. Here a small transformer (:mod:`.gated_mlp_model`: token + position embeddings, pre-LayerNorm blocks,
mean pooling, a linear head) is trained from scratch on a built-in text task (default: WordNet glosses ->
supersense, 45 classes) once per feed-forward variant and seed, every variant at the parameter count of the MLP.
Texts are tokenised with the packaged MiniLM's WordPiece tokenizer, its ids renumbered to those seen at least
``min_count`` times in the fit rows (the rest are one unknown id). Rows are split 60 / 20 / 20 (stratified,
``data_seed``): fit, validation (the epoch of the lowest validation loss is kept) and test (scored once). The
symmetries are measured on each variant too (:func:`.gated_mlp_model.symmetry_gaps`).
"""

from __future__ import annotations

import argparse
import copy
import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from poolkit.cli.options import config_from_args
from poolkit.errors import PoolkitError
from poolkit.provenance import git_commit

from .gated_mlp_config import DEFAULT, PRESETS, RESULT_FILES, GatedMLPConfig
from .gated_mlp_model import TextClassifier, ffn_parameters, hidden_width, symmetry_gaps
from .harness import Stopwatch, results_folder, run_tasks
from .reporting import print_table, pyplot, run_record, save_figure, write_outputs

COLUMNS = ["ffn", "seed", "hidden", "ffn_params", "params", "test_accuracy", "test_loss", "best_epoch", "seconds"]
#: fit / validation shares of the rows; the test rows are the rest
SPLIT = (0.6, 0.2)
#: the rows a class needs for :data:`SPLIT` to give it a row in each part
MIN_CLASS_ROWS = 5


# -- data -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EncodedTexts:
    """Token ids (N, T) (0: padding, 1: unknown), their 0/1 mask, class ids (N,) and the fit / val / test rows."""

    ids: Tensor
    mask: Tensor
    labels: Tensor
    splits: dict[str, Tensor]
    vocab: int
    classes: int

    def batches(self, split: str, size: int, generator: torch.Generator | None = None):
        """(ids, mask, labels) of ``split`` in batches of ``size``, shuffled with ``generator``, each cut to its
        longest row."""
        rows = self.splits[split]
        if generator is not None:
            rows = rows[torch.randperm(len(rows), generator=generator)]
        for part in rows.split(size):
            width = int(self.mask[part].sum(dim=1).max())
            yield self.ids[part, :width], self.mask[part, :width], self.labels[part]


def encode_texts(config: GatedMLPConfig) -> EncodedTexts:
    """The rows of ``config.data`` drawn, split, tokenised and renumbered (see the module docstring)."""
    from sklearn.model_selection import train_test_split
    from tokenizers import Tokenizer

    from poolkit.data.builtin import load_data
    from poolkit.models.encoders import default_model_path

    data = load_data(config.data, limit=config.rows, seed=config.data_seed)
    if data.task != "classification":
        raise PoolkitError(f"bench gated-mlp trains a classifier: {config.data} is a {data.task} set; give a "
                           "classification set (e.g. builtin:wordnet-supersense)")
    labels = np.asarray(data.targets)
    counts = np.bincount(labels, minlength=data.n_outputs)
    if (rare := np.flatnonzero((counts > 0) & (counts < MIN_CLASS_ROWS))).size:
        raise PoolkitError(f"{config.data}: {rare.size} classes have fewer than {MIN_CLASS_ROWS} of the {len(labels)} "
                           "rows drawn, too few for a stratified fit / validation / test split; give more rows "
                           "(rows, --rows) or a set with fewer classes")
    everything = np.arange(len(labels))
    fit, rest = train_test_split(everything, train_size=SPLIT[0], stratify=labels, random_state=config.data_seed)
    val, test = train_test_split(rest, train_size=SPLIT[1] / (1 - SPLIT[0]), stratify=labels[rest],
                                 random_state=config.data_seed)
    tokenizer = Tokenizer.from_file(str(Path(default_model_path()) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(config.max_length)
    tokens = [encoding.ids for encoding in tokenizer.encode_batch(data.texts)]
    counts = np.bincount(np.concatenate([tokens[i] for i in fit]), minlength=tokenizer.get_vocab_size())
    kept = np.flatnonzero(counts >= config.min_count)
    renumber = np.ones(tokenizer.get_vocab_size(), dtype=np.int64)  # unknown
    renumber[kept] = np.arange(2, len(kept) + 2)
    ids = torch.zeros(len(tokens), max(map(len, tokens)), dtype=torch.long)
    for row, seq in enumerate(tokens):
        ids[row, :len(seq)] = torch.from_numpy(renumber[seq])
    return EncodedTexts(ids, ids > 0, torch.from_numpy(labels).long(),
                        {name: torch.from_numpy(np.sort(rows)) for name, rows in
                         (("fit", fit), ("val", val), ("test", test))}, len(kept) + 2, data.n_outputs)


# -- one run ----------------------------------------------------------------------------------------------
def build_model(config: GatedMLPConfig, ffn: str, texts: EncodedTexts, seed: int) -> TextClassifier:
    """The classifier with ``ffn``, its weights drawn from ``seed`` alone."""
    torch.manual_seed(seed)
    return TextClassifier(ffn, texts.vocab, texts.classes, dim=config.dim, heads=config.heads, layers=config.layers,
                          mlp_hidden=config.mlp_hidden, max_length=config.max_length, dropout=config.dropout)


def evaluate(model: TextClassifier, texts: EncodedTexts, split: str, batch_size: int) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) on ``split``."""
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for ids, mask, labels in texts.batches(split, 4 * batch_size):
            logits = model(ids, mask)
            loss += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == labels).sum())
    count = len(texts.splits[split])
    return loss / count, correct / count


def train_one(config: GatedMLPConfig, texts: EncodedTexts, task: tuple[str, int]) -> dict:
    """One (ffn, seed) run: AdamW for ``config.epochs`` epochs, the epoch of the lowest validation loss kept and
    scored once on the test rows."""
    ffn, seed = task
    tic = time.perf_counter()
    model = build_model(config, ffn, texts, seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    order = torch.Generator().manual_seed(seed)
    best, val_loss, val_accuracy, train_loss = (float("inf"), -1, None), [], [], []
    for epoch in range(config.epochs):
        model.train()
        total, seen = 0.0, 0
        for ids, mask, labels in texts.batches("fit", config.batch_size, order):
            optimiser.zero_grad()
            loss = F.cross_entropy(model(ids, mask), labels)
            loss.backward()
            optimiser.step()
            total, seen = total + loss.item() * len(labels), seen + len(labels)
        train_loss.append(round(total / seen, 5))
        loss, accuracy = evaluate(model, texts, "val", config.batch_size)
        val_loss.append(round(loss, 5))
        val_accuracy.append(round(accuracy, 5))
        if loss < best[0]:
            best = (loss, epoch, copy.deepcopy(model.state_dict()))
    model.load_state_dict(best[2])
    test_loss, test_accuracy = evaluate(model, texts, "test", config.batch_size)
    return {"ffn": ffn, "seed": seed, "hidden": hidden_width(ffn, config.mlp_hidden),
            "ffn_params": ffn_parameters(model), "params": sum(p.numel() for p in model.parameters()),
            "test_accuracy": test_accuracy, "test_loss": test_loss, "best_epoch": best[1], "val_loss": val_loss,
            "val_accuracy": val_accuracy, "train_loss": train_loss, "seconds": round(time.perf_counter() - tic, 1)}


def _runner(config: GatedMLPConfig):
    """What each worker process runs its tasks with: the texts encoded once per worker."""
    return functools.partial(train_one, config, encode_texts(config))


# -- the run ----------------------------------------------------------------------------------------------
def run_gated_mlp(config: GatedMLPConfig = DEFAULT, out_dir=None, *, force: bool = False,
                  progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """Every (ffn, seed) run, as rows of :data:`COLUMNS` and the run's record (settings, provenance, cost, the
    vocabulary and split sizes, each variant's symmetry gaps, every run's curves). With ``out_dir``, results.csv,
    results.json, the plot and report.html are written there; existing results are kept unless ``force``."""
    config = config.validated()
    clock = Stopwatch()
    texts = encode_texts(config)  # here too: bad data fails before any worker starts or any folder is made
    with results_folder(out_dir, RESULT_FILES, force=force, settings=config) as out:
        tasks = [(ffn, seed) for seed in range(config.seed, config.seed + config.seeds) for ffn in config.ffns]
        runs = run_tasks(functools.partial(train_one, config, texts) if config.workers == 1 else None, tasks,
                         workers=config.workers, threads=config.threads, progress=progress, desc="gated-mlp",
                         unit="run", build_in_worker=None if config.workers == 1 else functools.partial(
                             _runner, config))
        commit = git_commit()
        runs = [{**run, "commit": commit} for run in runs]
        frame = pd.DataFrame([{key: run[key] for key in COLUMNS} for run in runs], columns=COLUMNS)
        meta = run_record("gated-mlp (Breslow 2026, gated MLPs as symmetry-broken rank-1 bilinear attention)",
                          config, clock.record(), vocabulary=texts.vocab, classes=texts.classes,
                          split_rows={name: len(rows) for name, rows in texts.splits.items()},
                          symmetries={ffn: symmetry_gaps(ffn) for ffn in config.ffns}, runs=runs)
        if out is not None:
            write_outputs(out, frame, meta, {"test accuracy": ("gated_mlp.png", lambda tmp: plot_runs(frame, tmp))},
                          title=f"gated-mlp ({config.preset})", tables={"summary": summarize(frame)})
    return frame, meta


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant: parameters, and the mean and sample std (ddof 1) of test accuracy and loss over seeds."""
    groups = frame.groupby("ffn", sort=False)
    summary = groups.agg(hidden=("hidden", "first"), ffn_params=("ffn_params", "first"), params=("params", "first"),
                         accuracy_mean=("test_accuracy", "mean"), accuracy_std=("test_accuracy", "std"),
                         loss_mean=("test_loss", "mean"), loss_std=("test_loss", "std"),
                         seeds=("seed", "count")).reset_index()
    return summary.fillna({"accuracy_std": 0.0, "loss_std": 0.0})


def plot_runs(frame: pd.DataFrame, path) -> None:
    """Test accuracy per variant: each seed a dot, the mean a bar."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=150)
    names = list(dict.fromkeys(frame["ffn"]))
    for i, name in enumerate(names):
        values = frame.loc[frame["ffn"] == name, "test_accuracy"]
        ax.bar(i, values.mean(), color="#c6dbef", edgecolor="#3182bd")
        ax.plot([i] * len(values), values, "o", color="#08519c", ms=4)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(frame["test_accuracy"].min() - 0.02, frame["test_accuracy"].max() + 0.01)
    ax.set_ylabel("test accuracy")
    ax.grid(True, axis="y", alpha=0.3)
    save_figure(fig, path, "feed-forward variants at matched parameters (dots: seeds)")


# -- CLI --------------------------------------------------------------------------------------------------
def run_gated_mlp_command(args: argparse.Namespace) -> int:
    """``poolkit bench gated-mlp``: run, print the summary, write --out."""
    config = config_from_args(args, PRESETS)
    clock = Stopwatch()
    frame, _ = run_gated_mlp(config, args.out, force=args.force, progress=not args.no_progress)
    summary = summarize(frame)
    print_table(f"gated-mlp ({config.preset}): test accuracy and loss, mean ± std over {config.seeds} seeds",
                ["ffn", "hidden", "FFN params", "accuracy", "loss"],
                [[row.ffn, str(row.hidden), f"{row.ffn_params:,}", f"{row.accuracy_mean:.4f} ± {row.accuracy_std:.4f}",
                  f"{row.loss_mean:.4f} ± {row.loss_std:.4f}"] for row in summary.itertuples()], clock, args.out)
    return 0
