"""The circle PDE past its first clusters (issue 35): the study's initial density on refined
grids (:func:`tpde.flows.integrate_circle`), then along the characteristics, with the
cluster count, the clusters' masses and the grid at every save.

Measured (β = 5, SA, ρ₀ = (1 + a cos θ + a cos 3θ)/2π, a = 2·10⁻⁴, from M = 1024): see
:func:`long_pde` and the branch's report.
"""

from __future__ import annotations

import numpy as np

from tpde.flows import integrate_circle
from tpde.measures import CircleDensity

from ..common.circle_clusters import (
    cluster_masses,
    density_masses,
    lifetimes,
    merges,
    points_masses,
)
from .config import Config, initial_density
from .run import post_ln_field

__all__ = ["cell_masses_of", "long_pde"]


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
    start_grid: int = 1024,
    max_grid: int = 2**16,
    follow: bool = True,
    quadrature: float = 1e-6,
) -> dict:
    """The PDE from the study's ρ₀ at ``config.beta`` to ``t1``, saved every ``step``
    (``follow`` and ``quadrature`` as in :func:`tpde.flows.integrate_circle`).

    Returns
    -------
    dict: ``status``, ``end`` (the time reached), ``unresolved`` (None or the cause),
    ``refinements`` [(t, M)], ``switch`` (time, or None), ``grids`` (per save; the nodes
    after a switch), ``seconds`` and ``steps`` per grid (key −n: the n followed nodes),
    ``mass_error``, ``clipped_mass``, ``quadrature``, ``times``, ``counts`` and
    ``masses`` (the clusters' masses) per save, ``lifetimes`` and ``merges`` of the count
    (:func:`~experiments.common.circle_clusters.lifetimes`, shortest ``config.min_plateau``).
    """
    times = np.arange(0.0, t1 + step / 2, step)
    times[-1] = min(times[-1], t1)
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
