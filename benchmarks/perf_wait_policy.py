"""Item 5 (issue 29): torch's OpenMP threads spinning or sleeping while they wait, in ``poolkit embed`` 's torch
backend, on a quiet machine and beside busy processes.

torch's CPU wheels run their intra-op threads on GNU OpenMP, whose idle threads spin for a while after each parallel
region before they sleep (``OMP_WAIT_POLICY`` unset); beside busy processes a spinning thread holds a core that the
thread it waits for needs. ``OMP_WAIT_POLICY=PASSIVE`` makes them sleep at once. OpenMP reads the policy when it
loads (at ``import torch``), so each variant is a process of its own: this script run with ``--worker`` (driven as a
:class:`perf_common.Worker`) loads the packaged all-MiniLM-L6-v2 with poolkit's ``TextEncoder`` (torch backend, the
model's own pooling: mean + Normalize) and encodes the texts once per pass, batch 32. Whole passes, the variants
interleaved, at 1 thread and at torch's default thread count (whatever ``--threads`` says; ``--device`` is the CPU):
the median of repeats and the ratio per repeat (unset
/ passive: over 1 where passive is faster), and how far the two variants' vectors are. The ``poolkit`` command sets
``OMP_WAIT_POLICY=PASSIVE`` where the user has not set it (poolkit/cli/__init__.py); run this quiet and beside busy
processes (``--background``).

    .venv/bin/python benchmarks/perf_wait_policy.py --repeats 5 --json benchmarks/results/wait-policy.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from perf_common import (Worker, every_repeat, interleaved, median_ms, parse_and_setup, per_repeat,  # noqa: E402
                         ratio, save_json, table)
from perf_model import real_texts  # noqa: E402
from poolkit.provenance import run_provenance  # noqa: E402
from st_peer_worker import serve  # noqa: E402

BATCH = 32
POLICY = "OMP_WAIT_POLICY"
#: The variants: their names -> the policy their process starts with (None: unset, OpenMP's default).
VARIANTS = {"OMP_WAIT_POLICY unset (OpenMP's default)": None, "OMP_WAIT_POLICY=PASSIVE": "PASSIVE"}
UNSET, PASSIVE = VARIANTS
#: torch's own thread count, read before ``--threads`` changes it: the default users run with
DEFAULT_THREADS = torch.get_num_threads()


def worker(argv: list[str]) -> None:
    """``--worker``: the texts' passes in this process, driven over stdin / stdout (the protocol of
    :class:`perf_common.Worker`); anything the libraries print goes to stderr."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--texts", type=Path, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    from poolkit import TextEncoder

    torch.set_num_threads(args.threads)
    texts = json.loads(args.texts.read_text())
    encoder = TextEncoder(None, device="cpu")

    def encode() -> torch.Tensor:
        return encoder.encode(texts, batch_size=BATCH)

    encode()
    serve(lambda: encode().numpy(), replies, {"policy": os.environ.get(POLICY), "threads": torch.get_num_threads()})


def passes(texts: list[str], threads: int, repeats: int) -> dict:
    """Both variants' passes over ``texts`` at ``threads`` threads, interleaved: ms per pass, the ratio unset /
    passive per repeat, and the largest difference between their vectors."""
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        texts_file = Path(scratch) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        workers = {}
        for name, policy in VARIANTS.items():
            env = {k: v for k, v in os.environ.items() if k != POLICY} | ({POLICY: policy} if policy else {})
            workers[name] = Worker([sys.executable, str(Path(__file__).resolve()), "--worker", "--texts",
                                    str(texts_file), "--threads", str(threads)], env=env)
            stack.callback(workers[name].close)
            if workers[name].ready["policy"] != policy or workers[name].ready["threads"] != threads:
                raise RuntimeError(f"the {name} worker started with {workers[name].ready}")
        times = interleaved(workers, torch.device("cpu"), repeats=repeats, min_sample_s=0.0, warmup=1)
        failed = {name: w.failure for name, w in workers.items() if w.failure}
        if failed:
            raise RuntimeError(f"workers failed: {failed}")
        vectors = [w.vectors(Path(scratch) / f"{i}.npy") for i, w in enumerate(workers.values())]
    return {"threads": threads, "unset_ms": median_ms(times, UNSET), "passive_ms": median_ms(times, PASSIVE),
            "speedup": ratio(times, UNSET, PASSIVE), "per_repeat": per_repeat(times, UNSET, PASSIVE),
            "max_abs_diff": float(np.abs(vectors[0] - vectors[1]).max())}


def render(result: dict) -> str:
    """The passes of both variants per thread count, and how often passive was faster or slower throughout."""
    rows = result["rows"]
    cells = [[str(r["threads"]), f"{r['unset_ms']:.0f}", f"{r['passive_ms']:.0f}", f"{r['speedup']:.2f}x",
              " ".join(f"{v:.2f}" for v in r["per_repeat"]), f"{r['max_abs_diff']:.1e}"] for r in rows]
    faster, slower = every_repeat(rows)
    busy = f"beside {result['background']} busy processes" if result["background"] else "no other load"
    prov = result["provenance"]
    return "\n\n".join([
        f"`benchmarks/perf_wait_policy.py --repeats {result['repeats']}"
        + (f" --background {result['background']}" if result["background"] else "") + "`: commit "
        + f"{(prov.get('commit') or 'unknown')[:10]}, torch {prov['torch']}, {prov['cpu']} ({prov['cores']} cores), "
        + f"{prov['date'][:10]}; {result['texts']} texts of {result['source']}, batch {BATCH}, poolkit's torch "
        + f"backend, {busy}; load average at the end {result['load_average'][0]:.1f}",
        table(["threads", f"{UNSET} (ms / pass)", f"{PASSIVE} (ms / pass)", "speedup", "per repeat", "max |diff|"],
              cells, title="both processes' passes interleaved"),
        f"{PASSIVE}, {busy}: faster in every repeat at {faster} of {len(rows)} thread counts, slower in every "
        f"repeat at {slower}"])


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:
        worker(argv)
        return {}
    args, _ = parse_and_setup(__doc__, argv, lambda parser: parser.add_argument(
        "--texts", type=int, default=1000, help="number of texts (default 1000)"))
    repeats = args.repeats or 5
    texts, source = real_texts(args.texts)
    result = {"kind": "wait_policy", "provenance": run_provenance(), "texts": len(texts), "source": source,
              "background": args.background, "repeats": repeats,
              "rows": [passes(texts, threads, repeats) for threads in sorted({1, DEFAULT_THREADS})],
              "load_average": os.getloadavg()}
    print(render(result))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
