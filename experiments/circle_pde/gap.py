r"""W1 between the study's largest cloud and the circle PDE past its first clusters (issue 35).

The PDE from ρ₀ at β is solved on refined grids, then along its characteristics
(:func:`~.long.long_pde`, ``long_grid`` the finest grid) to ``long_t1``; the first cloud
of the largest N at β (N i.i.d. draws of the same ρ₀, the study's main run) is compared
with it at every common save by the exact W1 on the circle (:func:`tpde.metrics.w1_circle`:
min_c ∫|F_μ − F_ν − c|dθ, the CDF difference with its optimal cut). Beside the gap
g(t) = W1(μ_N(t), ρ(t)):

- **the Monte-Carlo level** s̄(t) = E W1(ρ(t), ν_N), ν_N N i.i.d. draws of ρ(t) (its grid
  density, or its weighted nodes after the switch): the distance of a perfect N-sample of
  the PDE's state, from √N(F_N − F) → B∘F (a Brownian bridge; :func:`expected_level`,
  ≈ 1.4/√N near uniform), and beside it one such draw s(t) at every unit of time and
  every later save (W1 of two independent N-samples, one of them the PDE itself: √N·s
  has a spread of ≈ 0.5, hence the expectation for the rule);
- **the linear prediction** L(t) [ours, MATH.md §9]: the initial deviation δ₀ = μ_N(0) − ρ₀
  carried by the flow linearised at the uniform state, whose mode k grows as e^{λ_k t}
  (:func:`tpde.theory.instability_rate`): with a_k = (1/2π)∫e^{−ikθ}dδ₀,

      F_L(t, θ) = F_{δ₀}(θ) + 2 Re Σ_{k=1}^{K} (e^{λ_k t} − 1) a_k (e^{ikθ} − 1)/(ik),

  L(t) = min_c ∫|F_L − c|dθ by the midpoint rule on ``grid`` angles (:func:`linear_gap`).
  μ_N(t) − ρ(t) is that while both stay near uniform; the staircase of the particles moved
  by a smooth displacement ξ adds ~ √(ξ/N) (a Brownian bridge's increment), relative
  1/√(Nξ) to the linear term.

Rules (fixed before the run): the gap **is at the Monte-Carlo level** while g ≤ DEPART·s̄
and leaves it at the first save where g > DEPART·s̄; the linear prediction **holds** while
|g/L − 1| ≤ LINEAR_TOLERANCE, and nonlinear saturation is the first save where it fails.

Measured (β = 5, N = 10⁶, a = 2·10⁻⁴, ``long_grid`` 8192; MATH.md §9): g(0) = 1.29e-3
against s̄ = 1.40e-3; g > 2s̄ from t = 2.0; g/L within 1.5 % to t = 9, first beyond 10 % at
t = 10.25; g = 0.85 at t = 20, 0.81 at 30, 0.92 at 50 (the particles' clusters are their
noise's, N ≪ N_eff = 4/a², and merge to two between t = 30 and 40); 18 s CPU for the PDE,
72 s for the distances.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from tpde.measures import CircleDensity, Empirical
from tpde.metrics import w1_circle
from tpde.theory import dominant_mode, instability_rate

from .. import framework as fw
from ..common.circle_clusters import clusters, points_masses
from .long import _paired, cell_masses_of, long_pde

__all__ = [
    "DEPART",
    "LINEAR_TOLERANCE",
    "Gap",
    "draw_from",
    "expected_level",
    "first_over",
    "gap_claim",
    "gap_table",
    "linear_gap",
    "state_cdf",
]

#: The PDE run's entries kept in the results (long_pde's, without the trajectory).
PDE_KEYS = ("status", "end", "unresolved", "refinements", "switch", "grids", "seconds",
            "steps", "mass_error", "clipped_mass", "quadrature", "counts")  # fmt: skip

#: g > DEPART·s̄ leaves the Monte-Carlo level; |g/L − 1| > LINEAR_TOLERANCE ends the linear
#: prediction (module notes).
DEPART, LINEAR_TOLERANCE = 2.0, 0.1

#: The most angles of the linear prediction's midpoint rule (:func:`linear_gap`; 16N
#: below); Brownian bridges of the expected Monte-Carlo level and their angles
#: (:func:`expected_level`).
LINEAR_GRID, BRIDGES, BRIDGE_GRID = 2**20, 200, 4096

TWO_PI = 2 * math.pi


def draw_from(state, n: int, generator: torch.Generator) -> Empirical:
    """``n`` i.i.d. points of a PDE state: a CircleDensity (:meth:`sample`) or weighted
    nodes (an Empirical: node j with probability w_j)."""
    if isinstance(state, CircleDensity):
        return Empirical(state.sample(n, generator=generator))
    index = torch.multinomial(state.weights, n, replacement=True, generator=generator)
    return Empirical(state.points[index])


def state_cdf(state, grid: int) -> np.ndarray:
    """F(θ_g) = μ([0, θ_g]) at θ_g = 2πg/G, g = 0 … G − 1: a CircleDensity's exact CDF at
    its angles interpolated linearly (its cells' masses spread evenly, as
    :func:`tpde.metrics.w1_circle` reads it), weighted nodes' share at or below θ_g."""
    theta = np.arange(grid) * TWO_PI / grid
    if isinstance(state, CircleDensity):
        cdf = state.cdf().detach().to(torch.float64).cpu().numpy()
        cdf = cdf / cdf[-1]
        knots = state.offset % TWO_PI + np.arange(state.size + 1) * state.spacing
        period = np.concatenate([knots[:-1] - TWO_PI, knots, knots[1:] + TWO_PI])
        values = np.concatenate([cdf[:-1] - 1, cdf, cdf[1:] + 1])
        return np.interp(theta, period, values) - np.interp(0.0, period, values)
    angles = _angles(state.points)
    weights = state.weights.detach().to(torch.float64).cpu().numpy()
    order = np.argsort(angles)
    cumulative = np.concatenate([[0.0], np.cumsum(weights[order])]) / weights.sum()
    return cumulative[np.searchsorted(angles[order], theta, side="right")]


