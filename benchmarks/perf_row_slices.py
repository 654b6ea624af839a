"""A kernel call per row against one batched form, side by side, over batch sizes, widths, lengths and dtypes:
``--reduction max`` (default), the masked max's one ``index_reduce`` over the batch (``fast.reduce_by_index``)
against a call per row (``fast.reduce_row_slices``), in float32 and bf16; ``--reduction sum``, the half-precision
mean's float32 sum as a float32 copy of x and a product (``fast.HalfWeightedSum``) against a float32 sum per row
(``fast.sum_row_slices``), in bf16 and fp16 (both row forms include their run finding); ``--reduction query``,
latent / adapool's read of half-precision x by a query per row, from a float32 copy of x against a block of rows
at a time (``fast.half_query_read``: "row slices" here), in bf16 and fp16; ``--reduction query_train``, the same
with the gradients of x and of the queries (``fast.QueryRead``'s backward on the float32 copy against
``fast.HalfQueryRead``'s, a block of rows at a time); ``--reduction bag``, the float32 mean as a batched product with
its weights against one embedding bag over the real tokens divided by the counts (``fast.bag_sum``: "row slices"
here); ``--reduction half_bag``, the half-precision sum rounded to x's dtype (sum pooling's output) as the float32
sum that runs otherwise (``masking.masked_sum``: a float32 copy and a product, or a sum per row's slice) against one
embedding bag over the real tokens in x's dtype (``fast.bag_sum``: "row slices" here), in bf16 and fp16.

This sweep is the data behind the rule that picks the form for the thread count in use (``fast.slices_pay`` for the max,
``fast.row_sums_pay`` for the sum, ``fast.query_blocks_pay`` for the query read, ``fast.bag_sums_pay`` for the bag,
``fast.half_bag_sums_pay`` for the half bag): each cell records which form the rule picks there, and :func:`rule_checks`
(rendered in docs/performance.md, asserted by benchmarks/tests) says whether the sweep backs it. Rows are right-padded,
their real lengths drawn from [T/2, T] as in ``perf_tokens``. The figure is the batched form's time / the row slices'
time (> 1: the row slices are faster).

    .venv/bin/python benchmarks/perf_row_slices.py --threads 1 --json benchmarks/results/max-rows-t1.json
    .venv/bin/python benchmarks/perf_row_slices.py --reduction sum --threads 1 \
        --json benchmarks/results/sum-rows-t1.json
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from perf_common import DTYPES, interleaved, load_label, median_ms, per_repeat, ratio, run_sweep  # noqa: E402
from poolkit.pooling import fast, masking  # noqa: E402

BATCHES, WIDTHS, LENGTHS = (8, 32, 128), (128, 384, 768), (32, 64, 128, 256, 512)
#: A group of cells backs its form when at least this share of them has the median ratio on that form's side of 1.
BACKING_SHARE = 0.75
#: A cell counts as faster with the row slices only where its median ratio is above 1 + TIE: nearer 1 the two forms are
#: even (beside busy processes, small calls of both forms can take the same scheduler wait), and an even cell is no
#: evidence for the row slices. It counts with the batched form, which runs where no rule picks the other: this makes
#: a pick harder to back and a kept batched form easier, by the band.
TIE = 0.02


def inputs(batch: int, length: int, dim: int, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(batch * 10_000 + length * 10 + dim)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return torch.randn(batch, length, dim, generator=gen).to(dtype), mask


class Reduction(NamedTuple):
    """What a ``--reduction`` times: the batched form's name, the dtypes, (x, mask) -> each form's call (the row
    form named "row slices"), the rule that picks the row slices, (row, settings) -> whether a row of the sweep
    is under the rule's size ("short rows"; the size is the setting that ``settings`` gives, recorded in the run),
    whether the two forms give the same values (else float32 sums in another order), whether the calls take
    gradients (else they run under ``torch.inference_mode``), and the batch sizes swept."""
    batched: str
    dtypes: tuple[str, ...]
    forms: Callable[[torch.Tensor, torch.Tensor], dict[str, Callable[[], torch.Tensor]]]
    rule: Callable[[torch.Tensor, torch.Tensor], bool]
    short: Callable[[dict, dict], bool]
    settings: Callable[[], dict]
    exact: bool
    train: bool = False
    batches: tuple[int, ...] = BATCHES


def query_forms(x: torch.Tensor, mask: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """latent / adapool's read of half-precision x by one float32 query per row (``attention.cross_attention`` with
    one head and query, where no gradient is taken): ``fast.query_read`` of a float32 copy of x, and
    ``fast.half_query_read``, a block of rows at a time. Each returns the weighted sums."""
    queries, read = query_setup(x, mask)
    return {"float32 copy": lambda: read(False, x, queries)[0], "row slices": lambda: read(True, x, queries)[0]}


def query_train_forms(x: torch.Tensor, mask: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """:func:`query_forms` with the gradients of x and of the queries taken from a fixed gradient of the sums
    (``fast.HalfQueryRead``'s backward, a block of rows at a time, against ``fast.QueryRead``'s on the float32 copy).
    Each returns x's gradient."""
    queries, read = query_setup(x, mask)
    queries.requires_grad_()
    grad = torch.randn(x.shape[0], 1, x.shape[2], generator=torch.Generator().manual_seed(2))
    leaf = x.detach().requires_grad_()

    def trained(blocks: bool) -> torch.Tensor:
        return torch.autograd.grad(read(blocks, leaf, queries)[0], [leaf, queries], grad)[0]
    return {"float32 copy": lambda: trained(False), "row slices": lambda: trained(True)}


