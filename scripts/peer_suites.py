"""Run the peer suites (tests/peers/: sentence-transformers', PyG's and timm's own cases with poolkit's drop-ins in
place of theirs) and write what passed to docs/reliability/peers.json, which docs/reliability.md renders.

    .venv/bin/python scripts/peer_suites.py        # about half a minute on 2 cores
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from poolkit.io import atomic_write_json  # noqa: E402
from poolkit.provenance import run_provenance  # noqa: E402

OUT = ROOT / "docs" / "reliability" / "peers.json"
#: suite file -> the peer it runs
SUITES = {"test_sentence_transformers_suite.py": "sentence-transformers", "test_pyg_suite.py": "PyG",
          "test_timm_suite.py": "timm"}


def counts(report: Path) -> dict[str, dict[str, int]]:
    """Per suite file: passed, failed (errors too), xfailed (a known difference, named in its reason), skipped."""
    found = {name: {"passed": 0, "failed": 0, "xfailed": 0, "skipped": 0} for name in SUITES}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = Path(case.get("file") or case.get("classname", "").replace(".", "/") + ".py").name
        if name not in found:
            continue
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            found[name]["failed"] += 1
        elif skipped is not None:
            found[name]["xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"] += 1
        else:
            found[name]["passed"] += 1
    return found


def main() -> int:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "peers.xml"
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                               f"--junitxml={report}", str(ROOT / "tests" / "peers")], cwd=ROOT).returncode
        found = counts(report)
    timm = next(iter(sorted((ROOT / ".venv" / "timm").glob("timm-*.dist-info"))), None)
    versions = {"sentence-transformers": importlib.metadata.version("sentence-transformers"),
                "PyG": importlib.metadata.version("torch_geometric"),
                "timm": timm.name.removeprefix("timm-").removesuffix(".dist-info") if timm else None}
    atomic_write_json(OUT, {"script": "scripts/peer_suites.py", "seconds": round(time.perf_counter() - started, 1),
                            "provenance": run_provenance(), "pytest_exit_code": code,
                            "suites": [{"file": f"tests/peers/{name}", "peer": peer, "version": versions[peer],
                                        **found[name]} for name, peer in SUITES.items()]})
    print(f"wrote {OUT}")
    return code


if __name__ == "__main__":
    sys.exit(main())
