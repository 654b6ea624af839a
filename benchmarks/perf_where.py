"""Item 4: where a token pooler's time goes, cell by cell, beside its floor (``perf_tokens``' cells, poolers and floors).

Three calls are timed side by side (interleaved repeats) in every cell:

* the pooler's public ``forward``, as ``perf_tokens`` times it;
* its pooling alone, ``pool_for_output`` (what ``forward`` calls when no weights are asked for) on the input ``forward``
  would pass it (eager CPU: x as given, the boolean mask): no input checks, no mask check, no product that zeroes empty
  rows, no non-finite guard and no cast back. ``forward`` minus this is the contract's cost per call;
* the floor, as ``perf_tokens`` builds it.

The pooling alone then runs under ``torch.profiler`` and its operators' self times are summed by kind
(:data:`KINDS`: products, reductions, softmax, elementwise, copies and casts, allocation, views, other operators;
then autograd's bookkeeping and custom Functions' Python bodies). They are
scaled to the pooling's unprofiled time where the profiler's own cost makes them add up to more; what they leave of
it is time outside any operator: Python, the dispatcher, autograd's bookkeeping. Every figure is a share of the
pooler's ``forward`` time (median of the repeats), so a row reads: the floor is this much of the call, the contract
that much, and the pooling's operators the rest, by kind.

    .venv/bin/python benchmarks/perf_where.py --json benchmarks/results/where-t1.json
    .venv/bin/python benchmarks/perf_where.py --poolers mean,latent --sizes 128x384
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from perf_common import (DTYPES, comma_choices, describe, interleaved, median_ms, parse_and_setup,  # noqa: E402
                         run_info, save_json, table, timed_call)
from perf_tokens import (ATTENTION_POOLERS, ATTENTION_TARGET, BATCH, NOT_A_FLOOR, STAT_POOLERS,  # noqa: E402
                         STAT_TARGET, cell_label, floor_of, floor_ratio, grid, make_inputs)
from poolkit import get_pooler  # noqa: E402
from poolkit.pooling import compiled, fast  # noqa: E402

POOLERS = STAT_POOLERS + ATTENTION_POOLERS

#: Operator kinds, by ATen name without ``aten::`` and without an in-place form's trailing ``_``; an ATen operator no
#: kind names is "other operators". Composite operators (einsum, linear, softmax's wrappers) keep little self time:
#: it lands on the kernels they call.
KINDS = {
    "products": {"mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "dot", "matmul", "linear", "einsum"},
    "reductions": {"sum", "mean", "amax", "amin", "max", "min", "any", "all", "argmax", "argmin", "index_reduce",
                   "cumsum", "logsumexp", "norm", "linalg_vector_norm", "count_nonzero", "max_backward",
                   "value_selecting_reduction_backward"},
    "softmax": {"softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
                "_log_softmax_backward_data"},
    "copies and casts": {"copy", "_to_copy", "to", "clone", "contiguous", "index_select", "gather", "index_copy",
                         "index", "index_put", "_index_put_impl", "cat", "stack", "masked_select", "nonzero", "repeat",
                         "scatter", "scatter_add", "where", "masked_scatter", "put", "select_backward",
                         "slice_backward"},
    "allocation": {"empty", "empty_strided", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
                   "full_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "fill", "zero",
                   "resize", "arange", "scalar_tensor"},
    "views": {"view", "reshape", "_reshape_alias", "transpose", "t", "permute", "expand", "expand_as", "select",
              "slice", "unsqueeze", "squeeze", "as_strided", "flatten", "unflatten", "_unsafe_view", "detach", "alias",
              "lift_fresh", "split", "chunk", "narrow", "unbind", "view_as", "numpy_T", "movedim", "diagonal",
              "resolve_conj", "resolve_neg"},
    "elementwise": {"mul", "add", "sub", "rsub", "div", "tanh", "tanh_backward", "sigmoid", "sigmoid_backward", "exp",
                    "log", "neg", "masked_fill", "gelu", "gelu_backward", "native_layer_norm",
                    "native_layer_norm_backward", "layer_norm", "rsqrt", "sqrt", "clamp", "clamp_min", "relu",
                    "threshold_backward", "silu", "silu_backward", "pow", "reciprocal", "lt", "le", "gt", "ge", "eq",
                    "ne", "logical_not", "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "abs",
                    "sign", "addcmul", "addcdiv", "lerp", "isfinite", "isnan"},
}
#: Time in poolkit's compiled loops (numba, poolkit.pooling.compiled): each runs as a profiler event of its own.
COMPILED = "compiled loops"
#: Time in profiler events of no ATen operator: autograd's nodes and engine (``MulBackward0``, ``AccumulateGrad``) and
#: the Python bodies of custom autograd Functions (``fast.WeightedSum``), outside the operators they call.
AUTOGRAD = "autograd and Python functions"
#: The kinds in the order tables show them, then the time outside any profiled event.
COLUMNS = [*KINDS, COMPILED, "other operators", AUTOGRAD, "outside operators"]


def kind_of(event_name: str) -> str:
    """The kind of a profiler event: ``aten::bmm`` -> "products", an in-place form as its operator (``aten::mul_``
    -> "elementwise"), ATen operators no kind names -> "other operators", a compiled loop's event -> :data:`COMPILED`,
    anything else -> :data:`AUTOGRAD`."""
    if event_name.startswith(compiled.EVENT):
        return COMPILED
    name = event_name.removeprefix("aten::")
    if name == event_name:
        return AUTOGRAD
    for candidate in (name, name.rstrip("_")):
        for kind, names in KINDS.items():
            if candidate in names:
                return kind
    return "other operators"


def operator_ms(call, calls: int) -> dict[str, float]:
    """Self CPU milliseconds per call of ``call`` by kind, from ``calls`` calls under ``torch.profiler`` (CPU only,
    no shapes or stacks recorded: the cheapest it records)."""
    call()  # warm: first-call allocations and dispatch caches are not what a pooler costs
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False, with_stack=False) as prof:
        for _ in range(calls):
            call()
    spent = dict.fromkeys(COLUMNS[:-1], 0.0)
    for event in prof.key_averages():
        spent[kind_of(event.key)] += event.self_cpu_time_total / 1e3 / calls
    return spent


def attribute(spent: dict[str, float], pool_ms: float, forward_ms: float) -> dict[str, float]:
    """Shares of the forward time: the contract (forward - pool), each kind's operator time scaled down to the
    pooling's unprofiled time where the profiler's cost makes it exceed it, and what is left of the pooling's time
    outside any operator. The shares add up to 1 (the contract's is 0 where the pooling alone timed slower)."""
    total = sum(spent.values())
    scale = min(1.0, pool_ms / total) if total > 0 else 0.0
    shares = {kind: ms * scale / forward_ms for kind, ms in spent.items()}
    shares["outside operators"] = max(0.0, pool_ms - total * scale) / forward_ms
    shares["contract"] = max(0.0, forward_ms - pool_ms) / forward_ms
    inside = sum(shares.values())
    return {kind: share / inside for kind, share in shares.items()}


def measure_cell(length: int, dim: int, dtype_name: str, mode: str, names: list[str], device: torch.device,
                 repeats: int, profiled_calls: int, min_sample_s: float = 0.05) -> list[dict]:
    """Every pooler in ``names`` at one cell: forward, pooling alone and floor interleaved, then the pooling profiled.
    A row per pooler."""
    train = mode == "fwd+bwd"
    x, mask = make_inputs(length, dim, DTYPES[dtype_name], device)
    x.requires_grad_(train)
    variants, floors, pools, differs = {}, {}, {}, {}
    for name in names:
        torch.manual_seed(0)
        pooler = get_pooler(name, hidden_size=dim).to(device=device, dtype=DTYPES[dtype_name]).train(train)
        leaves = [x, *pooler.parameters()]
        variants[name] = timed_call(lambda p=pooler: p(x, mask), train, leaves)
        pools[name] = timed_call(lambda p=pooler: p.pool_for_output(x, mask), train, leaves)
        variants[f"pool of {name}"] = pools[name]
        with torch.inference_mode():  # every row has real tokens: the pooling alone is the call, less its checks
            differs[name] = (pooler(x, mask).float() - pooler.pool_for_output(x, mask).float()).abs().max().item()
        floor_calls, candidates, what = floor_of(name, pooler, x, mask, train)
        variants |= floor_calls
        floors[name] = (candidates, what)
    times = interleaved(variants, device, repeats=repeats, min_sample_s=min_sample_s)
    rows = []
    for name in names:
        forward_ms, pool_ms = median_ms(times, name), median_ms(times, f"pool of {name}")
        spent = operator_ms(pools[name], profiled_calls)
        rows.append({"pooler": name, "T": length, "D": dim, "dtype": dtype_name, "mode": mode,
                     "floor": floors[name][1], **floor_ratio(times, name, floors[name][0]),
                     "pool_ms": pool_ms, "pool_vs_forward_max_abs_diff": differs[name],
                     "pool_per_repeat": [p / f for p, f in zip(times[f"pool of {name}"], times[name])],
                     "operator_ms": spent, "shares": attribute(spent, pool_ms, forward_ms)})
    return rows


def _pairs(text: str) -> list[tuple[int, int]]:
    try:
        sizes = [tuple(int(n) for n in part.split("x")) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(len(s) != 2 or min(s) < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be TxD pairs separated by commas, such as 128x384,512x768; "
                                         f"got {text!r}")
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poolers", type=comma_choices(POOLERS, "a pooler timed"), default=POOLERS,
                        help=f"comma-separated, from {', '.join(POOLERS)} (default: all)")
    parser.add_argument("--sizes", type=_pairs, default=None,
                        help="TxD cells, comma-separated (default: perf_tokens' cells, quick or --full)")
    parser.add_argument("--dtypes", type=comma_choices(("fp32", "bf16"), "a dtype timed"), default=["fp32", "bf16"],
                        help="comma-separated, of fp32, bf16 (default: both)")
    parser.add_argument("--profiled-calls", type=int, default=20, help="calls of the pooling under the profiler")


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv, add_arguments)
    if not fast.active(torch.empty(0, device=device)):
        raise SystemExit("perf_where.py: error: it attributes the eager CPU forms; run it with --device cpu")
    sizes, repeats = grid(args.full)  # perf_tokens' cells and repeats, quick or --full
    sizes, repeats = args.sizes or sizes, args.repeats or repeats
    info = run_info(device, args)
    print(f"# Where the time goes ({describe(device)}), {repeats} interleaved repeats")
    rows = []
    for length, dim in sizes:
        for dtype_name in args.dtypes:
            for mode in ("fwd", "fwd+bwd"):
                rows += measure_cell(length, dim, dtype_name, mode, args.poolers, device, repeats, args.profiled_calls)
                print(f"  measured T={length} D={dim} {dtype_name} {mode}", flush=True)
    result = {"kind": "where", **info,
              "settings": {"batch": BATCH, "sizes": sizes, "dtypes": args.dtypes, "poolers": args.poolers,
                           "repeats": repeats, "profiled_calls": args.profiled_calls,
                           "threads": torch.get_num_threads(), "background": args.background,
                           "figure": "shares of the pooler's forward time (median over repeats)"},
              "rows": rows}
    print(render(result))
    save_json(args.json, result)
    return result


