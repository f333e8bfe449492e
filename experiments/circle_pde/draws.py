"""The circle-pde study's independent runs as tasks for the worker processes
(:class:`~experiments.common.pool.Workers`; issue 35: the full run's cost on 2 cores).

Every particle run starts from a cloud drawn beforehand, in the serial order, from the
study's generators (the main draws from ``seed``, the escape-only ones from ``seed + 1``,
the β sweep's from ``seed + 2``: :func:`draw_clouds`), and returns what the study saves of
it; the PDE on each grid is a task too. A task depends only on its arguments, so the study
gives the same arrays and results on one process or several (tested).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.metrics import w1_circle
from tpde.theory import dominant_mode

from ..common.circle_clusters import cluster_masses, density_masses, points_masses
from .config import Config, draws, initial_density
from .flow import follow, post_ln_field
from .gap import Gap
from .metastable import ABSORBED, KMAX, mode_amplitudes

__all__ = [
    "angles_histogram",
    "count",
    "draw_clouds",
    "escape_draw",
    "main_draw",
    "solve_pde",
    "sweep_draw",
]


def count(config: Config, masses: np.ndarray) -> int:
    """The cluster count of cell masses with the study's counter."""
    return len(cluster_masses(masses, config.window, config.level, config.min_share))


def angles_histogram(points: torch.Tensor, bins: int) -> np.ndarray:
    angles = torch.remainder(torch.atan2(points[:, 1], points[:, 0]), 2 * math.pi)
    return np.histogram(angles.numpy(), bins, (0, 2 * math.pi), density=True)[0]


def draw_clouds(config: Config, g_main, g_escape, g_sweep) -> dict:
    """Every initial cloud of the study, drawn in the serial run's order.

    Returns
    -------
    dict with ``main`` {(b, i, s): points (n, 2)} over β = (beta, *more_betas), sizes and
    draws (the largest N at β only), ``escape`` {(i, s): points} for the escape-only draws
    s = draws(n) … escape_seeds − 1, ``sweep`` {(b, s): points} over meta_betas.
    """
    betas = (config.beta, *config.more_betas)
    main = {}
    for b, beta in enumerate(betas):
        rho0 = initial_density(config, beta, min(config.grids))
        for i, n in enumerate(config.sizes):
            if b > 0 and n == max(config.sizes):
                continue
            for s in range(draws(config, n)):
                main[b, i, s] = rho0.sample(n, generator=g_main)
    rho0 = initial_density(config, config.beta, min(config.grids))
    escape = {(i, s): rho0.sample(n, generator=g_escape)
              for i, n in enumerate(config.sizes)
              for s in range(draws(config, n), config.escape_seeds)}  # fmt: skip
    sweep = {}
    for b, beta in enumerate(config.meta_betas):
        rho0 = initial_density(config, beta, min(config.grids))
        for s in range(config.meta_seeds):
            sweep[b, s] = rho0.sample(config.meta_size, generator=g_sweep)
    return {"main": main, "escape": escape, "sweep": sweep}


def solve_pde(config: Config, grid: int, times: np.ndarray) -> dict:
    """The PDE on ``grid`` angles over the dense saves: its densities (``_measures``) at
    the saved times (``_times``), counts and reach."""
    rho0 = initial_density(config, config.beta, grid)
    with warnings.catch_warnings():  # the stop is the expected outcome, in pde.status
        warnings.filterwarnings("ignore", "1 element.*status 'unresolved'", RuntimeWarning)
        pde = integrate(post_ln_field(config.beta), rho0, float(times[-1]), save=times.tolist())
    counts = [count(config, density_masses(m, config.cells)) for m in pde.measures]
    t = pde.times.numpy()
    k_star = dominant_mode(config.beta)
    first = next((float(s) for s, c in zip(t, counts, strict=True) if c >= 1), None)
    reached = next((float(s) for s, c in zip(t, counts, strict=True) if c == k_star), None)
    return {
        "grid": grid,
        "status": str(pde.status),
        "end": float(t[-1]),
        "unresolved": pde.stats["unresolved"],
        "mass_error": pde.stats["mass_error"],
        "count_at_end": counts[-1],
        "first_cluster": first,
        "first_k_star": reached,
        "_times": t,
        "_measures": list(pde.measures),
        "_counts": counts,
    }


