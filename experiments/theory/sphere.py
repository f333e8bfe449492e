r"""Part 2 on the sphere S² (d = 3): the growth rates of the spherical harmonics.

The uniform measure on S² is a stationary state of the post-LN flow with Q = K = V = I;
its degree-k harmonics grow at λ_k = k(k + 1) i_k(β)/(β i_0(β)) (SA) and
k(k + 1) i_k(β)/β (USA) (MATH.md §9, :func:`tpde.theory.instability_rate` with d = 3).

(a) **Random tokens.** N i.i.d. uniform tokens × S seeds, RK4 on the ``harmonics`` engine;
the degree-k energy (addition theorem, DLMF 14.30.9)

    E_k = (1/N²) Σ_{ij} P_k(⟨x_i, x_j⟩) = 4π/(2k + 1) Σ_{m=−k}^{k} |(1/N) Σ_j Y_km(x_j)|²

has mean 1/N at t = 0 and grows as e^{2λ_k t}/N while the modes are small; the rate is
fitted on the same linear window as on S¹ (:func:`experiments.common.kernels.fit_rate`,
mean power ≤ ``s2_level``), jackknife errors over the seeds. Beside it the second order
(:mod:`.forcing`): the Gaunt forcing of degree k by products of degrees l1, l2, from the
draw's own initial moments (``conditional``) and in the mean over draws (``expected``), and
every order at once (:mod:`.galerkin`: the draw's moments through the weak form itself,
``galerkin``), which the particles follow to ~1e-5 in E_k.

(b) **One mode at a time.** A product grid, Gauss–Legendre nodes in z = cos θ × equally
spaced azimuths, with its quadrature weights: it integrates every spherical harmonic of
degree ≤ ``s2_lat_degree`` exactly, so where the kernel's series (degree L(β)) fits in it
the grid is stationary to rounding and the linearisation about it is the uniform one. Each
token is moved along ∇_S P_k(z) by ±δ; half the difference of the zonal moments
c_k = Σ_j w_j P_k(z_j) of the two runs cancels every even order in δ (the grid's own
residual drift included), so λ̂_k = log(c_k(T)/c_k(0))/T is exact to O(δ²) and the RK4
error (λh)⁴/120.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from scipy.special import eval_legendre, roots_legendre

from tpde.fields import Normalized
from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.theory import instability_rate

from ..common.kernels import kernel_field, time_scale
from ..common.legendre import legendre_terms
from .forcing import conditional_rates, corrected_rates, initial_moments, model_degree
from .galerkin import Galerkin, galerkin_degree, galerkin_rates
from .rates import forcing_rate_of, random_rates, rate_results

__all__ = ["forcing_rate", "harmonic_energy", "part_sphere", "zonal_grid"]


# ---------------------------------------------------------------------- estimators
def harmonic_energy(points: torch.Tensor, degrees: int, weights=None) -> torch.Tensor:
    """E_k = Σ_{ij} w_i w_j P_k(⟨x_i, x_j⟩) for k = 1 … ``degrees``, in O(N·K²).

    By the addition theorem E_k = 4π/(2k + 1) (|c_k0|² + 2 Σ_{m=1}^{k} |c_km|²),
    c_km = Σ_j w_j Λ_k^m(z_j) e^{imφ_j}, Λ_k^m the fully normalised associated Legendre
    functions (∫_{S²} |Λ_k^m e^{imφ}|² = 1). Λ_k^m(z) e^{imφ} = Λ̄_k^m(z) (x₁ + ix₂)^m with
    Λ̄ = Λ/sin^m θ, which obeys the same three-term recurrence in k (no division by sin θ,
    no pole to avoid).

    Parameters
    ----------
    points : (..., N, 3), unit vectors, float64.
    degrees : K ≥ 1.
    weights : (N,) or None (1/N).

    Returns
    -------
    (..., K), float64: E_1 … E_K (each in [0, 1]; mean 1/N for N i.i.d. uniform tokens).
    """
    n = points.shape[-2]
    w = torch.full((n,), 1.0 / n, dtype=points.dtype) if weights is None else weights
    z = points[..., 2]
    xy = torch.complex(points[..., 0], points[..., 1])
    energy = torch.zeros(*points.shape[:-2], degrees, dtype=points.dtype)
    for k, m, current, power in legendre_terms(z, xy, degrees):
        if k == 0:
            continue
        moment = ((current * w) * power).sum(-1)
        energy[..., k - 1] += (1 if m == 0 else 2) * moment.abs().square()
    return energy * (4 * math.pi / (2 * torch.arange(1, degrees + 1, dtype=points.dtype) + 1))


def forcing_rate(rates, k: int) -> float:
    """max λ_j + λ_l over the degree pairs whose products hold degree k (Clebsch–Gordan:
    |j − l| ≤ k ≤ j + l, j + l + k even; j, l ≥ 1): the growth rate of the quadratic forcing
    of degree k. ``rates``: λ_1, λ_2, … up to the largest degree searched."""
    return forcing_rate_of(rates, k, lambda j, l, k: l - j <= k <= j + l and (j + l + k) % 2 == 0)


def zonal_grid(degree: int) -> tuple[np.ndarray, np.ndarray]:
    """(points (n_z·n_φ, 3), weights): n_z = ⌈(degree + 1)/2⌉ Gauss–Legendre nodes in z ×
    n_φ = degree + 1 equal azimuths, weights w_z/(2 n_φ): exact for every polynomial of
    degree ≤ ``degree`` on S² (so for the spherical harmonics of that degree)."""
    nodes, wz = roots_legendre(math.ceil((degree + 1) / 2))
    phi = 2 * math.pi * (np.arange(degree + 1) + 0.5) / (degree + 1)
    s = np.sqrt(1 - nodes**2)
    points = np.stack([np.outer(s, np.cos(phi)), np.outer(s, np.sin(phi)),
                       np.outer(nodes, np.ones_like(phi))], -1).reshape(-1, 3)  # fmt: skip
    weights = np.repeat(wz / (2 * (degree + 1)), degree + 1)
    return points, weights / weights.sum()


# ---------------------------------------------------------------------- (a) random tokens
def _random_run(config, kernel: str, beta: float) -> dict:
    """:func:`.rates.random_rates` on S² (harmonics engine, degree-k energies), with the
    forcing rate of each degree (:func:`forcing_rate` over degrees up to K + 4√β + 20) and
    the second-order predictions of :mod:`.forcing`: ``conditional`` (from the draw's own
    initial moments), ``expected`` (the mean over draws, (3)–(4)); ``galerkin``, every order
    from the draw's moments (:mod:`.galerkin`, on the fit's window, the run's RK4 steps)."""
    degree = model_degree(beta, config.s2_modes)
    whole = galerkin_degree(beta, config.s2_modes)  # ≥ degree: one set of moments for both
    run = random_rates(
        kernel, beta, d=3, modes=config.s2_modes, tokens=config.s2_tokens,
        seeds=config.s2_seeds, level=config.s2_level, saves=config.s2_steps + 1,
        steps=config.s2_steps, seed=config.seed + 6000 + int(100 * beta),
        power=lambda points: harmonic_energy(points, config.s2_modes).numpy(),
        engine="harmonics", initial=lambda points: initial_moments(points.numpy(), whole),
    )  # fmt: skip
    start = time.perf_counter()
    size, moments = {"tokens": config.s2_tokens}, run.pop("initial")
    run["conditional"] = conditional_rates(run, moments[:, : (degree + 1) ** 2], kernel, beta,
                                           run["used"], **size)  # fmt: skip
    run["expected"] = corrected_rates(run, kernel, beta, seeds=config.s2_seeds,
                                      used=run["used"], **size)  # fmt: skip
    run["model_seconds"] = time.perf_counter() - start
    start = time.perf_counter()
    # saves = s2_steps + 1: one RK4 step between saved times, as the particles took
    nu = Galerkin(kernel, beta, whole).run(moments, run["times"][: run["used"]], 1)
    run["galerkin"] = galerkin_rates(run, nu, kernel, beta, run["used"])
    run["galerkin_seconds"] = time.perf_counter() - start
    search = np.arange(1, config.s2_modes + int(4 * math.sqrt(beta)) + 21)
    every = instability_rate(search, beta, kernel=kernel, d=3)
    run["forcing"] = np.array([forcing_rate(every, k) for k in range(1, config.s2_modes + 1)])
    return run


