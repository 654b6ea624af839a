"""Item 1: token poolers against floors that do the same work, measured side by side in one run.

* Masked mean / sum / max: the floor is the *fastest* of several ways to read the real tokens once, gathered before
  timing into one contiguous tensor (its ``sum(0)``, ``amax(0)``, ``sum()`` and ``clone()``, and since
  ``one_thread_reads`` its ``sum()`` on one thread: :data:`READ_REAL`), all timed in the same repeats, the minimum
  taken per repeat: a slow kernel cannot pass as a floor. (Runs before
  :data:`READ_REAL` read every position of x, padding included; the embedding bags, which read the real tokens only,
  were faster than that in a cell, so it was not a floor.) The mean and sum in training read all of x once
  (:data:`READ_ONCE`), x the leaf, so that the floor writes x's whole gradient, as the pooler must; since
  ``real_reads_in_training`` also by reading the real tokens only, then writing x's whole gradient
  (:class:`ReadRealWriteAll`), as the compiled loops' training step does. So does
  ``max`` in training (since ``max_reads_once``): the token that holds each feature's maximum can be found in the pass
  that reads its values, and its gradient is x's whole gradient, zero but at the holders: a read of x and a write of
  a (B, T, D) gradient, the sums' memory work. (Earlier runs timed it against torch's maxima with their gradients,
  ``x.amax(1)`` and ``x.max(1).values``, unmasked; the pooler beat those in some training cells, the ``!`` of
  9f705b3's runs, so they were not a floor.) Target <= 1.3x.
* attention / attention_head / multihead_attention / gated_attention: the floor is the matmul of their
  own scoring weight (gated attention's two as one) over the positions the pooler scores. Where the fast
  forms run (eager CPU: ``fast.active``) those are the real tokens only, so the floor multiplies a
  contiguous, already gathered (N_real, D) tensor: the gather is left out, being a cost of poolkit's
  layout choice that a varlen kernel would not pay, so the floor is the bare flops. Elsewhere (GPU) the
  pooler scores every position and so does the floor. Without a gradient the product is timed two ways, the
  faster in each repeat the floor: torch's, and oneDNN's own linear (``onednn_floors``), which multiplies float32
  faster than torch's product on the Zen 4 measured. Target <= 1.2x.
* latent / adapool never project the tokens (their projections are folded into the queries): the floor
  is their query-side products (each of their Linear weights once, on B x Q rows) and one read of x by
  the queries, timed two ways in each repeat, the faster the floor: torch's (B, H*Q, D) x (B, D, T) bmm, whose
  backward writes x's gradient transposed by a batched product with an inner dimension of H*Q, and
  :class:`ReadOnce`, the same read with x's gradient written once in x's layout. adapool's default query is the
  mean of the real tokens, which must be read before any token is scored: its floor's query-side products start
  from ``x.sum(1)`` (:func:`query_from_tokens`), a second read of x. Target <= 1.2x.
* In half precision the attention floors are the faster, in each repeat, of their work in the pooler's dtype and in
  float32 from upcast inputs (the casts timed): where torch emulates half-precision matmuls on the CPU
  (``fast.emulated_half``), float32 is the faster way to do the same work.

A floor ratio below ``NOT_A_FLOOR`` (0.95: the pooler faster than its floor) means the floor is not a
floor; the suite flags it in its output, its JSON (``below_floor``) and the rendered table.

Beside the masked statistics, torch's own op for each (``x.mean(1)``, ``x.sum(1)``, ``x.amax(1)``: :data:`TORCH_OPS`)
runs on the whole of x, unmasked, in the same repeats: its ratio to the same floor, and the pooler's time over the op's,
are recorded with the pooler (``torch_op``) and rendered as a reference table and target row. Where torch's own op is
itself over the target, meeting it asks for a masked form faster than torch's unmasked kernel for that reduction.

B = 32 rows whose real lengths are drawn uniformly from [T/2, T] (right padding), the pooler called
through its public ``forward`` (input checks, masking, empty-row handling included). Forward runs under
``torch.inference_mode``; forward + backward calls ``.backward(g)`` on the output (g a fixed dense random
gradient, as a head sends) with the hidden states (and the poolers' / floors' weights) requiring grad.
In bf16 the pooler's parameters are bf16 too.

    .venv/bin/python benchmarks/perf_tokens.py            # quick: 2 sizes x fp32/bf16 x fwd/fwd+bwd
    .venv/bin/python benchmarks/perf_tokens.py --full     # T in {128, 512} x D in {384, 768}
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from perf_common import (DTYPES, describe, interleaved, median_ms, parse_and_setup, per_repeat, ratio,  # noqa: E402
                         run_info, save_json, table, timed_call)
from poolkit import get_pooler  # noqa: E402
from poolkit.pooling import fast  # noqa: E402

BATCH = 32
STAT_POOLERS = ["mean", "sum", "max"]
SCORING_POOLERS = ["attention", "attention_head", "multihead_attention", "gated_attention"]
QUERY_POOLERS = ["latent", "adapool"]
ATTENTION_POOLERS = SCORING_POOLERS + QUERY_POOLERS
STAT_TARGET, ATTENTION_TARGET = 1.3, 1.2
NOT_A_FLOOR = 0.95  # a median ratio below this: the pooler beat its floor, so the floor is not one


def on_one_thread(read: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``read`` with torch on one thread for the call, the thread count restored after. Beside busy processes a read
    split over several threads waits for whichever is descheduled, and one core reading alone can be the faster:
    the compiled loops (one core each) beat every several-thread read of :data:`READ_REAL` in e97be22's two-thread
    run beside two busy processes, so from ``one_thread_reads`` the floor has this way too."""
    def call(tensor: torch.Tensor) -> torch.Tensor:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return read(tensor)
        finally:
            torch.set_num_threads(threads)
    return call


