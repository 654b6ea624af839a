"""The KNN-centroid data of the noise-robustness benchmark (Brothers, ICML 2025, Sec. 5.1).

Each sample is ``N`` vectors of dimension ``d``. Its features are drawn from 18 columns with
per-sample parameters -- 6 normal, 6 uniform, 6 shifted exponential -- shuffled per sample, the first
``d`` kept and all divided by ``sqrt(d)``. The target for ``K`` is the mean of the ``K`` nearest
neighbours (Euclidean, on the scaled vectors) of vector 0, vector 0 itself excluded: those ``K`` are
the signal, the other vectors noise, SNR = K / N. As in the paper's code, ``K = N`` uses the ``N - 1``
other vectors (there are no more).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from poolkit.errors import PoolkitError

from .snr_config import PAPER_KS, check_ks

#: Distribution families (normal, uniform, exponential): d // 3 + 1 columns of each are drawn, d kept.
FAMILIES = 3
#: Samples drawn (and neighbours sorted) per chunk, to bound memory at the paper's 1M samples.
CHUNK = 4096

#: MSEs of the two analytic baselines in the paper's code (its ``analysis/plot_noise_robustness.py``,
#: 1M samples, N = 128, d = 16, held-out last 10%), by K.
PUBLISHED_BASELINES = {
    "baseline_mean": dict(zip(PAPER_KS, (0.0934218, 0.0711224, 0.0553561, 0.0425568,
                                         0.0308618, 0.0195224, 0.0084550, 0.00000771))),
    "baseline_x0": dict(zip(PAPER_KS, (0.0583144, 0.0442782, 0.0397463, 0.0413157,
                                       0.0477641, 0.0595709, 0.0796918, 0.1262743))),
}


@dataclass(frozen=True)
class KnnCentroidData:
    """Inputs ``x`` (S, N, d) and one target (S, d) per K in ``targets``."""

    x: Tensor
    targets: dict[int, Tensor]

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(self.targets)


def generate_vectors(num_samples: int, num_vectors: int = 128, dim: int = 16, seed: int = 0) -> Tensor:
    """Draw ``(num_samples, num_vectors, dim)`` float32 inputs, deterministically from ``seed`` (each
    chunk of :data:`CHUNK` samples has its own generator, seeded from ``seed`` and the chunk index)."""
    for name, value in (("num_samples", num_samples), ("num_vectors", num_vectors), ("dim", dim)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PoolkitError(f"{name} must be a positive int, got {value!r}")
    if num_vectors < 2:
        raise PoolkitError(f"num_vectors must be at least 2 (vector 0 and a neighbour), got {num_vectors}")
    chunks = []
    for index, start in enumerate(range(0, num_samples, CHUNK)):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
        chunks.append(_draw_chunk(min(CHUNK, num_samples - start), num_vectors, dim, gen))
    return torch.cat(chunks)


def _draw_chunk(count: int, num_vectors: int, dim: int, gen: torch.Generator) -> Tensor:
    """One chunk: per-sample, per-column parameters, then per-sample column shuffle and scaling."""
    cols = dim // FAMILIES + 1
    shape = (count, num_vectors, cols)

    def uniform(low: float, high: float) -> Tensor:  # one parameter per (sample, column)
        return torch.rand(count, 1, cols, generator=gen, dtype=torch.float64) * (high - low) + low

    normal = uniform(-3, 3) + uniform(1, 3) * torch.randn(shape, generator=gen, dtype=torch.float64)
    low = uniform(-3, 3)
    flat = low + uniform(0.2, 3) * torch.rand(shape, generator=gen, dtype=torch.float64)
    scale = uniform(0.1, 2)
    sign = torch.randint(0, 2, (count, 1, cols), generator=gen).to(torch.float64) * 2 - 1
    # The paper's code draws the shift U(0, 3) against the exponential's direction.
    shift = -sign * uniform(0, 3)
    expo = torch.empty(shape, dtype=torch.float64).exponential_(generator=gen) * scale * sign + shift
    columns = torch.cat((normal, flat, expo), dim=2)
    order = torch.rand(count, FAMILIES * cols, generator=gen).argsort(dim=1)[:, :dim]
    picked = columns.gather(2, order[:, None, :].expand(count, num_vectors, dim))
    return (picked / math.sqrt(dim)).to(torch.float32)


def knn_targets(x: Tensor, ks: tuple[int, ...] | list[int]) -> dict[int, Tensor]:
    """Mean of the K nearest neighbours of vector 0 (itself excluded) for each K, from one sort.

    ``K`` larger than ``N - 1`` uses all ``N - 1`` other vectors, as the paper's code does for K = N.
    """
    if x.dim() != 3 or x.shape[1] < 2:
        raise PoolkitError(f"x must be (samples, vectors >= 2, dim), got shape {tuple(x.shape)}")
    ks = check_ks(ks)
    others = x.shape[1] - 1
    out: dict[int, list[Tensor]] = {k: [] for k in ks}
    for part in x.split(CHUNK):
        dist = (part[:, 1:] - part[:, :1]).double().norm(dim=-1)
        order = dist.argsort(dim=1, stable=True) + 1
        sorted_vecs = part.gather(1, order[..., None].expand(-1, -1, x.shape[2])).double()
        running = sorted_vecs.cumsum(dim=1)
        for k in ks:
            used = min(k, others)
            out[k].append((running[:, used - 1] / used).to(x.dtype))
    return {k: torch.cat(v) for k, v in out.items()}


def make_knn_centroid(num_samples: int, ks=PAPER_KS, num_vectors: int = 128, dim: int = 16,
                      seed: int = 0) -> KnnCentroidData:
    """The benchmark data: one draw of inputs shared by every K (as in the paper), and its targets."""
    ks = check_ks(ks)
    x = generate_vectors(num_samples, num_vectors, dim, seed)
    return KnnCentroidData(x=x, targets=knn_targets(x, ks))


def baseline_mse(x: Tensor, target: Tensor) -> dict[str, float]:
    """MSE of the paper's two analytic baselines: the mean of all vectors (vector 0 included), and
    vector 0 itself."""
    return {
        "baseline_mean": torch.mean((x.double().mean(dim=1) - target.double()) ** 2).item(),
        "baseline_x0": torch.mean((x[:, 0].double() - target.double()) ** 2).item(),
    }
