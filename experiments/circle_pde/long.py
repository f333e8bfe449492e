"""The circle PDE past its first clusters (issue 35): the study's initial density on refined
grids (:func:`tpde.flows.integrate_circle`), then along the characteristics, with the
cluster count, the clusters' masses and the grid at every save.

Measured (β = 5, SA, ρ₀ = (1 + a cos θ + a cos 3θ)/2π, a = 2·10⁻⁴, from M = 1024,
``max_grid = 2**13``, saves every 0.5; one torch thread, load 7–9 on 2 cores): grids 2048,
4096, 8192 from t = 14.12, 14.88, 15.61; nodes from t = 16.32; t = 50 reached, mass error
4.4e-16, the nodes' gap ≤ 6.6e-8; 122 s wall, 40 s CPU (8192 angles: 22 s, the 8192 nodes:
91 s of the wall time). Three clusters from t = 12.5 to 50 (a censored plateau), masses
0.33315, 0.33315, 0.33370 at t = 50. With ``max_grid = 2**14`` (nodes from t = 17.00;
246 s wall, 116 s CPU) the same to ≤ 5.7e-8 of max|u| in the velocity field and ≤ 4e-9 in
the masses. MATH.md §9 has the line.
"""

from __future__ import annotations

import numpy as np
import torch

from tpde.flows import integrate_circle
from tpde.measures import CircleDensity, Empirical

from ..common.circle_clusters import (
    cluster_masses,
    clusters,
    density_masses,
    lifetimes,
    merges,
    points_masses,
)
from .config import Config, initial_density
from .flow import follow, post_ln_field

__all__ = ["cell_masses_of", "long_pde", "pde_against_particles"]

TWO_PI = 2 * np.pi


def cell_masses_of(measure, cells: int) -> np.ndarray:
    """The counter's cell masses of a saved state: a CircleDensity (the grid phase) or the
    weighted nodes (an Empirical, after the switch)."""
    if isinstance(measure, CircleDensity):
        return density_masses(measure, cells)
    return points_masses(measure.points, cells, measure.weights)


def long_pde(
    config: Config,
    t1: float = 50.0,
    *,
    step: float = 0.5,
    save=None,
    start_grid: int = 1024,
    max_grid: int = 2**16,
    follow: bool = True,
    quadrature: float = 1e-6,
) -> dict:
    """The PDE from the study's ρ₀ at ``config.beta`` to ``t1``, saved every ``step`` or at
    the times ``save`` (in [0, t1]) when given (``follow`` and ``quadrature`` as in
    :func:`tpde.flows.integrate_circle`).

    Returns
    -------
    dict
        ``status``, ``end`` (the time reached), ``unresolved`` (None or the cause),
        ``refinements`` [(t, M)], ``switch`` (time, or None), ``grids`` (per save; the
        nodes after a switch), ``seconds`` and ``steps`` per grid (key −n: the n followed
        nodes), ``mass_error``, ``clipped_mass``, ``quadrature``, ``times``, ``counts``
        and ``masses`` (the clusters' masses) per save, ``lifetimes`` and ``merges`` of
        the count (``lifetimes`` of the cluster counter, shortest ``config.min_plateau``).
    """
    if save is None:
        times = np.arange(0.0, t1 + step / 2, step)
        times[-1] = min(times[-1], t1)
    else:
        times = np.asarray(save, dtype=float)
    rho0 = initial_density(config, config.beta, start_grid)
    run = integrate_circle(
        post_ln_field(config.beta),
        rho0,
        t1,
        save=times,
        max_grid=max_grid,
        follow=follow,
        quadrature=quadrature,
    )
    masses = [
        cluster_masses(
            cell_masses_of(m, config.cells), config.window, config.level, config.min_share
        )
        for m in run.measures
    ]
    counts = [len(m) for m in masses]
    saved = run.times.numpy()
    return {
        "status": str(run.status.item()),
        "end": float(saved[-1]),
        "unresolved": run.stats["unresolved"],
        "refinements": run.stats["refinements"],
        "switch": run.stats["switch"],
        "grids": run.stats["grids"],
        "seconds": run.stats["seconds"],
        "steps": run.stats["steps"],
        "mass_error": run.stats["mass_error"],
        "clipped_mass": run.stats["clipped_mass"],
        "quadrature": run.stats["quadrature"],
        "times": saved.tolist(),
        "counts": counts,
        "masses": masses,
        "lifetimes": lifetimes(saved, counts, config.min_plateau),
        "merges": merges(saved, counts, config.min_plateau),
        "_trajectory": run,
    }


def _paired(ours: list, theirs: list) -> list[tuple[float, float]] | None:
    """(mass difference, arc between centres) of each of ``ours`` (mass, centre) with the
    nearest of ``theirs``; None when the counts differ."""
    if len(ours) != len(theirs) or not ours:
        return None
    out = []
    for mass, centre in ours:
        arcs = [abs((c - centre + np.pi) % TWO_PI - np.pi) for _, c in theirs]
        j = int(np.argmin(arcs))
        out.append((theirs[j][0] - mass, arcs[j]))
    return out


def pde_against_particles(
    config: Config,
    n: int,
    t1: float,
    *,
    step: float = 0.5,
    start_grid: int = 256,
    max_grid: int = 2048,
    seed: int = 0,
    quadrature: float = 1e-6,
) -> dict:
    """The PDE's clusters (mass, centre) against those of ``n`` particles drawn from the same
    ρ₀ (:meth:`~tpde.measures.CircleDensity.sample`), at every save.

    The particles follow dopri5 (``config.rtol``, ``config.atol``; the study's
    ``follow`` of run.py). Their sampling noise, |ĉ_k| ~ 1/√n, must
    be small against the PDE's modes a/2 for the two to form the same clusters: n ≫ 4/a².

    Returns
    -------
    dict
        ``times``; ``pde`` and ``particles`` the (mass, centre) lists per save;
        ``pairs`` per save: [(particle mass − PDE mass, arc between centres)] with each PDE
        cluster paired to the nearest particle cluster, or None where the counts differ;
        ``pde_status``, ``pde_end``.
    """
    pde = long_pde(
        config, t1, step=step, start_grid=start_grid, max_grid=max_grid, quadrature=quadrature
    )
    times = np.asarray(pde["times"])
    counter = (config.window, config.level, config.min_share)
    ours = [
        clusters(cell_masses_of(m, config.cells), *counter) for m in pde["_trajectory"].measures
    ]
    rho0 = initial_density(config, config.beta, start_grid)
    cloud = Empirical(rho0.sample(n, generator=torch.Generator().manual_seed(seed)))
    theirs: list = [None] * len(times)

    def visit(j, mu):
        theirs[j] = clusters(points_masses(mu.points, config.cells), *counter)

    follow(config, post_ln_field(config.beta), cloud, times, visit)
    return {
        "times": times.tolist(),
        "pde": ours,
        "particles": theirs,
        "pairs": [
            _paired(a, b) if b is not None else None for a, b in zip(ours, theirs, strict=True)
        ],
        "pde_status": pde["status"],
        "pde_end": pde["end"],
    }