#: Ways to read the real tokens once, gathered before timing into one contiguous (N_real, D) tensor ("real"): the
#: masked statistics' floor in forward is the fastest of them in each repeat. A masked statistic must read every real
#: token and need not read the padding (the embedding bags do not), so its floor does not read the padding either.
#: Runs without the ``read_real`` setting read all of x in forward too (:data:`READ_ONCE`).
READ_REAL = {"real.sum(0)": lambda r: r.sum(dim=0), "real.amax(0)": lambda r: r.amax(dim=0),
             "real.sum()": lambda r: r.sum(), "real.clone()": lambda r: r.clone(),
             "real.sum() on one thread": on_one_thread(lambda r: r.sum())}
#: Ways to read all of x once: the masked statistics' floor in training, the fastest of them in each repeat. x is the
#: leaf, so each writes x's whole gradient (autograd makes a dense one of the sums' broadcast), as the pooler must:
#: zero at the padding (for the max, everywhere but at each feature's holder), the gradient is still a (B, T, D) tensor.
READ_ONCE = {"x.sum(1)": lambda x: x.sum(dim=1), "x.amax(1)": lambda x: x.amax(dim=1),
             "x.flatten(1).sum(1)": lambda x: x.flatten(1).sum(dim=1), "x.clone()": lambda x: x.clone()}
#: torch's own op over the tokens for each masked statistic, on the whole of x (no mask), timed in the same repeats: the
#: same reduction by torch's kernel. Where it is itself over the target against the floor, the target asks for a masked
#: form faster than torch's own unmasked one; the pooler's time over the op's says how the two compare (under 1: the
#: pooler is the faster).
UNMASKED = {"x.mean(1)": lambda x: x.mean(dim=1), "x.sum(1)": READ_ONCE["x.sum(1)"],
            "x.amax(1)": READ_ONCE["x.amax(1)"]}
TORCH_OPS = {"mean": "x.mean(1)", "sum": "x.sum(1)", "max": "x.amax(1)"}


