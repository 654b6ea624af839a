"""``poolkit bench task-arithmetic``: its interference measure and a tiny run end to end on the tiny BERT."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dist_worker import toy_data
from poolkit_bench import task_arithmetic
from poolkit.cli import main as cli_main

pytestmark = pytest.mark.usefixtures("accelerate_on_one_cpu_thread")


def test_interference_counts_changed_predictions():
    # catches a measure that compares to the targets instead of the own-vector predictions, or regression shifts
    # left in the targets' units
    own = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [3.0, 1.0]])
    merged = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert task_arithmetic.changed("classification", own, merged, None) == 0.5
    assert task_arithmetic.changed("regression", np.array([[1.0], [3.0]]), np.array([[2.0], [2.0]]), [2.0]) == 0.5


def test_a_tiny_run_end_to_end(model_dir, tmp_path):
    # catches modes that do not reach the fine-tuning (equal trainable counts), an alpha outside the grid, a skill
    # change that is not merged minus single task, and result files missing the provenance or the plot
    good = toy_data(50)
    pd.DataFrame({"text": good.texts, "label": np.asarray(good.label_names)[good.targets]}).to_csv(
        tmp_path / "good.csv", index=False)
    words = toy_data(50, seed=1).texts
    pd.DataFrame({"text": words, "label": [len(t.split()) + 0.5 * (i % 3) for i, t in enumerate(words)]}).to_csv(
        tmp_path / "count.csv", index=False)
    out = tmp_path / "out"
    assert cli_main(["bench", "task-arithmetic", "--tasks", str(tmp_path / "good.csv"), str(tmp_path / "count.csv"),
                     "--model", model_dir, "--rows", "50", "--seeds", "1", "--grid", "0.5", "1.0", "--max-length",
                     "16", "--batch-size", "4", "--encoder-lr", "2e-3", "--pooler-lr", "3e-2", "--head-epochs", "1",
                     "--threads", "1", "--out", str(out), "--no-progress"]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert list(frame.columns) == task_arithmetic.COLUMNS and len(frame) == 3 * 2
    assert set(frame["kind"]) == {"classification", "regression"} and set(frame["alpha"]) <= {0.5, 1.0}
    assert np.allclose(frame["change"], frame["merged_skill"] - frame["finetuned_skill"])
    params = frame.groupby("mode")["trainable_params"].first()
    assert params["all"] > params["attention"] > params["attention_frozen_head"]
    meta = json.loads((out / "results.json").read_text())
    assert meta["provenance"]["commit"] and len(meta["runs"]) == 3 and len(meta["summary"]) == 6
    assert {row["mode"] for row in meta["modes"]} == set(task_arithmetic.MODES)
    assert (out / "task_arithmetic.png").stat().st_size > 10_000