def profiled(row: dict) -> float:
    """The pooling's operator time under the profiler over its unprofiled time: above 1, the profiler's own cost per
    operator is in the kinds (scaled down evenly) and the time outside operators reads 0."""
    return sum(row["operator_ms"].values()) / row["pool_ms"]


def target_of(name: str) -> float:
    """The pooler's target over its floor (perf_tokens): 1.3x for the statistics, 1.2x for the attention family."""
    return STAT_TARGET if name in STAT_POOLERS else ATTENTION_TARGET


def pool_over_floor(row: dict) -> float:
    """The pooling alone (no contract) over the floor, as the table reads it: the ratio less the contract's share."""
    return row["ratio"] * (1 - row["shares"]["contract"])


def over_target(rows: list[dict]) -> str:
    """The cells over their target, each read one of two ways: still over it with the contract's whole cost taken
    out (the pooling alone over the floor), so that the pooling itself sets it (its largest kind named: an operator
    kind, or the time outside operators), or over it only with the contract's cost."""
    over = [r for r in rows if r["ratio"] > target_of(r["pooler"])]
    if not over:
        return f"Over their target: none of the {len(rows)} cells"
    body = []
    for r in over:
        alone = pool_over_floor(r)
        kinds = {kind: share for kind, share in r["shares"].items() if kind != "contract"}
        body.append([r["pooler"], cell_label(r), f"{target_of(r['pooler'])}x",
                     f"{r['ratio']:.2f}", f"{alone:.2f}",
                     f"the pooling (largest: {max(kinds, key=kinds.get)})" if alone > target_of(r["pooler"])
                     else f"the contract ({r['shares']['contract']:.0%} of the call)"])
    set_by_operators = sum(row[-1].startswith("the pooling") for row in body)
    return table(["pooler", "cell", "target", "/ floor", "pooling alone / floor", "what puts it over"], body,
                 title=f"**Over their target: {len(over)} of {len(rows)} cells, {set_by_operators} of them still over "
                       f"it with the contract's cost taken out** (the pooling alone / floor: the ratio less the "
                       f"contract's share)")


