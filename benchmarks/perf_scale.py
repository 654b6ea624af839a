"""Scale: streamed ``poolkit embed`` against N, one process against two, and compare's cache bytes per text.

1. ``embed`` (``poolkit.training.streaming.embed_to_file`` -> .npy, windows of 8,192 rows) on WordNet glosses
   resampled with replacement to N: the packaged all-MiniLM-L6-v2 at small N, and a tiny random-initialised
   BERT (2 layers, hidden 64, MiniLM's tokenizer) at large N, so that a million texts take minutes. Each cell
   runs in a fresh child process that reports its wall and CPU seconds (``resource.getrusage``) and its peak RSS
   (VmHWM): the goal is texts/s flat in N and peak RSS flat from 10k up.
2. The same command alone (torch threads = the cores given) against ``torchrun --nproc_per_node 2`` (one thread
   each), whole commands timed (start-up included), outputs checked to agree.
3. compare's feature cache, bytes per text, with every layer's token states (before) and with what the default
   poolers and the linear baseline read (after; also with int8 token states, and with token states of each
   text's first ``--token-cap`` tokens), for MiniLM and a 12-layer BERT-base config (random weights: the sizes
   are the config's); the leaderboard of a few poolers on these caches (same folds and seeds); and the relative
   error of MiniLM's token states stored as int8 against float8 (e4m3), each with one scale per token vector.

    flock /tmp/poolkit-bench.lock .venv/bin/python benchmarks/perf_scale.py --json benchmarks/results/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from perf_common import run_info, save_json, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LEADERBOARD_POOLERS = ("cls", "mean", "max", "gem", "attention", "weighted_layer", "mean_layers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minilm-n", default="1000,10000", help="N for the packaged MiniLM (comma-separated)")
    parser.add_argument("--tiny-n", default="10000,100000,1000000", help="N for the tiny random BERT")
    parser.add_argument("--two-process-n", type=int, default=2000, help="N (MiniLM) of the 1 vs 2 processes run")
    parser.add_argument("--cache-texts", type=int, default=300, help="texts encoded for the cache sizes")
    parser.add_argument("--board-texts", type=int, default=1000, help="embedded rows of the before/after board")
    parser.add_argument("--board-epochs", type=int, default=5, help="epochs of the before/after board")
    parser.add_argument("--token-cap", type=int, default=8, help="tokens per text of the capped cache")
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the scaling cells (one: on cores "
                        "that other jobs share, a second thread mostly waits)")
    parser.add_argument("--tiny-batch-size", type=int, default=1024, help="batch of the tiny BERT (per-op overhead "
                        "dominates its small matrices)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON of one embed cell: run it here and report


def glosses(n: int, folder: Path) -> Path:
    """WordNet glosses (all of them when Debian's wordnet-base is installed, else the embedded 3,000) resampled
    with replacement to ``n`` rows, as a Parquet file."""
    from poolkit.data.builtin import load_builtin

    try:
        source = load_builtin("builtin:wordnet-supersense")
    except Exception:  # wordnet-base not installed: the shipped subset
        source = load_builtin("builtin:embedded")
    rng = np.random.default_rng(0)
    texts = np.asarray(source.texts, dtype=object)[rng.integers(0, len(source.texts), size=n)]
    path = folder / f"glosses-{n}.parquet"
    pd.DataFrame({"text": texts}).to_parquet(path)
    return path


def tiny_bert(folder: Path, layers: int = 2, hidden: int = 64) -> str:
    """A random-initialised BERT with MiniLM's tokenizer (real glosses tokenise as they would for MiniLM)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from poolkit.models.encoders import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(None))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                        max_position_embeddings=512)
    torch.manual_seed(0)
    path = folder / f"bert-{layers}x{hidden}"
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def child(cell: dict) -> None:
    """One embed cell in this (fresh) process: prints its seconds and peak RSS as JSON."""
    import torch

    from poolkit.training.streaming import embed_to_file

    torch.set_num_threads(cell.pop("threads"))
    start, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    done = embed_to_file(cell.pop("data"), cell.pop("out"), progress=False, **cell)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall_s": wall, "cpu_s": after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime,
                      "peak_rss_mib": peak_rss_mib(), "rows": done["rows"]}))


