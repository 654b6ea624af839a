"""``poolkit compare``: a leaderboard of poolers on a frozen encoder (poolkit.training.api.compare)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .common import (POOLER_OPT_HELP, Renamed, add_data_arguments, add_trust_remote_code_argument, data_kwargs, given,
                     pooler_specs, positive)

HELP = "leaderboard of poolers on a frozen encoder (encode once), K-fold"
DESCRIPTION = ("Encode the data once (what the poolers read cached, fp16, memory-mapped), train every pooler + head on "
               "the cache with K-fold CV, print and write a leaderboard. Without --data: the embedded WordNet subset. "
               "Under `torchrun` / `accelerate launch -m poolkit.cli compare ...` the encoding is shared among the "
               "processes (one device each); rank 0 trains the heads and writes the leaderboard.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    add = lambda *flags, **kw: parser.add_argument(*flags, default=argparse.SUPPRESS, **kw)  # noqa: E731
    parser.add_argument("--model", help="encoder (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--poolers", nargs="+", default=["default"], metavar="NAME",
                        help="pooler names separated by commas and/or spaces, 'default' (15 poolers) or 'all'; "
                             "NAME:KEY=VALUE[:KEY=VALUE] for one with options (attention:scorer=glu)")
    parser.add_argument("--pooler-opt", "--pooling-opt", dest="pooler_opt", action="append",
                        metavar="[POOLER:]KEY=VALUE", help=POOLER_OPT_HELP)
    add("--folds", type=positive(int), help="K-fold CV (default 5; 3 on the embedded default data)")
    add("--epochs", type=positive(int), help="max epochs per fold (default 20; 8 on the embedded default)")
    add("--batch-size", type=positive(int), help="default 64")
    add("--pooler-lr", type=positive(float), help="pooler + head learning rate (default 1e-3)")
    parser.add_argument("--lr", action=Renamed, use="--pooler-lr")
    add("--patience", type=positive(int), help="default 3")
    add("--max-length", type=positive(int), help="default 256")
    add("--seed", type=int, help="default 0")
    add("--cache-dir", help="feature cache folder (default: $POOLKIT_CACHE/features or ~/.cache/poolkit/features)")
    parser.add_argument("--no-cache", action="store_true", help="encode afresh: read and write no feature cache")
    add("--cache-dtype", choices=["float16", "int8"], help="dtype of the cached token states (default float16; int8: "
        "half the bytes, at the accuracy cost measured in docs/scale.md)")
    add("--cache-max-tokens", type=positive(int), metavar="N", help="cache the token states of each text's first N "
        "tokens only (max, gem, attention, ... see those; cls / mean / layer poolers over them still pool every "
        "token); the accuracy cost is measured in docs/scale.md")
    parser.add_argument("--no-baseline", action="store_true",
                        help="leave out the tuned linear baseline row (logistic / ridge regression on mean-pooled "
                             "features, regularisation chosen on each fold's inner split)")
    add_trust_remote_code_argument(parser)
    add("--finetune-top", type=int, metavar="K", help="then fine-tune the encoder end-to-end with the K best poolers")
    add("--finetune-epochs", type=positive(int), help="default 3")
    add("--encoder-lr", "--finetune-lr", dest="encoder_lr", type=positive(float),
        help="encoder learning rate when fine-tuning (default 5e-5)")
    parser.add_argument("--out", help="output folder (default: runs/compare-<time>)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing leaderboard in --out")


def run(args: argparse.Namespace) -> int:
    from ..training.api import compare

    out = Path(args.out or time.strftime("runs/compare-%Y%m%d-%H%M%S"))
    board = compare(args.data, poolers=pooler_specs(args.poolers, args.pooler_opt), model=args.model, out=out,
                    force=args.force, cache=not args.no_cache, baseline=not args.no_baseline,
                    trust_remote_code=args.trust_remote_code, **data_kwargs(args),
                    **given(args, "folds", "epochs", "batch_size", "pooler_lr", "patience", "max_length", "seed",
                            "cache_dir", "finetune_top", "finetune_epochs", "encoder_lr", "cache_dtype",
                            "cache_max_tokens"))
    if board is None:  # a process of several: rank 0 trains and writes the leaderboard
        from ..training.processes import process_rank

        print("process {} of {}: its share of the encoding is in the feature cache".format(*process_rank()))
        return 0
    print()
    print(board)
    print(f"\nencoded once in {board.settings['encode_seconds']:.1f}s; leaderboard.csv / .json / .png and report.html in {out}")
    return 0
