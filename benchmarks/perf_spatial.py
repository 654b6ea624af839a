"""Spatial poolers on image maps vs their floors and vs timm's pooling layers, measured side by side in one run.

Every spatial pooler is called through its public ``forward`` on an NCHW map (B, C, H, W) (the map adapter,
input checks and empty-row guard included) and timed against its **floor**: the plain torch code that computes
the same output from the same parameters, with no mask, no checks, no weights. Where there are several plain
forms (``FLOORS``), each is timed in the same repeats and the floor of a repeat is the fastest of them, as the
token floors are (a test holds every form equal to its pooler's output, so a floor cannot do less work):

* gap: ``x.mean((2, 3))``, the sum over the positions divided by their number, or a matmul with a uniform
  column; gmp: ``x.amax((2, 3))``, or the same of x read as float32; avgmax / catavgmax: every pair of those;
* gem (poolkit's default ``signed=True``) ``m = mean(sign(x) |x|^p)``, ``sign(m) |m|^(1/p)``; lse
  ``t (logsumexp(x / t) - log n)``; both in float32, where the poolers compute;
* flex ``x.flatten(2) @ softmax(logits)`` or the same as a bmm (the logit map is the map's size: no resizing);
* attention2d (gated attention) one matmul by the value and gate weights together (of the (B, P, C) view, or
  of the positions copied into one (B*P, C) matrix), tanh * sigmoid, the score, a softmax in float32 and the
  weighted sum;
* adapool2d (the mean as query, by each mean form) its projections folded into the query, as poolkit folds them
  (projecting
  every position by W_K and W_V would cost far more than poolkit does, and would be no floor): W_Q on the
  mean, W_K^T on the query, one (B, 1, C) x (B, C, P) read of the map in float32, a softmax, the weighted
  sum, W_V and W_O on the (B, C) result.

The ratio is pooler time / floor time (median of the per-repeat ratios). Target <= 1.3x, as for the token
statistics; under 0.95 the floor is not a floor (flagged ``!``).

Masked maps: a (B, H, W) validity mask, the first half of the rows valid everywhere, the second half only on
the top-left (3H // 4) x (3W // 4) positions. For ``MASKED`` poolers the masked call is timed against the floor
with the same mask (masked_fill / a masked mean, the same outputs) and against the unmasked floor (the extra
cost of a mask over pooling the whole map, as timm does).

timm: ``SelectAdaptivePool2d`` (pool types avg, max, avgmax, catavgmax, ``flatten=True``) against the poolkit
pooler of the same output, and timm's ``SimPool2d`` (GAP query, LayerNorm, a key projection of every position;
one head) beside adapool2d (the mean as query, projections folded): not the same function, the nearest
poolkit has. timm is optional (never a poolkit dependency): without it the suite records why and times the rest.

Shapes: a ResNet-50-like last map (B = 64, C = 2048, 7 x 7) and a ViT-like one (B = 64, 196 positions as
14 x 14, C = 768); fp32 and bf16 (the poolers' parameters bf16 too); forward under ``torch.inference_mode``,
and forward + backward (a fixed dense gradient into the output, the map requiring grad) for the poolers with
parameters.

    .venv/bin/python benchmarks/perf_spatial.py [--full] [--json FILE]
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch import Tensor  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from perf_common import (DTYPES, describe, interleaved, parse_and_setup, run_info, save_json, table,  # noqa: E402
                         timed_call)
from perf_tokens import NOT_A_FLOOR, floor_ratio  # noqa: E402
from poolkit import get_pooler  # noqa: E402

#: name -> (B, C, H, W)
SHAPES = {"ResNet-50 7x7": (64, 2048, 7, 7), "ViT 14x14": (64, 768, 14, 14)}
POOLERS = ["gap", "gmp", "gem", "lse", "avgmax", "catavgmax", "flex", "attention2d", "adapool2d"]
MASKED = ["gap", "gmp", "gem", "attention2d"]
#: poolkit pooler -> timm SelectAdaptivePool2d pool_type computing the same output
TIMM_TYPES = {"gap": "avg", "gmp": "max", "avgmax": "avgmax", "catavgmax": "catavgmax"}
TARGET = 1.3
MIN_SAMPLE_S = 0.05  # each timed sample lasts about this long (several calls of a fast variant)


# -- floors: plain torch, the same outputs -------------------------------------------------------------
# Each floor is the fastest, in each repeat, of a few plain forms of the same computation: which form of a mean or
# a max is fastest depends on the dtype and the shape (torch's bf16 mean / amax over a short contiguous axis are
# several times slower than its bf16 sum or a matmul), so no single form can stand as the floor.
def _weights(h: Tensor, valid: Tensor | None) -> Tensor:
    """(B, P, 1) uniform weights over the valid positions, in h's dtype (one column for all rows without a mask)."""
    if valid is None:
        return h.new_full((h.shape[2], 1), 1 / h.shape[2])
    return (valid / valid.sum(1, keepdim=True)).to(h.dtype)[:, :, None]


