"""``poolkit embed``: texts -> vectors with any pooler, or a trained model's (poolkit.training.api.embed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import (TABLE_SUFFIXES, add_pooler_arguments, add_precision_argument, add_text_input_arguments,
                     add_trust_remote_code_argument, positive, table_format, write_table)

HELP = "texts -> vectors (.npy, or the table plus embeddings) with any pooler"
DESCRIPTION = ("Embed a table's texts with an encoder + pooler: the packaged MiniLM (or --model) with a parameter-free "
               "pooler, or a model trained by `poolkit train` (--model RUN/fold_K, or RUN when it has one fold) with "
               "its trained pooler.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_text_input_arguments(parser)
    parser.add_argument("--out", required=True, help=f"output file: .npy, {', '.join(TABLE_SUFFIXES)} (.npy: the "
                        "(N, dim) float32 array; .parquet / .jsonl: the table plus an embedding column; .csv / .tsv: "
                        "plus emb_0..emb_{dim-1} columns; .csv / .tsv / .jsonl may end in .gz)")
    parser.add_argument("--model", help="encoder folder / hub name (default: packaged all-MiniLM-L6-v2), or a "
                        "`poolkit train` model: a fold_K folder, or its --out folder when it holds one fold")
    add_pooler_arguments(parser, default=None)
    parser.add_argument("--normalize", action="store_true", help="L2-normalise every vector (for cosine similarity)")
    parser.add_argument("--batch-size", type=positive(int), default=32)
    parser.add_argument("--max-length", type=positive(int), help="token limit (default: the model's, 256 for MiniLM)")
    add_precision_argument(parser)
    parser.add_argument("--allow-nonfinite", action="store_true",
                        help="write vectors holding NaN or inf (refused otherwise)")
    parser.add_argument("--allow-untrained", action="store_true",
                        help="accept a pooler with random (untrained) weight matrices on a bare encoder")
    add_trust_remote_code_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..io import atomic_write, refuse_overwrite
    from ..training.api import embed
    from .common import single_pooler_spec

    out = Path(args.out)
    kind, _ = table_format(out, others=(".npy",))
    refuse_overwrite(out, args.force)
    spec = single_pooler_spec(args.pooler or "mean", args.pooler_opt) if args.pooler or args.pooler_opt else None
    frame, vectors, used = embed(args.data, model=args.model, pooler=spec, text_col=args.text_col,
                                 normalize=args.normalize, batch_size=args.batch_size, max_length=args.max_length,
                                 precision=getattr(args, "precision", "auto"), allow_untrained=args.allow_untrained,
                                 allow_nonfinite=args.allow_nonfinite,
                                 trust_remote_code=args.trust_remote_code,
                                 progress=not args.quiet)
    if kind == ".npy":
        def save(tmp):
            with open(tmp, "wb") as handle:
                np.save(handle, vectors)

        atomic_write(out, save)
    elif kind in (".csv", ".tsv"):
        import pandas as pd
        columns = pd.DataFrame(vectors, columns=[f"emb_{j}" for j in range(vectors.shape[1])], index=frame.index)
        write_table(out, pd.concat([frame, columns], axis=1))
    else:
        write_table(out, frame.assign(embedding=list(vectors)))
    print(f"{len(vectors)} embeddings of dimension {vectors.shape[1]} ({used['name']} pooling"
          f"{', L2-normalised' if args.normalize else ''}) written to {out}")
    return 0
