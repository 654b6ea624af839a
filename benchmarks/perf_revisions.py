"""Before / after: every token pooler of an earlier git revision against the working tree, side by side.

The earlier revision's ``src/poolkit`` is exported with ``git archive`` into a temporary folder and both
versions are imported in one process (the old one under the name ``poolkit_before``); each pooler pair
gets the same weights and the same inputs, and their calls are interleaved as in the rest of the suite.
The figure is old time / new time (> 1: the working tree is faster). Sizes and modes as ``perf_tokens``.
``--new REV`` times a committed revision instead of the working tree (exported the same way, imported as
``poolkit_after``): the figures then do not move with uncommitted edits made while the run goes on.

    .venv/bin/python benchmarks/perf_revisions.py --against 6da0b4a [--new HEAD] [--poolers mean,max,attention]
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

from perf_common import describe, parse_and_setup, run_info, save_json, timed_call  # noqa: E402
from perf_tokens import BATCH, grid_table, pair_grid  # noqa: E402
from poolkit import get_pooler, list_poolers  # noqa: E402


def import_revision(revision: str, folder: Path, name: str = "poolkit_before"):
    """The package ``poolkit`` as it was at ``revision``, imported as ``name``."""
    archive = subprocess.run(["git", "archive", revision, "src/poolkit"], cwd=HERE.parent, capture_output=True,
                             check=True).stdout
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    source = folder / "src" / "poolkit"
    source.rename(folder / name)
    for path in (folder / name).rglob("*.py"):  # its absolute self-imports (lazy ones by name too) point at itself
        path.write_text(path.read_text().replace("from poolkit.", f"from {name}.").replace(
            "import poolkit.", f"import {name}.").replace('"poolkit.', f'"{name}.'))
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def main(argv: list[str] | None = None) -> dict:
    def arguments(parser):
        parser.add_argument("--against", required=True, help="the earlier git revision (commit, tag, branch)")
        parser.add_argument("--new", default=None,
                            help="time this git revision instead of the working tree (default: the working tree)")
        parser.add_argument("--poolers", default=None, help="comma-separated token poolers (default: all)")

    args, device = parse_and_setup(__doc__, argv, arguments)
    repeats = args.repeats or 7
    names = args.poolers.split(",") if args.poolers else list_poolers("token")
    sizes = [(128, 384), (128, 768), (512, 384), (512, 768)] if args.full else [(128, 384), (512, 768)]
    info = run_info(device, args)  # before the old revision is imported: its commit, the tree's state
    with tempfile.TemporaryDirectory() as folder:
        before = import_revision(args.against, Path(folder) / "before")
        against, new_commit = (subprocess.run(["git", "rev-parse", rev], cwd=HERE.parent, capture_output=True, text=True,
                                              check=True).stdout.strip() if rev else None
                               for rev in (args.against, args.new))
        new_get_pooler = get_pooler if args.new is None else import_revision(args.new, Path(folder) / "after",
                                                                             "poolkit_after").get_pooler
        print(f"# {args.against} vs {args.new or 'the working tree'} ({describe(device)}), B={BATCH}, {repeats} "
              "interleaved repeats; old time / new time")

        def pair(name, x, mask, train, dtype):
            new = new_get_pooler(name, hidden_size=x.shape[-1]).to(device=device, dtype=dtype)
            old = before.get_pooler(name, hidden_size=x.shape[-1]).to(device=device, dtype=dtype)
            old.load_state_dict(new.state_dict())
            with torch.no_grad():  # the two compute the same thing (to rounding): worth knowing
                diff = (old(x, mask).float() - new(x, mask).float()).abs().max().item()
            return {key: timed_call(lambda p=p: p(x, mask), train, [x, *p.parameters()])
                    for key, p in (("old", old.train(train)), ("new", new.train(train)))}, diff

        rows = pair_grid(names, sizes, device, repeats, ("old", "new"), pair)
    print(grid_table(rows, names, f"Speed-up of {args.new or 'the working tree'} over {args.against} "
                                  "(old time / new time)"))
    result = {"kind": "revisions", "device": describe(device), "against": args.against, "against_commit": against,
              "new": args.new, "new_commit": new_commit,
              "repeats": repeats, **info,
              "settings": {"batch": BATCH, "sizes": sizes, "dtypes": ["fp32", "bf16"], "modes": ["fwd", "fwd+bwd"],
                           "repeats": repeats, "min_sample_s": 0.05, "threads": torch.get_num_threads(),
                           "background": args.background, "poolers": names,
                           "figure": f"old time / new time (> 1: {args.new or 'the working tree'} is faster)"},
              "rows": rows}
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