#: (B, C, P) and valid (B, P) or None -> (B, C): the mean over the valid positions, three ways
MEANS: dict[str, Callable[[Tensor, Tensor | None], Tensor]] = {
    "mean": lambda h, valid: h.mean(2) if valid is None else (h * valid[:, None]).sum(2) / valid.sum(1, keepdim=True),
    "sum / n": lambda h, valid: (h if valid is None else h * valid[:, None]).sum(2) / (
        h.shape[2] if valid is None else valid.sum(1, keepdim=True)),
    "matmul": lambda h, valid: (h @ _weights(h, valid)).squeeze(-1),
}


def _filled(h: Tensor, valid: Tensor | None) -> Tensor:
    return h if valid is None else h.masked_fill(~valid[:, None], float("-inf"))


#: the max over the valid positions, two ways (the second reads half precision as float32)
MAXES: dict[str, Callable[[Tensor, Tensor | None], Tensor]] = {
    "amax": lambda h, valid: _filled(h, valid).amax(2),
    "amax in float32": lambda h, valid: _filled(h.float(), valid).amax(2).to(h.dtype),
}


def _softmax(scores: Tensor, valid: Tensor | None) -> Tensor:
    """(B, P) scores -> float32 weights over the valid positions."""
    scores = scores.float()
    return (scores if valid is None else scores.masked_fill(~valid, torch.finfo(scores.dtype).min)).softmax(-1)


def _gem(pooler, h: Tensor, valid: Tensor | None) -> Tensor:
    f, p = h.float(), pooler.p
    m = MEANS["sum / n"](f.sign() * f.abs().pow(p), valid)
    return (m.sign() * m.abs().pow(1 / p)).to(h.dtype)


def _lse(pooler, h: Tensor, valid: Tensor | None) -> Tensor:
    t = pooler.temperature
    scaled = h.float() / t
    count = torch.tensor(float(h.shape[2])) if valid is None else valid.sum(1, keepdim=True).float()
    if valid is not None:
        scaled = scaled.masked_fill(~valid[:, None], float("-inf"))
    return (t * (torch.logsumexp(scaled, 2) - count.log())).to(h.dtype)


def _flex(product: str):
    def flex(pooler, h: Tensor, valid: Tensor | None) -> Tensor:
        weights = pooler.logits.flatten().float().softmax(0).to(h.dtype)
        if product == "matmul":
            return h @ weights
        return torch.bmm(weights.expand(h.shape[0], 1, -1), h.transpose(1, 2)).squeeze(1)
    return flex


