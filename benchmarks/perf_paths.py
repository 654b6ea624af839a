"""Plain forms vs fast forms: every token pooler of the working tree with ``poolkit.pooling.fast`` off and on.

The fast CPU forms (``pooling/fast.py``: real-token scoring, the cheaper weighted-sum gradient, the
one-pass masked max / min) run only where ``fast.active(x)`` holds: eager CPU, no ``torch.func``
transform, no ``torch.compile`` / export. Everywhere else (GPUs, compiled or vmapped code, export) the
plain forms of ``pooling/masking.py`` run. Timing the plain forms on the CPU, here inside
``fast.disabled()``, tells what those paths cost on the CPU relative to the fast ones (on a GPU the plain
forms are the intended ones; this is not a GPU figure).

Same pooler (same weights), same inputs, the two calls interleaved as in the rest of the suite; the figure
is plain time / fast time (> 1: the fast forms are faster; poolers without a fast form should read 1.00x
up to noise). Sizes and modes as ``perf_tokens``.

    .venv/bin/python benchmarks/perf_paths.py [--poolers mean,max,attention] [--json benchmarks/results/paths.json]
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from perf_common import describe, parse_and_setup, run_info, save_json, timed_call  # noqa: E402
from perf_tokens import BATCH, grid_table, pair_grid  # noqa: E402
from poolkit import get_pooler, list_poolers  # noqa: E402
from poolkit.pooling import fast  # noqa: E402


def under(switch, fn):
    """``fn`` called inside a fresh ``switch()`` context (both variants pay for entering one)."""
    def call():
        with switch():
            return fn()
    return call


def main(argv: list[str] | None = None) -> dict:
    def arguments(parser):
        parser.add_argument("--poolers", default=None, help="comma-separated token poolers (default: all)")

    args, device = parse_and_setup(__doc__, argv, arguments)
    repeats = args.repeats or 7
    names = args.poolers.split(",") if args.poolers else list_poolers("token")
    sizes = [(128, 384), (128, 768), (512, 384), (512, 768)] if args.full else [(128, 384), (512, 768)]
    info = run_info(device, args)
    print(f"# Plain forms (fast.disabled()) vs fast forms ({describe(device)}), B={BATCH}, {repeats} interleaved "
          "repeats; plain time / fast time")
    if device.type != "cpu":
        print("note: the fast forms are CPU-only, so on this device both variants run the plain forms")

    def pair(name, x, mask, train, dtype):
        torch.manual_seed(0)
        pooler = get_pooler(name, hidden_size=x.shape[-1]).to(device=device, dtype=dtype).train(train)
        with torch.no_grad():  # the two forms agree (to rounding): the suite's tests hold them to it
            with fast.disabled():
                plain_out = pooler(x, mask).float()
            diff = (plain_out - pooler(x, mask).float()).abs().max().item()
        call = timed_call(lambda: pooler(x, mask), train, [x, *pooler.parameters()])
        return {"plain": under(fast.disabled, call), "fast": under(contextlib.nullcontext, call)}, diff

    rows = pair_grid(names, sizes, device, repeats, ("plain", "fast"), pair)
    print(grid_table(rows, names, "Cost of the plain forms over the fast forms (plain time / fast time)"))
    result = {"kind": "paths", **info,
              "settings": {"batch": BATCH, "sizes": sizes, "dtypes": ["fp32", "bf16"], "modes": ["fwd", "fwd+bwd"],
                           "repeats": repeats, "min_sample_s": 0.05, "threads": torch.get_num_threads(),
                           "background": args.background, "poolers": names,
                           "figure": "plain time / fast time (> 1: the fast forms are faster)"},
              "rows": rows}
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
