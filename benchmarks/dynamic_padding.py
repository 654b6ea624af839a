"""Fine-tuning throughput with length-grouped batches + dynamic padding vs fixed max-length padding.

The packaged all-MiniLM-L6-v2 (``PooledModel``, mean pooling, classification head) is fine-tuned end to
end (forward + backward + AdamW step) on real texts: the embedded WordNet glosses (45 supersenses) and,
when Debian's wordnet-base is installed, a stratified subsample of builtin:wordnet-supersense. Both
variants use ``poolkit.data.make_loader`` with the same length-grouped sampler, seed and batches; only
the collator's padding differs: ``"longest"`` (pad to the batch's longest text) vs ``"max_length"``
(pad every batch to ``--max-length``).

Each repeat times a fixed number of optimizer steps per variant, the variants interleaved (A B B A ...)
so that load from other processes on a shared machine hits both alike; the median repeat is reported, in
examples per wall second and per CPU second of this process. One torch thread by default (``--threads``).

    .venv/bin/python benchmarks/dynamic_padding.py --json benchmarks/results/dynamic_padding.json
    .venv/bin/python benchmarks/dynamic_padding.py --steps 10 --repeats 3 --datasets embedded

``--json`` writes every repeat of every variant (examples, wall and CPU seconds, tokens), the medians and
ratios printed, and where it ran (commit, machine, load average, torch version, threads):
docs/benchmarks-compare.md is rendered from that file by scripts/docs.py benchmarks-compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402

from perf_common import run_info, save_json  # noqa: E402
from poolkit.data import load_builtin, make_loader  # noqa: E402
from poolkit.data.builtin import WORDNET_DIR  # noqa: E402
from poolkit.models import PooledModel  # noqa: E402
from poolkit.models.encoders import load_tokenizer, resolve_model  # noqa: E402

VARIANTS = ("longest", "max_length")
NAMES = {"longest": "dynamic (sorted + longest)", "max_length": "fixed (max_length)"}


class Runner:
    """One variant: its own model copy, AdamW and an endless iterator over its loader's batches."""

    def __init__(self, model_path: str, data, tokenizer, padding: str, batch_size: int, max_length: int,
                 seed: int) -> None:
        torch.manual_seed(seed)
        self.model = PooledModel.from_encoder(model_path, pooler="mean", task="classification",
                                              num_labels=data.n_outputs)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=5e-5, weight_decay=0.01)
        self.loader = make_loader(data, tokenizer, batch_size, train=True, seed=seed, max_length=max_length,
                                  padding=padding)
        self.batches = self._endless()
        self.padded_tokens: list[int] = []
        self.real_tokens: list[int] = []

    def _endless(self):
        while True:
            yield from self.loader

    def steps(self, n: int, record: bool = True) -> tuple[float, float, int]:
        """n optimizer steps -> (wall seconds, CPU seconds, examples); batch loading and tokenization included."""
        examples = 0
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            batch = next(self.batches)
            targets = batch.pop("targets")
            loss = self.model(**batch, labels=targets).loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            examples += len(targets)
            if record:
                self.padded_tokens.append(batch["input_ids"].numel())
                self.real_tokens.append(int(batch["attention_mask"].sum()))
        return time.perf_counter() - start, time.process_time() - start_cpu, examples