def scoring_weight(pooler) -> torch.Tensor:
    """The weight of the layer that scores every token (gated attention's two as one matmul)."""
    name = pooler.name
    if name in ("attention", "attention_head"):
        return pooler.score[0].weight
    if name == "multihead_attention":
        return pooler.hidden.weight
    if name == "gated_attention":
        return torch.cat([pooler.value.weight, pooler.gate.weight])
    raise KeyError(name)


#: Half-precision floors are also timed this way, and the faster way in each repeat is the floor.
IN_FLOAT32 = " in float32"
#: latent / adapool's read of x is also timed this way (:class:`ReadOnce`), the faster in each repeat the floor.
GRADIENT_IN_PLACE = ", x's gradient in its layout"
#: The attention floors without a gradient are also timed this way (``onednn_floors``): oneDNN's own linear
#: (``torch.ops.mkldnn._linear_pointwise``, no activation), which on some CPUs multiplies float32 faster than torch's
#: product, and which the poolers' half-precision scoring calls there (``fast.activated_linear``).
ONEDNN = ", oneDNN's linear"


def onednn_floors(device: torch.device) -> bool:
    """Whether the attention floors on ``device`` are also timed as :data:`ONEDNN` (a CPU, oneDNN built and on)."""
    return device.type == "cpu" and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


