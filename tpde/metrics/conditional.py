"""Conditional Wasserstein distance between measures with token positions (MATH.md §5).

[ours] A token of masked (causal) attention is a pair (s, x), s ∈ [0, 1] its position, and
positions never move. For μ, ν with the same position marginal η,

    W_{2|η}(μ, ν)² = ∫ W2(μ_s, ν_s)² dη(s)          (reduction="mean")
    W_{∞|η}(μ, ν)  = sup_{s ∈ supp η} W2(μ_s, ν_s)    (reduction="max"),

where μ_s is the law of x given s: transport happens only within equal positions. For
particles, η is the set of distinct positions with their total masses, μ_s the particles at
position s with renormalised weights, and W_{2|η}² the η-weighted average of the per-position
W2². With a single position it is W2.
"""

from __future__ import annotations

import torch

from tpde._validation import check_choice
from tpde.measures import Empirical
from tpde.metrics._common import kind
from tpde.metrics.bures import safe_sqrt
from tpde.metrics.wasserstein import MAX_ITER, w2_squared_particles

__all__ = ["conditional_w2"]

REDUCTIONS = ("mean", "max")

# Distinct positions of the two measures are matched when they differ by at most this much:
# positions are usually i / (n − 1), computed identically in both measures.
POSITION_ATOL = 1e-9


def _groups(mu: Empirical):
    """Distinct positions with positive mass, their masses, and each particle's group index."""
    keys, inverse = torch.unique(mu.positions, return_inverse=True)
    mass = torch.zeros_like(keys).index_add_(0, inverse, mu.weights.detach())
    return keys, mass, inverse


def _check(mu, name: str) -> Empirical:
    if not isinstance(mu, Empirical):
        raise TypeError(
            f"conditional_w2 compares particles with positions; {name} is a {kind(mu)}. Build "
            "Empirical(points, weights, positions=...)."
        )
    if mu.positions is None:
        raise ValueError(
            f"conditional_w2: {name} has no positions. Pass positions=... (token index / "
            "(n − 1)) when building the Empirical, or use tpde.metrics.w2 for measures "
            "without positions."
        )
    return mu


def _match_marginals(mu: Empirical, nu: Empirical):
    """Groups of both measures after checking that their position marginals agree."""
    keys_mu, mass_mu, inv_mu = _groups(mu)
    keys_nu, mass_nu, inv_nu = _groups(nu)
    keep_mu, keep_nu = mass_mu > 0, mass_nu > 0
    k_mu, m_mu, k_nu, m_nu = keys_mu[keep_mu], mass_mu[keep_mu], keys_nu[keep_nu], mass_nu[keep_nu]
    tol = torch.finfo(mu.dtype).eps ** 0.5
    same_keys = k_mu.shape == k_nu.shape and bool(
        torch.allclose(k_mu, k_nu, rtol=0, atol=POSITION_ATOL)
    )
    if not same_keys or not bool(torch.allclose(m_mu, m_nu, rtol=0, atol=tol)):
        detail = (
            f"{k_mu.numel()} and {k_nu.numel()} distinct positions with mass"
            if not same_keys
            else f"masses differ by up to {float((m_mu - m_nu).abs().max()):.3g}"
        )
        raise ValueError(
            "conditional_w2: the position marginals of mu and nu differ "
            f"({detail}); the conditional distance transports only within equal positions "
            "and needs the same positions with the same total mass at each."
        )
    return (keys_mu, inv_mu, keep_mu), (keys_nu, inv_nu, keep_nu), m_mu


def conditional_w2(mu: Empirical, nu: Empirical, *, reduction: str = "mean") -> torch.Tensor:
    """Conditional Wasserstein distance W_{2|η}(μ, ν) for particles with positions.

    Parameters
    ----------
    mu, nu : Empirical with ``positions``
        Their position marginals (distinct positions and the mass at each, zero-mass
        positions ignored) must agree: positions within 1e-9, masses within √eps.
    reduction : {"mean", "max"}
        "mean": (∫ W2(μ_s, ν_s)² dη(s))^{1/2}, MATH.md §5. "max": sup_s W2(μ_s, ν_s).

    Returns
    -------
    0-d tensor, differentiable w.r.t. points (per-position W2 as in :func:`w2`).
    When every position holds one particle in each measure (a sequence of tokens) the
    per-position distance is |x_s − y_s| and no OT problem is solved.
    """
    check_choice(reduction, "reduction", REDUCTIONS)
    mu, nu = _check(mu, "mu"), _check(nu, "nu")
    if mu.dim != nu.dim:
        raise ValueError(
            f"conditional_w2: the measures live in different dimensions ({mu.dim} and {nu.dim})."
        )
    (_, inv_mu, keep), (_, inv_nu, keep_nu), eta = _match_marginals(mu, nu)
    dtype = torch.promote_types(mu.dtype, nu.dtype)
    x, a = mu.points.to(dtype), mu.weights.to(dtype)
    y, b = nu.points.to(dtype), nu.weights.to(dtype)
    # Group indices into the kept positions (same order in both after the check).
    rank_mu = torch.cumsum(keep.long(), 0) - 1
    rank_nu = torch.cumsum(keep_nu.long(), 0) - 1
    gx, gy = rank_mu[inv_mu], rank_nu[inv_nu]
    live_x, live_y = keep[inv_mu], keep_nu[inv_nu]
    x, a, gx = x[live_x], a[live_x], gx[live_x]
    y, b, gy = y[live_y], b[live_y], gy[live_y]
    count = eta.numel()
    if x.shape[0] == count and y.shape[0] == count:
        # One particle per position on both sides: W2(δ_x, δ_y) = |x − y|.
        order_x, order_y = torch.argsort(gx), torch.argsort(gy)
        per_position = ((x[order_x] - y[order_y]) ** 2).sum(-1)
    else:

        def within(k):  # W2² between the particles at position k (masks built once)
            ix, iy = gx == k, gy == k
            ax, by = a[ix], b[iy]
            return w2_squared_particles(
                x[ix], ax / ax.sum(), y[iy], by / by.sum(), max_iter=MAX_ITER
            )

        per_position = torch.stack([within(k) for k in range(count)])
    if reduction == "max":
        return safe_sqrt(per_position).max()
    return safe_sqrt((eta.to(dtype) * per_position).sum())
