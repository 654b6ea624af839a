"""timm's pooling-layer cases with poolkit's spatial poolers in place of timm's layers (issue 32, "peer suites").
Each case is one of timm's test situations (origin named: pytorch-image-models' ``tests/test_layers_pool.py``),
written here and run through timm's own layer and through the poolkit pooler of the same output, which must
agree. timm is the wheel ``make test`` unpacks beside the venv (``make timm``; never a poolkit dependency); its
pooling files are loaded on their own, as ``benchmarks/perf_spatial.py`` loads them. Nothing is fetched at run
time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from poolkit import get_pooler

_SPEC = importlib.util.spec_from_file_location(
    "_perf_spatial_for_peers", Path(__file__).resolve().parents[2] / "benchmarks" / "perf_spatial.py")


def _timm():
    sys.path.insert(0, str(Path(_SPEC.origin).parent))  # perf_spatial imports its neighbour perf_common
    try:
        module = importlib.util.module_from_spec(_SPEC)
        _SPEC.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module.timm_layers()


POOLING, OTHER, HOW = _timm()
pytestmark = pytest.mark.skipif(POOLING is None, reason=f"timm NOT AVAILABLE, so its peer suite is not run: {HOW} "
                                                        "(make timm unpacks it)")
#: timm's SelectAdaptivePool2d pool_type -> the poolkit pooler of the same output
TYPES = {"avg": "gap", "max": "gmp", "avgmax": "avgmax", "catavgmax": "catavgmax"}
#: (case, origin, the input map)
MAPS = [
    ("7x7", "test_select_adaptive_pool2d_module", (2, 64, 7, 7)),
    ("14x14", "test_adaptive_avgmax_pool2d_module", (2, 64, 14, 14)),
    ("non-square 3x5", "test_select_adaptive_pool2d_module (another size)", (2, 64, 3, 5)),
    ("1x1", "test_select_adaptive_pool2d_module (another size)", (2, 64, 1, 1)),
    ("batch of one", "test_select_adaptive_pool2d_module (another batch)", (1, 64, 7, 7)),
]


def _map(shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)


@pytest.mark.parametrize("flatten", [True, False])
@pytest.mark.parametrize("pool_type", sorted(TYPES))
@pytest.mark.parametrize(("case", "origin", "shape"), MAPS, ids=[m[0] for m in MAPS])
def test_spatial_poolers_give_select_adaptive_pool2d_outputs(case, origin, shape, pool_type, flatten):
    x = _map(shape)
    theirs = POOLING.SelectAdaptivePool2d(pool_type=pool_type, flatten=flatten)(x)
    ours = get_pooler(TYPES[pool_type], shape[1])(x)
    assert theirs.shape[:2] == ours.shape and POOLING.adaptive_pool_feat_mult(pool_type) * shape[1] == ours.shape[1]
    torch.testing.assert_close(ours, theirs.flatten(1), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("pool_type", ["avg", "max"])
def test_select_adaptive_pool2d_function(pool_type):
    # origin: test_select_adaptive_pool2d (the function form, output_size 1)
    x = _map((2, 64, 7, 7))
    theirs = POOLING.select_adaptive_pool2d(x, pool_type=pool_type, output_size=1)
    torch.testing.assert_close(get_pooler(TYPES[pool_type], 64)(x), theirs.flatten(1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_half_precision_maps(pool_type, dtype):
    # origin: the module cases in half precision. max selects, so it is exact; the mean is checked against the
    # float32 mean rounded once (timm's torch mean rounds once; poolkit's is docs/reliability.md's item 18)
    x = _map((2, 64, 7, 7), dtype)
    ours = get_pooler(TYPES[pool_type], 64)(x).to(dtype)
    if pool_type == "max":
        assert torch.equal(ours, POOLING.SelectAdaptivePool2d(pool_type="max", flatten=True)(x))
    else:
        torch.testing.assert_close(ours.float(), x.float().mean(dim=(2, 3)), atol=0, rtol=2 ** -7)


@pytest.mark.skipif(OTHER is None or not hasattr(OTHER, "LsePlus2d"), reason="this timm has no LsePlus2d")
@pytest.mark.parametrize("r", [0.5, 2.0, 10.0, 100.0])
def test_lse_at_temperature_one_over_r_is_lse_plus_2d(r):
    # origin: test_lse_plus_2d_basic, test_lse_high_r_approximates_max (r = 100), fixed r
    x = _map((2, 64, 7, 7))
    theirs = OTHER.LsePlus2d(r=r, r_learnable=False)(x)
    ours = get_pooler("lse", 64, temperature=1 / r, learn_temperature=False)(x)
    torch.testing.assert_close(ours, theirs, atol=2e-6, rtol=1e-5)
