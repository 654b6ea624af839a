"""The blocked fast forms at several block sizes, beside their plain forms: the data behind ``fast.block_bytes``.

Two fast forms work through x a block at a time: ``fast.GatheredLinear`` (the attention family's scoring over the
real tokens, gathered a block at a time) and ``fast.HalfWeightedSum`` (a half-precision x copied to float32 a block at
a time, for the mean (and mean_max, adapool's default query) and for attention's weighted sum). Their one-thread
block sizes are sized for a core's cache (2 MiB gathered, 512 KiB copied); with several threads every block costs
parallel regions that, beside other work, wait for descheduled threads. Each cell times the pooler's plain form (``fast.disabled()``) and its fast form with
every block size of :data:`SIZES` (``cache``: the one-thread sizes), interleaved, and records which size
``fast.block_bytes`` picks at this run's thread count. :func:`rule_checks` (rendered in docs/performance.md, asserted
by benchmarks/tests) says whether the sweeps at one thread count back that pick. Inputs as ``perf_tokens`` (B = 32,
right padding, real lengths drawn from [T/2, T]). Figures: plain time / fast time (> 1: the fast form is faster).

    .venv/bin/python benchmarks/perf_blocks.py --threads 0 --background 2 --json benchmarks/results/blocks-t2-busy2.json
    .venv/bin/python benchmarks/perf_blocks.py --poolers mean,adapool,mean_max --threads 0   # the half copy's cells
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from perf_common import (DTYPES, comma_choices, interleaved, load_label, median_ms, per_repeat, ratio,  # noqa: E402
                         run_sweep, timed_call)
from perf_tokens import BATCH, make_inputs  # noqa: E402
from poolkit import get_pooler  # noqa: E402
from poolkit.pooling import fast  # noqa: E402

#: Block sizes timed: ``cache`` keeps each form's one-thread size; the others give both forms that many bytes.
SIZES = {"cache": None, "8 MiB": 8 << 20, "16 MiB": 16 << 20, "32 MiB": 32 << 20, "whole": 1 << 62}
#: (pooler, dtypes) per blocked form: the attention family's scoring in both dtypes, the exact half mean (mean,
#: adapool's default query, mean_max) in bf16.
CASES = [("attention", ("fp32", "bf16")), ("gated_attention", ("fp32", "bf16")), ("mean", ("bf16",)),
         ("adapool", ("bf16",)), ("mean_max", ("bf16",))]
SHAPES = [(128, 384), (512, 768)]
#: The picked size is backed where, in every sweep at that thread count, the fast form with it is faster than the
#: plain form in at least this share of the cells, and no other size is faster by more than ``WITHIN`` on the
#: median cell.
BACKING_SHARE, WITHIN = 0.75, 0.10


def picked() -> str:
    """The size :func:`fast.block_bytes` picks at the current thread count, as a key of :data:`SIZES`."""
    threaded = fast.block_bytes(0)
    return "cache" if threaded == 0 else next(name for name, size in SIZES.items() if size == threaded)


def sized(call, size: int | None):
    """``call`` with both forms' blocks at ``size`` bytes (None: their one-thread sizes), at any thread count."""
    def run():
        chosen = fast.block_bytes
        fast.block_bytes = (lambda single: single) if size is None else (lambda single: size)
        try:
            call()
        finally:
            fast.block_bytes = chosen
    return run


def sweep(device: torch.device, repeats: int, cases=CASES, shapes=SHAPES) -> list[dict]:
    rows = []
    for name, dtypes in cases:
        for length, dim in shapes:
            for dtype_name in dtypes:
                for mode in ("fwd", "fwd+bwd"):
                    dtype = DTYPES[dtype_name]
                    x, mask = make_inputs(length, dim, dtype, device)
                    train = mode == "fwd+bwd"
                    torch.manual_seed(0)
                    pooler = get_pooler(name, hidden_size=dim).to(device=device, dtype=dtype).train(train)
                    x.requires_grad_(train)
                    call = timed_call(lambda: pooler(x, mask), train, [x, *pooler.parameters()])

                    def plain(call=call):
                        with fast.disabled():
                            call()
                    variants = {"plain": plain, **{size: sized(call, SIZES[size]) for size in SIZES}}
                    times = interleaved(variants, device, repeats=repeats, min_sample_s=0.05)
                    rows.append({"pooler": name, "T": length, "D": dim, "dtype": dtype_name, "mode": mode,
                                 "speedup": {size: ratio(times, "plain", size) for size in SIZES},
                                 "per_repeat": {size: per_repeat(times, "plain", size) for size in SIZES},
                                 "ms": {key: median_ms(times, key) for key in times}})
            print(f"  measured {name}", flush=True)
    return rows


