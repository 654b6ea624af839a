"""``poolkit train``: fine-tune encoder + pooler + head (poolkit.training.api.train)."""

from __future__ import annotations

import argparse

from .common import (Renamed, add_data_arguments, add_pooler_arguments, add_precision_argument,
                     add_trust_remote_code_argument, data_kwargs, given, positive,
                     single_pooler_spec)

HELP = "fine-tune encoder + pooler + head on a table of texts"
DESCRIPTION = "Fine-tune encoder + pooler + head. Writes fold_*/ models, oof.csv, metrics.json and train.log to --out."
#: TrainConfig fields set by flags of the same name; unset ones keep TrainConfig's defaults.
SETTINGS = ("folds", "val_fraction", "epochs", "batch_size", "encoder_lr", "pooler_lr", "layer_decay", "weight_decay",
            "warmup_ratio", "scheduler", "grad_accum", "max_grad_norm", "precision", "max_length", "patience", "seed",
            "train_only", "frozen_head", "head_dropout")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="encoder: a local folder or hub name (default: packaged all-MiniLM-L6-v2)")
    add_pooler_arguments(model, default="mean")
    add_trust_remote_code_argument(model)
    train = parser.add_argument_group("training (unset: poolkit.training.finetune.TrainConfig's defaults)")
    add = lambda *flags, **kw: train.add_argument(*flags, default=argparse.SUPPRESS, **kw)  # noqa: E731
    add("--folds", type=positive(int), help="K-fold CV, one model per fold (default 1: one train/test split)")
    add("--val-fraction", type=float, help="share of each fold's training rows that chooses the checkpoint and "
        "stops early; with --folds 1 also the share of all rows held out for testing (default 0.2)")
    add("--epochs", type=positive(int), help="default 3")
    add("--batch-size", type=positive(int), help="default 32")
    add("--encoder-lr", type=positive(float), help="encoder learning rate, top layer (default 5e-5)")
    add("--pooler-lr", type=positive(float), help="pooler + head learning rate (default 1e-3)")
    train.add_argument("--lr", action=Renamed, use="--encoder-lr (encoder) or --pooler-lr (pooler + head)")
    add("--layer-decay", type=positive(float), help="layer-wise LR decay per layer (default 0.9)")
    add("--weight-decay", type=float, help="default 0.01")
    add("--warmup-ratio", type=float, help="default 0.1")
    add("--scheduler", choices=["linear", "cosine"], help="default linear")
    add("--grad-accum", type=positive(int), help="default 1")
    add("--max-grad-norm", type=positive(float), help="default 1.0")
    add_precision_argument(train)
    add("--max-length", type=positive(int), help="token limit (default 256)")
    add("--patience", type=positive(int), help="evaluations without improvement before stopping (default 2)")
    add("--seed", type=int, help="default 42")
    add("--train-only", choices=["all", "attention", "head"],
        help="attention: only self-attention projections + pooler + head (Jin et al. 2024); head: frozen encoder")
    add("--frozen-head", type=positive(int), metavar="EPOCHS",
        help="train the pooler + head EPOCHS epochs on the frozen encoder first, then keep them fixed while the "
        "encoder trains (LP-FT; for task arithmetic, poolkit merge)")
    add("--head-dropout", type=float, help="default 0.1")
    out = parser.add_argument_group("output")
    out.add_argument("--out", required=True, help="output folder (model per fold, oof.csv, metrics.json, train.log)")
    out.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    out.add_argument("--force", action="store_true", help="overwrite an existing --out")


def run(args: argparse.Namespace) -> int:
    from ..training.api import train

    spec = single_pooler_spec(args.pooler, args.pooler_opt)
    metrics = train(args.data, args.out, pooler=spec, model=args.model, resume=args.resume, force=args.force,
                    trust_remote_code=args.trust_remote_code,
                    **data_kwargs(args), **given(args, *SETTINGS))
    metric, std = metrics["primary_metric"], metrics["std_ddof1"][metrics["primary_metric"]]
    spread = f" ± {std:.4f} (sample std)" if std is not None else ""
    print(f"{spec['name']}: test {metric} {metrics['mean'][metric]:.4f}{spread} over {metrics['n_folds']} fold(s); "
          f"model and predictions in {args.out}")
    return 0
