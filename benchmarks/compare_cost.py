"""Cost of ``poolkit compare`` (encode once, cache every layer, train each pooler + head on the cache)
versus re-encoding the texts through the frozen encoder for every pooler.

Measured side by side in one run, on the same N real texts (embedded WordNet glosses -> 45 supersenses),
the same poolers, one holdout fold, a fixed number of epochs (patience > epochs, so every epoch runs):

  (a) T_encode   one frozen encoder pass over the N texts, all layers, into a fresh cache (temporary folder);
  (b) T_heads    sum over poolers of ``probe_pooler`` (pooler + head trained on the cache, validated each epoch);
  (c) compare    ``poolkit.cli.main(["compare", ...])`` end to end on a CSV of the same texts, fresh cache and
                 output folders: loading, encoding, training, leaderboard files (CSV, JSON, PNG) included;
  (d) re-encode  per pooler, the same training loop (same inner split, batches, seeds, AdamW, epochs, per-epoch
                 validation and one scoring of the test rows) but every batch goes through the frozen encoder
                 first (inference mode, output_hidden_states=True), training, validation and test batches alike.

The measurements are interleaved in rounds (components, CLI, a share of the re-encode poolers; the order
alternates between rounds) so that load from other processes on a shared machine hits every variant alike.
Ratios, not absolute seconds, are the result; each cost is reported in wall seconds and in this process's
CPU seconds (steadier when other processes share the cores). One torch thread by default (``--threads``).

    .venv/bin/python benchmarks/compare_cost.py --json benchmarks/results/compare_cost.json   # N=800, 12 poolers
    .venv/bin/python benchmarks/compare_cost.py --reencode-poolers 3  # (d) on 3 poolers, the rest extrapolated

``--json`` writes every measured cell (per round, wall and CPU seconds), the medians and ratios printed, and
where it ran (commit, machine, load average, torch version, threads): docs/benchmarks-compare.md is rendered
from that file by scripts/docs.py benchmarks-compare.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from perf_common import run_info, save_json  # noqa: E402
from poolkit import cli  # noqa: E402
from poolkit.data import fold_splits, load_builtin  # noqa: E402
from poolkit.data.tables import split_rows  # noqa: E402
from poolkit.data.batching import LengthGroupedBatchSampler  # noqa: E402
from poolkit.models.encoders import load_encoder, load_tokenizer, resolve_model  # noqa: E402
from poolkit.models.pooled_model import task_loss  # noqa: E402
from poolkit.training.features import encode_features  # noqa: E402
from poolkit.training.metrics import compute_metrics, primary_metric  # noqa: E402
from poolkit.pooling import build_pooler  # noqa: E402
from poolkit.training.probing import ProbeConfig, ProbeModel, _Targets, probe_pooler  # noqa: E402

POOLERS = ["cls", "mean", "max", "mean_max", "gem", "lse", "attention", "attention_head", "gated_attention",
           "adapool", "weighted_layer", "lstm_layers"]


# -- (d) the re-encoding alternative ----------------------------------------------------------------
class Reencoder:
    """The frozen encoder + tokenizer, run on every batch (what compare avoids by caching)."""

    def __init__(self, texts: list[str], max_length: int) -> None:
        path = resolve_model(None)
        self.tokenizer = load_tokenizer(path)
        self.tokenizer.padding_side = "right"
        self.encoder = load_encoder(path).eval()
        self.texts = texts
        self.max_length = max_length

    def tokenize(self) -> tuple[dict, np.ndarray]:
        encoded = self.tokenizer(self.texts, truncation=True, max_length=self.max_length)
        return encoded, np.array([len(ids) for ids in encoded["input_ids"]], dtype=np.int64)

    def states(self, encoded: dict, rows: np.ndarray, all_layers: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
        batch = self.tokenizer.pad({k: [encoded[k][i] for i in rows] for k in encoded.keys()}, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.encoder(**batch, output_hidden_states=True).hidden_states
        chosen = hidden if all_layers else hidden[-1:]
        # inference tensors cannot be saved for backward: an ordinary copy for the trainable pooler
        return [h.clone() for h in chosen], batch["attention_mask"].bool()


def reencode_fold(spec: str, reencoder: Reencoder, cache, data, train_rows: np.ndarray, test_rows: np.ndarray,
                  config: ProbeConfig, seed: int) -> float:
    """``probing.train_fold`` with the encoder in the loop (the same inner split, epoch choice on it and one
    scoring of the test rows); returns the test score."""
    encoded, lengths = reencoder.tokenize()
    torch.manual_seed(seed)
    fit, val = split_rows(data.subset(train_rows), config.val_fraction, seed)
    fit_rows, val_rows = train_rows[fit], train_rows[val]
    pooler = build_pooler(spec, cache.hidden_size, cache.num_layers)  # the cache only sizes the pooler
    model = ProbeModel(pooler, data.n_outputs, config.head_dropout)
    all_layers = pooler.kind == "layer"
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.pooler_lr, weight_decay=config.weight_decay)
    targets = _Targets(data, fit_rows)
    metric = primary_metric(data.task, data.n_outputs)

    def predict(rows: np.ndarray) -> np.ndarray:
        model.eval()
        outputs = []
        sampler = LengthGroupedBatchSampler(lengths[rows], config.batch_size * 2, shuffle=False)
        with torch.inference_mode():
            for batch in sampler:
                states, mask = reencoder.states(encoded, rows[batch], all_layers)
                outputs.append(model(states, mask).float())
        return targets.outputs(sampler.restore(torch.cat(outputs)).numpy())

    sampler = LengthGroupedBatchSampler(lengths[fit_rows], config.batch_size, shuffle=True, seed=seed)
    best, best_state, stale = None, None, 0
    for _ in range(config.epochs):
        model.train()
        for batch in sampler:
            rows = fit_rows[batch]
            states, mask = reencoder.states(encoded, rows, all_layers)
            loss = task_loss(data.task, model(states, mask), targets.values[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        score = compute_metrics(data.task, predict(val_rows), data.targets[val_rows], data.n_outputs)[metric.name]
        if best is None or metric.better(score, best):
            best, best_state, stale = score, copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
            if stale >= config.patience:
                break
    model.load_state_dict(best_state)
    return float(compute_metrics(data.task, predict(test_rows), data.targets[test_rows], data.n_outputs)[metric.name])


# -- the measurements ---------------------------------------------------------------------------------
class Cost(NamedTuple):
    """Wall-clock seconds and this process's CPU seconds (the latter barely moves when other processes
    take the cores: with one torch thread it is the work done, not the waiting)."""

    wall: float
    cpu: float

    def __add__(self, other):  # type: ignore[override]
        return Cost(self.wall + other.wall, self.cpu + other.cpu)

    def __sub__(self, other):
        return Cost(self.wall - other.wall, self.cpu - other.cpu)

    def __truediv__(self, other):  # type: ignore[override]
        """The ratio of two costs, wall to wall and CPU to CPU."""
        return Cost(self.wall / other.wall, self.cpu / other.cpu)


ZERO = Cost(0.0, 0.0)


def now() -> Cost:
    return Cost(time.perf_counter(), time.process_time())


def total(costs) -> Cost:
    return sum(costs, ZERO)


def median(costs: list[Cost]) -> Cost:
    return Cost(statistics.median(c.wall for c in costs), statistics.median(c.cpu for c in costs))


def time_components(data, poolers, config, max_length, scratch: Path) -> tuple[Cost, dict[str, Cost], object]:
    """(a) encode into a fresh cache, (b) probe_pooler per pooler on it -> T_encode, {pooler: cost}, cache."""
    folder = Path(tempfile.mkdtemp(prefix="cache-", dir=scratch))
    start = now()
    cache = encode_features(data.texts, None, max_length=max_length, cache_dir=folder, progress=False)
    t_encode = now() - start
    splits = fold_splits(data, config.folds, config.val_fraction, config.seed)
    heads = {}
    for spec in poolers:
        start = now()
        probe_pooler(spec, cache, data, config, splits)
        heads[spec] = now() - start
    return t_encode, heads, cache


def time_cli(csv: Path, poolers, config, max_length, scratch: Path) -> Cost:
    """(c) `poolkit compare` end to end, in-process, fresh cache and output folders; output captured."""
    argv = ["compare", "--data", str(csv), "--text-col", "text", "--target-col", "label", "--task", "classification",
            "--poolers", ",".join(poolers), "--folds", str(config.folds), "--epochs", str(config.epochs),
            "--patience", str(config.patience), "--batch-size", str(config.batch_size), "--pooler-lr", str(config.pooler_lr),
            "--max-length", str(max_length), "--seed", str(config.seed), "--no-baseline",
            "--cache-dir", tempfile.mkdtemp(prefix="cli-cache-", dir=scratch),
            "--out", str(Path(tempfile.mkdtemp(prefix="cli-out-", dir=scratch)) / "run")]
    sink = io.StringIO()
    start = now()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = cli.main(argv)
    cost = now() - start
    if code != 0:
        raise SystemExit(f"poolkit compare failed (exit {code}):\n{sink.getvalue()[-2000:]}")
    return cost


def time_reencode(spec, reencoder, cache, data, config) -> Cost:
    train_rows, test_rows = fold_splits(data, config.folds, config.val_fraction, config.seed)[0]
    start = now()
    reencode_fold(spec, reencoder, cache, data, train_rows, test_rows, config, config.seed)
    return now() - start


def fmt(cost: Cost) -> str:
    return f"{cost.wall:7.1f}s wall {cost.cpu:7.1f}s cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=800, help="texts (stratified sample of builtin:embedded)")
    parser.add_argument("--poolers", default=",".join(POOLERS), help="comma-separated pooler names")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of (a)+(b) and (c); median reported")
    parser.add_argument("--reencode-poolers", type=int, default=0,
                        help="run (d) for K poolers spread over the list and extrapolate the rest "
                             "(default 0: all of them, about 20s each at N=800 on one core)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads, the same for every variant (default 1: on a shared 2-core machine, "
                             "2 OpenMP threads competing with other processes stall at every barrier)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write every cell and the summary here (the docs use benchmarks/results/compare_cost.json)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    info = run_info(torch.device("cpu"), args)
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars, once per model load
    poolers = [p for p in args.poolers.split(",") if p]
    k = len(poolers) if args.reencode_poolers <= 0 else max(1, min(args.reencode_poolers, len(poolers)))
    measured = [poolers[i * len(poolers) // k] for i in range(k)]  # spread over the list: token and layer poolers
    config = ProbeConfig(folds=1, epochs=args.epochs, batch_size=args.batch_size, patience=args.epochs + 1)
    data = load_builtin("embedded", limit=args.n)
    train_rows, test_rows = fold_splits(data, 1, config.val_fraction, config.seed)[0]
    fit, val = split_rows(data.subset(train_rows), config.val_fraction, config.seed)
    print(f"compare_cost: {len(data)} texts ({len(fit)} fit + {len(val)} inner validation / {len(test_rows)} test), "
          f"{len(poolers)} poolers, {args.epochs} epochs, batch {args.batch_size}, torch threads {args.threads}, "
          f"re-encode measured for {k} pooler(s), {args.rounds} interleaved rounds", flush=True)

    scratch = Path(tempfile.mkdtemp(prefix="poolkit-compare-cost-"))
    try:
        csv = scratch / "data.csv"
        pd.DataFrame({"text": data.texts, "label": [data.label_names[t] for t in data.targets]}).to_csv(csv, index=False)
        reencoder = Reencoder(data.texts, args.max_length)
        encodes: list[Cost] = []
        heads_rounds: list[dict[str, Cost]] = []
        clis: list[Cost] = []
        reencode: dict[str, Cost] = {}
        chunks = [measured[r::args.rounds] for r in range(args.rounds)]
        cache = None
        rounds = []
        for r in range(args.rounds):
            steps = ["components", "cli", "reencode"]
            if r % 2:
                steps.reverse()
            rounds.append({"order": steps, "reencode": {}})
            for step in steps:
                if step == "components":
                    t_encode, heads, cache = time_components(data, poolers, config, args.max_length, scratch)
                    encodes.append(t_encode)
                    heads_rounds.append(heads)
                    rounds[-1].update(encode=t_encode._asdict(), heads={p: c._asdict() for p, c in heads.items()})
                    print(f"  round {r + 1}: (a) encode   {fmt(t_encode)}   (b) heads {fmt(total(heads.values()))}",
                          flush=True)
                elif step == "cli":
                    clis.append(time_cli(csv, poolers, config, args.max_length, scratch))
                    rounds[-1]["cli"] = clis[-1]._asdict()
                    print(f"  round {r + 1}: (c) poolkit compare end to end {fmt(clis[-1])}", flush=True)
                else:
                    if cache is None:  # the re-encode loop needs a cache only to size the poolers
                        cache = encode_features(data.texts, None, max_length=args.max_length,
                                                cache_dir=scratch / "sizing", progress=False)
                    for spec in chunks[r]:
                        reencode[spec] = time_reencode(spec, reencoder, cache, data, config)
                        rounds[-1]["reencode"][spec] = reencode[spec]._asdict()
                        print(f"  round {r + 1}: (d) re-encode {spec:<16} {fmt(reencode[spec])}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    t_encode = median(encodes)
    per_head = {p: median([h[p] for h in heads_rounds]) for p in poolers}
    t_heads = total(per_head.values())
    t_cli = median(clis)
    compare_total = t_encode + t_heads
    extrapolated = k < len(poolers)
    mean_overhead = Cost(statistics.mean(reencode[p].wall - per_head[p].wall for p in measured),
                         statistics.mean(reencode[p].cpu - per_head[p].cpu for p in measured))
    per_reencode = {p: reencode.get(p, per_head[p] + mean_overhead) for p in poolers}
    reencode_total = total(per_reencode.values())
    end_to_end = t_cli / compare_total
    summary = {
        "poolers": {p: {"heads": per_head[p]._asdict(), "reencode": per_reencode[p]._asdict(),
                        "measured": p in reencode, "reencode_over_heads": (per_reencode[p] / per_head[p])._asdict()}
                    for p in poolers},
        "encode": t_encode._asdict(), "heads": t_heads._asdict(), "components": compare_total._asdict(),
        "cli": t_cli._asdict(), "reencode": reencode_total._asdict(), "extrapolated": extrapolated,
        "cli_over_components": end_to_end._asdict(), "target_cli_over_components": 2.0,
        "target_met": max(end_to_end) <= 2.0,
        "reencode_over_components": (reencode_total / compare_total)._asdict(),
        "reencode_over_cli": (reencode_total / t_cli)._asdict(),
        "cli_over_components_per_round": [(c / (a + total(h.values())))._asdict()
                                          for a, h, c in zip(encodes, heads_rounds, clis)],
    }

    print()
    print(f"{'pooler':<18}{'heads on cache (b)':>20}{'re-encode (d)':>16}{'(d)/(b)':>10}   (CPU seconds, medians)")
    for p in poolers:
        star = "" if p in reencode else "*"
        print(f"{p:<18}{per_head[p].cpu:>19.2f}s{per_reencode[p].cpu:>15.2f}s{star:<1}"
              f"{per_reencode[p].cpu / per_head[p].cpu:>8.1f}x{star}")
    if extrapolated:
        print("* EXTRAPOLATED, not measured: the pooler's own head time + the mean encoder overhead of the "
              f"{k} measured poolers")
    print()
    label = f"(d) re-encode total, {len(poolers)} poolers" + (
        f" (EXTRAPOLATED from {k} measured)" if extrapolated else "")
    rows = [
        ("", "wall s", "CPU s"),
        ("(a) T_encode (all layers, fresh cache)", f"{t_encode.wall:.1f}", f"{t_encode.cpu:.1f}"),
        ("(b) T_heads (sum over poolers)", f"{t_heads.wall:.1f}", f"{t_heads.cpu:.1f}"),
        ("(a) + (b)", f"{compare_total.wall:.1f}", f"{compare_total.cpu:.1f}"),
        ("(c) poolkit compare end to end", f"{t_cli.wall:.1f}", f"{t_cli.cpu:.1f}"),
        (label, f"{reencode_total.wall:.1f}", f"{reencode_total.cpu:.1f}"),
        ("(c) / ((a) + (b))  target <= 2.0x", f"{end_to_end.wall:.2f}x",
         f"{end_to_end.cpu:.2f}x {'OK' if summary['target_met'] else 'MISSED'}"),
        ("speed-up (d) / ((a) + (b))", f"{reencode_total.wall / compare_total.wall:.1f}x",
         f"{reencode_total.cpu / compare_total.cpu:.1f}x"),
        ("speed-up (d) / (c)", f"{reencode_total.wall / t_cli.wall:.1f}x", f"{reencode_total.cpu / t_cli.cpu:.1f}x"),
    ]
    width = max(len(r[0]) for r in rows) + 2
    print(f"N texts / poolers / epochs / folds: {len(data)} / {len(poolers)} / {args.epochs} / 1 (holdout); "
          f"medians of {args.rounds} rounds")
    for name, wall, cpu in rows:
        print(f"{name:<{width}}{wall:>10}{cpu:>14}")
    print("(c) / ((a) + (b)) per round, CPU: "
          + ", ".join(f"{r['cpu']:.2f}x" for r in summary["cli_over_components_per_round"]))
    save_json(args.json, {"benchmark": "compare_cost", **info,
                          "load_average_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
                          "settings": {"texts": len(data), "fit_rows": len(fit), "val_rows": len(val),
                                       "test_rows": len(test_rows),
                                       "poolers": poolers, "reencode_measured": measured, "probe": asdict(config)},
                          "rounds": rounds, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