def bench_dataset(name: str, data, tokenizer, model_path: str, args) -> dict:
    runners = {v: Runner(model_path, data, tokenizer, v, args.batch_size, args.max_length, args.seed)
               for v in VARIANTS}
    for runner in runners.values():  # warm-up, untimed (allocator, first-call overheads)
        runner.steps(args.warmup, record=False)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu_rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    repeats = []
    for rep in range(args.repeats):
        order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
        for v in order:
            wall, cpu, examples = runners[v].steps(args.steps)
            rates[v].append(examples / wall)
            cpu_rates[v].append(examples / cpu)
            repeats.append({"repeat": rep + 1, "variant": v, "examples": examples, "wall": wall, "cpu": cpu})
            print(f"  {name} repeat {rep + 1}: {NAMES[v]:<28} {examples / wall:7.1f} examples/s wall, "
                  f"{examples / cpu:7.1f} per CPU s ({args.steps} steps, {wall:.1f}s)", flush=True)
    result = {"name": name, "rows": len(data), "repeats": repeats}
    for v in VARIANTS:
        r = runners[v]
        result[v] = {"median": statistics.median(rates[v]), "rates": rates[v],
                     "cpu_median": statistics.median(cpu_rates[v]), "cpu_rates": cpu_rates[v],
                     "padded": statistics.mean(r.padded_tokens), "real": statistics.mean(r.real_tokens),
                     "padded_per_batch": r.padded_tokens, "real_per_batch": r.real_tokens}
    dyn, fix = result["longest"], result["max_length"]
    result["summary"] = {"speedup": dyn["median"] / fix["median"], "cpu_speedup": dyn["cpu_median"] / fix["cpu_median"],
                         "wall_per_repeat": [a / b for a, b in zip(dyn["rates"], fix["rates"])],
                         "cpu_per_repeat": [a / b for a, b in zip(dyn["cpu_rates"], fix["cpu_rates"])],
                         "tokens": fix["padded"] / dyn["padded"], "target": 1.5}
    result["summary"]["target_met"] = min(result["summary"]["speedup"], result["summary"]["cpu_speedup"]) >= 1.5
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="embedded,wordnet-supersense",
                        help="built-in datasets (wordnet-supersense is skipped when WordNet is not installed)")
    parser.add_argument("--n", type=int, default=2000, help="stratified sample size of each dataset")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="timed optimizer steps per variant per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the median is reported")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per variant first")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads, the same for every variant (default 1: on a shared 2-core machine, "
                             "2 OpenMP threads competing with other processes stall at every barrier)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None,
                        help="write every repeat and the summary here (the docs use "
                             "benchmarks/results/dynamic_padding.json)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    info = run_info(torch.device("cpu"), args)
    transformers.utils.logging.disable_progress_bar()
    model_path = resolve_model(None)
    tokenizer = load_tokenizer(model_path)
    print(f"dynamic_padding: MiniLM-L6 fine-tuning (mean pooling, classification), batch {args.batch_size}, "
          f"max_length {args.max_length}, {args.steps} steps x {args.repeats} interleaved repeats per variant, "
          f"torch threads {args.threads}", flush=True)
    results, skipped = [], []
    for name in [d for d in args.datasets.split(",") if d]:
        if name.startswith("wordnet") and not (WORDNET_DIR / "data.noun").is_file():
            skipped.append(f"{name} (WordNet not installed at {WORDNET_DIR})")
            continue
        data = load_builtin(name, limit=args.n, seed=args.seed)
        results.append(bench_dataset(name, data, tokenizer, model_path, args))

    print()
    header = (f"{'dataset':<20}{'variant':<29}{'examples/s':>11}{'ex/CPU s':>10}{'padded tok/batch':>18}"
              f"{'real tok/batch':>16}{'pad share':>11}")
    print(header)
    for res in results:
        for v in VARIANTS:
            r = res[v]
            print(f"{res['name']:<20}{NAMES[v]:<29}{r['median']:>11.1f}{r['cpu_median']:>10.1f}{r['padded']:>18.0f}"
                  f"{r['real']:>16.0f}{1 - r['real'] / r['padded']:>10.0%}")
    print()
    for res in results:
        s = res["summary"]
        print(f"{res['name']}: dynamic / fixed throughput {s['speedup']:.2f}x wall, {s['cpu_speedup']:.2f}x per CPU s "
              f"(target >= 1.5x: {'OK' if s['target_met'] else 'MISSED'}; wall per repeat "
              f"{', '.join(f'{x:.2f}' for x in s['wall_per_repeat'])}); "
              f"fixed pads {s['tokens']:.1f}x more tokens per batch")
    for name in skipped:
        print(f"skipped: {name}")
    save_json(args.json, {"benchmark": "dynamic_padding", **info,
                          "load_average_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
                          "datasets": results, "skipped": skipped})
    return 0


if __name__ == "__main__":
    sys.exit(main())
