"""Install footprint of ``pip install poolkit`` (the core) and ``pip install 'poolkit[all]'``.

Two fresh venvs in a temp dir, the CPU torch pin installed first in both (as ``make install`` does), then
poolkit from a clean ``git archive`` of ``--rev``. Per venv: installed distributions (``pip list``) and the
size of site-packages, with and without torch, before and after poolkit. Writes docs/install/footprint.json;
``scripts/docs.py --write install`` renders docs/install/footprint.md from it.

    python scripts/install_footprint.py && python scripts/docs.py --write install    # several minutes
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from poolkit.io import atomic_write_content

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "install"
TORCH_PIN = "torch==2.13.0"  # the Makefile's TORCH_PIN
INSTALLS = {"core": "", "all": "[all]"}


def run(*cmd: str) -> str:
    """Run a command; its stdout (fails loudly with its stderr)."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def megabytes(paths) -> float:
    """Total size of the regular files among ``paths`` (and under the folders among them), in 10^6 bytes."""
    total = 0
    for path in paths:
        files = path.rglob("*") if path.is_dir() and not path.is_symlink() else [path]
        total += sum(f.lstat().st_size for f in files if f.is_file() and not f.is_symlink())
    return round(total / 1e6, 1)


def torch_paths(site: Path) -> list[Path]:
    """The top-level entries of site-packages that the torch distribution's RECORD installs (and its .pyc)."""
    record = next(site.glob("torch-*.dist-info")) / "RECORD"
    tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines() if line}
    return [site / top for top in sorted(tops) if top != ".." and (site / top).exists()]


def measure(venv: Path) -> dict:
    """Distributions and site-packages size of ``venv``, in all and without torch."""
    python = str(venv / "bin" / "python")
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    listed = json.loads(run(python, "-m", "pip", "list", "--format=json"))
    dists = sorted(f"{d['name']}=={d['version']}" for d in listed)
    total, torch = megabytes([site]), megabytes(torch_paths(site))
    return {"distributions": len(dists), "site_packages_mb": total, "torch_mb": torch,
            "without_torch_mb": round(total - torch, 1), "installed": dists}


def footprint(rev: str) -> dict:
    """Measure both installs of ``rev`` in fresh venvs."""
    commit = run("git", "-C", str(ROOT), "rev-parse", rev).strip()
    result = {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "python": platform.python_version(), "machine": f"{platform.system()} {platform.machine()}",
              "torch_pin": TORCH_PIN, "units": "MB = 10^6 bytes of regular files under site-packages, .pyc included",
              "installs": {}}
    with tempfile.TemporaryDirectory(prefix="poolkit-footprint-") as tmp:
        source = Path(tmp) / "poolkit"
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(source, filter="data")
        for name, extra in INSTALLS.items():
            venv = Path(tmp) / name
            run(sys.executable, "-m", "venv", str(venv))
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
            run(*pip, TORCH_PIN)
            torch_only = measure(venv)
            run(*pip, f"{source}{extra}")
            after = measure(venv)
            after["torch_pin_alone"] = {k: torch_only[k] for k in ("distributions", "site_packages_mb")}
            after["added"] = sorted(set(after["installed"]) - set(torch_only["installed"]))
            result["installs"][name] = after
            print(name, {k: v for k, v in after.items() if k not in ("installed", "added")}, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to install (default: HEAD)")
    args = parser.parse_args()
    atomic_write_content(OUT / "footprint.json", json.dumps(footprint(args.rev), indent=2) + "\n")
    print(f"wrote {OUT / 'footprint.json'}: now run scripts/docs.py --write install")


if __name__ == "__main__":
    main()