def render(result: dict) -> str:
    """A row per pooler and cell: its ratio to the floor (! under NOT_A_FLOOR), the floor's share of its time
    (1 / ratio: the floor's work overlaps the kinds), :func:`profiled`, then the contract's and each operator kind's
    share (of the pooler's forward time), and the time outside operators; under it, the cell where each kind's share
    is largest. Kinds no row spends 1% in are left out; last, :func:`over_target`."""
    rows = result["rows"]
    shown = [kind for kind in ["contract", *COLUMNS] if any(r["shares"].get(kind, 0) >= 0.01 for r in rows)]
    body = [[r["pooler"], cell_label(r), f"{r['ratio']:.2f}" + (" !" if r["below_floor"] else ""),
             f"{1 / r['ratio']:.0%}", f"{profiled(r):.2f}", *(f"{r['shares'][kind]:.0%}" for kind in shown)]
            for r in rows]
    largest = [max(rows, key=lambda r, k=kind: r["shares"][k]) for kind in shown]
    return "\n".join([table(["pooler", "cell", "/ floor", "floor", "profiled", *shown], body,
                             title="**Where the time goes: shares of the pooler's forward time** (! = under "
                                   f"{NOT_A_FLOOR}: the floor is slower than the pooler there, not a floor)"), "",
                       "Each kind at its largest: " + "; ".join(
                           f"{kind} {r['shares'][kind]:.0%} (`{r['pooler']}` {cell_label(r)})"
                           for kind, r in zip(shown, largest)), "", over_target(rows)])


if __name__ == "__main__":
    main()