def rule_checks(results: list[dict]) -> tuple[list[str], bool]:
    """(what each sweep shows, whether the sweeps back the pick) over sweeps at one thread count that picked one size
    (quiet, beside busy processes): in each, the share of cells where the fast form with the picked size beats the
    plain form (at least :data:`BACKING_SHARE`), and the median over cells of picked time / other size's time for the
    best other size (at most 1 + :data:`WITHIN`)."""
    shown, backed = [], True
    for result in results:
        pick, rows = result["settings"]["picked"], result["rows"]
        share = sum(r["speedup"][pick] > 1 for r in rows) / len(rows)
        others = {size: statistics.median(r["speedup"][size] / r["speedup"][pick] for r in rows)
                  for size in result["settings"]["sizes"] if size != pick}
        best = max(others, key=others.get)
        backed &= share >= BACKING_SHARE and others[best] <= 1 + WITHIN
        low = min(r["speedup"][pick] for r in rows)
        shown.append(f"`{pick}` beats the plain form in {share:.0%} of {len(rows)} cells (lowest {low:.2f}x); best "
                     f"other size `{best}`: {others[best]:.2f}x its speed on the median cell")
    return shown, backed


def render(result: dict) -> str:
    """Every cell: a row per pooler, shape, dtype and mode; a column per block size (plain time / fast time), the
    picked one marked ``*``."""
    from rendering import table

    sizes, pick = result["settings"]["sizes"], result["settings"]["picked"]
    body = [[r["pooler"], f"T{r['T']} D{r['D']} {r['dtype']} {r['mode']}", f"{r['ms']['plain']:.1f}"]
            + [f"{r['speedup'][size]:.2f}x" + (" *" if size == pick else "") for size in sizes]
            for r in result["rows"]]
    losing = [f"`{size}` {sum(r['speedup'][size] < 1 for r in result['rows'])} of {len(result['rows'])} (lowest "
              f"{min(r['speedup'][size] for r in result['rows']):.2f}x)" for size in sizes]
    return (table(["pooler", "cell", "plain ms", *(f"`{size}`" for size in sizes)], body, padded=True)
            + "\n\nCells where the fast form is slower than the plain form, per block size: " + ", ".join(losing))


def render_rule(results: list[dict]) -> str:
    """The checks, a row per sweep, grouped by thread count: what the sweep shows, and whether the sweeps at that
    count back the pick."""
    from rendering import table

    by_threads = {}
    for result in results:
        by_threads.setdefault(result["settings"]["threads"], []).append(result)
    body = []
    for threads, runs in sorted(by_threads.items()):
        shown, backed = rule_checks(runs)
        body += [[str(threads), load_label(run), ", ".join(dict.fromkeys(r["pooler"] for r in run["rows"])), line,
                  "backed" if backed else "**not backed**"] for run, line in zip(runs, shown)]
    return table(["torch threads", "load", "poolers", "the picked block size", "the rule at this thread count"], body)


def main(argv: list[str] | None = None) -> dict:
    return run_sweep(__doc__, argv, "blocks", "plain time / fast time per block size",
                     lambda cases: {"batch": BATCH, "poolers": [name for name, _ in cases], "sizes": list(SIZES),
                                    "shapes": SHAPES, "picked": picked(),
                                    "cache_bytes": {"gather": fast.GATHER_CHUNK_BYTES,
                                                    "half copy": fast.EXACT_BLOCK_BYTES},
                                    "backing_share": BACKING_SHARE, "within": WITHIN,
                                    "figure": "plain time / fast time (> 1: the fast form is faster)"},
                     sweep, render, render_rule,
                     lambda parser: parser.add_argument("--poolers", default=None,
                                                        type=comma_choices([n for n, _ in CASES], "a pooler swept"),
                                                        help="comma-separated poolers of CASES (default: all)"),
                     lambda args: {"cases": [case for case in CASES
                                             if args.poolers is None or case[0] in args.poolers]})


if __name__ == "__main__":
    main()