def expected_level(
    state, n: int, generator: np.random.Generator, bridges: int = BRIDGES, grid: int = BRIDGE_GRID
) -> tuple[float, float]:
    r"""E W1(μ, μ_n) and its standard error, μ_n n i.i.d. draws of μ, in the large-n limit:
    √n(F_n − F) → B∘F (B a Brownian bridge), so

        √n·W1(μ, μ_n) → min_c ∫_0^{2π} |B(F(θ)) − c| dθ,

    averaged over ``bridges`` bridges sampled at the values F(θ_g) of :func:`state_cdf` on
    ``grid`` angles (the integral by the rectangle rule, the median c exact on the grid;
    uniform law: 1.427, 1.421, 1.426 ± 0.010 on 1024, 8192, 65536 angles, 2000 bridges).
    """
    u = np.clip(state_cdf(state, grid), 0.0, 1.0)
    steps = np.diff(np.concatenate([[0.0], u, [1.0]]))
    walk = np.cumsum(generator.standard_normal((bridges, grid + 1)) * np.sqrt(steps), axis=1)
    bridge = walk[:, :-1] - u * walk[:, -1:]
    median = np.median(bridge, axis=1, keepdims=True)
    values = np.abs(bridge - median).mean(axis=1) * TWO_PI / math.sqrt(n)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(bridges))


def _angles(points: torch.Tensor) -> np.ndarray:
    p = points.detach().to(torch.float64).cpu().numpy()
    return np.remainder(np.arctan2(p[:, 1], p[:, 0]), TWO_PI)


def linear_gap(
    cloud: Empirical, rho0: CircleDensity, beta: float, times, grid: int | None = None
) -> np.ndarray:
    r"""L(t): W1 of the initial deviation μ_N(0) − ρ₀ carried by the linearised flow
    (module notes), at each of ``times``.

    Parameters
    ----------
    cloud : Empirical (n, 2) on S¹, any weights: μ_N(0).
    rho0 : CircleDensity, ρ₀ (a trigonometric polynomial of degree < K, K = 4k* + 20: the
        modes the linear flow moves; λ_K ≤ 1e-20 at β ≤ 10).
    beta : the SA post-LN field's β (λ_k = k²I_k(β)/(βI_0(β))).
    times : (T,) the times.
    grid : G, the midpoint rule's angles (default: the power of 2 ≥ 16n, at most
        :data:`LINEAR_GRID`); F_{δ₀} exact at each (the cloud's count below it, ρ₀'s CDF
        from its modes), the error of the rule ≤ (2π/G)·(the variation of F inside the
        cells) ≤ 2π·2/G (2 the variation of the two CDFs): ≤ 0.8/n against W1 ≈ 1.4/√n at
        G ≥ 16n (measured at n = 10⁶, G = 2²⁰: 3e-7 relative at t = 0).

    Returns
    -------
    (T,) L(t) in [0, π].
    """
    if grid is None:
        grid = min(LINEAR_GRID, 1 << max(10, (16 * cloud.points.shape[0] - 1).bit_length()))
    k_max = 4 * dominant_mode(beta) + 20
    k = np.arange(1, k_max + 1)
    theta = (np.arange(grid) + 0.5) * TWO_PI / grid
    angles = _angles(cloud.points)
    weights = cloud.weights.detach().to(torch.float64).cpu().numpy()
    order = np.argsort(angles)
    cumulative = np.concatenate([[0.0], np.cumsum(weights[order])]) / weights.sum()
    below = cumulative[np.searchsorted(angles[order], theta, side="right")]
    particles = (weights[:, None] * np.exp(-1j * np.outer(angles, k))).sum(0) / weights.sum()
    rho_angles = rho0.angles().numpy()
    values = rho0.density.numpy() / rho0.density.numpy().sum()
    smooth = (values[:, None] * np.exp(-1j * np.outer(rho_angles, k))).sum(0)
    a_rho, a_dev = smooth / TWO_PI, (particles - smooth) / TWO_PI
    rates = np.array([float(instability_rate(int(j), beta)) for j in k])
    deviation = below - theta / TWO_PI - _trig_cdf(a_rho, grid)
    out = []
    for t in np.asarray(times, dtype=float):
        moved = deviation + _trig_cdf(np.expm1(rates * t) * a_dev, grid)
        out.append(float(np.abs(moved - np.median(moved)).sum()) * TWO_PI / grid)
    return np.array(out)


