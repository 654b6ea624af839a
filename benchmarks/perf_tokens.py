"""Item 1: token poolers against their floor, measured side by side in one run.

* Masked mean / sum / max against ``x.sum(dim=1)`` on the same tensor (the cost of reading it once):
  target <= 1.3x.
* Attention-family poolers against the matmul of their own scoring layer over every token (``x @ W.T``
  with the pooler's first scoring weight; gated attention's two, as one matmul): target <= 1.2x.

B = 32 rows whose real lengths are drawn uniformly from [T/2, T] (right padding), the pooler called
through its public ``forward`` (input checks, masking, empty-row handling included). Forward runs under
``torch.inference_mode``; forward + backward calls ``.backward(g)`` on the output (g a fixed dense random
gradient, as a head sends) with the hidden states (and the poolers' / floors' weights) requiring grad.
In bf16 the pooler's parameters are bf16 too.

    .venv/bin/python benchmarks/perf_tokens.py            # quick: 2 sizes x fp32/bf16 x fwd/fwd+bwd
    .venv/bin/python benchmarks/perf_tokens.py --full     # T in {128, 512} x D in {384, 768}
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from perf_common import (DTYPES, describe, interleaved, median_ms, parse_and_setup, per_repeat, ratio,  # noqa: E402
                         save_json, spread, table, timed_call)
from poolkit import get_pooler  # noqa: E402

BATCH = 32
STAT_POOLERS = ["mean", "sum", "max"]
ATTENTION_POOLERS = ["attention", "attention_head", "multihead_attention", "gated_attention", "latent", "adapool"]
STAT_TARGET, ATTENTION_TARGET = 1.3, 1.2


def scoring_weight(pooler) -> torch.Tensor:
    """The weight of the layer that scores every token (what the pooler cannot avoid computing)."""
    name = pooler.name
    if name in ("attention", "attention_head"):
        return pooler.score[0].weight
    if name == "multihead_attention":
        return pooler.hidden.weight
    if name == "gated_attention":
        return torch.cat([pooler.value.weight, pooler.gate.weight])
    if name in ("latent", "adapool"):
        return pooler.key.weight
    raise KeyError(name)


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


def run_config(length: int, dim: int, dtype_name: str, mode: str, device: torch.device, repeats: int):
    dtype = DTYPES[dtype_name]
    x, mask = make_inputs(length, dim, dtype, device)
    train = mode == "fwd+bwd"
    x.requires_grad_(train)
    poolers = {}
    for name in STAT_POOLERS + ATTENTION_POOLERS:
        torch.manual_seed(0)
        poolers[name] = get_pooler(name, hidden_size=dim).to(device=device, dtype=dtype).train(train)
    floors = {name: scoring_weight(poolers[name]).detach().clone().requires_grad_(train)
              for name in ATTENTION_POOLERS}

    def wrap(fn, leaves):
        return timed_call(fn, train, leaves)

    variants = {"floor: x.sum(1)": wrap(lambda: x.sum(dim=1), [x])}
    for name in STAT_POOLERS:
        variants[name] = wrap(lambda p=poolers[name]: p(x, mask), [x])
    for name in ATTENTION_POOLERS:
        pooler, weight = poolers[name], floors[name]
        variants[name] = wrap(lambda p=pooler: p(x, mask), [x, *pooler.parameters()])
        variants[f"floor: {name} scoring matmul"] = wrap(lambda w=weight: F.linear(x, w), [x, weight])
    times = interleaved(variants, device, repeats=repeats, min_sample_s=0.05)
    rows = []
    for name in STAT_POOLERS:
        rows.append({"pooler": name, "floor": "x.sum(dim=1)", "ratio": ratio(times, name, "floor: x.sum(1)"),
                     "spread": spread(times, name, "floor: x.sum(1)"), "ms": median_ms(times, name),
                     "floor_ms": median_ms(times, "floor: x.sum(1)"), "target": STAT_TARGET})
    for name in ATTENTION_POOLERS:
        floor = f"floor: {name} scoring matmul"
        rows.append({"pooler": name, "floor": "scoring matmul " + "x".join(map(str, floors[name].shape[::-1])),
                     "ratio": ratio(times, name, floor), "spread": spread(times, name, floor),
                     "ms": median_ms(times, name),
                     "floor_ms": median_ms(times, floor), "target": ATTENTION_TARGET})
    for row in rows:
        row.update(T=length, D=dim, dtype=dtype_name, mode=mode)
    return rows


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv)
    repeats = args.repeats or (9 if args.full else 7)
    sizes = [(128, 384), (128, 768), (512, 384), (512, 768)] if args.full else [(128, 384), (512, 768)]
    print(f"# Token poolers vs their floor ({describe(device)}), B={BATCH}, {repeats} interleaved repeats")
    rows = []
    for length, dim in sizes:
        for dtype_name in ("fp32", "bf16"):
            for mode in ("fwd", "fwd+bwd"):
                rows += run_config(length, dim, dtype_name, mode, device, repeats)
                print(f"  measured T={length} D={dim} {dtype_name} {mode}", flush=True)
    print(render(rows))
    result = {"device": describe(device), "repeats": repeats, "rows": rows}
    save_json(args.json, result)
    return result


def render(rows: list[dict]) -> str:
    """One table per pooler family: a column per (T, D, dtype, mode), a row per pooler; misses marked *."""
    configs = list(dict.fromkeys((r["T"], r["D"], r["dtype"], r["mode"]) for r in rows))
    headers = ["pooler (floor)"] + [f"T{t} D{d} {dt} {m}" for t, d, dt, m in configs]
    out = []
    for family, names, target in (("masked statistics vs x.sum(dim=1), target <= 1.3x", STAT_POOLERS, STAT_TARGET),
                                  ("attention family vs its scoring matmul, target <= 1.2x", ATTENTION_POOLERS,
                                   ATTENTION_TARGET)):
        body = []
        for name in names:
            cells = []
            for config in configs:
                row = next(r for r in rows if (r["T"], r["D"], r["dtype"], r["mode"]) == config and r["pooler"] == name)
                cells.append(f"{row['ratio']:.2f}" + ("" if row["ratio"] <= target else " *"))
            body.append([name] + cells)
        out.append(table(headers, body, title=f"Ratio to the floor: {family} (* = over target)"))
    return "\n".join(out)


if __name__ == "__main__":
    main()
