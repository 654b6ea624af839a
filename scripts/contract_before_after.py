"""The padding contract's edge cases, counted on an earlier revision and on the working tree.

For every registered pooler: does NaN padding reach a real row's output, does an all-padding row with NaN
padding give NaN, do B = 0 / T = 0 inputs crash, does gem with p = 50 overflow. The earlier revision's
``src/poolkit`` is exported with ``git archive`` and run in a subprocess (one per side), so both sides run
their own code. Results go to docs/reliability/contract-<rev>.json; ``scripts/docs.py --write reliability`` renders
the counts in docs/reliability.md from it (``scripts/pages/reliability.py`` names the file).

    .venv/bin/python scripts/contract_before_after.py --against 55de4ff
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from poolkit.io import atomic_write_content

ROOT = Path(__file__).resolve().parent.parent

#: Runs inside the measured tree (its src first on sys.path); prints one JSON object.
PROBE = r"""
import json, torch, poolkit
from poolkit.pooling import pooler_options
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the earlier revision to count on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "archive", args.against, "src/poolkit"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        before = measure(Path(folder) / "src")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    path = ROOT / "docs" / "reliability" / f"contract-{args.against}.json"
    atomic_write_content(path, json.dumps({"against": args.against, "commit": commit,
                                           "file": str(path.relative_to(ROOT)), "before": before,
                                           "after": measure(ROOT / "src")}, indent=1) + "\n")
    print(f"wrote {path}: now run scripts/docs.py --write reliability (after naming the file in "
          "scripts/pages/reliability.py)")


if __name__ == "__main__":
    main()
