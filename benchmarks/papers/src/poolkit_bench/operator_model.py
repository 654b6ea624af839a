"""The models of ``poolkit bench operator``: an attention neural operator with continuum attention (Calvello,
Kovachki, Levine & Stuart, "Continuum Attention for Neural Operators", arXiv 2406.06486) and the Fourier neural
operator baseline (Li et al., "Fourier Neural Operator for Parametric Partial Differential Equations", ICLR 2021).

Both read a function sampled at points x_j of the periodic unit interval, as (u(x_j), sin 2 pi x_j, cos 2 pi x_j)
per point, and return the output function at the same points. Continuum attention is the integral operator
out(x_i) = integral exp(q(x_i).k(y)) v(y) dy / integral exp(q(x_i).k(y)) dy, discretised with quadrature weights
w_j: softmax_j(s_ij + log w_j) against v_j. The FNO's spectral convolution needs a uniform grid (the FFT).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from poolkit.errors import PoolkitError
from poolkit.pooling.quadrature import trapezoid_weights


def periodic_weights(positions: Tensor) -> Tensor:
    """The periodic trapezoid rule's weights on [0, 1) for sample positions (B, T): (B, T).

    poolkit's :func:`~poolkit.pooling.quadrature.trapezoid_weights` integrates over [min x, max x], halving the end
    weights; on a periodic domain the interval from the last point wraps to the first. So the first point is
    appended again one period on, the trapezoid weights taken over that closed interval and the copy's weight
    added back to its original: each point gets half the (periodic) distance between its two neighbours, 1 / T
    each on a uniform grid, summing to 1.
    """
    first, where = positions.min(dim=1, keepdim=True)
    weights = trapezoid_weights(torch.cat([positions, first + 1], dim=1))
    return weights[:, :-1].scatter_add(1, where, weights[:, -1:])


def features(u: Tensor, x: Tensor) -> Tensor:
    """(u, sin 2 pi x, cos 2 pi x) per point: u (B, N), x (B, N) -> (B, N, 3); periodic position features, so the
    wrapped-around neighbours of a point look alike to every model."""
    angle = 2 * math.pi * x
    return torch.stack([u, torch.sin(angle), torch.cos(angle)], dim=-1)


def projection(width: int) -> nn.Sequential:
    """Every model's pointwise projection to the output: Linear(width, 2 width) -> GELU -> Linear(2 width, 1)."""
    return nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, 1))


