"""The padding contract's edge cases, counted on an earlier revision and on the working tree.

For every registered pooler: does NaN padding reach a real row's output, does an all-padding row with NaN
padding give NaN, do B = 0 / T = 0 inputs crash, does gem with p = 50 overflow. The earlier revision's
``src/poolkit`` is exported with ``git archive`` and run in a subprocess (one per side), so both sides run
their own code. Results go to docs/reliability/contract-<rev>.json; the counts in docs/reliability.md are
rendered from that file between ``<!-- rendered: contract -->`` markers.

    .venv/bin/python scripts/contract_before_after.py --against 55de4ff     # measure, then render
    .venv/bin/python scripts/contract_before_after.py --render docs/reliability/contract-55de4ff.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"

#: Runs inside the measured tree (its src first on sys.path); prints one JSON object.
PROBE = r"""
import json, torch, poolkit
from poolkit.pooling.base import pooler_options
H = 16
found = {"real_row_nan": [], "empty_row_nan": [], "batch_0_crash": [], "tokens_0_crash": []}
for name in poolkit.list_poolers():
    pooler = poolkit.get_pooler(name, H, **({"num_layers": 5} if "num_layers" in pooler_options(name) else {}))
    pooler.eval()
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    layers = [torch.where(mask.bool()[:, :, None], h, torch.full_like(h, float("nan")))
              for h in (torch.randn(3, 5, H) for _ in range(6))]
    with torch.no_grad():
        out = pooler(layers if pooler.kind == "layer" else layers[-1], mask)
    if not torch.isfinite(out[:2]).all():
        found["real_row_nan"].append(name)
    if not torch.isfinite(out[2]).all():
        found["empty_row_nan"].append(name)
    for batch, length, key in ((0, 4, "batch_0_crash"), (3, 0, "tokens_0_crash")):
        states = [torch.randn(batch, length, H) for _ in range(6)]
        try:
            with torch.no_grad():
                pooler(states if pooler.kind == "layer" else states[-1], torch.zeros(batch, length))
        except Exception:
            found[key].append(name)
gem = poolkit.get_pooler("gem", H, p=50.0)
with torch.no_grad():
    found["gem_p50_finite"] = bool(torch.isfinite(gem(torch.randn(2, 5, H) * 5)).all())
found["poolers"] = len(poolkit.list_poolers())
print(json.dumps(found))
"""


def measure(src: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(src)!r})\n" + PROBE],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def render(results: dict) -> str:
    before, after = results["before"], results["after"]
    lines = [f"Counted by `scripts/contract_before_after.py` at {results['against']} (before) and {results['commit']} "
             f"(after), from `{results['file']}`:", "",
             "| case | before | after |", "|---|---|---|"]
    cases = [("NaN padding reaches a real row", "real_row_nan"), ("an all-padding row gives NaN", "empty_row_nan"),
             ("B = 0 crashes", "batch_0_crash"), ("T = 0 crashes", "tokens_0_crash")]
    for text, key in cases:
        lines.append(f"| {text} | {len(before[key])} of {before['poolers']} poolers | "
                     f"{len(after[key])} of {after['poolers']} |")
    lines.append(f"| gem with p = 50 finite | {before['gem_p50_finite']} | {after['gem_p50_finite']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="the earlier revision to count on")
    parser.add_argument("--render", help="render this results file into docs/reliability.md without measuring")
    args = parser.parse_args()
    if args.render:
        path = Path(args.render)
    else:
        with tempfile.TemporaryDirectory() as folder:
            archive = subprocess.run(["git", "archive", args.against, "src/poolkit"], cwd=ROOT, capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
            before = measure(Path(folder) / "src")
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        path = ROOT / "docs" / "reliability" / f"contract-{args.against}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"against": args.against, "commit": commit, "file": str(path.relative_to(ROOT)),
                                    "before": before, "after": measure(ROOT / "src")}, indent=1) + "\n")
    block = render(json.loads(path.read_text()))
    text = DOC.read_text()
    marked = re.compile(r"(<!-- rendered: contract -->\n).*?(<!-- end rendered: contract -->)", re.S)
    if not marked.search(text):
        sys.exit("docs/reliability.md has no '<!-- rendered: contract -->' block")
    DOC.write_text(marked.sub(lambda m: m.group(1) + block + "\n" + m.group(2), text))
    print(block)


if __name__ == "__main__":
    main()
