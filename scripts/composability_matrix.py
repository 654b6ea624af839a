"""The composability matrix (pooler x PyTorch transform: pass / fail), from a run of the transform tests.

Runs tests/pooling/test_pooling_transforms.py (slow tests included) with a JUnit report, records every outcome
in docs/composability/results.json (commit, torch version, machine) and renders docs/composability/matrix.md
from that file. The tests compare each transform's answer with plain autograd / eager PyTorch, so a cell
passes only if the transform runs *and* answers alike, on the fast and on the plain code path.

    .venv/bin/python scripts/composability_matrix.py            # run the tests, then render
    .venv/bin/python scripts/composability_matrix.py --render   # render the committed results only
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "composability"
#: test function -> column title, in the order of the table
COLUMNS = {
    "test_double_backward_matches_the_plain_path": "double backward",
    "test_gradgradcheck_in_double_precision": "gradgradcheck",
    "test_torch_func_grad_matches_autograd": "func.grad",
    "test_per_sample_gradients_with_vmap": "vmap(grad)",
    "test_jacrev_matches_autograd_jacobian": "jacrev",
    "test_forward_mode_ad_matches_func_jvp": "forward AD (dual numbers)",
    "test_compile_fullgraph_matches_eager": "compile fullgraph (aot_eager)",
    "test_inductor_compile_matches_eager": "compile (inductor)",
    "test_torch_export_answers_like_eager_on_other_inputs": "torch.export",
    "test_onnx_export_runs_in_onnxruntime": "ONNX + onnxruntime",
}


#: poolers holding an nn.LSTM / nn.GRU: compiled under torch._dynamo.config.allow_rnn (see the tests)
RNN_POOLERS = ("lstm_layers", "gru_layers")


def run_tests() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                        "tests/pooling/test_pooling_transforms.py", f"--junitxml={report}"], cwd=ROOT, check=False)
        cases = ET.parse(report).getroot().iter("testcase")
        outcomes = []
        for case in cases:
            failed = case.find("failure") is not None or case.find("error") is not None
            skipped = case.find("skipped") is not None
            outcomes.append({"test": case.get("name"), "outcome": "fail" if failed else "skip" if skipped else "pass"})
    import torch

    from poolkit.provenance import cpu_capability, cpu_model

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    return {"commit": commit.strip(), "torch": torch.__version__, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {cpu_model()} (torch kernels: {cpu_capability()}), {platform.system()}",
            "outcomes": outcomes}


def render(results: dict) -> str:
    cells: dict[str, dict[str, list[str]]] = {}
    for item in results["outcomes"]:
        match = re.fullmatch(r"(\w+?)\[(?:(fast|plain)-)?(\w+)\]", item["test"])
        if not match or match.group(1) not in COLUMNS:
            continue
        function, path, pooler = match.groups()
        mark = {"pass": "pass", "fail": "FAIL", "skip": "skipped"}[item["outcome"]]
        cells.setdefault(pooler, {}).setdefault(COLUMNS[function], []).append(f"{mark}" + (f" ({path})" if
                                                                                       mark != "pass" and path else ""))
    columns = [c for c in COLUMNS.values() if any(c in row for row in cells.values())]
    lines = ["| pooler | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    from poolkit import list_poolers

    order = {name: i for i, name in enumerate(list_poolers())}
    for pooler, row in sorted(cells.items(), key=lambda item: order.get(item[0], len(order))):
        shown = []
        for column in columns:
            marks = row.get(column)
            if not marks:
                shown.append("-")
            elif all(m == "pass" for m in marks):
                shown.append("pass" + (" (both paths)" if len(marks) == 2 else ""))
            else:
                shown.append(", ".join(m for m in marks if m != "pass"))
        if pooler in RNN_POOLERS:
            shown = [f"{cell} (allow_rnn)" if column.startswith("compile") and cell != "-" else cell
                     for column, cell in zip(columns, shown)]
        lines.append(f"| `{pooler}` | " + " | ".join(shown) + " |")
    passed = sum(o["outcome"] == "pass" for o in results["outcomes"])
    header = (f"Pooler x transform, from `docs/composability/results.json` (commit {results['commit']}, torch "
              f"{results['torch']}, {results['machine']}): {passed} of {len(results['outcomes'])} checks pass. "
              "'both paths': checked with poolkit's fast CPU forms and with the plain forms. '-': not checked "
              "(gradgradcheck and inductor: one pooler per family; ONNX: token poolers). 'allow_rnn': with "
              "PyTorch's `torch._dynamo.config.allow_rnn = True`, without which Dynamo refuses nn.LSTM / nn.GRU. "
              "Rendered by "
              "`scripts/composability_matrix.py`.\n\n")
    return header + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render", action="store_true", help="render the committed results without running")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not args.render:
        (OUT / "results.json").write_text(json.dumps(run_tests(), indent=1) + "\n")
    (OUT / "matrix.md").write_text(render(json.loads((OUT / "results.json").read_text())))
    print((OUT / "matrix.md").read_text())


if __name__ == "__main__":
    main()