def peak_rss_mib() -> float:
    """This process's peak resident memory: VmHWM, kept per address space, so it starts afresh at exec (Linux's
    ru_maxrss keeps the maximum across exec, i.e. counts the parent's memory at fork); elsewhere ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_cell(data: Path, model: str | None, out: Path, window: int, threads: int, batch_size: int) -> dict:
    cell = {"data": str(data), "out": str(out), "model": model, "window": window, "threads": threads,
            "batch_size": batch_size, "force": True}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run([sys.executable, __file__, "--child", json.dumps(cell)], capture_output=True, text=True,
                            env=env, check=False)
    if result.returncode:
        raise SystemExit(result.stderr[-3000:])
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return {**measured, "texts_per_s": measured["rows"] / measured["wall_s"]}


def scaling(args, folder: Path, tiny: str, rows: list[dict], saved) -> list[dict]:
    """Every (model, N) cell, appended to ``rows``; ``saved()`` after each (a run stopped later keeps them)."""
    for label, model, sizes, batch in (("all-MiniLM-L6-v2", None, args.minilm_n, 32),
                                       ("tiny BERT 2x64 (random)", tiny, args.tiny_n, args.tiny_batch_size)):
        for n in (int(x) for x in sizes.split(",") if x):
            data = glosses(n, folder)
            measured = run_cell(data, model, folder / "out.npy", args.window, args.threads, batch)
            rows.append({"model": label, "n": n, "batch_size": batch, **measured})
            print(f"{label:<26} N={n:>8}: {measured['wall_s']:7.1f} s, {measured['texts_per_s']:7.0f} texts/s, "
                  f"peak RSS {measured['peak_rss_mib']:6.0f} MiB", flush=True)
            data.unlink()
            saved()
    return rows


def processes(args, folder: Path) -> dict:
    """The whole ``poolkit embed`` command, alone (1 and 2 threads) and as 2 processes of one thread each."""
    data = glosses(args.two_process_n, folder)
    base = ["embed", "--data", str(data), "--window", str(args.window), "--quiet", "--force"]
    alone = [sys.executable, "-m", "poolkit.cli", *base, "--out", str(folder / "one.npy")]
    runs = {"1 process, 1 thread": (alone, 1), "1 process, 2 threads": (alone, 2),
            "2 processes, 1 thread each": ([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            "--nproc_per_node", "2", "-m", "poolkit.cli", *base, "--out",
                                            str(folder / "two.npy")], 1)}
    result = {}
    for name, (command, threads) in runs.items():
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
        wall = time.perf_counter() - start
        result[name] = {"wall_s": wall, "texts_per_s": args.two_process_n / wall, "threads_per_process": threads}
        print(f"{name}: {wall:.1f} s", flush=True)
    diff = float(np.abs(np.load(folder / "one.npy") - np.load(folder / "two.npy")).max())
    return {"n": args.two_process_n, "model": "all-MiniLM-L6-v2", "runs": result, "max_abs_difference": diff,
            "command": " ".join(["torchrun --standalone --nproc_per_node 2 -m poolkit.cli", *base[:1], "..."])}


def cache_sizes(args, folder: Path) -> list[dict]:
    """Bytes per text of the full cache and of the lean one for compare's default poolers + baseline."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from poolkit.data.builtin import load_builtin
    from poolkit.models.encoders import resolve_model
    from poolkit.training.api import DEFAULT_POOLERS
    from poolkit.training.features import encode_features

    texts = load_builtin("builtin:embedded").texts[:args.cache_texts]
    base = folder / "bert-base-config"
    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(base)  # 12 layers, hidden 768: BERT-base's sizes
    AutoTokenizer.from_pretrained(resolve_model(None)).save_pretrained(base)
    rows = []
    for label, model in (("all-MiniLM-L6-v2", None), ("BERT-base config (12 layers, 768)", str(base))):
        full = encode_features(texts, model, max_length=256, cache_dir=folder / "cache", progress=False)
        lean = encode_features(texts, model, max_length=256, cache_dir=folder / "cache", progress=False,
                               poolers=DEFAULT_POOLERS, summaries=["mean"])
        int8 = encode_features(texts, model, max_length=256, cache_dir=folder / "cache", progress=False,
                               poolers=DEFAULT_POOLERS, summaries=["mean"], token_dtype="int8")
        capped = encode_features(texts, model, max_length=256, cache_dir=folder / "cache", progress=False,
                                 poolers=DEFAULT_POOLERS, summaries=["mean"], token_cap=args.token_cap)
        tokens = float(full.lengths.mean())
        files = lean.meta["files"]
        per_token = files["tokens.npy"]["size"] / full.meta["tokens"]
        fixed = sum(f["size"] for name, f in files.items() if name.startswith("summary_")) / len(texts)
        rows.append({"model": label, "layers": full.num_layers, "hidden_size": full.hidden_size,
                     "texts": len(texts), "tokens_per_text": tokens, "full_bytes_per_text": full.bytes_per_text(),
                     "lean_bytes_per_text": lean.bytes_per_text(), "lean_plan": lean.meta["plan"],
                     "lean_int8_bytes_per_text": int8.bytes_per_text(), "token_cap": args.token_cap,
                     "lean_capped_bytes_per_text": capped.bytes_per_text(),
                     "full_bytes_at_100_tokens": full.meta["files"]["tokens.npy"]["size"] / full.meta["tokens"] * 100,
                     "lean_bytes_at_100_tokens": fixed + per_token * 100})
        print(f"{label}: {rows[-1]['full_bytes_per_text']:.0f} -> {rows[-1]['lean_bytes_per_text']:.0f} bytes per "
              f"text ({tokens:.1f} tokens)", flush=True)
    return rows


