r"""Every order about the uniform measure on S²: a draw's harmonic moments pushed through the
mean-field equation itself (MATH.md §9, the bullet "Second order about the uniform measure
on S²", *All orders*).

:mod:`.forcing` expands d/dt ν̂_a = ∫∇Y_a·v dμ to second order and iterates once. Here the
weak form is kept whole. With the density ρ = 1/4π + Σ_a ν̂_aY_a (degree ≤ L) and the
potential W (v = ∇W), 2∇Y·∇W = Δ(YW) − YΔW − WΔY and ∫ρΔ(YW) = ∫YWΔρ give

    d/dt ν̂_a = ½∫Y_a [WΔρ − ρΔW + l_a(l_a+1)ρW] dA,                                   (5)

    W = (4π/β)Σ_b g_bν̂_bY_b                 (USA: (5) is exactly quadratic in ν̂),
    W = β⁻¹ log f, f = 1 + 4πΣ_b g_bν̂_bY_b   (SA; ΔW = β⁻¹(Δf/f − |∇f|²/f²),
                                              |∇f|² = ½Δ(f²) − fΔf),

g_l as in :func:`.forcing.kernel_weights` (run time). Every function is synthesised on a
Gauss–Legendre × equal-azimuth grid (exact to degree ``top``, default 3L + 8: the products
ρW and WΔρ of degree ≤ 2L plus a projection of degree L; SA's log f is not a polynomial, its
series converges geometrically and the default grid resolves it to rounding at the sizes
used) and projected back on the Y_a; RK4 in time. The linear part of (5) is λ_aν̂_a; its
quadratic part is (1).

Exactness. The empirical measure of the tokens solves the weak form for every test function,
so (5) with the draw's own moments is the particles' flow, less two truncations: the moments
above degree L (their products with the kernel's degrees feed degree a ≤ L − L_kernel
exactly, the degrees between through one more order per hop: L = K + 2·L_kernel, L_kernel of
:func:`.forcing.kernel_degree` at :data:`.forcing.FORCING_TOL`, is exact to third order for
the measured K), and the kernel's degrees above L (g_l < 10⁻⁶g_1 at that L). Checked
against the particle flow with the same RK4 steps (tests/experiments/test_theory_galerkin.py).

Orders. ν(t; ε) of the scaled start εν̂(0) is analytic in ε; its Taylor terms ν^(n)(t) (the
n-th order of the expansion, ν^(1) = e^{λt}ν̂(0), ν^(2) the second term of (2)) come from
the discrete Cauchy integral over J points of |ε| = r:
ν^(n) = (J rⁿ)⁻¹ Σ_j ν(t; rω^j)ω^{−jn}, ω = e^{2πi/J} (aliasing from order n + J, r^J
smaller); a real start needs J/2 + 1 runs (ν(ε̄) = conj ν(ε)).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..common.kernels import time_scale
from .forcing import FORCING_TOL, _product_grid, degrees_of, kernel_degree, kernel_weights

__all__ = ["Galerkin", "galerkin_degree", "galerkin_energies", "galerkin_rates"]


def galerkin_degree(beta: float, modes: int, hops: int = 2) -> int:
    """L = ``modes`` + ``hops``·L_kernel: the degree at which (5) holds degree ≤ ``modes``
    to order ``hops`` + 1 (module notes)."""
    return modes + hops * kernel_degree(beta, FORCING_TOL)


class Galerkin:
    """(5) for every mode of degree ≤ ``degree`` of one kernel and β (run time).

    Parameters
    ----------
    kernel : "sa" or "usa".
    beta : β > 0.
    degree : L ≥ 1, the highest degree kept.
    top : the grid's exact degree (default 3L + 8).
    """

    def __init__(self, kernel: str, beta: float, degree: int, top: int | None = None):
        if kernel not in ("sa", "usa"):
            raise ValueError(f"kernel must be 'sa' or 'usa'; received {kernel!r}.")
        if degree < 1 or not beta > 0:
            raise ValueError(f"degree must be >= 1 and beta > 0; received degree = {degree}, "
                             f"beta = {beta}.")  # fmt: skip
        self.kernel, self.beta, self.degree = kernel, float(beta), int(degree)
        ls = degrees_of((degree + 1) ** 2)
        self.ll = (ls * (ls + 1)).astype(float)
        self.g = kernel_weights(kernel, beta, degree)[ls]
        weights, self.Y = _product_grid(top or 3 * degree + 8, degree)
        self.P = self.Y * weights[:, None]  # projection: ∫ f Y_a dA = f(grid) @ P

    def rhs(self, nu: np.ndarray) -> np.ndarray:
        """d/dt ν̂ by (5): nu (..., (L + 1)²), real or complex (the Cauchy integral)."""
        Y, P, ll, beta = self.Y, self.P, self.ll, self.beta
        rho = 1 / (4 * math.pi) + nu @ Y.T
        lap_rho = (-ll * nu) @ Y.T
        h = 4 * math.pi * self.g * nu  # K∗ν/i_0 (SA), K∗ν (USA), by modes
        if self.kernel == "usa":
            W, lap_W = (h @ Y.T) / beta, ((-ll * h) @ Y.T) / beta
        else:
            f, lap_f = 1 + h @ Y.T, (-ll * h) @ Y.T
            lap_square = (-ll * (((f - 1) ** 2) @ P)) @ Y.T  # Δ(h²), h = f − 1
            grad2 = 0.5 * (2 * lap_f + lap_square) - f * lap_f  # |∇f|² = ½Δ(f²) − fΔf
            W, lap_W = np.log(f) / beta, (lap_f / f - grad2 / f**2) / beta
        return 0.5 * ((W * lap_rho - rho * lap_W) @ P) + 0.5 * ll * ((rho * W) @ P)

    def run(self, moments, times, steps: int = 1) -> np.ndarray:
        """ν̂(t) at ``times`` (T,) from ``moments`` (..., (L + 1)²) (t = times[0]), ``steps``
        RK4 steps between saved times: (T, ..., (L + 1)²)."""
        nu = np.array(moments)
        if nu.shape[-1] != (self.degree + 1) ** 2 or steps < 1:
            raise ValueError(
                f"moments must have (degree + 1)² = {(self.degree + 1) ** 2} columns and "
                f"steps must be >= 1; received {nu.shape[-1]} columns, steps = {steps}."
            )
        nu[..., 0] = 0.0  # ν has no mass
        out = [nu.copy()]
        for start, end in itertools.pairwise(times):
            h = (end - start) / steps
            for _ in range(steps):
                k1 = self.rhs(nu)
                k2 = self.rhs(nu + h / 2 * k1)
                k3 = self.rhs(nu + h / 2 * k2)
                k4 = self.rhs(nu + h * k3)
                nu = nu + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            out.append(nu.copy())
        return np.stack(out)

    def orders(self, moments, times, steps: int = 1, count: int = 16,
               radius: float = 1.0) -> np.ndarray:  # fmt: skip
        """ν^(n)(t), n = 0 … ``count`` − 1 (module notes: the Cauchy integral on |ε| =
        ``radius``, ``count`` points): (count, T, ..., (L + 1)²); ν^(0) = 0."""
        if count < 2 or count % 2 or not radius > 0:
            raise ValueError(f"count must be an even number >= 2 and radius > 0; received "
                             f"count = {count}, radius = {radius}.")  # fmt: skip
        start = np.asarray(moments, dtype=float)
        half = [self.run(radius * np.exp(2j * math.pi * j / count) * start, times, steps)
                for j in range(count // 2 + 1)]  # fmt: skip
        every = np.stack([half[j] if j <= count // 2 else half[count - j].conj()
                          for j in range(count)])  # fmt: skip
        n = np.arange(count)
        phase = np.exp(-2j * math.pi * np.outer(n, n) / count)
        terms = np.tensordot(phase, every, axes=(1, 0)) / count
        return (terms / radius ** n.reshape(-1, *[1] * (terms.ndim - 1))).real


def galerkin_energies(nu: np.ndarray, modes: int) -> np.ndarray:
    """E_k = 4π/(2k+1)Σ_m ν̂_km², k = 1 … ``modes``: nu (..., (L + 1)²) → (..., modes)."""
    return np.stack([4 * math.pi / (2 * k + 1) * (nu[..., k * k : (k + 1) ** 2] ** 2).sum(-1)
                     for k in range(1, modes + 1)], -1)  # fmt: skip


def galerkin_rates(run: dict, nu: np.ndarray, kernel: str, beta: float, used: int) -> np.ndarray:
    """Half the slope of log(Σ_s E_k(t)/Σ_s E_k(0)) over the first ``used`` saved times of
    ``run`` (the measured fit's window, as :func:`.forcing.conditional_rates`), from ν̂(t)
    ``nu`` (T, S, (L + 1)²) on ``run["times"]``: (K,), original time; NaN for fewer than 3
    times or a modelled energy ≤ 0 (a truncated series)."""
    modes = len(run["predicted"])
    if used < 3:
        return np.full(modes, np.nan)
    times = np.asarray(run["times"], dtype=float)[:used]
    energy = galerkin_energies(nu[:used], modes).sum(1)  # (T, K)
    out = [np.polyfit(times, np.log(e / e[0]), 1)[0] / 2 if (e > 0).all() else math.nan
           for e in energy.T]  # fmt: skip
    return np.array(out) / time_scale(kernel, beta)
