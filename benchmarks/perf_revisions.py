"""Before / after: every token pooler of an earlier git revision against the working tree, side by side.

The earlier revision's ``src/poolkit`` is exported with ``git archive`` into a temporary folder and both
versions are imported in one process (the old one under the name ``poolkit_before``); each pooler pair
gets the same weights and the same inputs, and their calls are interleaved as in the rest of the suite.
The figure is old time / new time (> 1: the working tree is faster). Sizes and modes as ``perf_tokens``.

    .venv/bin/python benchmarks/perf_revisions.py --against 6da0b4a [--poolers mean,max,attention]
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from perf_common import DTYPES, describe, interleaved, parse_and_setup, ratio, save_json, table, timed_call  # noqa: E402
from perf_tokens import BATCH, make_inputs  # noqa: E402
from poolkit import get_pooler, list_poolers  # noqa: E402


def import_revision(revision: str, folder: Path):
    """The package ``poolkit`` as it was at ``revision``, imported as ``poolkit_before``."""
    archive = subprocess.run(["git", "archive", revision, "src/poolkit"], cwd=HERE.parent, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    source = folder / "src" / "poolkit"
    source.rename(folder / "poolkit_before")
    for path in (folder / "poolkit_before").rglob("*.py"):  # its absolute self-imports, if any, point at itself
        path.write_text(path.read_text().replace("from poolkit.", "from poolkit_before.").replace(
            "import poolkit.", "import poolkit_before."))
    sys.path.insert(0, str(folder))
    return importlib.import_module("poolkit_before")


def main(argv: list[str] | None = None) -> dict:
    def arguments(parser):
        parser.add_argument("--against", required=True, help="the earlier git revision (commit, tag, branch)")
        parser.add_argument("--poolers", default=None, help="comma-separated token poolers (default: all)")

    args, device = parse_and_setup(__doc__, argv, arguments)
    repeats = args.repeats or 7
    names = args.poolers.split(",") if args.poolers else list_poolers("token")
    sizes = [(128, 384), (128, 768), (512, 384), (512, 768)] if args.full else [(128, 384), (512, 768)]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        before = import_revision(args.against, Path(folder))
        print(f"# {args.against} vs the working tree ({describe(device)}), B={BATCH}, {repeats} interleaved repeats; "
              "old time / new time")
        for length, dim in sizes:
            for dtype_name in ("fp32", "bf16"):
                for mode in ("fwd", "fwd+bwd"):
                    train = mode == "fwd+bwd"
                    x, mask = make_inputs(length, dim, DTYPES[dtype_name], device)
                    x.requires_grad_(train)
                    cells = {}
                    for name in names:
                        new = get_pooler(name, hidden_size=dim).to(device=device, dtype=DTYPES[dtype_name])
                        old = before.get_pooler(name, hidden_size=dim).to(device=device, dtype=DTYPES[dtype_name])
                        old.load_state_dict(new.state_dict())
                        variants = {key: timed_call(lambda p=p: p(x, mask), train, [x, *p.parameters()])
                                    for key, p in (("old", old.train(train)), ("new", new.train(train)))}
                        times = interleaved(variants, device, repeats=repeats, min_sample_s=0.05)
                        cells[name] = ratio(times, "old", "new")
                    rows.append({"T": length, "D": dim, "dtype": dtype_name, "mode": mode, "speedup": cells})
                    print(f"  measured T={length} D={dim} {dtype_name} {mode}", flush=True)
    headers = ["pooler"] + [f"T{r['T']} D{r['D']} {r['dtype']} {r['mode']}" for r in rows]
    body = [[name] + [f"{r['speedup'][name]:.2f}x" for r in rows] for name in names]
    print(table(headers, body, title=f"Speed-up of the working tree over {args.against} (old time / new time)"))
    result = {"device": describe(device), "against": args.against, "repeats": repeats, "rows": rows}
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