def leaderboard(args, folder: Path) -> dict:
    """A few poolers trained on the full cache, the lean one, the lean one with int8 token states and the lean one
    with each text's first ``--token-cap`` token states, of the same rows: same folds, seeds and settings."""
    from poolkit.training.api import load
    from poolkit.training.features import encode_features
    from poolkit.training.probing import ProbeConfig, compare_poolers

    table_data = load("builtin:embedded", limit=args.board_texts)
    config = ProbeConfig(folds=3, epochs=args.board_epochs)
    boards = {}
    lean = list(LEADERBOARD_POOLERS)
    for name, poolers, dtype, cap in (("full", None, "float16", None), ("lean", lean, "float16", None),
                                      ("lean + int8 tokens", lean, "int8", None),
                                      (f"lean + first {args.token_cap} tokens", lean, "float16", args.token_cap)):
        cache = encode_features(table_data.texts, None, max_length=256, cache_dir=folder / "cache", progress=False,
                                poolers=poolers, token_dtype=dtype, token_cap=cap)
        results = compare_poolers(list(LEADERBOARD_POOLERS), cache, table_data, config)
        boards[name] = {r.label: r.summary() for r in results}
        print(name, {k: round(v["mean"], 4) for k, v in boards[name].items()}, flush=True)
    return {"rows": len(table_data), "folds": config.folds, "epochs": config.epochs, "metric": results[0].metric,
            "boards": boards}


def quantisation_error(args, folder: Path) -> dict:
    """Per layer, the mean relative error (L2, per token) of MiniLM's token states stored in one byte per value with
    one scale per token vector: int8 as the cache stores them (largest magnitude / 127), and float8 e4m3 (largest
    magnitude / 448, torch.float8_e4m3fn), on the real tokens of the cache sizes' texts."""
    import torch

    from poolkit.data.builtin import load_builtin
    from poolkit.models.encoders import load_encoder, load_tokenizer, resolve_model
    from poolkit.training.features import _stored_tokens

    model = resolve_model(None)
    tokenizer, encoder = load_tokenizer(model, False), load_encoder(model, False).eval()
    batch = tokenizer(list(load_builtin("builtin:embedded").texts[:args.cache_texts]), padding=True,
                      truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        states = encoder(**batch, output_hidden_states=True).hidden_states
    real = batch["attention_mask"].bool()
    rows = []
    for layer, hidden in enumerate(states):
        exact = hidden[real].to(torch.float16).float()  # what the float16 cache holds
        quantised, scale = _stored_tokens(exact, int8=True)
        int8 = torch.from_numpy(quantised).float() * torch.from_numpy(scale).float()[:, None]
        scale8 = exact.abs().amax(-1, keepdim=True).clamp_min(1e-8) / 448
        fp8 = (exact / scale8).to(torch.float8_e4m3fn).float() * scale8
        error = lambda approx: float(((approx - exact).norm(dim=-1) / exact.norm(dim=-1)).mean())  # noqa: E731
        rows.append({"layer": layer, "int8": error(int8), "float8_e4m3": error(fp8)})
    return {"model": "all-MiniLM-L6-v2", "texts": args.cache_texts, "tokens": int(real.sum()), "layers": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    result = {**run_info(torch.device("cpu"), args), "window": args.window, "complete": False, "scaling": []}

    def saved() -> None:  # after every part: a run stopped early keeps what it measured, and says so
        result.update(load_average_end=os.getloadavg(), total_s=time.perf_counter() - started)
        save_json(args.json, result)

    with tempfile.TemporaryDirectory(prefix="poolkit-scale-") as scratch:
        folder = Path(scratch)
        tiny = tiny_bert(folder)
        for part, measure in (("cache", cache_sizes), ("quantisation", quantisation_error),
                              ("leaderboard", leaderboard), ("processes", processes)):
            result[part] = measure(args, folder)
            saved()
        scaling(args, folder, tiny, result["scaling"], saved)
    result["complete"] = True
    saved()
    print(table(["model", "N", "wall s", "texts/s", "peak RSS MiB"],
                [[r["model"], r["n"], r["wall_s"], r["texts_per_s"], r["peak_rss_mib"]] for r in result["scaling"]]))


if __name__ == "__main__":
    main()