def _gated_attention(gather: bool):
    """Gated attention in one projection by the value and gate weights together; ``gather``: the positions copied
    into one (B*P, C) matrix first (one 2-D product), else projected as the (B, P, C) view."""
    def gated_attention(pooler, h: Tensor, valid: Tensor | None) -> Tensor:
        positions = h.transpose(1, 2)  # (B, P, C)
        if gather:
            positions = positions.reshape(-1, h.shape[1])
        both = F.linear(positions, torch.cat([pooler.value.weight, pooler.gate.weight]),
                        torch.cat([pooler.value.bias, pooler.gate.bias]))
        value, gate = both.chunk(2, dim=-1)
        scores = F.linear(value.tanh() * gate.sigmoid(), pooler.score.weight).view(h.shape[0], -1)
        return (h @ _softmax(scores, valid).to(h.dtype)[:, :, None]).squeeze(-1)
    return gated_attention


def _adapool(mean: str):
    def adapool(pooler, h: Tensor, valid: Tensor | None) -> Tensor:
        query = F.linear(MEANS[mean](h, valid), pooler.query.weight)  # (B, C) in h's dtype, as poolkit's query
        f = h.float()
        key = (query.float() @ pooler.key.weight.float()) * h.shape[1] ** -0.5  # W_K^T q: the key folded into q
        weights = _softmax(torch.bmm(key[:, None, :], f).squeeze(1), valid)  # (B, P)
        mixed = torch.bmm(f, weights[:, :, None]).squeeze(-1)  # (B, C), float32
        return F.linear(F.linear(mixed, pooler.value.weight.float()).to(pooler.out.weight.dtype), pooler.out.weight)
    return adapool


def _pair(mean: str, maximum: str, concat: bool):
    def both(pooler, h: Tensor, valid: Tensor | None) -> Tensor:
        avg, top = MEANS[mean](h, valid), MAXES[maximum](h, valid)
        return torch.cat([avg, top], dim=1) if concat else 0.5 * (avg + top)
    return both


#: pooler name -> {form: floor(pooler, h (B, C, P), valid (B, P) bool or None) -> the pooler's output}
FLOORS: dict[str, dict[str, Callable[..., Tensor]]] = {
    "gap": {name: lambda p, h, valid, f=f: f(h, valid) for name, f in MEANS.items()},
    "gmp": {name: lambda p, h, valid, f=f: f(h, valid) for name, f in MAXES.items()},
    "gem": {"signed power mean": _gem},
    "lse": {"logsumexp": _lse},
    "avgmax": {f"{m} + {k}": _pair(m, k, concat=False) for m in MEANS for k in MAXES},
    "catavgmax": {f"{m} + {k}": _pair(m, k, concat=True) for m in MEANS for k in MAXES},
    "flex": {"matmul": _flex("matmul"), "bmm": _flex("bmm")},
    "attention2d": {"(B*P, C) product": _gated_attention(True), "(B, P, C) product": _gated_attention(False)},
    "adapool2d": {f"query by {m}": _adapool(m) for m in MEANS},
}


def floor_output(name: str, pooler, x: Tensor, mask: Tensor | None = None, form: str | None = None) -> Tensor:
    """The floor of ``name`` on the NCHW map x (and its (B, H, W) mask), in ``form`` (default: the first): the
    pooler's output in plain torch."""
    forms = FLOORS[name]
    return forms[form or next(iter(forms))](pooler, x.flatten(2), None if mask is None else mask.flatten(1))


def build_pooler(name: str, shape: tuple[int, int, int, int], dtype: torch.dtype, seed: int = 0):
    """The pooler for maps of ``shape`` (flex's logit map that size), random (nonzero) flex logits, in ``dtype``."""
    torch.manual_seed(seed)
    _, channels, height, width = shape
    options = {"height": height, "width": width} if name == "flex" else {}
    pooler = get_pooler(name, hidden_size=channels, **options)
    if name == "flex":
        with torch.no_grad():
            pooler.logits.normal_()  # the zeros of its initialisation would make it gap
    return pooler.to(dtype)


