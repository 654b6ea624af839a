"""``poolkit predict``: a ``poolkit train`` model's predictions for a table (poolkit.training.api.predict)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..io import table_format, write_table
from ..training.config import PREDICT_PRESETS
from .common import add_text_input_arguments, add_trust_remote_code_argument
from .options import add_config_arguments, given_settings

HELP = "predict with a model written by `poolkit train`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a `poolkit train` --out folder (its fold models averaged) "
                        "or one of its fold_K folders")
    add_text_input_arguments(parser)
    parser.add_argument("--out", required=True, help="predictions file (.csv, .tsv, .jsonl or .parquet; .csv / .tsv / "
                        ".jsonl may end in .gz)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out")
    add_trust_remote_code_argument(parser)
    add_config_arguments(parser.add_argument_group("prediction (poolkit.training.config.PredictConfig; unset: its "
                                                   "defaults)"), PREDICT_PRESETS)


def run(args: argparse.Namespace) -> int:
    from ..io import refuse_overwrite
    from ..training.api import predict

    table_format(args.out)  # a format poolkit can write, before any work
    out = refuse_overwrite(args.out, args.force)
    result = predict(args.model, args.data, text_col=args.text_col, trust_remote_code=args.trust_remote_code,
                     **given_settings(args, PREDICT_PRESETS))
    write_table(Path(out), result)
    print(f"{len(result)} predictions ({result.attrs['n_models']} model(s) averaged) written to {out}")
    return 0