class ReadOnce(torch.autograd.Function):
    """One read of x (B, T, D) by per-row queries q (B, K, D), ``torch.bmm(x, q.transpose(1, 2))``, whose x gradient
    is written once, laid out as x: a broadcast multiply for one query (each entry one product), a batched product
    otherwise. The least a read of x and its gradient cost: poolkit's ``fast.ScoreProduct`` does the same for latent
    and adapool with one query per row (H * Q = 1; more keep torch's product), and the floor is written here apart
    from it, so that a slower pooler form cannot slow its floor. In forward-only cells it is the same read with x on
    the left: another way to read x once, the faster of the two the floor there too."""

    @staticmethod
    def forward(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, q.transpose(1, 2))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, q = ctx.saved_tensors
        grad_x = (grad * q if q.shape[1] == 1 else torch.bmm(grad, q)) if ctx.needs_input_grad[0] else None
        grad_q = torch.bmm(grad.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        return grad_x, grad_q


def attention_floor(pooler, x: torch.Tensor, mask: torch.Tensor, train: bool):
    """(what it is, {way: its timed call}, its leaves): the floor of an attention-family pooler (module docstring).

    In half precision the floor's work is also timed in float32, its inputs upcast inside the timed call (way
    :data:`IN_FLOAT32`): on CPUs whose half-precision matmuls torch emulates (``fast.emulated_half``) that is the
    faster way to do the same work, so a half-precision matmul alone would be no floor there."""
    def leaf(weight):
        return weight.detach().clone().requires_grad_(train)

    def ways(work, suffix=""):  # work(cast) -> the floor's output, its inputs passed through cast
        calls = {suffix: lambda: work(lambda t: t)}
        if x.dtype in (torch.bfloat16, torch.float16):
            calls[IN_FLOAT32 + suffix] = lambda: work(lambda t: t.float())
        return calls

    if pooler.name in QUERY_POOLERS:
        weights = [leaf(m.weight) for m in pooler.modules() if isinstance(m, nn.Linear)]
        queries, heads = getattr(pooler, "num_queries", 1), pooler.num_heads
        from_tokens = query_from_tokens(pooler)
        start = None if from_tokens else torch.randn(x.shape[0] * queries, x.shape[-1],
                                                     generator=torch.Generator().manual_seed(0)).to(x)

        def query_side(cast, tokens):
            h = tokens.sum(dim=1) if from_tokens else cast(start)
            for weight in weights:
                h = F.linear(h, cast(weight))
            return h.view(x.shape[0], queries, -1).repeat(1, heads, 1)

        def torch_read(cast):
            tokens = cast(x)
            return torch.bmm(query_side(cast, tokens), tokens.transpose(1, 2))

        def read_once(cast):
            tokens = cast(x)
            return ReadOnce.apply(tokens, query_side(cast, tokens))
        source = "the sum of x over its tokens (the query is their mean), then " if from_tokens else ""
        return (f"{source}{len(weights)} query-side products on B x {queries} rows + one read of x by the queries "
                f"(bmm (B, {heads * queries}, D) x (B, D, T), or with x's gradient in its layout)"), \
            ways(torch_read) | ways(read_once, GRADIENT_IN_PLACE), [x, *weights]
    weight = leaf(scoring_weight(pooler))
    real = fast.active(x)  # where the pooler scores the real tokens only, so does its floor
    tokens = x.detach().reshape(-1, x.shape[-1])
    tokens = (tokens[mask.reshape(-1)] if real else tokens).contiguous().requires_grad_(train)
    rows = "real tokens (gathered before timing)" if real else "all B*T positions"
    size = "D" if weight.shape[0] == x.shape[-1] else weight.shape[0]
    calls = ways(lambda cast: F.linear(cast(tokens), cast(weight)))
    if not train and onednn_floors(x.device):  # it has no gradient
        calls |= ways(lambda cast: torch.ops.mkldnn._linear_pointwise(cast(tokens).contiguous(), cast(weight), None,
                                                                      "none", [], ""), ONEDNN)
    return f"x @ W.T over the {rows}, W {size} x D", calls, [tokens, weight]


def query_from_tokens(pooler) -> bool:
    """Whether the pooler's query is the mean of the real tokens (adapool's default, ``query_index=None``): its work
    then reads x once more before any score, so its floor does too."""
    return getattr(pooler, "query_index", 0) is None


#: The ways of :data:`READ_REAL` that the training floor also takes (``real_reads_in_training``), x's whole gradient
#: written after them (:class:`ReadRealWriteAll`): the ones that won the forward floor's repeats.
READ_REAL_IN_TRAINING = ("real.sum()", "real.sum() on one thread")
#: The suffix of those ways' names.
WRITE_ALL = ", x's gradient written"


class ReadRealWriteAll(torch.autograd.Function):
    """``read`` (a :data:`READ_REAL` way) of the real tokens, gathered before timing, in forward, and x's whole (B, T,
    D) gradient written in backward: the incoming (B, D) gradient broadcast over every position, as autograd writes
    ``x.sum(1)`` 's. The masked statistics' forward pass reads the real tokens only where the compiled loops run, in
    training too (58e7a07), so a training floor that reads all of x does more reading than they do: since
    ``real_reads_in_training`` the floor has these ways beside :data:`READ_ONCE` 's."""

    @staticmethod
    def forward(x: torch.Tensor, real: torch.Tensor, read: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        read(real)
        return x.new_zeros(x.shape[0], x.shape[2])

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[:, None, :].expand(ctx.shape).contiguous(), None, None


def floor_of(name: str, pooler, x: torch.Tensor, mask: torch.Tensor, train: bool):
    """(the timed calls of ``name``'s floor, the names of the candidates the floor is the fastest of in each repeat,
    the floor in words): the ways of reading the real tokens once for the masked statistics in forward, in training
    those of reading x once and of reading the real tokens then writing x's whole gradient
    (:data:`READ_REAL_IN_TRAINING`), and the ways of :func:`attention_floor` for the attention family."""
    if name in STAT_POOLERS:
        real = x.detach()[mask].contiguous()
        if not train:
            return ({way: timed_call(lambda f=f: f(real), train, [real]) for way, f in READ_REAL.items()},
                    list(READ_REAL), "fastest of " + ", ".join(READ_REAL) + " over the real tokens (gathered before "
                    "timing)")
        calls = {way: timed_call(lambda f=f: f(x), train, [x]) for way, f in READ_ONCE.items()}
        calls |= {way + WRITE_ALL: timed_call(lambda f=READ_REAL[way]: ReadRealWriteAll.apply(x, real, f), train, [x])
                  for way in READ_REAL_IN_TRAINING}
        return (calls, list(calls), "fastest of " + ", ".join(calls) + ", in training (x's whole gradient written, as "
                "the pooler's is; the real tokens gathered before timing)")
    what, calls, leaves = attention_floor(pooler, x, mask, train)
    variants = {f"floor of {name}{way}": timed_call(call, train, leaves) for way, call in calls.items()}
    return variants, list(variants), what


def floor_ratio(times: dict[str, list[float]], name: str, candidates: list[str]) -> dict:
    """``name``'s time over its floor's, the floor in each repeat the fastest of ``candidates`` in that repeat.

    -> the ratio (median of the per-repeat ratios), every repeat's ratio, the median ms of both, how often
    each candidate was the fastest, and ``below_floor`` (the ratio under NOT_A_FLOOR)."""
    repeats = range(len(times[name]))
    floor = repeat_floors(times, candidates, repeats)
    fastest = [min(candidates, key=lambda c: times[c][r]) for r in repeats]
    per = [t / f for t, f in zip(times[name], floor)]
    median = statistics.median(per)
    return {"ratio": median, "per_repeat": per, "ms": median_ms(times, name),
            "floor_ms": statistics.median(floor) * 1e3,
            "fastest_floor": {c: fastest.count(c) for c in candidates if c in fastest},
            "below_floor": median < NOT_A_FLOOR}


def repeat_floors(times: dict[str, list[float]], candidates: list[str], repeats: range) -> list[float]:
    """The floor's time in each repeat: the fastest of ``candidates`` in that repeat."""
    return [min(times[c][r] for c in candidates) for r in repeats]


def torch_op_ratio(times: dict[str, list[float]], name: str, candidates: list[str]) -> dict:
    """The statistic ``name``'s torch op (:data:`TORCH_OPS`) in the same repeats: its time over the floor (the fastest
    of ``candidates`` in each repeat) and the pooler's time over the op's, each the median of the per-repeat ratios."""
    op = TORCH_OPS[name]
    repeats = range(len(times[name]))
    floor = repeat_floors(times, candidates, repeats)
    return {"op": op, "ratio": statistics.median(times[op][r] / floor[r] for r in repeats),
            "pooler_over_op": statistics.median(times[name][r] / times[op][r] for r in repeats)}


def make_inputs(length: int, dim: int, dtype: torch.dtype, device: torch.device):
    gen = torch.Generator().manual_seed(length * 1000 + dim)
    x = torch.randn(BATCH, length, dim, generator=gen).to(device=device, dtype=dtype)
    lengths = torch.randint(length // 2, length + 1, (BATCH,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(device)
    return x, mask


def pair_grid(names: list[str], sizes: list[tuple[int, int]], device: torch.device, repeats: int, keys: tuple[str, str],
              pair) -> list[dict]:
    """Two variants of every token pooler, timed side by side (interleaved) over sizes x {fp32, bf16} x {fwd,
    fwd+bwd}. ``pair(name, x, mask, train, dtype)`` -> ({keys[0]: call, keys[1]: call}, the largest difference of
    their outputs). One row per cell: each pooler's median per-repeat ratio keys[0] / keys[1] (``speedup``), the
    per-repeat ratios, the median ms of each variant and the output difference."""
    rows = []
    for length, dim in sizes:
        for dtype_name in ("fp32", "bf16"):
            for mode in ("fwd", "fwd+bwd"):
                train = mode == "fwd+bwd"
                x, mask = make_inputs(length, dim, DTYPES[dtype_name], device)
                x.requires_grad_(train)
                row = {"T": length, "D": dim, "dtype": dtype_name, "mode": mode, "speedup": {}, "per_repeat": {},
                       "ms": {}, "max_abs_diff": {}}
                for name in names:
                    variants, row["max_abs_diff"][name] = pair(name, x, mask, train, DTYPES[dtype_name])
                    times = interleaved(variants, device, repeats=repeats, min_sample_s=0.05)
                    row["speedup"][name] = ratio(times, *keys)
                    row["per_repeat"][name] = per_repeat(times, *keys)
                    row["ms"][name] = {key: median_ms(times, key) for key in times}
                rows.append(row)
                print(f"  measured T={length} D={dim} {dtype_name} {mode}", flush=True)
    return rows


def grid_table(rows: list[dict], names: list[str], title: str) -> str:
    """The ratios of :func:`pair_grid`'s rows: a pooler per line, a column per cell."""
    headers = ["pooler"] + [f"T{r['T']} D{r['D']} {r['dtype']} {r['mode']}" for r in rows]
    return table(headers, [[name] + [f"{r['speedup'][name]:.2f}x" for r in rows] for name in names], title=title)


def run_config(length: int, dim: int, dtype_name: str, mode: str, device: torch.device, repeats: int,
               min_sample_s: float = 0.05) -> list[dict]:
    """Every pooler of the three families and every floor, interleaved in one set of repeats: a row per pooler."""
    train = mode == "fwd+bwd"
    x, mask = make_inputs(length, dim, DTYPES[dtype_name], device)
    x.requires_grad_(train)
    variants, floors = {}, {}
    for name in STAT_POOLERS + ATTENTION_POOLERS:
        torch.manual_seed(0)
        pooler = get_pooler(name, hidden_size=dim).to(device=device, dtype=DTYPES[dtype_name]).train(train)
        variants[name] = timed_call(lambda p=pooler: p(x, mask), train, [x, *pooler.parameters()])
        floor_calls, candidates, what = floor_of(name, pooler, x, mask, train)
        variants |= floor_calls
        floors[name] = (candidates, what)
    variants |= {op: timed_call(lambda f=f: f(x), train, [x]) for op, f in UNMASKED.items() if op not in variants}
    times = interleaved(variants, device, repeats=repeats, min_sample_s=min_sample_s)
    return [{"pooler": name, "T": length, "D": dim, "dtype": dtype_name, "mode": mode, "floor": what,
             "target": STAT_TARGET if name in STAT_POOLERS else ATTENTION_TARGET,
             **floor_ratio(times, name, candidates),
             **({"torch_op": torch_op_ratio(times, name, candidates)} if name in TORCH_OPS else {})}
            for name, (candidates, what) in floors.items()]


def grid(full: bool) -> tuple[list[tuple[int, int]], int]:
    """The (T, D) cells and the default repeats of a quick run, or of a ``--full`` one."""
    if full:
        return [(128, 384), (128, 768), (512, 384), (512, 768)], 9
    return [(128, 384), (512, 768)], 7


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv)
    sizes, repeats = grid(args.full)
    repeats = args.repeats or repeats
    info = run_info(device, args)
    print(f"# Token poolers vs their floor ({describe(device)}), B={BATCH}, {repeats} interleaved repeats")
    rows = []
    for length, dim in sizes:
        for dtype_name in ("fp32", "bf16"):
            for mode in ("fwd", "fwd+bwd"):
                rows += run_config(length, dim, dtype_name, mode, device, repeats)
                print(f"  measured T={length} D={dim} {dtype_name} {mode}", flush=True)
    result = {"kind": "floors", **info,
              "settings": {"batch": BATCH, "sizes": sizes, "dtypes": ["fp32", "bf16"], "modes": ["fwd", "fwd+bwd"],
                           "repeats": repeats, "min_sample_s": 0.05, "threads": torch.get_num_threads(),
                           "half_floors_in_float32": True, "read_once_floors": True,
                           "onednn_floors": onednn_floors(device),
                           "background": args.background, "not_a_floor": NOT_A_FLOOR, "read_real": list(READ_REAL),
                           "one_thread_reads": True, "read_once": list(READ_ONCE),
                           "max_reads_once": True, "real_reads_in_training": list(READ_REAL_IN_TRAINING),
                           "figure": "pooler time / floor time, median of the per-repeat ratios"},
              "rows": rows}
    print(render(result))
    print(targets(result))
    save_json(args.json, result)
    return result


FAMILIES = (("masked statistics vs the fastest way to read x once", STAT_POOLERS, STAT_TARGET),
            ("attention family vs its scoring matmul over the positions it scores", SCORING_POOLERS, ATTENTION_TARGET),
            ("latent / adapool vs their query-side products and their reads of x", QUERY_POOLERS, ATTENTION_TARGET))


def families(result: dict) -> tuple:
    """:data:`FAMILIES` as ``result`` measured them: with the ``read_real`` setting the statistics' floor reads the real
    tokens only (with ``read_once`` too, all of x in training: for the mean and sum only where the ``max_with_holder``
    setting says that ``max`` was timed against torch's maxima with their gradients; before that setting, against a
    read of x too)."""
    settings = result.get("settings", {})
    (title, names, target), *rest = FAMILIES
    if settings.get("read_real"):  # and since 79cbfdf the mean's and sum's training floor reads x (``read_once``)
        training = ("" if not settings.get("read_once")
                    else " (in training: x, or the real tokens, x's whole gradient written)"
                    if settings.get("real_reads_in_training")
                    else " (in training: x)" if settings.get("max_reads_once") else " (mean and sum in training: x)")
        title = title.replace("read x once", "read the real tokens once" + training)
    if settings.get("max_with_holder"):
        title += " (max in training: vs torch's max with its gradient)"
    return ((title, names, target), *rest)


def cell_label(row: dict) -> str:
    """A row's cell in words: 'T128 D384 fp32 fwd'."""
    return f"T{row['T']} D{row['D']} {row['dtype']} {row['mode']}"


def render(result: dict) -> str:
    """One table per family (a row per pooler, a column per cell; * over target, ! under NOT_A_FLOOR), the
    floor each pooler is timed against, which read-once candidate was fastest, and the flagged cells."""
    rows = result["rows"]
    labels = list(dict.fromkeys(cell_label(r) for r in rows))
    cell = {(r["pooler"], cell_label(r)): r for r in rows}
    out = []
    for title, names, target in families(result):
        body = [[name] + [f"{cell[name, label]['ratio']:.2f}" + (" *" if cell[name, label]["ratio"] > target else "")
                          + (" !" if cell[name, label]["below_floor"] else "") for label in labels] for name in names]
        out.append(table(["pooler"] + labels, body,
                         title=f"**Ratio to the floor: {title}, target <= {target}x** (* = over target, "
                               f"! = under {NOT_A_FLOOR}: not a floor)"))
    ops = [name for name in STAT_POOLERS if "torch_op" in cell.get((name, labels[0]), {})]
    if ops:
        body = [[f"`{cell[name, labels[0]]['torch_op']['op']}` ({name})"]
                + [f"{cell[name, label]['torch_op']['ratio']:.2f}" + (" *" if cell[name, label]["torch_op"]["ratio"]
                                                                       > STAT_TARGET else "")
                   + f" ({cell[name, label]['torch_op']['pooler_over_op']:.2f})" for label in labels] for name in ops]
        out.append(table(["torch's op, unmasked"] + labels, body,
                         title=f"**torch's own op over the tokens on the whole of x (no mask), ratio to the same "
                               f"floor** (* = over the statistics' target, {STAT_TARGET}x; in brackets the pooler's "
                               "time over the op's, under 1 where the pooler is the faster)"))
    floors: dict[str, dict[str, set]] = {}  # floor -> the poolers timed against it, in order -> at which D
    wins: dict[str, int] = {}
    for r in rows:
        floors.setdefault(r["floor"], {}).setdefault(r["pooler"], set()).add(r["D"])
        if r["pooler"] == STAT_POOLERS[0]:
            for read, count in r["fastest_floor"].items():
                wins[read] = wins.get(read, 0) + count
    flagged = [f"`{r['pooler']}` {cell_label(r)} {r['ratio']:.2f}" for r in rows if r["below_floor"]]
    settings = result.get("settings", {})
    read = ("x" if not settings.get("read_real")
            else "the real tokens (in training: x, or the real tokens, x's whole gradient written)"
            if settings.get("real_reads_in_training")
            else "the real tokens (in training: x)" if settings.get("read_once") else "the real tokens")
    dims = {r["D"] for r in rows}

    def timed(names: dict[str, set]) -> str:  # the poolers, with the sizes D where only some use this floor
        return ", ".join(f"`{n}`" + ("" if at == dims else f" (D = {', '.join(map(str, sorted(at)))})")
                         for n, at in names.items())
    out += ["", "Floors:", "", *(f"* {timed(names)}: {what}" for what, names in floors.items()),
            "", f"Fastest way to read {read} once, repeats won over every cell: "
            + ", ".join(f"`{read}` {count}" for read, count in sorted(wins.items(), key=lambda w: -w[1])),
            "", f"Not a floor (ratio under {NOT_A_FLOOR}): " + (", ".join(flagged) if flagged else "none")]
    half = [r for r in rows if r["pooler"] in ATTENTION_POOLERS and r["dtype"] != "fp32"]
    if half and result["settings"].get("half_floors_in_float32"):
        won = sum(count for r in half for way, count in r["fastest_floor"].items() if IN_FLOAT32 in way)
        out += ["", f"Half-precision attention floors, the faster of their work in the pooler's dtype and in float32 "
                    f"(inputs upcast in the timed call) in each repeat: float32 was the faster in {won} of "
                    f"{sum(sum(r['fastest_floor'].values()) for r in half)} repeats"]
    scored = [r for r in rows if r["pooler"] in SCORING_POOLERS and r["mode"] == "fwd"]
    if scored and result["settings"].get("onednn_floors"):
        won = sum(count for r in scored for way, count in r["fastest_floor"].items() if ONEDNN in way)
        out += ["", f"Attention floors without a gradient, the fastest of torch's product and oneDNN's linear in each "
                    f"repeat: oneDNN's linear was the fastest in {won} of "
                    f"{sum(sum(r['fastest_floor'].values()) for r in scored)} repeats"]
    trained = [r for r in rows if r["pooler"] in QUERY_POOLERS and r["mode"] == "fwd+bwd"]
    if trained and result["settings"].get("read_once_floors"):
        won = sum(count for r in trained for way, count in r["fastest_floor"].items()
                  if way.endswith(GRADIENT_IN_PLACE))
        out += ["", f"latent / adapool floors in training, the faster of torch's read of x and the read with x's "
                    f"gradient in its layout in each repeat: the latter was the faster in {won} of "
                    f"{sum(sum(r['fastest_floor'].values()) for r in trained)} repeats"]
    return "\n".join(out)


def targets(result: dict) -> str:
    """The target rows: per family, met or missed, in how many cells, and its lowest and highest cell."""
    lines = ["| target | result | |", "|---|---|---|"]
    for title, names, target in families(result):
        rows = sorted((r for r in result["rows"] if r["pooler"] in names), key=lambda r: r["ratio"])
        missed = sum(r["ratio"] > target for r in rows)
        lines.append(f"| {', '.join(names)} <= {target}x, {title} | {len(rows) - missed} of {len(rows)} cells "
                     f"within; from {rows[0]['ratio']:.2f}x (`{rows[0]['pooler']}` {cell_label(rows[0])}) to "
                     f"{rows[-1]['ratio']:.2f}x (`{rows[-1]['pooler']}` {cell_label(rows[-1])}) | "
                     f"{'**missed**' if missed else 'met'} |")
        ops = [r for r in result["rows"] if r["pooler"] in names and "torch_op" in r]
        if ops:
            over = [r for r in ops if r["torch_op"]["ratio"] > target]
            lines.append(f"| {', '.join(names)}: torch's own op over the tokens, unmasked ("
                         f"{', '.join(dict.fromkeys(r['torch_op']['op'] for r in ops))}), against the same floor | "
                         f"over {target}x in {len(over)} of {len(ops)} cells, {sum(r['ratio'] > target for r in over)} "
                         f"of them missed by the pooler too; the pooler within {target}x of the op in "
                         f"{sum(r['torch_op']['pooler_over_op'] <= target for r in ops)} of {len(ops)} cells | "
                         "reference |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
