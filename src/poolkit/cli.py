"""The ``poolkit`` command: train, predict, embed, compare, data, bench, zoo. Thin: parses, then calls the library.

Bad input ends with ``error: <one line>`` and exit code 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .errors import PoolkitError

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_DATA = "builtin:embedded"
QUICK_DEFAULTS = {"folds": 3, "epochs": 8}  # `poolkit compare` with no --data: fits in 10 minutes on 2 cores
COMPARE_DEFAULT_POOLERS = ["cls", "mean", "max", "mean_max", "gem", "lse", "attention", "attention_head",
                           "gated_attention", "latent", "adapool", "weighted_layer", "mean_layers",
                           "attention_layers", "lstm_layers"]


# -- argument helpers ---------------------------------------------------------------------------
def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``["attn_size=256", "token_pooler=mean"]`` -> {"attn_size": 256, "token_pooler": "mean"} (JSON values)."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PoolkitError(f"--pooling-opt takes KEY=VALUE, got {pair!r} (e.g. --pooling-opt attn_size=256)")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def parse_poolers(value: str) -> list[str]:
    from .pooling import list_poolers
    from .pooling.base import resolve_name

    if value == "all":
        return list_poolers()
    if value == "default":
        return list(COMPARE_DEFAULT_POOLERS)
    names = [resolve_name(name) for name in value.split(",") if name.strip()]
    if not names:
        raise PoolkitError("--poolers is empty: give 'all', 'default' or a comma-separated list of names")
    return names


def add_data_arguments(parser: argparse.ArgumentParser, targets: bool = True) -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--data", help="CSV/TSV/JSONL/Parquet file, or builtin:NAME (see `poolkit data list`)")
    group.add_argument("--text-col", default="text", help="column holding the texts (default: text)")
    if targets:
        group.add_argument("--target-col", "--target", dest="target_cols", nargs="+", default=["label"],
                           metavar="COL", help="target column(s); several = multi-target regression (default: label)")
        group.add_argument("--task", choices=["regression", "classification", "multilabel"],
                           help="default: inferred from the target column(s)")
        group.add_argument("--limit", type=int, help="use a stratified sample of this many rows")


def add_text_input_arguments(parser: argparse.ArgumentParser) -> None:
    """--data and --text-col of the commands that read texts only (predict, embed)."""
    parser.add_argument("--data", required=True, help="CSV/TSV/JSONL/Parquet file with a text column, or builtin:NAME")
    parser.add_argument("--text-col", default="text", help="column holding the texts (default: text)")


def load_dataset(args: argparse.Namespace, default: str | None = None):
    from .data import load_data

    spec = args.data or default
    if spec is None:
        raise PoolkitError("--data is required: a CSV/TSV/JSONL/Parquet file or builtin:NAME")
    table_args = {}
    if not spec.startswith("builtin:"):
        table_args = {"text_col": args.text_col, "target_cols": tuple(args.target_cols), "task": args.task}
    return load_data(spec, limit=args.limit, seed=getattr(args, "seed", 0), **table_args)


def positive(kind: type):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


# -- train ----------------------------------------------------------------------------------------
def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="encoder: a local folder or hub name (default: packaged all-MiniLM-L6-v2)")
    model.add_argument("--pooling", default="mean", help="pooler name (see `poolkit zoo`; default: mean)")
    model.add_argument("--pooling-opt", action="append", metavar="KEY=VALUE",
                       help="pooler option, repeatable: --pooling-opt attn_size=256 --pooling-opt token_pooler=mean")
    train = parser.add_argument_group("training")
    train.add_argument("--folds", type=positive(int), default=1, help="K-fold CV, one model per fold (default 1: one "
                       "train/validation split)")
    train.add_argument("--val-fraction", type=float, default=0.2, help="validation share when --folds 1")
    train.add_argument("--epochs", type=positive(int), default=3)
    train.add_argument("--batch-size", type=positive(int), default=32)
    train.add_argument("--lr", type=positive(float), default=5e-5, help="encoder learning rate (top layer)")
    train.add_argument("--pooler-lr", type=positive(float), default=1e-3, help="pooler + head learning rate")
    train.add_argument("--layer-decay", type=positive(float), default=0.9, help="layer-wise LR decay per layer")
    train.add_argument("--weight-decay", type=float, default=0.01)
    train.add_argument("--warmup-ratio", type=float, default=0.1)
    train.add_argument("--scheduler", choices=["linear", "cosine"], default="linear")
    train.add_argument("--grad-accum", type=positive(int), default=1)
    train.add_argument("--max-grad-norm", type=positive(float), default=1.0)
    train.add_argument("--mixed-precision", choices=["auto", "no", "fp16", "bf16"], default="auto")
    train.add_argument("--max-length", type=positive(int), default=256)
    train.add_argument("--patience", type=positive(int), default=2, help="evaluations without improvement before stopping")
    train.add_argument("--seed", type=int, default=42)
    train.add_argument("--train-only", choices=["all", "attention", "head"], default="all",
                       help="attention: only self-attention projections + pooler + head (Jin et al. 2024); "
                            "head: frozen encoder")
    train.add_argument("--head-dropout", type=float, default=0.1)
    out = parser.add_argument_group("output")
    out.add_argument("--out", required=True, help="output folder (model per fold, oof.csv, metrics.json, train.log)")
    out.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    out.add_argument("--force", action="store_true", help="overwrite an existing --out")


def train_config(args: argparse.Namespace, pooling: str | None = None, options: dict | None = None):
    from .training.finetune import TrainConfig

    return TrainConfig(model=args.model, pooling=pooling or args.pooling,
                       pooling_options=options if options is not None else parse_options(args.pooling_opt),
                       folds=args.folds, val_fraction=args.val_fraction, epochs=args.epochs,
                       batch_size=args.batch_size, lr=args.lr, pooler_lr=args.pooler_lr,
                       layer_decay=args.layer_decay, weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio,
                       scheduler=args.scheduler, grad_accum=args.grad_accum, max_grad_norm=args.max_grad_norm,
                       mixed_precision=args.mixed_precision, max_length=args.max_length, patience=args.patience,
                       seed=args.seed, train_only=args.train_only, head_dropout=args.head_dropout)


def run_train(args: argparse.Namespace) -> int:
    from .pooling.base import check_options
    from .training.finetune import fit

    options = parse_options(args.pooling_opt)
    args.pooling = check_options(args.pooling, options)  # fail before loading data and models
    data = load_dataset(args)
    metrics = fit(train_config(args, options=options), data, args.out, resume=args.resume, force=args.force)
    primary = metrics.get("primary_metric")
    summary = metrics.get("mean", {})
    if primary in summary:
        print(f"{args.pooling}: {primary} {summary[primary]:.4f} ± {metrics.get('std', {}).get(primary, 0.0):.4f} "
              f"over {args.folds} fold(s); model and predictions in {args.out}")
    return 0


# -- predict --------------------------------------------------------------------------------------
def read_texts(path: str, text_col: str):
    """The input table and its text column as a list of strings (missing values as ""); ``builtin:NAME``
    gives the built-in set's texts and targets."""
    import pandas as pd

    from .data.tables import read_frame

    if path.startswith("builtin:"):
        from .data.builtin import load_builtin

        data = load_builtin(path)
        frame = pd.DataFrame({data.text_col: data.texts})
        if data.task == "classification":
            frame[data.target_cols[0]] = [data.label_names[i] for i in data.targets]
        elif data.task == "regression":
            for j, col in enumerate(data.target_cols):
                frame[col] = data.targets[:, j]
        return frame, list(data.texts)
    frame = read_frame(Path(path))
    if text_col not in frame.columns:
        from .errors import suggest
        raise PoolkitError(f"column {text_col!r} not found in {path}.{suggest(text_col, frame.columns)} "
                           f"Columns: {', '.join(map(str, frame.columns))}; pass the text column with --text-col")
    return frame, frame[text_col].fillna("").astype(str).tolist()