# ---------------------------------------------------------------------- (b) one mode
def _lattice_run(config, kernel: str) -> dict:
    betas = np.asarray(config.inst_betas, dtype=float)
    modes = np.arange(1, config.s2_lat_modes + 1)
    grid, weights = zonal_grid(config.s2_lat_degree)
    x = torch.as_tensor(grid)
    z = x[:, 2].numpy()
    starts = []
    for k in modes:
        slope = np.polynomial.legendre.Legendre.basis(int(k)).deriv()(z)  # P_k'(z)
        gradient = slope[:, None] * (np.array([0.0, 0.0, 1.0]) - z[:, None] * grid)
        for sign in (1.0, -1.0):
            moved = grid + sign * config.s2_lat_delta * gradient
            starts.append(moved / np.linalg.norm(moved, axis=-1, keepdims=True))
    points = np.broadcast_to(np.stack(starts), (len(betas), 2 * len(modes), len(grid), 3))
    field = Normalized(kernel_field(kernel, betas, 3, rescale=True))
    mu = Empirical(torch.as_tensor(points.copy()), torch.as_tensor(weights))
    start = time.perf_counter()
    traj = integrate(field, mu, 1.0, dt=1.0 / config.s2_lat_steps, method="rk4", events=())
    seconds = time.perf_counter() - start
    own = np.repeat(modes, 2)[None, :, None]
    c0, c1 = ((eval_legendre(own, m.points[..., 2].numpy()) * weights).sum(-1)
              .reshape(len(betas), len(modes), 2) for m in traj.measures)  # fmt: skip
    odd0, odd1 = ((c[..., 0] - c[..., 1]) / 2 for c in (c0, c1))
    scale = time_scale(kernel, betas)
    measured = np.log(odd1 / odd0) / scale
    predicted = np.stack([instability_rate(modes, b, kernel=kernel, d=3) for b in betas])
    grid_mu = Empirical(x.expand(len(betas), 1, -1, -1), torch.as_tensor(weights))
    drift = field.velocity(grid_mu).norm(dim=-1).amax(-1).numpy().ravel() / np.ravel(scale)
    return {"betas": betas, "measured": measured, "predicted": predicted, "seconds": seconds,
            "residual": drift}  # fmt: skip


