"""The masked max's two fast forms side by side: one ``index_reduce`` over the batch (``fast.reduce_by_index``) and a
kernel call per row (``fast.reduce_row_slices``, with its run finding), over batch sizes, widths, lengths and dtypes.

This sweep is the data behind ``fast.slices_pay``, the rule that picks the form for the thread count in use: each
cell records which form the rule picks there, and :func:`rule_checks` (rendered in docs/performance.md, asserted by
benchmarks/tests) says whether the sweep backs it. Rows are right-padded, their real lengths drawn from [T/2, T]
as in ``perf_tokens``. The figure is index_reduce time / row-slices time (> 1: the row slices are faster).

    .venv/bin/python benchmarks/perf_max_rows.py --threads 1 --json benchmarks/results/max-rows-t1.json
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from perf_common import DTYPES, interleaved, median_ms, parse_and_setup, per_repeat, ratio, run_info, save_json  # noqa: E402
from poolkit.pooling import fast  # noqa: E402

BATCHES, WIDTHS, LENGTHS = (8, 32, 128), (128, 384, 768), (32, 64, 128, 256, 512)
#: A group of cells backs its form when at least this share of them has the median ratio on that form's side of 1.
BACKING_SHARE = 0.75


def inputs(batch: int, length: int, dim: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(batch * 10_000 + length * 10 + dim)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return torch.randn(batch, length, dim, generator=gen).to(dtype), mask


def sweep(device: torch.device, repeats: int, batches=BATCHES, widths=WIDTHS, lengths=LENGTHS) -> list[dict]:
    rows = []
    for batch in batches:
        for dim in widths:
            for length in lengths:
                for dtype_name in ("fp32", "bf16"):
                    x, mask = inputs(batch, length, dim, DTYPES[dtype_name])
                    with torch.inference_mode():
                        by_index = fast.reduce_by_index(x, mask, True)
                        slices = fast.reduce_row_slices(x, fast.single_runs(mask), True)
                        if not torch.equal(by_index, slices):
                            raise AssertionError(f"the two forms disagree at B{batch} T{length} D{dim} {dtype_name}")
                        times = interleaved({"index_reduce": lambda: fast.reduce_by_index(x, mask, True),
                                             "row slices": lambda: fast.reduce_row_slices(x, fast.single_runs(mask),
                                                                                          True)},
                                            device, repeats=repeats)
                    rows.append({"B": batch, "T": length, "D": dim, "dtype": dtype_name,
                                 "tokens": int(mask.sum()) / batch, "rule_picks_slices": fast.slices_pay(x, mask),
                                 "speedup": ratio(times, "index_reduce", "row slices"),
                                 "per_repeat": per_repeat(times, "index_reduce", "row slices"),
                                 "ms": {key: median_ms(times, key) for key in times}})
            print(f"  measured B={batch} D={dim}", flush=True)
    return rows


def groups(result: dict) -> dict[str, list[dict]]:
    """The sweep's cells by what the rule does with them: row slices picked; left to index_reduce for being short;
    left to index_reduce though long (float32 on one thread)."""
    out = {"row slices picked": [], "index_reduce kept: short rows": [], "index_reduce kept: long rows": []}
    for row in result["rows"]:
        if row["rule_picks_slices"]:
            out["row slices picked"].append(row)
        elif row["tokens"] < result["settings"]["row_slice_tokens"]:
            out["index_reduce kept: short rows"].append(row)
        else:
            out["index_reduce kept: long rows"].append(row)
    return {name: rows for name, rows in out.items() if rows}


def rule_checks(result: dict) -> list[tuple[str, str, bool]]:
    """(group, what the sweep shows, whether it backs the rule) per group of :func:`groups`: row slices are picked
    only where at least :data:`BACKING_SHARE` of the cells are faster with them; index_reduce is kept for short rows
    only where at least that share is faster with it, and for long rows only where the row slices do not reach that
    share (neither form winning across the group)."""
    checks = []
    for name, rows in groups(result).items():
        won = sum(r["speedup"] > 1 for r in rows) / len(rows)
        if name == "row slices picked":
            backed = won >= BACKING_SHARE
        elif name.endswith("short rows"):
            backed = 1 - won >= BACKING_SHARE
        else:
            backed = won < BACKING_SHARE
        speedups = [r["speedup"] for r in rows]
        checks.append((name, f"{len(rows)} cells, row slices faster in {won:.0%}; index_reduce / row slices: median "
                             f"{statistics.median(speedups):.2f}x, {min(speedups):.2f}x to {max(speedups):.2f}x", backed))
    return checks


def render(result: dict) -> str:
    """The rule's checks as a table, one row per group of cells."""
    from rendering import table

    body = [[name, shown, "backed" if backed else "**not backed**"] for name, shown, backed in rule_checks(result)]
    return table(["cells", "the sweep", "the rule"], body)


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv)
    repeats = args.repeats or 5
    info = run_info(device, args)
    print(f"# index_reduce / row slices, masked max, {torch.get_num_threads()} torch threads, {repeats} repeats")
    result = {"kind": "max_rows", **info,
              "settings": {"batches": BATCHES, "widths": WIDTHS, "lengths": LENGTHS, "repeats": repeats,
                           "threads": torch.get_num_threads(), "background": args.background,
                           "row_slice_tokens": fast.ROW_SLICE_TOKENS, "backing_share": BACKING_SHARE,
                           "figure": "index_reduce time / row slices time (> 1: the row slices are faster)"},
              "rows": sweep(device, repeats)}
    print(render(result))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
