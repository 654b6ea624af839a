"""The performance suite (``make bench``): every figure a ratio of variants measured side by side in one run.

1. perf_tokens    token poolers vs their floor (x.sum(dim=1); the attention family's scoring matmul)
2. perf_snippets  poolkit vs the published snippets and sentence-transformers' Pooling
3. perf_memory    peak memory of layer pooling over 13 hidden states (one fresh process per variant)
4. perf_model     every token pooler's share of a packaged-MiniLM forward pass
5. perf_embed     embedding throughput vs sentence-transformers ``encode``
6. dynamic_padding.py  training throughput, length-sorted dynamic padding vs fixed max-length padding
   (its own script; run here with small settings, see docs/benchmarks-compare.md)

Default: the quick grid (about 8 minutes on a shared 2-core CPU). ``--full``: the whole grid and more
repeats. ``--device cuda`` runs the same scripts on a GPU. ``--out DIR`` also writes results.json and
the printed tables (results.md) there. ``--only tokens,memory`` runs a subset.

    .venv/bin/python benchmarks/run_all.py [--full] [--device cuda] [--out DIR] [--only NAMES]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import perf_common  # noqa: E402,F401  (sets the offline environment before torch / transformers load)
import perf_embed  # noqa: E402
import perf_memory  # noqa: E402
import perf_model  # noqa: E402
import perf_snippets  # noqa: E402
import perf_tokens  # noqa: E402

SUITES = {"tokens": perf_tokens, "snippets": perf_snippets, "memory": perf_memory, "model": perf_model,
          "embed": perf_embed}


class Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy (for results.md)."""

    def __init__(self, stream) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.stream.flush()
        return self.copy.write(text)


def dynamic_padding(full: bool, device: str) -> dict:
    script = HERE / "dynamic_padding.py"
    if not script.exists():
        print("dynamic_padding.py not found: item 6 skipped")
        return {"skipped": True}
    if device != "cpu":
        print("note: dynamic_padding.py runs on the CPU (its own script)")
    argv = [] if full else ["--datasets", "embedded", "--n", "640", "--steps", "3", "--repeats", "3"]
    result = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, check=False)
    lines = [line for line in result.stdout.splitlines() if "Loading weights" not in line]
    print("\n".join(lines))
    if result.returncode != 0:
        print(result.stderr[-2000:])
    return {"argv": argv, "returncode": result.returncode, "stdout": "\n".join(lines)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the whole grid and more repeats")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    parser.add_argument("--only", default=",".join([*SUITES, "dynamic_padding"]),
                        help="comma-separated subset of: " + ", ".join([*SUITES, "dynamic_padding"]))
    args = parser.parse_args(argv)
    common = ["--threads", str(args.threads)] + (["--full"] if args.full else [])
    if args.device:
        common += ["--device", args.device]
    tee = Tee(sys.stdout)
    results, started = {}, time.time()
    with contextlib.redirect_stdout(tee):
        for name in args.only.split(","):
            print(f"\n## {name}\n", flush=True)
            begin = time.time()
            if name == "dynamic_padding":
                results[name] = dynamic_padding(args.full, args.device or "cpu")
            else:
                results[name] = SUITES[name].main(common)
            print(f"\n({name}: {time.time() - begin:.0f} s)")
        print(f"\nsuite finished in {time.time() - started:.0f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
        (args.out / "results.md").write_text(tee.copy.getvalue())
        print(f"wrote {args.out / 'results.json'} and {args.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
