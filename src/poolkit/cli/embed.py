"""``poolkit embed``: texts -> vectors with any pooler, or a trained model's (poolkit.training.api.embed)."""

from __future__ import annotations

import argparse

from ..io import TABLE_SUFFIXES
from ..training.config import EMBED_PRESETS, WINDOW
from .common import add_pooler_arguments, add_text_input_arguments, add_trust_remote_code_argument, positive
from .options import add_config_arguments, given_settings

HELP = "texts -> vectors (.npy, or the table plus embeddings) with any pooler"
DESCRIPTION = ("Embed a table's texts with an encoder + pooler: the packaged MiniLM (or --model) with a parameter-free "
               "pooler, or a model trained by `poolkit train` (--model RUN/fold_K, or RUN when it has one fold) with "
               "its trained pooler. The input is streamed in windows (memory does not grow with the data), an "
               "interrupted run resumes, and under `torchrun` / `accelerate launch -m poolkit.cli embed ...` the "
               "windows are shared among the processes (one device each) and rank 0 writes the one output.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_text_input_arguments(parser)
    parser.add_argument("--out", required=True, help=f"output file: .npy, {', '.join(TABLE_SUFFIXES)} (.npy: the "
                        "(N, dim) float32 array; .parquet / .jsonl: the table plus an embedding column; .csv / .tsv: "
                        "plus emb_0..emb_{dim-1} columns; .csv / .tsv / .jsonl may end in .gz)")
    parser.add_argument("--model", help="encoder folder / hub name (default: packaged all-MiniLM-L6-v2), or a "
                        "`poolkit train` model: a fold_K folder, or its --out folder when it holds one fold")
    add_pooler_arguments(parser, default=None)
    add_config_arguments(parser.add_argument_group("encoding (poolkit.training.config.EmbedConfig; unset: its "
                                                   "defaults)"), EMBED_PRESETS)
    add_trust_remote_code_argument(parser)
    parser.add_argument("--window", type=positive(int), default=WINDOW,
                        help=f"rows read, length-sorted and written at a time (default {WINDOW}): memory holds one "
                        "window; an interrupted run resumes from its finished windows (kept in OUT.partial/)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out, and start over when "
                        "OUT.partial/ holds a run with other settings")


def run(args: argparse.Namespace) -> int:
    from ..training.streaming import embed_to_file
    from .common import encoder_pooler

    spec = encoder_pooler(args)
    settings = given_settings(args, EMBED_PRESETS)
    done = embed_to_file(args.data, args.out, model=args.model, pooler=spec, text_col=args.text_col,
                         trust_remote_code=args.trust_remote_code, window=args.window, force=args.force,
                         progress=not args.quiet, **settings)
    reused = f"; {done['reused']} of {done['windows']} windows kept from an interrupted run" if done["reused"] else ""
    if done["rows"] is None:  # a process of several: rank 0 writes the output
        print(f"process {done['rank']} of {done['world']}: its windows are done{reused}")
        return 0
    print(f"{done['rows']} embeddings of dimension {done['dim']} ({done['pooling']} pooling"
          f"{', L2-normalised' if settings.get('normalize') else ''}"
          f"{', as ' + settings['quantize'] + ' codes' if settings.get('quantize') else ''}) written to {args.out}"
          f"{reused}")
    return 0