def part_sphere(config) -> tuple[dict, dict]:
    """Part 2 on S²: (arrays, results) of (a) and (b) for every kernel and β."""
    arrays, results = {}, {}
    for kernel in config.inst_kernels:
        for beta in config.inst_betas:
            run = _random_run(config, kernel, beta)
            tag = f"s2__{kernel}__{beta:g}"
            for key in ("predicted", "measured", "se", "power", "times", "forcing", "conditional",
                        "expected", "galerkin"):  # fmt: skip
                arrays[f"{tag}__{key}"] = run[key]
            results[f"random/{kernel}/{beta:g}"] = {
                **rate_results(run),
                "model_seconds": run["model_seconds"],
                "galerkin_seconds": run["galerkin_seconds"],
            }
        if config.s2_lat_modes:
            lat = _lattice_run(config, kernel)
            for key in ("betas", "measured", "predicted", "residual"):
                arrays[f"s2lat__{kernel}__{key}"] = lat[key]
            rel = np.abs(lat["measured"] / lat["predicted"] - 1)
            results[f"lattice/{kernel}"] = {
                "max_rel_error": float(rel.max()), "residual": float(lat["residual"].max()),
                "tokens": int(lat_tokens(config.s2_lat_degree)), "seconds": lat["seconds"],
            }  # fmt: skip
    return arrays, results


def lat_tokens(degree: int) -> int:
    """The number of tokens of :func:`zonal_grid` at this degree."""
    return math.ceil((degree + 1) / 2) * (degree + 1)