def write_table(out: Path, frame) -> None:
    """Write a DataFrame atomically in the format the suffix names (.jsonl, .parquet, .tsv, else CSV)."""
    from .io import atomic_write

    writer = {".jsonl": lambda tmp: frame.to_json(tmp, orient="records", lines=True, force_ascii=False),
              ".parquet": lambda tmp: frame.to_parquet(tmp, index=False),
              ".tsv": lambda tmp: frame.to_csv(tmp, index=False, sep="\t")}.get(
        out.suffix.lower(), lambda tmp: frame.to_csv(tmp, index=False))
    atomic_write(out, writer)


def run_predict(args: argparse.Namespace) -> int:
    from .data.tables import decode_labels
    from .io import refuse_overwrite
    from .training.finetune import predict

    out = refuse_overwrite(args.out, args.force)
    frame, texts = read_texts(args.data, args.text_col)
    outputs, info = predict(args.model, texts, batch_size=args.batch_size)
    result = frame.copy()
    task, names = info["task"], info.get("label_names")
    if task == "regression":
        for j, col in enumerate(info.get("target_cols") or [f"target_{j}" for j in range(outputs.shape[1])]):
            result[f"pred_{col}"] = outputs[:, j]
    else:
        for j, name in enumerate(names):
            result[f"prob_{name}"] = outputs[:, j]
        decoded = decode_labels(outputs, names, multilabel=task == "multilabel")
        result["prediction"] = ["|".join(d) for d in decoded] if task == "multilabel" else decoded
    write_table(out, result)
    print(f"{len(result)} predictions ({info.get('n_models', 1)} model(s) averaged) written to {out}")
    return 0


