"""docs/onnx.md's numbers, rendered from ``benchmarks/results/onnx.json`` (``benchmarks/perf_onnx.py``: each block is
that script's own renderer), and the same benchmark on other CPUs (:data:`OTHER_CPUS`: an Intel Xeon, a Zen 2 AMD
EPYC, the same beside two busy processes, and onnxruntime's fusions there), each giving ``PREFIX-setup`` and ``PREFIX-PART`` for each part of
:data:`OTHER_PARTS` the run measured."""

from __future__ import annotations

import sys

from rendering import ROOT, Page, machine, read_json

sys.path.insert(0, str(ROOT / "benchmarks"))

import perf_onnx  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RESULT = RESULTS / "onnx.json"
#: The same benchmark on other CPUs: the page's block prefix -> its result file.
OTHER_CPUS = {"intel": "onnx-intel.json", "zen2": "onnx-zen2.json", "zen2-busy": "onnx-zen2-busy2.json",
              "zen2-fusions": "onnx-zen2-fusions.json"}
#: What the page shows of those runs, where a run measured it (``profile`` since 06592b6, ``fusions`` since 29fb7f9;
#: ``--parts`` chooses).
OTHER_PARTS = ("throughput", "profile", "fusions", "int8")


def render_setup(result: dict, file: str = "onnx.json") -> str:
    prov = result["provenance"]
    commit = prov.get("commit") or "unknown"
    commit = commit[:10] + (" with uncommitted changes" if commit.endswith("+dirty") else "")
    parts = result.get("parts", list(perf_onnx.PARTS))  # runs before --parts measured them all
    options = (f" --background {result['background']}" if result.get("background") else "") + (
        f" --parts {','.join(parts)}" if parts != list(perf_onnx.PARTS) else "")
    return (f"Made by `benchmarks/perf_onnx.py --threads 0 --repeats {result['repeats']}{options}` "
            f"(`benchmarks/results/{file}`): commit {commit}, poolkit "
            f"{prov['poolkit']}, torch {prov['torch']}"
            + (f", onnxruntime {result['onnxruntime']}" if "onnxruntime" in result else "")
            + f", {machine(prov['cpu'], prov['cores'])}, {prov['date']}.")


def render() -> dict[str, str]:
    result = read_json(RESULT)
    blocks = {"setup": render_setup(result), "throughput": perf_onnx.render_throughput(result),
              "cost": perf_onnx.render_cost(result), "agreement": perf_onnx.render_agreement(result),
              "trace": perf_onnx.render_trace(result), "int8": perf_onnx.render_int8(result)}
    for prefix, name in OTHER_CPUS.items():
        other = read_json(RESULTS / name)
        blocks[f"{prefix}-setup"] = render_setup(other, name)
        blocks |= {f"{prefix}-{part}": perf_onnx.RENDERERS[part](other) for part in OTHER_PARTS if part in other}
    return blocks


PAGE = Page("docs/onnx.md", render)
