"""``poolkit bench task-arithmetic``: its interference and disentanglement measures, the linearised encoder, and a
tiny run end to end on the tiny BERT."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from dist_worker import toy_data
from poolkit_bench import task_arithmetic, task_arithmetic_config
from poolkit.cli import main as cli_main
from poolkit.models.encoders import load_encoder, load_tokenizer

pytestmark = pytest.mark.usefixtures("accelerate_on_one_cpu_thread")


def test_interference_counts_changed_predictions():
    # catches a measure that compares to the targets instead of the own-vector predictions, or regression shifts
    # left in the targets' units
    own = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [3.0, 1.0]])
    merged = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert task_arithmetic.changed("classification", own, merged, None) == 0.5
    assert task_arithmetic.changed("regression", np.array([[1.0], [3.0]]), np.array([[2.0], [2.0]]), [2.0]) == 0.5


def linear_tasks(overlap: float):
    """Two regression tasks of a linear model f(x; theta) = x theta: task 0's inputs and vector on coordinates 0-1,
    task 1's on 2-3, task 1's vector reaching ``overlap`` into coordinate 0; ``predict`` as run_mode builds it."""
    rng = np.random.default_rng(0)
    inputs = [np.pad(rng.normal(size=(20, 2)), ((0, 0), (0, 2))), np.pad(rng.normal(size=(20, 2)), ((0, 0), (2, 0)))]
    theta0, taus = rng.normal(size=4), [np.array([1.0, -2.0, 0, 0]), np.array([overlap, 0, 0.5, 3.0])]

    def predict(alphas, tasks):
        theta = theta0 + sum(a * tau for a, tau in zip(alphas, taus))
        return {t: (inputs[t] @ theta)[:, None] for t in (range(2) if tasks is None else tasks)}

    return predict


def test_the_disentanglement_error_is_zero_for_vectors_that_do_not_interact():
    # catches an error measured against the single-task model (alpha 1) or the targets instead of the task's own
    # vector at the same alpha, and one blind to a vector that reaches another task's inputs
    kinds, stds = ["regression"] * 2, [[1.0], [1.0]]
    assert task_arithmetic.disentanglement_error(linear_tasks(0.0), kinds, stds, (0.3, 1.0)) == [0.0, 0.0]
    reached, untouched = task_arithmetic.disentanglement_error(linear_tasks(0.7), kinds, stds, (0.3, 1.0))
    assert reached > 0 and untouched == 0.0


def test_task_vector_norms():
    # catches the added vector counting the task's own vector, or left unscaled by alpha
    base = {"w": torch.zeros(2), "ids": torch.arange(2)}
    tuned = [{"w": torch.tensor([3.0, 4.0]), "ids": torch.arange(2)},
             {"w": torch.tensor([0.0, 1.0]), "ids": torch.arange(2)}]
    norms, added = task_arithmetic.vector_norms(base, tuned, 0.5)
    assert norms == [5.0, 1.0] and added == [0.5, 2.5]


def test_the_linearised_encoder_is_the_first_order_taylor_expansion_at_the_base(model_dir):
    # catches a "linearised" encoder that is the plain one, or its jvp taken at theta instead of theta_0
    encoder = load_encoder(model_dir).double().eval()
    batch = load_tokenizer(model_dir)(["a cat sat on a mat", "dogs run"], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    step = {name: 0.3 * torch.randn_like(p) for name, p in encoder.named_parameters()}
    theta0 = {name: p.detach().clone() for name, p in encoder.named_parameters()}

    def at(scale: float) -> torch.Tensor:  # the plain encoder at theta_0 + scale * step
        with torch.no_grad():
            for name, p in encoder.named_parameters():
                p.copy_(theta0[name] + scale * step[name])
        return encoder(**batch).last_hidden_state.detach()

    eps = 1e-5
    taylor = at(0.0) + (at(eps) - at(-eps)) / (2 * eps)  # f(theta_0) + J(theta_0) step, by central differences
    plain = at(1.0)
    with torch.no_grad():
        for name, p in encoder.named_parameters():
            p.copy_(theta0[name])
    task_arithmetic.linearize(encoder)
    with torch.no_grad():
        for name, p in encoder.named_parameters():
            p.add_(step[name])
        linear = encoder(**batch).last_hidden_state
    torch.testing.assert_close(linear, taylor, rtol=1e-6, atol=1e-6)
    assert (linear - plain).abs().max() > 1e-2


def test_a_tiny_run_end_to_end(model_dir, tmp_path):
    # catches modes that do not reach the fine-tuning (equal trainable counts where they differ), a merged model
    # scored in another form than it was trained in (own vector at alpha 1 unlike the single-task model), a skill
    # change that is not merged minus single task, and result files missing the provenance or the plot
    good = toy_data(50)
    pd.DataFrame({"text": good.texts, "label": np.asarray(good.label_names)[good.targets]}).to_csv(
        tmp_path / "good.csv", index=False)
    words = toy_data(50, seed=1).texts
    pd.DataFrame({"text": words, "label": [len(t.split()) + 0.5 * (i % 3) for i, t in enumerate(words)]}).to_csv(
        tmp_path / "count.csv", index=False)
    out = tmp_path / "out"
    assert cli_main(["bench", "task-arithmetic", "--tasks", str(tmp_path / "good.csv"), str(tmp_path / "count.csv"),
                     "--model", model_dir, "--rows", "50", "--seeds", "1", "--grid", "1.0", "--max-length",
                     "16", "--batch-size", "4", "--encoder-lr", "2e-3", "--pooler-lr", "3e-2", "--head-epochs", "1",
                     "--threads", "1", "--out", str(out), "--no-progress"]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert list(frame.columns) == task_arithmetic.COLUMNS and len(frame) == 4 * 2
    assert set(frame["kind"]) == {"classification", "regression"} and set(frame["alpha"]) == {1.0}
    assert np.allclose(frame["own_skill"], frame["finetuned_skill"], atol=1e-4)
    assert np.allclose(frame["change"], frame["merged_skill"] - frame["finetuned_skill"])
    assert np.allclose(frame["interference_per_norm"] * frame["added_norm"], frame["interference"])
    assert (frame["tau_norm"] > 0).all() and (frame["disentanglement_error"] >= 0).all()
    params = frame.groupby("mode")["trainable_params"].first()
    assert params["linearized"] == params["all"] > params["attention"] > params["attention_frozen_head"]
    linear = frame.set_index(["mode", "task"])["finetuned"]
    assert not np.allclose(linear["linearized"], linear["all"])
    meta = json.loads((out / "results.json").read_text())
    assert meta["provenance"]["commit"] and len(meta["runs"]) == 4 and len(meta["summary"]) == 8
    assert {row["mode"] for row in meta["modes"]} == set(task_arithmetic_config.MODES)
    assert (out / "task_arithmetic.png").stat().st_size > 10_000
