"""``poolkit train``: fine-tune encoder + pooler + head (poolkit.training.api.train)."""

from __future__ import annotations

import argparse

from ..training.config import TRAIN_PRESETS
from .common import Renamed, add_data_arguments, add_pooler_arguments, add_trust_remote_code_argument, data_kwargs
from .common import said, single_pooler_spec
from .options import add_config_arguments, given_settings

HELP = "fine-tune encoder + pooler + head on a table of texts (or encoder + pooler on pairs, for embeddings)"
DESCRIPTION = ("Fine-tune encoder + pooler + head. Writes fold_*/ models, oof.csv, metrics.json and train.log to "
               "--out. With --task retrieval or similarity: encoder + pooler on a table of pairs, with a contrastive "
               "loss and no head (no oof.csv); the fold models load in embed and evaluate.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser, pairs=True)
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="encoder: a local folder or hub name (default: packaged all-MiniLM-L6-v2)")
    add_pooler_arguments(model, default="mean")
    add_trust_remote_code_argument(model)
    train = parser.add_argument_group("training (poolkit.training.config.TrainConfig; unset: its defaults)")
    add_config_arguments(train, TRAIN_PRESETS)
    train.add_argument("--lr", action=Renamed, use="--encoder-lr (encoder) or --pooler-lr (pooler + head)")
    out = parser.add_argument_group("output")
    out.add_argument("--out", required=True, help="output folder (model per fold, oof.csv, metrics.json, train.log)")
    out.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    out.add_argument("--force", action="store_true", help="overwrite an existing --out")


def run(args: argparse.Namespace) -> int:
    from ..training.api import train
    from ..training.processes import process_rank

    spec = single_pooler_spec(args.pooler, args.pooler_opt)
    metrics = train(args.data, args.out, pooler=spec, model=args.model, resume=args.resume, force=args.force,
                    trust_remote_code=args.trust_remote_code, report=said(args),
                    **data_kwargs(args), **given_settings(args, TRAIN_PRESETS))
    if process_rank()[0]:  # the first process reports the launch's result
        return 0
    metric, std = metrics["primary_metric"], metrics["std_ddof1"][metrics["primary_metric"]]
    spread = f" ± {std:.4f} (sample std)" if std is not None else ""
    print(f"{spec['name']}: test {metric} {metrics['mean'][metric]:.4f}{spread} over {metrics['n_folds']} fold(s); "
          f"models{'' if 'oof' not in metrics else ' and predictions'} in {args.out}")
    return 0