def query_setup(x: torch.Tensor, mask: torch.Tensor):
    """One float32 query per row, and read(blocks, x, queries) -> (sums, weights): ``fast.half_query_read`` (blocks) or
    ``fast.query_read`` of x's float32 copy, the weights a masked softmax over the real tokens."""
    queries = torch.randn(x.shape[0], 1, x.shape[2], generator=torch.Generator().manual_seed(1)) * x.shape[2] ** -0.5

    def weigh(scores: torch.Tensor, rows: slice) -> torch.Tensor:
        return masking.masked_softmax(scores, mask[rows, None, :])

    def read(blocks: bool, tokens: torch.Tensor, queries: torch.Tensor):
        if blocks:
            return fast.half_query_read(tokens, queries, mask[:, None, :], weigh)
        return fast.query_read(tokens.float(), queries, mask[:, None, :], lambda scores: weigh(scores, slice(None)))
    return queries, read


def bag_forms(x: torch.Tensor, mask: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """The float32 mean over the real tokens, ``masking.masked_mean``'s two forms: the batched product with the mean's
    weights, and one embedding bag over the real tokens (``fast.bag_sum``) divided by the counts. The weights and the
    counts, a few small ops on the mask on each side, are made outside the timed calls."""
    weights = masking.uniform_weights(mask)
    counts = mask.sum(dim=1, keepdim=True).clamp(min=1)
    return {"product": lambda: masking.masked_weighted_sum(x, weights),
            "row slices": lambda: fast.bag_sum(x, mask) / counts}


def query_reduction(forms: Callable[[torch.Tensor, torch.Tensor], dict[str, Callable[[], torch.Tensor]]],
                    train: bool) -> Reduction:
    """The half-precision query read's sweep, without gradients or with them: its forms, fast.query_blocks_pay, x
    whose rows fit one block as the short rows."""
    return Reduction("float32 copy", ("bf16", "fp16"), forms, lambda x, mask: fast.query_blocks_pay(x),
                     lambda row, settings: row["B"] <= fast.block_rows(row["T"], row["D"],
                                                                       settings["query_block_bytes"]),
                     lambda: {"query_block_bytes": fast.QUERY_BLOCK_BYTES}, True, train)


REDUCTIONS = {
    "max": Reduction("index_reduce", ("fp32", "bf16"),
                     lambda x, mask: {"index_reduce": lambda: fast.reduce_by_index(x, mask, True),
                                      "row slices": lambda: fast.reduce_row_slices(x, fast.single_runs(mask), True)},
                     fast.slices_pay, lambda row, settings: row["tokens"] < settings["row_slice_tokens"],
                     lambda: {"row_slice_tokens": fast.ROW_SLICE_TOKENS}, True),
    "sum": Reduction("float32 copy", ("bf16", "fp16"),
                     lambda x, mask: {"float32 copy": lambda: masking.masked_weighted_sum(x, mask),
                                      "row slices": lambda: fast.sum_row_slices(x, fast.single_runs(mask))},
                     fast.row_sums_pay, lambda row, settings: row["tokens"] * row["D"] < settings["row_sum_elements"],
                     lambda: {"row_sum_elements": fast.ROW_SUM_ELEMENTS}, False),
    "bag": Reduction("product", ("fp32",), bag_forms, fast.bag_sums_pay,
                     lambda row, settings: row["B"] * row["tokens"] * row["D"] < settings["bag_sum_elements"],
                     lambda: {"bag_sum_elements": fast.BAG_SUM_ELEMENTS}, False),
    "half_bag": Reduction("float32 sum", ("bf16", "fp16"),
                          lambda x, mask: {"float32 sum": lambda: masking.masked_sum(x, mask).to(x.dtype),
                                           "row slices": lambda: fast.bag_sum(x, mask)},
                          fast.half_bag_sums_pay, lambda row, settings: False, dict, False,
                          batches=(1,) + BATCHES),
    "query": query_reduction(query_forms, False),
    "query_train": query_reduction(query_train_forms, True),
}


#: Reductions whose faster form was tried and reverted, their forms gone with its code: what their committed sweeps
#: (``TRIED`` files of docs/performance.md) need to be rendered and checked. ``loop_*``: the compiled loops (their
#: mean, max with holders, and spread) on one core against blocks of rows on torch's threads, from 07ec403, picked
#: from ``threaded_elements`` elements of x (B x T x D) on several threads.
def _under_threaded_elements(row: dict, settings: dict) -> bool:
    return row["B"] * row["T"] * row["D"] < settings["threaded_elements"]


RETIRED = {f"loop_{name}": Reduction("one core", dtypes, None, None, _under_threaded_elements, dict, True)
           for name, dtypes in (("mean", ("fp32", "bf16")), ("max", ("fp32", "bf16")), ("spread", ("bf16",)))}


def reduction_of(result: dict) -> Reduction:
    """A sweep's reduction (sweeps before ``--reduction`` timed the max; a retired one's from :data:`RETIRED`)."""
    name = result["settings"].get("reduction", "max")
    return REDUCTIONS[name] if name in REDUCTIONS else RETIRED[name]


def sweep(device: torch.device, repeats: int, batches=None, widths=WIDTHS, lengths=LENGTHS,
          reduction: str = "max") -> list[dict]:
    chosen = REDUCTIONS[reduction]
    batches = chosen.batches if batches is None else batches
    batched = chosen.batched
    rows = []
    for batch in batches:
        for dim in widths:
            for length in lengths:
                for dtype_name in chosen.dtypes:
                    x, mask = inputs(batch, length, dim, DTYPES[dtype_name])
                    with torch.inference_mode(not chosen.train):
                        calls = chosen.forms(x, mask)
                        ours, theirs = calls["row slices"](), calls[batched]()
                        if not (torch.equal(ours, theirs) if chosen.exact else torch.allclose(
                                ours, theirs, rtol=max(1e-5, torch.finfo(ours.dtype).eps), atol=1e-5)):
                            raise AssertionError(f"the two forms disagree at B{batch} T{length} D{dim} {dtype_name}")
                        times = interleaved(calls, device, repeats=repeats)
                    rows.append({"B": batch, "T": length, "D": dim, "dtype": dtype_name,
                                 "tokens": int(mask.sum()) / batch, "rule_picks_slices": chosen.rule(x, mask),
                                 "speedup": ratio(times, batched, "row slices"),
                                 "per_repeat": per_repeat(times, batched, "row slices"),
                                 "ms": {key: median_ms(times, key) for key in times}})
            print(f"  measured B={batch} D={dim}", flush=True)
    return rows


def groups(result: dict) -> dict[str, list[dict]]:
    """A sweep's cells by what the rule does with them: row slices picked; the batched form (``index_reduce`` for
    the max) kept for rows under the rule's size ("short rows"); kept though the rows are long (float32, or several
    threads)."""
    reduction = reduction_of(result)
    batched = reduction.batched
    out = {"row slices picked": [], f"{batched} kept: short rows": [], f"{batched} kept: long rows": []}
    for row in result["rows"]:
        if row["rule_picks_slices"]:
            out["row slices picked"].append(row)
        elif reduction.short(row, result["settings"]):
            out[f"{batched} kept: short rows"].append(row)
        else:
            out[f"{batched} kept: long rows"].append(row)
    return {name: rows for name, rows in out.items() if rows}


def rule_checks(results: list[dict]) -> list[tuple[str, list[str], bool]]:
    """(group, what each sweep shows, whether the sweeps back the rule) per group of :func:`groups`, over sweeps at one
    thread count (quiet, beside busy processes) of one reduction: row slices are picked only where they are faster
    (by more than :data:`TIE`) in at least :data:`BACKING_SHARE` of the cells in every sweep; the batched form is kept
    for short rows only where the row slices are faster in at most the rest of them in every sweep, and for long rows
    only where the row slices miss that share in some sweep (they are not faster there under every condition). Where
    the rule picks the row slices for no cell at this thread count, the rows' size decides nothing, and the short rows
    take the long rows' check."""
    checks = []
    batched = reduction_of(results[0]).batched
    sized = any(row["rule_picks_slices"] for result in results for row in result["rows"])
    for name in dict.fromkeys(name for result in results for name in groups(result)):
        shown, shares = [], []
        for result in results:
            rows = groups(result).get(name, [])
            if not rows:  # no evidence from this sweep: its column says so, and the group is not backed by it
                shown.append("no cells")
                shares.append(float("nan"))
                continue
            speedups = [r["speedup"] for r in rows]
            shares.append(sum(s > 1 + TIE for s in speedups) / len(rows))
            shown.append(f"{len(rows)} cells, row slices over {TIE:.0%} faster in {shares[-1]:.0%}; {batched} / row "
                         f"slices: median {statistics.median(speedups):.2f}x, {min(speedups):.2f}x to "
                         f"{max(speedups):.2f}x")
        if name == "row slices picked":
            backed = all(share >= BACKING_SHARE for share in shares)
        elif name.endswith("short rows") and sized:
            backed = all(1 - share >= BACKING_SHARE for share in shares)
        else:  # a weak check: it asks only that the row slices are not faster in 3 of 4 cells under every condition
            backed = any(share < BACKING_SHARE for share in shares)
        checks.append((name, shown, backed))
    return checks


def render(result: dict) -> str:
    """Every cell's ratio: a row per dtype, batch and width, a column per length; ``*``: the rule picks the row
    slices there."""
    from rendering import table

    lengths = result["settings"]["lengths"]
    cells = {(r["dtype"], r["B"], r["D"], r["T"]): r for r in result["rows"]}
    body = [[dtype, str(batch), str(dim)] + [f"{cells[dtype, batch, dim, t]['speedup']:.2f}"
                                             + (" *" if cells[dtype, batch, dim, t]["rule_picks_slices"] else "")
                                             for t in lengths]
            for dtype, batch, dim in dict.fromkeys((r["dtype"], r["B"], r["D"]) for r in result["rows"])]
    return table(["dtype", "B", "D"] + [f"T{t}" for t in lengths], body, padded=True)


def render_rule(results: list[dict]) -> str:
    """The rule's checks, a table per thread count: a row per group of cells, a column per sweep at that count."""
    from rendering import table

    by_threads = {}
    for result in results:
        by_threads.setdefault(result["settings"]["threads"], []).append(result)
    out = []
    for threads, runs in sorted(by_threads.items()):
        body = [[name, *shown, "backed" if backed else "**not backed**"] for name, shown, backed in rule_checks(runs)]
        out.append(f"{threads} torch thread(s):\n\n" + table(["cells", *(load_label(run) for run in runs),
                                                                "the rule"], body))
    return "\n\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    def add_arguments(parser) -> None:
        parser.add_argument("--reduction", choices=tuple(REDUCTIONS), default="max",
                            help="the masked max's forms (default), the half-precision sum's, the float32 mean's, "
                                 "the rounded half-precision sum's or the half-precision query read's (without and "
                                 "with gradients)")

    def settings(reduction: str) -> dict:
        chosen = REDUCTIONS[reduction]
        return {"reduction": reduction, "batches": chosen.batches, "widths": WIDTHS, "lengths": LENGTHS,
                **chosen.settings(), "backing_share": BACKING_SHARE, "tie": TIE,
                "figure": f"{chosen.batched} time / row slices time (> 1: the row slices are faster)"}

    return run_sweep(__doc__, argv, lambda reduction: f"{reduction}_rows",
                     lambda reduction: f"{REDUCTIONS[reduction].batched} / row slices, masked {reduction}",
                     settings, sweep, render, render_rule, add_arguments,
                     lambda parsed: {"reduction": parsed.reduction})


if __name__ == "__main__":
    main()