def _trig_cdf(a: np.ndarray, grid: int) -> np.ndarray:
    """2 Re Σ_{k=1}^{K} a_k (e^{ikθ} − 1)/(ik) at the midpoints θ_g = (g + ½)2π/G (K < G/2),
    by one inverse FFT: the CDF from 0 of the density Σ_{k≠0} a_k e^{ikθ} (a_{−k} = ā_k)."""
    k = np.arange(1, len(a) + 1)
    c = a / (1j * k)
    spectrum = np.zeros(grid // 2 + 1, dtype=complex)
    spectrum[1 : len(a) + 1] = c * np.exp(1j * k * math.pi / grid)  # the half-cell shift
    return np.fft.irfft(spectrum, grid) * grid - 2 * float(c.real.sum())


def first_over(times, values, limit) -> float | None:
    """The first time where ``values`` exceeds ``limit`` (arrays; NaN entries skipped)."""
    for t, v, m in zip(times, values, limit, strict=True):
        if np.isfinite(v) and np.isfinite(m) and v > m:
            return float(t)
    return None


class Gap:
    """The PDE to ``config.long_t1`` and the gap, MC level and linear prediction of one
    cloud, recorded by :meth:`visit` at the study's saves (module notes)."""

    def __init__(self, config, times: np.ndarray, seed: int):
        self.config = config
        self.saves = times[times <= config.long_t1 + 1e-9]
        tic = time.process_time()
        self.pde = long_pde(
            config,
            float(self.saves[-1]),
            save=self.saves,
            start_grid=min(config.grids),
            max_grid=config.long_grid,
            quadrature=config.long_quadrature,
        )
        self.pde_cpu = time.process_time() - tic
        reached = self.pde["_trajectory"].times.tolist()
        self.at = {round(t, 9): j for j, t in enumerate(reached)}
        self.g, self.rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
        self.curves = {
            name: np.full(len(self.saves), np.nan)
            for name in ("gap", "gap_drawn", "gap_level", "gap_level_se", "gap_linear")
        }
        self.pairs: dict[str, list | None] = {}
        self.counts: dict[str, list[int]] = {}  # [PDE, particles] at the later saves
        self.n = 0
        self.cpu = 0.0

    def visit(self, j: int, mu: Empirical) -> None:
        """At the study's save j: the gap and the MC level where the PDE has the time; at
        j = 0 the linear prediction over the dense saves."""
        if j >= len(self.saves):
            return
        tic = time.process_time()
        config, curves, t = self.config, self.curves, float(self.saves[j])
        dense = t <= config.dense_until + 1e-9
        if j == 0:
            self.n = mu.points.shape[0]
            rho0 = self.pde["_trajectory"].measures[0]
            early = self.saves <= config.dense_until + 1e-9
            curves["gap_linear"][early] = linear_gap(mu, rho0, config.beta, self.saves[early])
        index = self.at.get(round(t, 9))
        if index is not None:
            state = self.pde["_trajectory"].measures[index]
            curves["gap"][j] = float(w1_circle(mu, state))
            level = expected_level(state, self.n, self.rng)
            curves["gap_level"][j], curves["gap_level_se"][j] = level
            if not dense or abs(t - round(t)) < 1e-9:
                curves["gap_drawn"][j] = float(w1_circle(state, draw_from(state, self.n, self.g)))
            if not dense or j == len(self.saves) - 1:
                counter = (config.window, config.level, config.min_share)
                ours = clusters(cell_masses_of(state, config.cells), *counter)
                theirs = clusters(points_masses(mu.points, config.cells), *counter)
                self.pairs[f"{t:g}"] = _paired(ours, theirs)
                self.counts[f"{t:g}"] = [len(ours), len(theirs)]
        self.cpu += time.process_time() - tic

    def results(self) -> dict:
        """The PDE's run (no trajectory), the rules' times and the CPU seconds."""
        gap, level, linear = (self.curves[k] for k in ("gap", "gap_level", "gap_linear"))
        off = np.abs(gap / linear - 1)
        return {
            "n": self.n,
            "pde": {k: self.pde[k] for k in PDE_KEYS},
            "pde_cpu": self.pde_cpu,
            "cpu": self.cpu,
            "departs": first_over(self.saves, gap, DEPART * level),
            "saturates": first_over(self.saves, off, np.full(len(off), LINEAR_TOLERANCE)),
            "pairs": self.pairs,
            "counts": self.counts,
        }

    def arrays(self) -> dict[str, np.ndarray]:
        return {"gap_times": self.saves, **self.curves}


def gap_claim(config: dict, gap: dict, arrays: dict) -> fw.Claim:
    """The gap's claim (module notes' rules): agrees iff it leaves the Monte-Carlo level
    while the linear prediction still holds (the departure is the noise's linear growth)."""
    t, g, s = arrays["gap_times"], arrays["gap"], arrays["gap_level"]
    drawn = arrays["gap_drawn"]
    pde, n = gap["pde"], gap["n"]
    claim = (
        f"β = {config['beta']}, N = {n:.0e} from ρ₀: the particles' W1 to the PDE is the "
        "Monte-Carlo noise carried by the linearised flow (e^(λ_k t)/√N per mode) until the "
        "clusters form"
    )
    later = ", ".join(f"{g[j]:.3g} at t = {t[j]:g}" for j in _long_saves(config, t))
    grids = ", ".join(f"{m} from t = {s0:.2f}" for s0, m in pde["refinements"])
    switch = f"nodes from t = {pde['switch']:.2f}" if pde["switch"] is not None else "no nodes"
    outcome = (
        f"g(0) = {g[0]:.3g} (·√N = {g[0] * math.sqrt(n):.2f}), MC level s̄(0) = {s[0]:.3g} "
        f"(·√N = {s[0] * math.sqrt(n):.2f}; one fresh draw: {drawn[0]:.3g}); "
        f"g > {DEPART:g}·s̄ from t = {_time(gap['departs'])}; |g/L − 1| ≤ "
        f"{LINEAR_TOLERANCE:.0%} to t = {_time(gap['saturates'])} (first miss); past the "
        f"clusters g = {later}. PDE to t = {pde['end']:g} ({pde['status']}): grids {grids or '—'}, "
        f"{switch}; mass error {pde['mass_error']:.1e}; {gap['pde_cpu']:.0f} s CPU, the "
        f"distances {gap['cpu']:.0f} s"
    )
    if gap["departs"] is None:
        return fw.Claim(claim, outcome + "; the gap never leaves the MC level", "n/a")
    held = gap["saturates"] is None or gap["saturates"] > gap["departs"]
    return fw.Claim(claim, outcome, "agrees" if held else "differs")


def _time(value) -> str:
    return "—" if value is None else f"{value:g}"


def _long_saves(config: dict, times) -> list[int]:
    return [j for j, t in enumerate(times) if t > config["dense_until"] + 1e-9]


def gap_table(config: dict, gap: dict, arrays: dict) -> str:
    """t, g, s, g/s, L, g/L and the PDE's grid at every unit of time over the dense saves
    and at every later save; the paired clusters (mass, arc) past dense_until."""
    t = arrays["gap_times"]
    g, s, L = arrays["gap"], arrays["gap_level"], arrays["gap_linear"]
    drawn = arrays["gap_drawn"]
    grids, switch = gap["pde"]["grids"], gap["pde"]["switch"]
    rows = []
    for j, time_ in enumerate(t):
        if j >= len(grids) or not (abs(time_ - round(time_)) < 1e-9 or j in _long_saves(config, t)):
            continue
        pairs, counts = gap["pairs"].get(f"{time_:g}"), gap["counts"].get(f"{time_:g}")
        arcs = "—" if not pairs else ", ".join(f"{a:.3f}" for _, a in pairs)
        if counts and not pairs:
            arcs = f"counts {counts[0]} (PDE) and {counts[1]} (particles)"
        rows.append([
            f"{time_:g}", f"{g[j]:.3g}", f"{s[j]:.3g}", f"{drawn[j]:.3g}", f"{g[j] / s[j]:.2f}",
            f"{L[j]:.3g}" if np.isfinite(L[j]) else "—",
            f"{g[j] / L[j]:.3f}" if np.isfinite(L[j]) else "—",
            f"{grids[j]} nodes" if switch is not None and time_ >= switch else grids[j], arcs,
        ])  # fmt: skip
    return fw.markdown_table(
        ["t", "g = W1(particles, PDE)", "s̄ (MC level)", "s (one draw)", "g/s̄", "L (linear)",
         "g/L", "PDE grid",
         "cluster centre arcs (rad)"],
        rows,
    )  # fmt: skip
