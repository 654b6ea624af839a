"""Result files name the commit, machine and versions they were made with."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

import poolkit
from poolkit.provenance import run_provenance

ROOT = Path(__file__).resolve().parents[1]


def test_provenance_names_this_checkout_commit_and_versions():
    """Catches a commit read from the wrong folder (None, or another repository's) and stale versions."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    info = run_provenance()
    assert info["commit"].removesuffix("+dirty") == head
    assert (info["poolkit"], info["torch"]) == (poolkit.__version__, torch.__version__) and info["cores"] >= 1
