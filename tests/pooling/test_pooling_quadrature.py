"""Quadrature weights: pooler(x, mask, quadrature_weights=w) and poolkit.trapezoid_weights (continuum attention)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import HIDDEN, make_pooler, mask_from_lengths
from poolkit import PoolkitError, trapezoid_weights
from poolkit_bench import quadrature
from poolkit.pooling.spec import quadrature_poolers

pytestmark = pytest.mark.usefixtures("path")  # on the fast and on the plain forms

WEIGHTED = quadrature_poolers()


def test_trapezoid_weights_of_unsorted_padded_and_single_sample_rows():
    # catches weights assigned in input order instead of position order, padding that takes weight, a missing
    # half at the two ends, and a lone sample with weight 0 (whose row would then count as empty)
    positions = torch.tensor([[0.0, 1.0, 0.5, 9.0], [2.0, 0.0, 5.0, 7.0], [3.0, 8.0, 8.0, 8.0], [1.0, 1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
    want = torch.tensor([[0.25, 0.25, 0.5, 0], [2.5, 1.0, 2.5, 1.0], [1.0, 0, 0, 0], [0, 0, 0, 0]])
    torch.testing.assert_close(trapezoid_weights(positions, mask), want)
    assert trapezoid_weights(positions[:2, :3]).sum(dim=1).tolist() == [1.0, 5.0]  # the hull's length


def test_trapezoid_weights_refuse_positions_in_more_dimensions():
    with pytest.raises(PoolkitError, match="product rule"):
        trapezoid_weights(torch.rand(2, 5, 2))


@pytest.mark.parametrize("name", WEIGHTED)
def test_equal_weights_change_nothing_and_zero_weights_drop_samples(name):
    # softmax(s + log c) = softmax(s) and sum c x / sum c = mean: catches w added to the logits instead of log w, or
    # an unnormalised sum w x. A zero weight is the sample removed: catches log 0 = -inf turning into NaN.
    pooler = make_pooler(name)
    x = torch.randn(3, 5, HIDDEN)
    mask = mask_from_lengths([5, 4, 2], 5)
    w = torch.rand(3, 5) + 0.5
    w[0, 1] = 0
    with torch.no_grad():
        plain = pooler(x, mask)
        assert torch.allclose(pooler(x, mask, quadrature_weights=torch.full((3, 5), 0.3)), plain, atol=1e-6)
        weighted = pooler(x, mask, quadrature_weights=w)
        dropped = pooler(x[:, [0, 2, 3, 4]], mask[:, [0, 2, 3, 4]], quadrature_weights=w[:, [0, 2, 3, 4]])
    assert weighted.isfinite().all()
    torch.testing.assert_close(weighted[0], dropped[0], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(weighted[1], plain[1], atol=1e-4)  # the weights are used


@pytest.mark.parametrize("name", ["mean", "attention", "latent"])
def test_zero_weights_and_a_row_of_them_keep_gradients_finite(name):
    pooler = make_pooler(name).double()
    x = torch.randn(2, 4, HIDDEN, dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[0.0, 0.5, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    pooled = pooler(x, quadrature_weights=w)
    assert torch.equal(pooled[1], torch.zeros_like(pooled[1]))  # all weights zero: an empty row
    grads = torch.autograd.grad(pooled.square().sum(), [x, w, *pooler.parameters()])
    assert all(g.isfinite().all() for g in grads)
    assert torch.equal(grads[0][0, 0], torch.zeros(HIDDEN, dtype=torch.float64))  # a dropped sample has no say


def test_poolers_without_quadrature_and_bad_weights_raise_one_clear_error():
    x, w = torch.randn(2, 3, HIDDEN), torch.rand(2, 3)
    with pytest.raises(PoolkitError, match="max does not take quadrature_weights; the poolers that do: mean, "):
        make_pooler("max")(x, quadrature_weights=w)
    with pytest.raises(PoolkitError, match=r"shape \(2, 4\) does not match"):
        make_pooler("mean")(x, quadrature_weights=torch.rand(2, 4))
    with pytest.raises(PoolkitError, match="finite and >= 0"):
        make_pooler("attention")(x, quadrature_weights=-w)
    with pytest.raises(PoolkitError, match="finite and >= 0"):
        make_pooler("attention")(x, quadrature_weights=w.masked_fill(w > 0.5, float("nan")))
    assert {"mean", "attention", "gated_attention", "latent"} <= set(WEIGHTED) and "max" not in WEIGHTED


@pytest.fixture(scope="module")
def convergence_rows():
    return quadrature.convergence(sizes=(16, 32, 64, 128, 256), seed=0)


def test_the_attention_reference_is_the_integral():
    # the test's own reference for the attention pooler: scipy's adaptive quadrature, not the bench's Simpson
    from scipy.integrate import quad_vec

    pooler = quadrature.study_poolers(seed=0)["attention"]

    def integrand(t):
        with torch.no_grad():
            h = quadrature.smooth_features(torch.tensor([t], dtype=torch.float64))
            e = torch.exp(pooler.score(h)).squeeze(-1)
        return np.concatenate([(e[:, None] * h)[0].numpy(), e.numpy()])

    both = quad_vec(integrand, 0, 1, epsabs=1e-12)[0]
    np.testing.assert_allclose(quadrature.attention_reference(pooler), both[:4] / both[4], rtol=1e-9)


@pytest.mark.parametrize("pooler", ["mean", "attention"])
@pytest.mark.parametrize("grid", quadrature.GRIDS)
def test_weighted_pooling_converges_at_the_trapezoid_rate_on_every_grid(convergence_rows, pooler, grid):
    # catches weights that ignore the spacing (the clustered grid then converges to the wrong value) and a rule of
    # lower order (midpoint-like weights that drop the ends: O(1/n))
    rate = quadrature.convergence_rate(convergence_rows, pooler, grid)
    assert rate < (-1.7 if grid != "random" else -1.5), rate
    errors = [r["error"] for r in convergence_rows if (r["pooler"], r["grid"], r["weighted"]) == (pooler, grid, True)]
    assert errors[-1] < 2e-4


@pytest.mark.parametrize("pooler", ["mean", "attention"])
def test_unweighted_pooling_drifts_with_the_sampling_density(convergence_rows, pooler):
    errors = [r["error"] for r in convergence_rows
              if (r["pooler"], r["grid"], r["weighted"]) == (pooler, "clustered", False)]
    assert min(errors) > 0.1  # converges, but to the average under the clustered grid's density
