"""docs/onnx.md's numbers, rendered from ``benchmarks/results/onnx.json`` (``benchmarks/perf_onnx.py``: each block is
that script's own renderer), and the same benchmark on an Intel Xeon from ``benchmarks/results/onnx-intel.json``."""

from __future__ import annotations

import sys

from rendering import ROOT, Page, read_json

sys.path.insert(0, str(ROOT / "benchmarks"))

import perf_onnx  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "onnx.json"
INTEL = ROOT / "benchmarks" / "results" / "onnx-intel.json"


def render_setup(result: dict, file: str = "onnx.json") -> str:
    prov = result["provenance"]
    commit = prov.get("commit") or "unknown"
    commit = commit[:10] + (" with uncommitted changes" if commit.endswith("+dirty") else "")
    return (f"Made by `benchmarks/perf_onnx.py --threads 0 --repeats {result['repeats']}` "
            f"(`benchmarks/results/{file}`): commit {commit}, poolkit "
            f"{prov['poolkit']}, torch {prov['torch']}"
            + (f", onnxruntime {result['onnxruntime']}" if "onnxruntime" in result else "")
            + f", {prov['cpu']} ({prov['cores']} cores), {prov['date']}.")


def render() -> dict[str, str]:
    result, intel = read_json(RESULT), read_json(INTEL)
    return {"setup": render_setup(result), "throughput": perf_onnx.render_throughput(result),
            "cost": perf_onnx.render_cost(result), "agreement": perf_onnx.render_agreement(result),
            "trace": perf_onnx.render_trace(result),
            "int8": perf_onnx.render_int8(result), "intel-setup": render_setup(intel, INTEL.name),
            "intel-throughput": perf_onnx.render_throughput(intel), "intel-int8": perf_onnx.render_int8(intel)}


PAGE = Page("docs/onnx.md", render)
