"""``poolkit evaluate``: how good an encoder + pooler's embeddings, or a trained model, are on a table, with no
training (poolkit.training.evaluation)."""

from __future__ import annotations

import argparse
import json

from ..tasks import EMBEDDING_TASKS as PAIR_TASKS
from ..tasks import HEAD_TASKS
from ..errors import PoolkitError
from ..training.config import EVALUATE_METHODS, EVALUATE_PRESETS, NEIGHBOURS, RESCORE
from .common import add_pooler_arguments, add_trust_remote_code_argument, positive, split_names
from .options import add_config_arguments, given_settings

HELP = "score embeddings (retrieval, similarity, k-NN) or a trained model on a table, with no training"
DESCRIPTION = ("Score an encoder + pooler on a table of pairs, with no training: retrieval (each row a query and a "
               "relevant document; every query ranked against the whole corpus by cosine: nDCG@10, MRR@10, MAP@100, "
               "Recall@1/@10) or similarity (two texts and a graded score: Spearman and Pearson of the cosine). "
               "The figures are those of sentence-transformers' InformationRetrievalEvaluator / "
               "EmbeddingSimilarityEvaluator on the same model and pooling. On a table of texts and targets "
               "(regression, classification, multilabel): a `poolkit train` model's head, or (an encoder, or "
               "--method knn) each row predicted from its --neighbours most cosine-similar other rows (leave one "
               "out), scored with the task's metrics.")
NEIGHBOURS_HELP = "with --method knn: how many neighbours vote for each row (default: %(default)s)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--data", required=True, help="CSV/TSV/JSONL/Parquet file of pairs, or of texts and targets")
    data.add_argument("--task", required=True, choices=PAIR_TASKS + HEAD_TASKS,
                      help="retrieval or similarity (a table of pairs), or regression, classification, multilabel")
    data.add_argument("--text-col", default="text", help="the query (retrieval) or first text (default: text)")
    data.add_argument("--pair-col", default="pair", help="the relevant document (retrieval) or second text (default: "
                      "pair)")
    data.add_argument("--target-col", nargs="+", help="similarity: the graded score (default: score); the other "
                      "table tasks: the target column(s) (default: a trained model's, else label)")
    data.add_argument("--negative-col", help="retrieval: a hard negative document per row (joins the corpus)")
    data.add_argument("--corpus", help="retrieval: a table of more documents, in a column named as --pair-col")
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="encoder folder / hub name (default: packaged all-MiniLM-L6-v2), or a "
                       "`poolkit train` model: its --out folder (every fold scored: mean ± sample std) or a fold_K "
                       "folder")
    model.add_argument("--fold", type=int, metavar="K", help="with a `poolkit train` run: score its fold_K only")
    model.add_argument("--dims", nargs="+", metavar="N", help="also score the first N dimensions of every vector "
                       "for each N (Matryoshka truncation; the texts are encoded once), e.g. --dims 64,128,256")
    model.add_argument("--quantize", nargs="+", metavar="KIND", help="retrieval: also score each kind of quantised "
                       "vectors (int8, uint8, binary, ubinary: queries and corpus quantised, ranked by their codes), "
                       "with and without rescoring, e.g. --quantize int8,binary")
    model.add_argument("--rescore", type=positive(int), default=RESCORE, metavar="M",
                       help=f"with --quantize: rescore the top M x 100 candidates in float32 (default {RESCORE})")
    model.add_argument("--query-prompt", metavar="TEXT", help="retrieval: a prompt before the queries only")
    model.add_argument("--document-prompt", metavar="TEXT", help="retrieval: a prompt before the documents only")
    model.add_argument("--method", choices=EVALUATE_METHODS, help="regression / classification / multilabel: a trained "
                       "model's head (its default) or k-nearest neighbours of the embeddings (an encoder's default)")
    model.add_argument("--neighbours", type=positive(int), default=NEIGHBOURS, metavar="K", help=NEIGHBOURS_HELP)
    add_pooler_arguments(model, default=None)
    add_trust_remote_code_argument(model)
    add_config_arguments(parser.add_argument_group("encoding (poolkit.training.config.EncodeConfig; unset: its "
                                                   "defaults)"), EVALUATE_PRESETS)
    out = parser.add_argument_group("output")
    out.add_argument("--out", help="also write the result as JSON (metrics under \"metrics\")")
    out.add_argument("--force", action="store_true", help="overwrite an existing --out")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ..io import atomic_write_json, refuse_overwrite
    from ..training.evaluation import evaluate
    from .common import encoder_pooler

    out = refuse_overwrite(args.out, args.force) if args.out else None  # before any work
    spec = encoder_pooler(args)
    target = args.target_col if args.target_col is None or len(args.target_col) > 1 else args.target_col[0]
    result = evaluate(args.data, args.task, model=args.model, pooler=spec, text_col=args.text_col,
                      pair_col=args.pair_col, target_col=target, negative_col=args.negative_col,
                      corpus=args.corpus, fold=args.fold, dims=_dims(args.dims),
                      quantize=split_names(args.quantize) if args.quantize else None, rescore=args.rescore,
                      query_prompt=args.query_prompt, document_prompt=args.document_prompt, method=args.method,
                      neighbours=args.neighbours, trust_remote_code=args.trust_remote_code,
                      progress=not args.quiet,
                      **given_settings(args, EVALUATE_PRESETS))
    if out is not None:
        atomic_write_json(out, result)
    sizes = {"retrieval": lambda: f"{result['queries']} queries, {result['corpus']} documents",
             "similarity": lambda: f"{result['pairs']} pairs"}.get(args.task, lambda: f"{result['rows']} rows")()
    if result.get("method") == "knn":
        sizes += f" ({result['neighbours']} nearest neighbours, leave one out)"
    std = result.get("std_ddof1")
    shown = ", ".join(f"{name} {value:.4f}" + (f" ± {std[name]:.4f}" if std else "")
                      for name, value in result["metrics"].items())
    over = f" (mean ± sample std over {len(result['folds'])} folds)" if std else ""
    print(f"{result['pooling']} on {sizes}: {shown}{over}" + (f"; written to {out}" if out else ""))
    for row in result.get("by_dim", []):
        shown = ", ".join(f"{name} {value:.4f}" for name, value in row["metrics"].items())
        print(f"  first {row['dim']} dims: {shown}")
    for row in result.get("by_quantize", []):
        for key, how in (("metrics", ""), ("rescored", f", top {row['rescore']} x 100 rescored in float32")):
            shown = ", ".join(f"{name} {value:.4f}" for name, value in row[key].items())
            print(f"  {row['kind']}{how}: {shown}")
    if not out:
        print(json.dumps(result["metrics"]))
    return 0


def _dims(values: list[str] | None) -> list[int] | None:
    """--dims 64,128 256 -> [64, 128, 256]; a value that is not a whole number is refused in one line."""
    if values is None:
        return None
    names = split_names(values)
    try:
        return [int(name) for name in names]
    except ValueError:
        raise PoolkitError(f"--dims takes whole numbers of dimensions, got {' '.join(values)!r}") from None