class ContinuumAttention(nn.Module):
    """Multi-head self-attention over the points of a function, each key weighted by its quadrature weight:
    out_i = sum_j w_j exp(s_ij) v_j / sum_j w_j exp(s_ij), s_ij = q_i.k_j / sqrt(d_head); without weights,
    standard softmax attention (every point counts alike, whatever the grid)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise PoolkitError(f"width {width} is not divisible by heads {heads}; choose width a multiple of heads")
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, h: Tensor, weights: Tensor | None = None) -> Tensor:
        batch, points, width = h.shape
        q, k, v = self.qkv(h).view(batch, points, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        # log w_j added to every query's scores: the softmax's normaliser becomes the quadrature sum over keys
        bias = None if weights is None else weights.log()[:, None, None, :].to(h.dtype)
        mixed = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.out(mixed.transpose(1, 2).reshape(batch, points, width))


class AttentionOperator(nn.Module):
    """Calvello et al.'s transformer neural operator, 1-D: a pointwise lift of the features to ``width``, ``layers``
    pre-norm blocks h += attention(LN h); h += FFN(LN h) (FFN: Linear(w, 2w) -> GELU -> Linear(2w, w)), a final
    LayerNorm and the pointwise projection. Attention is weighted by :func:`periodic_weights` of the points
    unless ``quadrature=False`` (the ablation: plain softmax)."""

    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.lift = nn.Linear(3, width)
        self.attention = nn.ModuleList(ContinuumAttention(width, heads) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
                                 for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(2 * layers + 1))
        self.project = projection(width)

    def forward(self, u: Tensor, x: Tensor, quadrature: bool = True) -> Tensor:
        """u (B, N) sampled at x (B, N) in [0, 1) -> the output function at x (B, N)."""
        weights = periodic_weights(x) if quadrature else None
        h = self.lift(features(u, x))
        for i, (attention, ffn) in enumerate(zip(self.attention, self.ffn)):
            h = h + attention(self.norms[2 * i](h), weights)
            h = h + ffn(self.norms[2 * i + 1](h))
        return self.project(self.norms[-1](h)).squeeze(-1)


class SpectralConv1d(nn.Module):
    """Li et al.'s Fourier layer's global part: the rFFT of each channel, its lowest ``modes`` Fourier modes mixed
    across channels by complex weights (C_in, C_out, modes), the rest set to 0, the inverse rFFT. The FFT's
    default normalisation makes a mode's coefficient over N points N times its Fourier coefficient and the inverse
    divide by N again, so a function's output does not depend on how finely it is sampled (for grids with at least
    ``modes`` modes; coarser ones keep what they have)."""

    def __init__(self, channels: int, modes: int) -> None:
        super().__init__()
        self.modes = modes
        scale = 1 / (channels * channels)  # Li et al.'s initialisation
        self.weights = nn.Parameter(scale * torch.rand(channels, channels, modes, dtype=torch.cfloat))

    def forward(self, h: Tensor) -> Tensor:
        """h (B, C, N) on a uniform grid -> (B, C, N)."""
        points = h.shape[-1]
        spectrum = torch.fft.rfft(h)
        kept = min(self.modes, spectrum.shape[-1])
        mixed = torch.zeros_like(spectrum)
        mixed[..., :kept] = torch.einsum("bim,iom->bom", spectrum[..., :kept], self.weights[..., :kept])
        return torch.fft.irfft(mixed, n=points)


class FNO1d(nn.Module):
    """Li et al.'s 1-D FNO: a pointwise lift of the features to ``width``, ``layers`` Fourier layers
    h = GELU(K h + W h) (K: :class:`SpectralConv1d`, W: a pointwise linear map; no GELU after the last), the
    pointwise projection. Its grid must be uniform."""

    def __init__(self, width: int, layers: int, modes: int) -> None:
        super().__init__()
        self.lift = nn.Linear(3, width)
        self.spectral = nn.ModuleList(SpectralConv1d(width, modes) for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Conv1d(width, width, 1) for _ in range(layers))
        self.project = projection(width)

    def forward(self, u: Tensor, x: Tensor, quadrature: bool = True) -> Tensor:
        """u (B, N) sampled at uniform x (B, N) in [0, 1) -> the output function at x (B, N); ``quadrature`` is
        ignored (the FFT assumes equal spacing)."""
        h = self.lift(features(u, x)).transpose(1, 2)
        for i, (spectral, pointwise) in enumerate(zip(self.spectral, self.pointwise)):
            h = spectral(h) + pointwise(h)
            if i < len(self.spectral) - 1:
                h = nn.functional.gelu(h)
        return self.project(h.transpose(1, 2)).squeeze(-1)


def parameter_count(model: nn.Module) -> int:
    """Real parameters: a complex weight counts twice (its real and imaginary parts)."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())


def build_model(name: str, width: int, *, layers: int, heads: int, fno_layers: int, modes: int) -> nn.Module:
    """``attention`` (:class:`AttentionOperator`) or ``fno`` (:class:`FNO1d`) at ``width``."""
    if name == "attention":
        return AttentionOperator(width, layers, heads)
    if name == "fno":
        return FNO1d(width, fno_layers, modes)
    raise PoolkitError(f"unknown model {name!r}: choose from attention, fno")


def matched_width(width: int, *, layers: int, heads: int, fno_layers: int, modes: int) -> int:
    """The FNO width whose parameter count (:func:`parameter_count`) is nearest the attention operator's at
    ``width``."""
    sizes = dict(layers=layers, heads=heads, fno_layers=fno_layers, modes=modes)

    def count(w: int) -> int:
        return parameter_count(build_model("fno", w, **sizes))

    target = parameter_count(build_model("attention", width, **sizes))
    fno = 1
    while count(fno) < target:
        fno += 1
    return min((w for w in (fno - 1, fno) if w > 0), key=lambda w: abs(count(w) - target))