# -- embed ----------------------------------------------------------------------------------------
EMBED_SUFFIXES = (".npy", ".parquet", ".jsonl", ".csv", ".tsv")


def run_embed(args: argparse.Namespace) -> int:
    import numpy as np

    from .io import atomic_write, refuse_overwrite
    from .models.text_encoder import TextEncoder

    out = Path(args.out)
    if out.suffix.lower() not in EMBED_SUFFIXES:
        raise PoolkitError(f"--out {out}: unsupported format {out.suffix or '(no suffix)'!r}; use one of "
                           f"{', '.join(EMBED_SUFFIXES)}")
    refuse_overwrite(out, args.force)
    options = parse_options(args.pooling_opt)
    frame, texts = read_texts(args.data, args.text_col)
    encoder = TextEncoder(args.model, args.pooling, normalize=args.normalize, max_length=args.max_length,
                          precision=args.mixed_precision, allow_untrained=args.allow_untrained, **options)
    vectors = encoder.encode(texts, batch_size=args.batch_size, progress=not args.quiet).numpy()
    if out.suffix.lower() == ".npy":
        atomic_write(out, lambda tmp: np.save(open(tmp, "wb"), vectors))
    elif out.suffix.lower() in (".csv", ".tsv"):
        import pandas as pd
        columns = pd.DataFrame(vectors, columns=[f"emb_{j}" for j in range(vectors.shape[1])], index=frame.index)
        write_table(out, pd.concat([frame, columns], axis=1))
    else:
        write_table(out, frame.assign(embedding=list(vectors)))
    print(f"{len(texts)} embeddings of dimension {vectors.shape[1]} ({encoder.pooler.name} pooling"
          f"{', L2-normalised' if args.normalize else ''}) written to {out}")
    return 0


