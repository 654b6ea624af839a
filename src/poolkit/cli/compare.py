"""``poolkit compare``: a leaderboard of poolers on a frozen encoder (poolkit.training.api.compare)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..training.config import COMPARE_PRESETS
from .common import POOLER_OPT_HELP, Renamed, add_data_arguments, add_trust_remote_code_argument, data_kwargs
from .common import pooler_specs, said
from .options import add_config_arguments, given_settings

HELP = "leaderboard of poolers on a frozen encoder (encode once), K-fold"
DESCRIPTION = ("Encode the data once (what the poolers read cached, fp16, memory-mapped), train every pooler + head on "
               "the cache with K-fold CV, print and write a leaderboard. Without --data: the embedded WordNet subset. "
               "Under `torchrun` / `accelerate launch -m poolkit.cli compare ...` the encoding is shared among the "
               "processes (one device each); rank 0 trains the heads and writes the leaderboard.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser, pairs=True)
    parser.add_argument("--model", help="encoder (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--poolers", nargs="+", default=["default"], metavar="NAME",
                        help="pooler names separated by commas and/or spaces, 'default' (15 poolers) or 'all'; "
                             "NAME:KEY=VALUE[:KEY=VALUE] for one with options (attention:scorer=glu)")
    parser.add_argument("--pooler-opt", "--pooling-opt", dest="pooler_opt", action="append",
                        metavar="[POOLER:]KEY=VALUE", help=POOLER_OPT_HELP)
    settings = parser.add_argument_group("settings (poolkit.training.config.CompareConfig; unset: its defaults)")
    add_config_arguments(settings, COMPARE_PRESETS)
    settings.add_argument("--lr", action=Renamed, use="--pooler-lr")
    add_trust_remote_code_argument(parser)
    parser.add_argument("--out", help="output folder (default: runs/compare-<time>, with -2, -3, ... after it when that name is taken)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing leaderboard in --out (and an "
                        "earlier --export folder)")
    parser.add_argument("--export", metavar="DIR", help="then refit the best learned row (frozen or fine-tuned; never "
                        "the baseline) on every row, for the median of the epochs its folds chose, into a model folder "
                        "that predict, embed, evaluate and explain load")
    parser.add_argument("--export-pooler", metavar="NAME", help="export the best row with this leaderboard label "
                        "instead of the best row")
    parser.add_argument("--export-mode", choices=("frozen", "finetuned"), help="export only a row of this mode "
                        "(default: either, by the metric)")
    parser.add_argument("--export-format", choices=("poolkit", "sentence-transformers"), default="poolkit",
                        help="poolkit: a model folder with the head; sentence-transformers: a folder "
                             "SentenceTransformer(DIR) loads, giving the refit pooler's vectors (learned poolers need "
                             "trust_remote_code=True there) (default: poolkit)")


def default_out() -> Path:
    """runs/compare-<time> to the second, then -2, -3, ... after it while an earlier run holds the name (runs
    started within one second, as a script's back-to-back compares of small tables are). Two processes that pick
    one name at once are kept apart by the run folder's lock: the second is refused, and nothing is overwritten."""
    stamp = Path(time.strftime("runs/compare-%Y%m%d-%H%M%S"))
    out, n = stamp, 1
    while out.exists():
        n += 1
        out = stamp.with_name(f"{stamp.name}-{n}")
    return out


def run(args: argparse.Namespace) -> int:
    from ..training.api import compare

    out = Path(args.out) if args.out else default_out()
    board = compare(args.data, poolers=pooler_specs(args.poolers, args.pooler_opt), model=args.model, out=out,
                    force=args.force, trust_remote_code=args.trust_remote_code, report=said(args), export=args.export,
                    export_pooler=args.export_pooler, export_format=args.export_format,
                    export_mode=args.export_mode, **data_kwargs(args),
                    **given_settings(args, COMPARE_PRESETS))
    if board is None:  # a process of several: rank 0 trains and writes the leaderboard
        from ..training.processes import process_rank

        print("process {} of {}: its share of the encoding is in the feature cache".format(*process_rank()))
        return 0
    print()
    print(board)
    if board.curve is not None:
        print(f"\n{board.curve.reading()}")
    files = "leaderboard.csv / .json / .png" + (", learning_curve.csv / .png" if board.curve is not None else "")
    print(f"\nencoded once in {board.settings['encode_seconds']:.1f}s; {files} and report.html in {out}")
    if args.export and args.export_format == "sentence-transformers":
        print(f"the winner's pooler, {board.settings['export']['pooler']}, refit on every row: "
              f"SentenceTransformer({str(args.export)!r}, trust_remote_code=True).encode(texts)")
    elif args.export:
        print(f"the winner, {board.settings['export']['pooler']}, refit on every row: poolkit predict --model "
              f"{args.export} --data NEW.csv --out preds.csv")
    return 0
