"""The performance suite (``make bench``): every figure a ratio of variants measured side by side in one run.

1. perf_tokens    token poolers vs floors doing the same work (see its docstring)
2. perf_snippets  poolkit vs the published snippets and sentence-transformers' Pooling
3. perf_memory    peak memory of layer pooling over 13 hidden states (one fresh process per variant)
4. perf_model     every token pooler's share of a packaged-MiniLM forward pass (model), and of a forward +
   backward (model_train: ``perf_model.py --train``)
5. perf_embed     embedding throughput vs sentence-transformers ``encode``
6. dynamic_padding.py  training throughput, length-sorted dynamic padding vs fixed max-length padding
   (its own script; run here with small settings, see docs/benchmarks-compare.md)
7. perf_spatial   spatial poolers on image maps vs their floors and timm's pooling layers (timm optional)
8. perf_onnx      the onnx / onnx-int8 backends vs sentence-transformers ``encode``, memory, export, int8 recipes
   (its own page, docs/onnx.md, from benchmarks/results/onnx.json)

Default: the quick grid (about 8 minutes on a shared 2-core CPU). ``--full``: the whole grid and more
repeats. ``--device cuda`` runs the same scripts on a GPU. ``--only tokens,memory`` runs a subset. Every
run writes a JSON of every cell (commit, machine, torch version, threads, per-repeat ratios) to
``--json`` (default ``benchmarks/results/bench-<device>-<quick|full>[-<subset>].json``), which
``scripts/docs.py --write performance`` renders into docs/performance.md (once ``scripts/pages/performance.py``
lists it); ``--out DIR`` also writes that JSON
(results.json) and the printed tables (results.md) there.

    .venv/bin/python benchmarks/run_all.py [--full] [--device cuda] [--out DIR] [--only NAMES] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import perf_common  # noqa: E402  (sets the offline environment before torch / transformers load)
import perf_embed  # noqa: E402
import perf_memory  # noqa: E402
import perf_model  # noqa: E402
import perf_onnx  # noqa: E402
import perf_snippets  # noqa: E402
import perf_spatial  # noqa: E402
import perf_tokens  # noqa: E402
import torch  # noqa: E402

SUITES = {"tokens": perf_tokens.main, "snippets": perf_snippets.main, "memory": perf_memory.main,
          "model": perf_model.main, "model_train": lambda argv: perf_model.main([*argv, "--train"]),
          "embed": perf_embed.main, "spatial": perf_spatial.main, "onnx": perf_onnx.main}
ALL = ",".join([*SUITES, "dynamic_padding"])


def default_json(device: str, full: bool, only: str) -> Path:
    """benchmarks/results/bench-<device>-<quick|full>[-<subset>].json: one file per kind of run."""
    subset = "" if only == ALL else "-" + only.replace(",", "-")
    return HERE / "results" / f"bench-{device}-{'full' if full else 'quick'}{subset}.json"


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
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; 0 = torch's default)")
    parser.add_argument("--background", type=int, default=0, metavar="N",
                        help="N busy processes beside the whole run (perf_common.start_background; default 0)")
    parser.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    parser.add_argument("--only", default=ALL, help="comma-separated subset of: " + ALL.replace(",", ", "))
    parser.add_argument("--json", type=Path, default=None,
                        help="write every cell here (default: benchmarks/results/bench-<device>-<quick|full>"
                             "[-<subset>].json)")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    perf_common.start_background(args.background)  # started once, here: the suites are not given the option
    common = ["--threads", str(args.threads)] + (["--full"] if args.full else [])
    common += ["--device", device]
    tee = Tee(sys.stdout)
    info = perf_common.run_info(torch.device(device), args)  # the tree and load as the run starts
    results, started = {}, time.time()
    with contextlib.redirect_stdout(tee):
        for name in args.only.split(","):
            print(f"\n## {name}\n", flush=True)
            begin, load = time.time(), os.getloadavg()
            if name == "dynamic_padding":
                results[name] = dynamic_padding(args.full, device)
            else:
                results[name] = SUITES[name](common)
            results[name]["load_average"] = {"start": load, "end": os.getloadavg()}  # other processes' load
            print(f"\n({name}: {time.time() - begin:.0f} s)")
        print(f"\nsuite finished in {time.time() - started:.0f} s")
    bundle = {"kind": "bench", **info, "suites": results}
    targets = [args.json or default_json(device, args.full, args.only)]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.md").write_text(tee.copy.getvalue())
        targets.append(args.out / "results.json")
    for path in targets:
        perf_common.save_json(path, bundle)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
