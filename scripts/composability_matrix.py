"""The composability matrix (pooler x PyTorch transform: pass / fail), from a run of the transform tests.

Runs tests/pooling/test_pooling_transforms.py (slow tests included) with a JUnit report, records every outcome
in docs/composability/results.json (commit, torch version, machine); ``scripts/docs.py --write composability``
renders docs/composability/matrix.md from that file. The tests compare each transform's answer with plain autograd / eager PyTorch, so a cell
passes only if the transform runs *and* answers alike, on the fast and on the plain code path.

    .venv/bin/python scripts/composability_matrix.py && .venv/bin/python scripts/docs.py --write composability
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from poolkit.io import atomic_write_content

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "composability"
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


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    atomic_write_content(OUT / "results.json", json.dumps(run_tests(), indent=1) + "\n")
    print(f"wrote {OUT / 'results.json'}: now run scripts/docs.py --write composability")


if __name__ == "__main__":
    main()
