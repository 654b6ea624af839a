"""A sentence-transformers model with one of its own backends, in whatever Python environment has that backend,
driven over stdin / stdout by ``benchmarks/perf_onnx.py`` so that its passes are timed in the same interleaved
repeats as poolkit's (issue 29: "also against sentence-transformers' own backend").

sentence-transformers' ``[openvino]`` extra does not install beside poolkit's dev environment, so ``make
st-openvino`` builds it an environment of its own (``.venv/st-openvino``); this script imports neither poolkit nor
anything of this repository, only sentence-transformers, numpy and torch.

    python st_peer_worker.py --model DIR --backend openvino --threads 2 --texts texts.json [--precision f32]

Loads the model, encodes the texts once (warm-up), then answers one line per command on stdout:

- first, unasked: ``{"ready": true, "versions": {...}, "precision": "bf16"}`` (JSON; the precision the backend
  computes in, :func:`computed_in`);
- ``pass``: encodes the texts once, batch ``--batch``, then ``done``;
- ``vectors PATH``: encodes them and saves the (texts, dim) float32 vectors to PATH (``.npy``), then ``done``.

Anything the libraries print goes to stderr, never into the replies. The worker ends at the end of stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import metadata
from pathlib import Path

#: The distributions whose versions a ready line reports, where installed.
VERSIONS = ("sentence-transformers", "transformers", "torch", "openvino", "optimum-intel", "optimum-onnx",
            "onnxruntime")


def model_options(backend: str, threads: int, precision: str = "default") -> dict:
    """sentence-transformers' ``model_kwargs`` that hold its runtime to ``threads`` threads; ``precision="f32"``
    holds OpenVINO to float32 (its INFERENCE_PRECISION_HINT), where by default its CPU plugin computes in bf16 on
    CPUs with native bf16 (AVX512-BF16, AMX); torch and onnxruntime compute in float32 either way."""
    if backend == "openvino":
        hint = {"INFERENCE_PRECISION_HINT": "f32"} if precision == "f32" else {}
        return {"ov_config": {"INFERENCE_NUM_THREADS": threads, **hint}}
    if backend == "onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        return {"session_options": options, "provider": "CPUExecutionProvider"}
    return {}


def computed_in(model, backend: str) -> str:
    """The precision a loaded model computes in: OpenVINO's compiled model's inference precision (bf16, f32, ...);
    f32 for torch and onnxruntime on CPU."""
    if backend == "openvino":
        return model[0].auto_model.request.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return "f32"


def installed_versions() -> dict[str, str]:
    found = {}
    for name in VERSIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a sentence-transformers model folder")
    parser.add_argument("--backend", required=True, choices=("torch", "onnx", "openvino"))
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--texts", type=Path, required=True, help="a JSON list of the texts to encode")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--precision", choices=("default", "f32"), default="default",
                        help="f32: OpenVINO in float32 (default: its own choice, bf16 on CPUs with native bf16)")
    args = parser.parse_args(argv)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the libraries' prints (load reports) go to stderr
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    texts = json.loads(args.texts.read_text())
    model = SentenceTransformer(args.model, device="cpu", backend=args.backend,
                                model_kwargs=model_options(args.backend, args.threads, args.precision))

    def encode():
        return model.encode(texts, batch_size=args.batch, show_progress_bar=False, convert_to_numpy=True)

    encode()
    serve(encode, replies, {"versions": installed_versions(), "precision": computed_in(model, args.backend)})


def serve(encode, replies, ready: dict) -> None:
    """The worker's side of the protocol: the ready line (``ready`` with ``"ready": true``) on ``replies``, then one
    ``done`` per command read on stdin: ``pass`` calls ``encode`` (-> the texts' vectors), ``vectors PATH`` saves them
    there as float32 (``.npy``). Ends at the end of stdin."""
    import numpy as np

    print(json.dumps({"ready": True, **ready}), file=replies, flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "pass":
            encode()
        elif command == "vectors":
            np.save(argument, np.asarray(encode(), dtype=np.float32))
        else:
            raise SystemExit(f"unknown command {command!r}: use 'pass' or 'vectors PATH'")
        print("done", file=replies, flush=True)


if __name__ == "__main__":
    main()
