"""docs/onnx.md's numbers, rendered from ``benchmarks/results/onnx.json`` (``benchmarks/perf_onnx.py``: each block is
that script's own renderer), and the same benchmark on other CPUs (:data:`OTHER_CPUS`: an Intel Xeon, a Zen 2 AMD
EPYC, the same beside two busy processes, onnxruntime's fusions there, the throughput and profile after them, and
the agreement and int8 recipes after them; a Zen 4 AMD EPYC, every part it had then, the throughput again with
OpenVINO held to float32 beside its default, onnxscript's rewrite of the graphs, and onnxruntime's threads
spinning or waiting, quiet and beside busy processes),
each giving ``PREFIX-setup`` and ``PREFIX-PART`` for each part the page shows of it."""

from __future__ import annotations

import sys

from rendering import ROOT, Page, machine, read_json

sys.path.insert(0, str(ROOT / "benchmarks"))

import perf_onnx  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RESULT = RESULTS / "onnx.json"
#: The same benchmark on other CPUs: the page's block prefix -> its result file and the parts the page shows of it.
OTHER_CPUS = {"intel": ("onnx-intel.json", ("throughput", "int8")),
              "zen2": ("onnx-zen2.json", ("throughput",)),  # its profile predates the weight products' split
              "zen2-int8": ("onnx-zen2-int8.json", ("agreement", "int8")),
              "zen2-busy": ("onnx-zen2-busy2.json", ("throughput",)),
              "zen2-fusions": ("onnx-zen2-fusions.json", ("fusions",)),
              "zen2-after": ("onnx-zen2-profile.json", ("throughput", "profile")),
              "zen4": ("onnx-zen4.json", ("throughput", "cost", "agreement", "trace", "profile", "fusions", "int8")),
              "zen4-peers": ("onnx-zen4-peers.json", ("throughput",)),
              "zen4-rewrites": ("onnx-zen4-rewrites.json", ("rewrites",)),
              "zen4-spinning": ("onnx-zen4-spinning.json", ("spinning",)),
              "zen4-spinning-busy": ("onnx-zen4-spinning-busy2.json", ("spinning",))}


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
    for prefix, (name, parts) in OTHER_CPUS.items():
        other = read_json(RESULTS / name)
        blocks[f"{prefix}-setup"] = render_setup(other, name)
        blocks |= {f"{prefix}-{part}": perf_onnx.RENDERERS[part](other) for part in parts}
    return blocks


PAGE = Page("docs/onnx.md", render)
