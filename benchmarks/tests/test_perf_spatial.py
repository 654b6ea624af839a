"""benchmarks/perf_spatial.py: its floors compute the poolers' outputs, and a tiny run executes and renders."""

from __future__ import annotations

import json

import pytest
import torch


import perf_spatial

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SHAPE = (6, 16, 5, 7)


@pytest.mark.parametrize("name", perf_spatial.POOLERS)
def test_every_floor_computes_its_poolers_output(name):
    # catches a floor form that does less work than its pooler (a gem without the power, gated attention without its
    # gate, adapool without its value / output projections, flex with uniform weights, a mean over padded positions)
    # and so would time as a false floor
    x, mask = perf_spatial.make_inputs(SHAPE, torch.float32, torch.device("cpu"))
    pooler = perf_spatial.build_pooler(name, SHAPE, torch.float32)
    for m in (None, mask) if name in perf_spatial.MASKED else (None,):
        for form in perf_spatial.FLOORS[name]:
            floor = perf_spatial.floor_output(name, pooler, x, m, form)
            assert floor.shape == (SHAPE[0], pooler.output_dim)
            assert torch.allclose(floor, pooler(x, m), atol=1e-5, rtol=1e-5), form


def test_the_masked_maps_mask_half_the_rows_and_matter():
    # catches a mask that leaves every row whole (masked cells would time the unmasked work)
    x, mask = perf_spatial.make_inputs(SHAPE, torch.float32, torch.device("cpu"))
    assert mask[: SHAPE[0] // 2].all() and mask[SHAPE[0] // 2:].sum((1, 2)).tolist() == [3 * 5] * 3
    pooler = perf_spatial.build_pooler("gap", SHAPE, torch.float32)
    assert not torch.allclose(perf_spatial.floor_output("gap", pooler, x, mask)[-1], x[-1].mean((1, 2)))


def test_a_tiny_run_times_every_cell_and_renders(tmp_path, monkeypatch):
    # catches a cell or pooler left out, fwd+bwd timed for poolers without parameters, masked rows without their
    # unmasked comparison, timm rows missing when timm loads, and a render that fails on the result
    monkeypatch.setattr(perf_spatial, "SHAPES", {"tiny": (4, 8, 3, 3)})
    monkeypatch.setattr(perf_spatial, "MIN_SAMPLE_S", 0.0)  # one call per sample
    result = perf_spatial.main(["--repeats", "1", "--json", str(tmp_path / "spatial.json")])
    rows = json.loads((tmp_path / "spatial.json").read_text())["rows"]
    assert len(rows) == len(result["rows"])
    timed = {(r["pooler"], r["dtype"], r["mode"], r["masked"]) for r in rows if "against" not in r}
    learned = ["gem", "lse", "flex", "attention2d", "adapool2d"]
    assert timed == ({(n, d, "fwd", False) for n in perf_spatial.POOLERS for d in ("fp32", "bf16")}
                     | {(n, d, "fwd+bwd", False) for n in learned for d in ("fp32", "bf16")}
                     | {(n, d, "fwd", True) for n in perf_spatial.MASKED for d in ("fp32", "bf16")}
                     | {(n, d, "fwd+bwd", True) for n in ("gem", "attention2d") for d in ("fp32", "bf16")})
    assert all(r["ratio"] > 0 and "vs_unmasked_floor" in r for r in rows if r["masked"])
    pooling, _, status = perf_spatial.timm_layers()
    against = {r["against"] for r in rows if "against" in r}
    assert ("timm avg" in against) == (pooling is not None) and result["timm"] == status
    text = perf_spatial.render(result)
    assert "Ratio to the floor" in text and f"timm: {status}." in text