def main_draw(
    config: Config, beta: float, points, times, reference, gap_seed, *, dense: bool = True
) -> dict:
    """One draw of the main run to t1: its cluster counts; with ``reference`` (the PDE's
    densities {save index: CircleDensity}, at β only) its W1 to the PDE at those saves and
    |ĉ_k| at every save; with ``gap_seed`` (the first cloud of the largest N) its histogram
    and the gap against the PDE past its clusters (:class:`~.gap.Gap`).

    Returns
    -------
    dict: ``counts`` (T,), ``distance`` {j: W1}, ``modes`` (T, KMAX) or None,
    ``histogram`` (T, bins) or None, ``gap`` (results, arrays) or None, ``info`` of
    :func:`~.flow.follow` (``dense``: its saves, interpolated or landed on).
    """
    counts = np.full(len(times), -1, dtype=np.int64)
    modes = None if reference is None else np.full((len(times), KMAX), np.nan)
    histogram = None if gap_seed is None else np.zeros((len(times), config.bins))
    gap = None if gap_seed is None else Gap(config, times, gap_seed)
    distance = {}

    def visit(j, mu):
        counts[j] = count(config, points_masses(mu.points, config.cells))
        if reference is not None and j in reference:
            distance[j] = float(w1_circle(mu, reference[j]))
        if gap is not None:
            histogram[j] = angles_histogram(mu.points, config.bins)
            gap.visit(j, mu)
        if modes is not None:
            modes[j] = mode_amplitudes(mu.points)

    info = follow(config, post_ln_field(beta), Empirical(points), times, visit, dense=dense)
    return {
        "counts": counts,
        "distance": distance,
        "modes": modes,
        "histogram": histogram,
        "gap": None if gap is None else (gap.results(), gap.arrays()),
        "info": info,
    }


def escape_draw(config: Config, points, saves, *, dense: bool = True) -> dict:
    """An escape-only draw at β over ``saves``: |ĉ_k| (len(saves), KMAX) at every save
    (NaN after the stop), stopped after the call where |ĉ_k*| reaches twice
    ``escape_level``; ``info`` of :func:`~.flow.follow` (``dense``: its saves)."""
    k = dominant_mode(config.beta)
    store = np.full((len(saves), KMAX), np.nan)

    def visit(j, mu):
        store[j] = mode_amplitudes(mu.points)

    def stop(j):
        return store[j, k - 1] >= 2 * config.escape_level

    field = post_ln_field(config.beta)
    info = follow(config, field, Empirical(points), saves, visit, stop, dense=dense)
    return {"modes": store, "info": info}


def sweep_draw(config: Config, beta: float, points, times, *, dense: bool = True) -> dict:
    """A sweep run at β over ``times``: its cluster counts (T,) (filled with 1 once
    absorbed in one cluster: the run stops once a count ≥ 2 has dropped to one held over
    the last ``ABSORBED`` saves), |ĉ_k| (T, KMAX) (NaN after the stop), ``info``
    (``dense``: :func:`~.flow.follow`'s saves)."""
    series = np.full(len(times), -1, dtype=np.int64)
    store = np.full((len(times), KMAX), np.nan)

    def visit(j, mu):
        series[j] = count(config, points_masses(mu.points, config.cells))
        store[j] = mode_amplitudes(mu.points)

    def stop(j):
        seen = series[: j + 1]
        return seen.max() >= 2 and (seen[-ABSORBED:] == 1).all()

    info = follow(config, post_ln_field(beta), Empirical(points), times, visit, stop, dense=dense)
    if info["status"] == "stopped":
        series[series < 0] = 1  # one cluster to the end
    return {"counts": series, "modes": store, "info": info}