# -- compare --------------------------------------------------------------------------------------
def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    parser.add_argument("--model", help="encoder (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--poolers", default="default", help="'default' (15 poolers), 'all', or a comma-separated list")
    parser.add_argument("--folds", type=positive(int), help="K-fold CV (default 5; 3 on the embedded default data)")
    parser.add_argument("--epochs", type=positive(int), help="max epochs per fold (default 20; 8 on the embedded default)")
    parser.add_argument("--batch-size", type=positive(int), default=64)
    parser.add_argument("--lr", type=positive(float), default=1e-3, help="pooler + head learning rate")
    parser.add_argument("--patience", type=positive(int), default=3)
    parser.add_argument("--max-length", type=positive(int), default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", help="feature cache folder (default: $POOLKIT_CACHE or ~/.cache/poolkit)")
    parser.add_argument("--finetune-top", type=int, default=0, metavar="K",
                        help="then fine-tune the encoder end-to-end with the K best poolers")
    parser.add_argument("--finetune-epochs", type=positive(int), default=3)
    parser.add_argument("--finetune-lr", type=positive(float), default=5e-5)
    parser.add_argument("--out", help="output folder (default: runs/compare-<time>)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing leaderboard in --out")


def run_compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .io import prepare_out_dir
    from .models.encoders import model_label
    from .training.features import encode_features
    from .training.leaderboard import OUTPUTS, leaderboard_row, print_leaderboard, rank, write_leaderboard
    from .training.metrics import primary_metric
    from .training.probing import ProbeConfig, compare_poolers

    console = Console()
    quick = args.data is None
    folds = args.folds or (QUICK_DEFAULTS["folds"] if quick else 5)
    epochs = args.epochs or (QUICK_DEFAULTS["epochs"] if quick else 20)
    poolers = parse_poolers(args.poolers)
    data = load_dataset(args, default=DEFAULT_DATA)
    out = prepare_out_dir(args.out or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S"), args.force, OUTPUTS)
    metric = primary_metric(data.task, data.n_outputs)
    console.print(f"[bold]poolkit compare[/]: {len(poolers)} poolers on {data.source} ({len(data)} rows, "
                  f"{data.task}, {folds} folds, up to {epochs} epochs), ranked by {metric.name}")

    start = time.perf_counter()
    cache = encode_features(data.texts, args.model, max_length=args.max_length, cache_dir=args.cache_dir)
    encode_seconds = time.perf_counter() - start
    config = ProbeConfig(folds=folds, epochs=epochs, batch_size=args.batch_size, lr=args.lr,
                         patience=args.patience, seed=args.seed)

    def report(result):
        summary = result.summary()
        console.print(f"  {result.label:<22} {metric.name} {summary['mean']:.4f} ± {summary['std']:.4f}  "
                      f"({result.seconds:.1f}s)")

    results = compare_poolers(poolers, cache, data, config, on_result=report)
    rows = [leaderboard_row(r.label, "frozen", r.metric, r.fold_metrics, r.params, r.seconds) for r in results]
    title = f"{data.source}: {len(data)} rows, {folds}-fold {metric.name}, encoder {model_label(cache.meta['model'])}"
    settings = {"data": data.source, "rows": len(data), "task": data.task, "model": cache.meta["model"],
                "metric": metric.name, "higher_is_better": metric.higher_is_better, "folds": folds,
                "probe": vars(config), "encode_seconds": round(encode_seconds, 2), "poolers": poolers,
                "finetune_top": args.finetune_top}
    details = {"folds_detail": {r.label: r.fold_metrics for r in results}}

    def publish(rows: list[dict[str, Any]]):
        frame = rank(rows, metric)
        write_leaderboard(out, frame, {**settings, "total_seconds": round(time.perf_counter() - start, 2)},
                          details, title)
        return frame

    frame = publish(rows)  # the frozen leaderboard is on disk before any (long) fine-tuning starts
    if args.finetune_top > 0:
        rows += _finetune_top(args, results[: args.finetune_top], data, out, folds, console)
        frame = publish(rows)
    print_leaderboard(frame, title, console)
    console.print(f"encoded once in {encode_seconds:.1f}s; leaderboard.csv / .json / .png in {out}")
    return 0


def _finetune_top(args, top, data, out: Path, folds: int, console) -> list[dict[str, Any]]:
    from .training.finetune import TrainConfig, fit
    from .training.leaderboard import leaderboard_row

    rows = []
    for result in top:
        console.print(f"[bold]fine-tuning[/] the encoder with {result.label} ({folds} folds, {args.finetune_epochs} epochs)")
        config = TrainConfig(model=args.model, pooling=result.pooler, pooling_options=result.options, folds=folds,
                             epochs=args.finetune_epochs, lr=args.finetune_lr, max_length=args.max_length,
                             seed=args.seed)
        start = time.perf_counter()
        metrics = fit(config, data, out / "finetuned" / result.label, force=args.force)
        fold_metrics = [f["metrics"] for f in metrics["folds"]]
        rows.append(leaderboard_row(result.label, "finetuned", metrics["primary_metric"], fold_metrics,
                                    metrics.get("params", 0), time.perf_counter() - start))
    return rows


# -- data, bench, zoo ------------------------------------------------------------------------------
def run_data_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .data import list_datasets

    table = Table(title="built-in datasets (use as --data builtin:NAME)")
    for column in ("name", "task", "description", "needs"):
        table.add_column(column)
    for info in list_datasets():
        table.add_row(info.name, info.task, info.description, info.needs or "nothing (ships with poolkit)")
    Console().print(table)
    return 0


def run_zoo_command(args: argparse.Namespace) -> int:
    from .demo import main as zoo_main

    zoo_main()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poolkit", description="Pooling that is correct under padding and dtypes: "
                                     "fine-tune, predict and compare poolers on your own data.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = sub.add_parser("train", help="fine-tune encoder + pooler + head on a table of texts",
                           description="Fine-tune encoder + pooler + head. Writes fold_*/ models, oof.csv, "
                                       "metrics.json and train.log to --out.")
    add_train_arguments(train)
    train.set_defaults(func=run_train)

    predict = sub.add_parser("predict", help="predict with a model folder written by `poolkit train`")
    predict.add_argument("--model", required=True, help="the --out folder of `poolkit train`")
    add_text_input_arguments(predict)
    predict.add_argument("--out", required=True, help="predictions file (.csv, .tsv, .jsonl or .parquet)")
    predict.add_argument("--batch-size", type=positive(int), default=64)
    predict.add_argument("--force", action="store_true", help="overwrite an existing --out")
    predict.set_defaults(func=run_predict)

    embed = sub.add_parser("embed", help="texts -> vectors (.npy, or the table plus embeddings) with any pooler",
                           description="Embed a table's texts with an encoder + pooler: the packaged MiniLM (or "
                           "--model) with a parameter-free pooler, or a model trained by `poolkit train` "
                           "(--model RUN/fold_K) with its trained pooler.")
    add_text_input_arguments(embed)
    embed.add_argument("--out", required=True, help=f"output file: {', '.join(EMBED_SUFFIXES)} (.npy: the (N, dim) "
                       "float32 array; .parquet / .jsonl: the table plus an embedding column; .csv / .tsv: plus "
                       "emb_0..emb_{dim-1} columns)")
    embed.add_argument("--model", help="encoder folder / hub name, or a `poolkit train` fold folder (default: "
                       "packaged all-MiniLM-L6-v2)")
    embed.add_argument("--pooling", help="pooler name (default: mean; a trained model's own pooler when --model is one)")
    embed.add_argument("--pooling-opt", action="append", metavar="KEY=VALUE", help="pooler option (repeatable)")
    embed.add_argument("--normalize", action="store_true", help="L2-normalise every vector (for cosine similarity)")
    embed.add_argument("--batch-size", type=positive(int), default=32)
    embed.add_argument("--max-length", type=positive(int), help="token limit (default: the model's, 256 for MiniLM)")
    embed.add_argument("--mixed-precision", choices=["auto", "no", "fp16", "bf16"], default="auto",
                       help="autocast dtype (auto: bf16/fp16 on CUDA, float32 on CPU)")
    embed.add_argument("--allow-untrained", action="store_true",
                       help="accept a pooler with random (untrained) weight matrices on a bare encoder")
    embed.add_argument("--quiet", action="store_true", help="no progress bar")
    embed.add_argument("--force", action="store_true", help="overwrite an existing --out")
    embed.set_defaults(func=run_embed)

    compare = sub.add_parser("compare", help="leaderboard of poolers on a frozen encoder (encode once), K-fold",
                             description="Encode the data once (all layers cached, fp16, memory-mapped), train "
                                         "every pooler + head on the cache with K-fold CV, print and write a "
                                         "leaderboard. Without --data: the embedded WordNet subset.")
    add_compare_arguments(compare)
    compare.set_defaults(func=run_compare)

    data = sub.add_parser("data", help="built-in datasets")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="list the built-in datasets").set_defaults(func=run_data_list)

    bench = sub.add_parser("bench", help="benchmarks that reproduce the research")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    from .bench.snr import add_snr_arguments, run_snr_command

    snr = bench_sub.add_parser("snr", help="noise robustness (SNR) of poolers, Brothers (ICML 2025)")
    add_snr_arguments(snr)
    snr.set_defaults(func=run_snr_command)

    zoo = sub.add_parser("zoo", help="every pooler on the packaged MiniLM's hidden states: dims, params, time")
    zoo.set_defaults(func=run_zoo_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PoolkitError as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # anything unexpected: one line, the traceback with --debug
        if args.debug:
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(f"error: {type(err).__name__}: {first} (run with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