def make_inputs(shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device):
    """The map (B, C, H, W) and its mask (B, H, W): rows of the second half valid on (3H // 4) x (3W // 4)."""
    batch, channels, height, width = shape
    x = torch.randn(shape, generator=torch.Generator().manual_seed(height * 1000 + channels)).to(device, dtype)
    mask = torch.ones(batch, height, width, dtype=torch.bool, device=device)
    mask[batch // 2:, 3 * height // 4:, :] = False
    mask[batch // 2:, :, 3 * width // 4:] = False
    return x, mask


# -- timm ------------------------------------------------------------------------------------------------
#: Where ``make bench`` unpacks timm's wheel: outside site-packages, because an installed timm without torchvision
#: breaks the ``accelerate`` command (it imports timm.layers, which imports torchvision).
TIMM_DIR = Path(os.environ.get("POOLKIT_TIMM_DIR", Path(__file__).resolve().parents[1] / ".venv" / "timm"))


def timm_layers() -> tuple[types.ModuleType | None, types.ModuleType | None, str]:
    """timm's adaptive_avgmax_pool and other_pool modules, and how they were had (or why not).

    ``timm.layers`` imports torchvision (its norm layers), which poolkit's environment does not have; these two
    modules import torch only, so they are loaded on their own from an installed timm or from the wheel unpacked in
    :data:`TIMM_DIR` (under a private package name, so no half-imported ``timm`` is left in ``sys.modules``)."""
    spec = importlib.util.find_spec("timm")
    if spec is not None:
        version, layers = importlib.metadata.version("timm"), Path(spec.submodule_search_locations[0]) / "layers"
        try:
            from timm.layers import adaptive_avgmax_pool, other_pool
            return adaptive_avgmax_pool, other_pool, f"timm {version}, timm.layers imported"
        except ImportError as err:
            reason = f"timm {version}: timm.layers not importable ({err})"
    else:
        unpacked = sorted(TIMM_DIR.glob("timm-*.dist-info"))
        if not unpacked:
            return None, None, f"timm not found (optional: make bench unpacks it into {TIMM_DIR})"
        version, layers = unpacked[-1].name.removeprefix("timm-").removesuffix(".dist-info"), TIMM_DIR / "timm" / "layers"
        reason = f"timm {version} unpacked in {TIMM_DIR.name}/ (not installed)"
    package = types.ModuleType("_timm_layers")
    package.__path__ = [str(layers)]
    sys.modules["_timm_layers"] = package
    try:
        modules = [importlib.import_module(f"_timm_layers.{name}") for name in ("adaptive_avgmax_pool", "other_pool")]
    except ImportError as err:
        return None, None, f"{reason}; its pooling files not loadable on their own either ({err})"
    return *modules, f"{reason}; adaptive_avgmax_pool.py and other_pool.py (torch only) loaded on their own"


def timm_variants(shape, dtype, train: bool, x: Tensor, pooling, other) -> dict[str, tuple[Callable, list, Tensor]]:
    """timm's poolers for this cell: name -> (the timed call, its leaves, its output for the check)."""
    variants = {}
    if pooling is not None and not train:
        for name, pool_type in TIMM_TYPES.items():
            layer = pooling.SelectAdaptivePool2d(pool_type=pool_type, flatten=True)
            variants[f"timm {pool_type}"] = (lambda m=layer: m(x), [x], name)
    if other is not None and hasattr(other, "SimPool2d"):
        torch.manual_seed(0)
        simpool = other.SimPool2d(shape[1]).to(dtype)
        variants["timm SimPool2d"] = (lambda m=simpool: m(x), [x, *simpool.parameters()], "adapool2d")
    return variants


# -- the run ---------------------------------------------------------------------------------------------
def run_cell(label: str, shape, dtype_name: str, mode: str, device: torch.device, repeats: int, timm) -> list[dict]:
    """Every pooler, its floor, the masked calls and timm's layers of one (shape, dtype, mode), interleaved."""
    train, dtype = mode == "fwd+bwd", DTYPES[dtype_name]
    x, mask = make_inputs(shape, dtype, device)
    x.requires_grad_(train)
    variants, plan, outputs = {}, [], {}
    for name in POOLERS:
        pooler = build_pooler(name, shape, dtype).to(device).train(train)
        params = list(pooler.parameters())
        if train and not any(p.requires_grad for p in params):
            continue  # forward + backward only where the pooler has parameters to train
        leaves = [x, *params]
        for masked in ((False, True) if name in MASKED else (False,)):
            m = mask if masked else None
            tag = " masked" if masked else ""
            variants[name + tag] = timed_call(lambda p=pooler, m=m: p(x, m), train, leaves)
            for form in FLOORS[name]:
                variants[f"floor {name}{tag}: {form}"] = timed_call(
                    lambda p=pooler, n=name, m=m, f=form: floor_output(n, p, x, m, f), train, leaves)
            with torch.no_grad():
                pooled = pooler(x, m).float()
                outputs[name + tag] = max(float((pooled - floor_output(name, pooler, x, m, form).float()).abs().max())
                                          for form in FLOORS[name])
            plan.append((name, masked))
    extra = timm_variants(shape, dtype, train, x, *timm[:2]) if timm else {}
    for key, (call, leaves, _) in extra.items():
        variants[key] = timed_call(call, train, leaves)
    times = interleaved(variants, device, repeats=repeats, min_sample_s=MIN_SAMPLE_S)
    batch, channels, height, width = shape
    common = {"shape": label, "B": batch, "C": channels, "H": height, "W": width, "dtype": dtype_name, "mode": mode}
    rows = []
    for name, masked in plan:
        tag = " masked" if masked else ""
        forms = FLOORS[name]
        row = {**common, "pooler": name, "masked": masked, "target": TARGET,
               "max_abs_diff_vs_floor": outputs[name + tag],
               **floor_ratio(times, name + tag, [f"floor {name}{tag}: {form}" for form in forms])}
        if masked:
            row["vs_unmasked_floor"] = floor_ratio(times, name + tag, [f"floor {name}: {form}" for form in forms])
        rows.append(row)
    for key, (_, _, name) in extra.items():
        if name in variants:  # poolkit's time over timm's, the same repeats
            rows.append({**common, "pooler": name, "masked": False, "against": key,
                         **floor_ratio(times, name, [key])})
    return rows


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv)
    repeats = args.repeats or (9 if args.full else 7)
    timm = timm_layers()
    info = run_info(device, args)
    print(f"# Spatial poolers vs their floor and timm ({describe(device)}), {repeats} interleaved repeats; {timm[2]}")
    rows = []
    for label, shape in SHAPES.items():
        for dtype_name in ("fp32", "bf16"):
            for mode in ("fwd", "fwd+bwd"):
                rows += run_cell(label, shape, dtype_name, mode, device, repeats, timm)
                print(f"  measured {label} {dtype_name} {mode}", flush=True)
    result = {"kind": "spatial", **info, "timm": timm[2],
              "settings": {"shapes": SHAPES, "poolers": POOLERS, "masked": MASKED, "timm_types": TIMM_TYPES,
                           "dtypes": ["fp32", "bf16"], "modes": ["fwd", "fwd+bwd"], "repeats": repeats,
                           "min_sample_s": MIN_SAMPLE_S, "threads": torch.get_num_threads(), "target": TARGET,
                           "not_a_floor": NOT_A_FLOOR,
                           "figure": "pooler time / floor (or timm) time, median of the per-repeat ratios"},
              "rows": rows}
    print(render(result))
    save_json(args.json, result)
    return result


# -- rendering -------------------------------------------------------------------------------------------
def _cell(row: dict) -> str:
    return f"{row['ratio']:.2f}" + (" *" if row["ratio"] > TARGET else "") + (" !" if row["below_floor"] else "")


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(f"{r['shape']} {r['dtype']} {r['mode']}" for r in rows))


