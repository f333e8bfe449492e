"""Boundary checks shared by the metrics: measure kinds, pairs, dimensions, dtypes.

Grids are weighted particles to the particle metrics: any measure with a ``to_empirical()``
method (cell centres weighted by cell masses) is treated so.
"""

from __future__ import annotations

import torch

from tpde._validation import check_finite
from tpde.measures import Empirical, Gaussian, Grid, Measure

__all__ = [
    "as_empirical",
    "check_pair_kinds",
    "gaussian_pair",
    "is_grid",
    "is_particle_like",
    "kind",
    "particle_pair",
    "raise_mixed",
]


def is_grid(measure) -> bool:
    """Whether ``measure`` is a :class:`tpde.measures.Grid`, or a grid-like class of that name."""
    return isinstance(measure, Grid) or type(measure).__name__ == "Grid"


def is_particle_like(measure) -> bool:
    """Empirical measures, and measures that convert to one (grids via cell centres)."""
    return isinstance(measure, Empirical) or callable(getattr(measure, "to_empirical", None))


def kind(measure) -> str:
    """A short name of the measure's type for error messages."""
    if isinstance(measure, Gaussian) and measure.batch_shape:
        return f"Gaussian (batch shape {tuple(measure.batch_shape)})"
    return type(measure).__name__


def _check_measure(measure, name: str, fname: str) -> None:
    if not isinstance(measure, Measure) and not is_particle_like(measure):
        raise TypeError(
            f"{fname} takes tpde measures; {name} is a {type(measure).__name__}. Wrap points "
            "in tpde.measures.Empirical(points, weights) or moments in "
            "tpde.measures.Gaussian(mean, cov)."
        )


def _check_dims(d0: int, d1: int, fname: str) -> None:
    if d0 != d1:
        raise ValueError(
            f"{fname}: the two measures live in different dimensions ({d0} and {d1}); both "
            "must be measures on the same R^d."
        )


def _common_dtype(*tensors: torch.Tensor) -> torch.dtype:
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _check_device(a: torch.Tensor, b: torch.Tensor, fname: str) -> None:
    if a.device != b.device:
        raise ValueError(
            f"{fname}: the measures are on different devices ({a.device} and {b.device}); "
            "move one with measure.to(device)."
        )


def raise_mixed(mu, nu, fname: str, hint: str) -> None:
    """Raise for a pair of measure kinds that ``fname`` does not compare, saying what to call."""
    kinds = f"{kind(mu)} and {kind(nu)}"
    if is_grid(mu) or is_grid(nu):
        kinds += " (a Grid is compared as weighted cell centres, never with a Gaussian)"
    raise TypeError(f"{fname} does not compare a {kinds}. {hint}")


def gaussian_pair(g0, g1, fname: str):
    """Means and covariances of two Gaussians, broadcast to one batch shape and one dtype.

    Returns ``(m0, S0, m1, S1)`` with shapes (..., d) and (..., d, d).
    """
    for name, g in (("g0", g0), ("g1", g1)):
        if not isinstance(g, Gaussian):
            raise TypeError(
                f"{fname} takes two tpde.measures.Gaussian; {name} is a {kind(g)}. For "
                "particles use tpde.metrics.w2; for the Gaussian with a cloud's moments use "
                "Gaussian(mu.mean(), mu.cov())."
            )
    _check_dims(g0.dim, g1.dim, fname)
    m0, S0, m1, S1 = g0.mean(), g0.cov(), g1.mean(), g1.cov()
    _check_device(m0, m1, fname)
    for name, t in (("g0 mean", m0), ("g0 cov", S0), ("g1 mean", m1), ("g1 cov", S1)):
        check_finite(t, name)
    try:
        batch = torch.broadcast_shapes(g0.batch_shape, g1.batch_shape)
    except RuntimeError:
        raise ValueError(
            f"{fname}: the batch shapes {tuple(g0.batch_shape)} and {tuple(g1.batch_shape)} "
            "do not broadcast; index or unsqueeze the batched Gaussians so they do."
        ) from None
    dtype = _common_dtype(m0, m1)
    d = g0.dim
    return (
        m0.to(dtype).expand(*batch, d),
        S0.to(dtype).expand(*batch, d, d),
        m1.to(dtype).expand(*batch, d),
        S1.to(dtype).expand(*batch, d, d),
    )


def as_empirical(measure, name: str, fname: str) -> Empirical:
    """An Empirical measure, or the weighted cell centres of a measure with ``to_empirical()``."""
    if isinstance(measure, Empirical):
        emp = measure
    elif callable(getattr(measure, "to_empirical", None)):
        emp = measure.to_empirical()
    else:
        raise TypeError(f"{fname}: {name} must be an Empirical measure; received {kind(measure)}.")
    if emp.points.ndim != 2:
        raise ValueError(
            f"{fname}: {name} is a batch of {tuple(emp.points.shape[:-2])} particle clouds; "
            f"compare one cloud at a time ({name}[i]), e.g. in a loop over the batch."
        )
    check_finite(emp.points, f"{name} points")
    check_finite(emp.weights, f"{name} weights")
    return emp


def particle_pair(mu, nu, fname: str):
    """Points and weights of two particle-like measures in one dtype.

    Returns ``(x, a, y, b)`` with shapes (n, d), (n,), (m, d), (m,).
    """
    mu = as_empirical(mu, "mu", fname)
    nu = as_empirical(nu, "nu", fname)
    _check_dims(mu.dim, nu.dim, fname)
    _check_device(mu.points, nu.points, fname)
    dtype = _common_dtype(mu.points, nu.points)
    return (
        mu.points.to(dtype),
        mu.weights.to(dtype),
        nu.points.to(dtype),
        nu.weights.to(dtype),
    )


def check_pair_kinds(mu, nu, fname: str) -> str:
    """'gaussian' or 'particles' for a comparable pair; raise for anything else."""
    _check_measure(mu, "mu", fname)
    _check_measure(nu, "nu", fname)
    if isinstance(mu, Gaussian) and isinstance(nu, Gaussian):
        return "gaussian"
    if is_particle_like(mu) and is_particle_like(nu):
        return "particles"
    return "mixed"
