"""``poolkit explain``: what a trained model's pooler looks at, as one self-contained HTML page
(poolkit.explain)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import add_trust_remote_code_argument, positive

HELP = "explain a model's predictions by its pooler's weights: a self-contained HTML report"
DESCRIPTION = ("Shade each text's words by the pooler's weight (sub-word pieces summed per word), with the prediction, "
               "layer weights for layer poolers and one row per head / query; writes one HTML file that needs no "
               "network. --model: a `poolkit train` folder (its fold models averaged) or one fold_K folder; or an "
               "encoder with --pooler (no head: no prediction).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a `poolkit train` --out folder or one of its fold_K folders "
                        "(or an encoder folder / hub name, with --pooler)")
    texts = parser.add_mutually_exclusive_group(required=True)
    texts.add_argument("--text", action="append", help="a text to explain (repeatable)")
    texts.add_argument("--data", help="CSV/TSV/JSONL/Parquet file with a text column, or builtin:NAME")
    parser.add_argument("--text-col", default="text", help="column holding the texts (default: text)")
    parser.add_argument("--target-col", help="column holding the true labels / values: adds sorting by error")
    parser.add_argument("--limit", type=positive(int), help="explain only the first N rows of --data")
    parser.add_argument("--pooler", help="with an encoder as --model: the pooler whose weights to show")
    parser.add_argument("--out", required=True, help="the report (.html)")
    parser.add_argument("--png", metavar="DIR", help="also write one matplotlib picture per text (text_0001.png, ...)")
    parser.add_argument("--batch-size", type=positive(int), default=32)
    parser.add_argument("--max-length", type=positive(int), help="token limit (default: the one it was trained with)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out (and pictures in --png)")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="average the finished folds of an unfinished run (refused otherwise)")
    add_trust_remote_code_argument(parser)


def run(args: argparse.Namespace) -> int:
    from ..errors import PoolkitError
    from ..explain import explain
    from ..explain.pictures import picture_names, write_pictures
    from ..explain.report import Report
    from ..io import RunFolder, refuse_overwrite
    from ..data.texts import read_texts
    from ..wording import counted

    if not args.out.endswith((".html", ".htm")):
        raise PoolkitError(f"--out {args.out} must end in .html: the report is one HTML file")
    out = refuse_overwrite(args.out, args.force)
    if args.text:
        texts, targets = args.text, None
        if args.target_col:
            raise PoolkitError("--target-col reads a column of --data: it does not go with --text")
    else:
        frame, texts = read_texts(args.data, args.text_col)
        frame, texts = (frame.iloc[:args.limit], texts[:args.limit]) if args.limit else (frame, texts)
        targets = None
        if args.target_col:
            if args.target_col not in frame.columns:
                raise PoolkitError(f"--target-col {args.target_col!r} is not a column of {args.data} (columns: "
                                   f"{', '.join(map(str, frame.columns))})")
            targets = frame[args.target_col].tolist()
    pictures = RunFolder(Path(args.png), tuple(picture_names(len(texts))), flag="--png") if args.png else None
    if pictures is not None:
        pictures.check(force=args.force)  # before the model is loaded
    explanation = explain(args.model, texts, pooler=args.pooler, targets=targets, batch_size=args.batch_size,
                          max_length=args.max_length, allow_incomplete=args.allow_incomplete,
                          trust_remote_code=args.trust_remote_code)
    title = f"poolkit explain: {explanation.pooler['name']} pooler, {counted(len(texts), 'text')}"
    Report(title).explanations(explanation).write(out)
    print(f"{counted(len(texts), 'text')} explained ({explanation.source}) -> {out}")
    if pictures is not None:
        with pictures.claim(force=args.force) as png:
            write_pictures(explanation, png)
        print(f"{len(texts)} pictures -> {png}")
    return 0
