"""The data of ``poolkit bench operator``: 1-D viscous Burgers' equation u_t + (u^2 / 2)_x = nu u_xx on the periodic
unit interval, the map u(., 0) -> u(., T) learned by a neural operator (Li et al., "Fourier Neural Operator for
Parametric Partial Differential Equations", ICLR 2021, section 5.1).

Initial conditions are draws of the Gaussian random field N(0, 625 (-Laplacian + 25 I)^-2) of that paper, without
its constant mode (so that every draw has mean 0). Each is solved pseudo-spectrally on one fine uniform grid:
2/3-rule dealiasing, the viscous term integrated exactly (an integrating factor) and the nonlinear term by RK4
(IF-RK4), one time step for the whole batch from the CFL condition on the largest initial |u| (the maximum
principle keeps |u| below it). A coarser uniform grid is a subsample of the fine one; off-grid points (a
non-uniform grid) are the fine solution's Fourier interpolant there.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from poolkit.errors import PoolkitError

#: the GRF N(0, 625 (-Laplacian + 25 I)^-2) of Li et al.: per Fourier mode k, the standard deviation 25 / (4 pi^2
#: k^2 + 25) of each of its orthonormal cosine and sine coefficients
GRF_SCALE, GRF_SHIFT = 25.0, 25.0
#: modes of the initial condition drawn (the field's std at mode 64 is 1e-4 of its first)
IC_MODES = 64


def wavenumbers(n: int) -> Tensor:
    """Angular wavenumbers 2 pi k of ``torch.fft.rfft`` on n points of [0, 1): (n // 2 + 1,) float64."""
    return 2 * math.pi * torch.arange(n // 2 + 1, dtype=torch.float64)


def random_initial_conditions(count: int, n: int, seed: int = 0) -> Tensor:
    """``count`` draws of the GRF on n uniform points of [0, 1): (count, n) float64, seeded by ``seed``."""
    if n // 2 <= IC_MODES:
        raise PoolkitError(f"fine grid {n} is too coarse for the {IC_MODES} modes of the initial condition; use "
                           f"fine >= {2 * IC_MODES + 2}")
    gen = np.random.default_rng(seed)
    k = np.arange(1, IC_MODES + 1)
    std = GRF_SCALE / (4 * math.pi ** 2 * k ** 2 + GRF_SHIFT)
    a, b = gen.standard_normal((2, count, IC_MODES)) * std
    x = np.arange(n) / n
    # sqrt(2) cos and sqrt(2) sin: the orthonormal basis of L2(0, 1) in which the field's covariance is diagonal
    phase = 2 * math.pi * k[:, None] * x[None, :]
    u0 = math.sqrt(2) * (a @ np.cos(phase) + b @ np.sin(phase))
    return torch.from_numpy(u0)


def solve_burgers(u0: Tensor, nu: float, t_end: float = 1.0, cfl: float = 0.5, dt: float | None = None) -> Tensor:
    """u(., ``t_end``) of Burgers' equation from u0 (B, n) on n uniform periodic points of [0, 1): (B, n) float64.

    IF-RK4 (Kassam & Trefethen 2005's integrating-factor RK4): in v = e^{-L t} u_hat, L = -nu k^2, the viscous
    term is exact and only -(1/2) i k FFT(u^2) is stepped, dealiased by the 2/3 rule. The step is ``dt``, or
    ``cfl`` dx / max|u0| shortened to divide ``t_end`` evenly.
    """
    if not nu > 0 or not t_end > 0:
        raise PoolkitError(f"Burgers needs nu > 0 and t_end > 0, got nu={nu!r}, t_end={t_end!r}")
    u0 = u0.to(torch.float64)
    n = u0.shape[-1]
    k = wavenumbers(n)
    keep = torch.arange(n // 2 + 1) < n / 3  # 2/3-rule: the quadratic term's aliases land outside the kept modes
    if dt is None:
        dt = cfl / n / max(float(u0.abs().max()), 1e-12)
    steps = max(1, math.ceil(t_end / dt))
    dt = t_end / steps
    half, full = torch.exp(-nu * k ** 2 * dt / 2), torch.exp(-nu * k ** 2 * dt)

    def nonlinear(v: Tensor) -> Tensor:
        u = torch.fft.irfft(v * keep, n=n)
        return -0.5j * k * torch.fft.rfft(u * u) * keep

    v = torch.fft.rfft(u0)
    for _ in range(steps):
        a = dt * nonlinear(v)
        b = dt * nonlinear(half * (v + a / 2))
        c = dt * nonlinear(half * v + b / 2)
        d = dt * nonlinear(full * v + half * c)
        v = full * v + (full * a + 2 * half * (b + c) + d) / 6
    return torch.fft.irfft(v, n=n)


def cole_hopf(amplitude: float, nu: float, t: float, n: int) -> Tensor:
    """The exact solution at time t of Burgers' equation from u0 = amplitude sin(2 pi x), on n uniform points
    (n,) float64: u = -2 nu phi_x / phi with phi solving the heat equation phi_t = nu phi_xx from
    phi0 = exp(-(1 / 2 nu) integral u0) = exp(amplitude cos(2 pi x) / (4 pi nu)), solved exactly per Fourier mode
    (the Cole-Hopf transform)."""
    x = torch.arange(n, dtype=torch.float64) / n
    k = wavenumbers(n)
    phi = torch.fft.rfft(torch.exp(amplitude * torch.cos(2 * math.pi * x) / (4 * math.pi * nu)))
    phi = phi * torch.exp(-nu * k ** 2 * t)
    return -2 * nu * torch.fft.irfft(1j * k * phi, n=n) / torch.fft.irfft(phi, n=n)


def subsample(u: Tensor, resolution: int) -> Tensor:
    """The values of u (B, n) on the uniform grid of ``resolution`` points, which must divide n."""
    n = u.shape[-1]
    if n % resolution:
        raise PoolkitError(f"resolution {resolution} does not divide the fine grid {n}; choose a divisor of {n}")
    return u[..., :: n // resolution]


def interpolate(u: Tensor, x: Tensor) -> Tensor:
    """The Fourier interpolant of u (B, n) (uniform periodic samples on [0, 1)) at the points x (P,): (B, P)."""
    n = u.shape[-1]
    coefficients = torch.fft.rfft(u.to(torch.float64)) / n
    # real series: c_0 + sum 2 Re(c_k e^{2 pi i k x}), the Nyquist mode of an even n counted once
    count = torch.full((n // 2 + 1,), 2.0, dtype=torch.float64)
    count[0] = 1.0
    if n % 2 == 0:
        count[-1] = 1.0
    phase = torch.exp(1j * wavenumbers(n)[:, None] * x.to(torch.float64)[None, :])
    return ((coefficients * count) @ phase).real


def clustered_grid(resolution: int, strength: float = 0.8) -> Tensor:
    """``resolution`` periodic, non-uniform points of [0, 1): x = s - strength sin(2 pi s) / (2 pi) on uniform s,
    dense near 0 (spacing (1 - strength) / resolution) and sparse near 1/2 ((1 + strength) / resolution);
    ``strength`` in [0, 1)."""
    s = torch.arange(resolution, dtype=torch.float64) / resolution
    return s - strength * torch.sin(2 * math.pi * s) / (2 * math.pi)


def burgers_pairs(count: int, fine: int, nu: float, seed: int = 0, cfl: float = 0.5) -> tuple[Tensor, Tensor]:
    """``count`` (u0, u(., 1)) pairs on the fine grid: (count, fine) float64 each."""
    u0 = random_initial_conditions(count, fine, seed)
    return u0, solve_burgers(u0, nu, cfl=cfl)