def _grid(rows: list[dict], key: Callable[[dict], str], text: Callable[[dict], str], title: str) -> str:
    """A table: a line per ``key(row)``, a column per (shape, dtype, mode), ``text(row)`` in each cell."""
    columns = _columns(rows)
    cells = {(key(r), f"{r['shape']} {r['dtype']} {r['mode']}"): text(r) for r in rows}
    lines = list(dict.fromkeys(key(r) for r in rows))
    return table(["pooler"] + columns, [[line] + [cells.get((line, c), "") for c in columns] for line in lines],
                 title=title)


def render(result: dict) -> str:
    """The floor table, the masked table (vs the masked and the unmasked floor), the timm table, and a summary of
    which poolers are within the target in every cell."""
    rows = result["rows"]
    plain = [r for r in rows if not r["masked"] and "against" not in r]
    masked = [r for r in rows if r["masked"]]
    timm = [r for r in rows if "against" in r]
    out = [_grid(plain, lambda r: r["pooler"], _cell,
                 f"**Ratio to the floor, target <= {TARGET}x** (* = over target, ! = under {NOT_A_FLOOR}: not a floor; "
                 "fwd+bwd only for poolers with parameters)"),
           _grid(masked, lambda r: r["pooler"], lambda r: f"{r['ratio']:.2f} / {r['vs_unmasked_floor']['ratio']:.2f}",
                 "**Masked maps: ratio to the masked floor / to the unmasked floor** (the second: what the mask "
                 "costs over pooling the whole map)")]
    if timm:
        out.append(_grid(timm, lambda r: f"{r['pooler']} / {r['against']}", lambda r: f"{r['ratio']:.2f}",
                         "**poolkit / timm, the same repeats** (< 1: poolkit faster; SimPool2d is not the same "
                         "function as adapool2d, see above)"))
    out.append(f"\ntimm: {result['timm']}.")
    names = list(dict.fromkeys(r["pooler"] for r in plain))
    within = [n for n in names if all(r["ratio"] <= TARGET for r in plain if r["pooler"] == n)]
    beaten = [n for n in within if any(r["below_floor"] for r in plain if r["pooler"] == n)]
    over = [f"`{r['pooler']}` {r['shape']} {r['dtype']} {r['mode']} {r['ratio']:.2f}" for r in plain
            if r["ratio"] > TARGET]
    flagged = [f"`{r['pooler']}` {r['shape']} {r['dtype']} {r['mode']} {r['ratio']:.2f}" for r in plain
               if r["below_floor"]]
    wins: dict[str, dict[str, int]] = {}  # pooler -> form -> repeats it was the fastest, over every unmasked cell
    for r in plain:
        for form, count in r["fastest_floor"].items():  # "floor NAME: FORM"
            won = wins.setdefault(r["pooler"], {})
            won[form.partition(": ")[2]] = won.get(form.partition(": ")[2], 0) + count
    forms_won = "; ".join(f"`{name}` " + ", ".join(f"{form} {count}" for form, count in
                                                   sorted(won.items(), key=lambda w: -w[1]))
                          for name, won in wins.items() if len(FLOORS[name]) > 1)
    largest = max(plain + masked, key=lambda r: r["max_abs_diff_vs_floor"])
    out += ["", f"Within {TARGET}x of the floor in every cell: "
            + (", ".join(f"`{n}`" for n in within if n not in beaten) or "none") + "; within, but faster than the "
            "floor in some cell (where the floor bounds nothing): " + (", ".join(f"`{n}`" for n in beaten) or "none")
            + ".", "", "Over the target: " + ("; ".join(over) or "none") + ".", "",
            f"Not a floor (ratio under {NOT_A_FLOOR}): " + ("; ".join(flagged) or "none") + ".", "",
            f"Fastest floor form, repeats won over the unmasked cells: {forms_won}.", "",
            f"Largest output difference pooler vs floor: {largest['max_abs_diff_vs_floor']:.2g} (`{largest['pooler']}`"
            f"{' masked' if largest['masked'] else ''}, {largest['shape']} {largest['dtype']} {largest['mode']})."]
    return "\n".join(out)


if __name__ == "__main__":
    main()
