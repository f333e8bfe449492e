r"""W1 on the unit circle with the arc-length cost, exactly, through distribution functions.

For probability measures μ, ν on S¹ = R/2πZ and the geodesic (arc-length) cost,

    W1(μ, ν) = min_{c ∈ R} ∫_0^{2π} |F_μ(θ) − F_ν(θ) − c| dθ,

F the distribution functions from the angle 0 (Rabin, Delon, Gousseau, "Transportation
distances on the circle", J. Math. Imaging Vis. 41, 2011, Thm 2.3): the minimiser c* is
a median of G = F_μ − F_ν under the Lebesgue measure. Here G is piecewise linear with
jumps — particles (:class:`~tpde.measures.Empirical` on S¹) have a staircase F, a
:class:`~tpde.measures.CircleDensity` has F exact at its grid angles (:meth:`cdf`) and
linear between them (its cell masses exact, each spread evenly over the cell, within
2π·h²max|ρ'|/8 of the interpolant's W1). On the knots y_0 = 0 < … < y_Q = 2π where
either F has a jump or a kink, G runs linearly from s_q to e_q over a length L_q, so

    φ(c) = Σ_q L_q ∫_0^1 |s_q + (e_q − s_q)u − c| du

is a convex piecewise-quadratic function whose derivative
φ'(c) = Σ_q L_q (2·P_q(G < c) − 1) is piecewise linear and nondecreasing, with jumps at the
values of flat segments. The median is found exactly: bisection over the sorted 2Q
breakpoints of φ' (φ' summed directly at each), then the root of φ' where it is linear;
then φ(c*) in closed form per segment. Cost O((n + M) log(n + M)).
"""

from __future__ import annotations

import math

import torch

from tpde._validation import check_measure_finite
from tpde.measures import Empirical
from tpde.measures.circle import CircleDensity

__all__ = ["w1_circle"]

TWO_PI = 2 * math.pi


def _knots_empirical(mu: Empirical) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(knots x_p in [0, 2π) with x_0 = 0, F(x_p+), F(x_{p+1}−)) of a cloud on S¹."""
    if mu.points.ndim != 2 or mu.dim != 2:
        raise ValueError(
            f"w1_circle compares one cloud on the circle S¹ ⊂ R²: points of shape (n, 2); "
            f"received shape {tuple(mu.points.shape)}. Index a batch element, mu[i]."
        )
    points = mu.points.detach().to(torch.float64)
    radius = points.norm(dim=-1)
    worst = float((radius - 1).abs().max())
    tolerance = 1e3 * torch.finfo(mu.dtype).eps
    if not worst <= tolerance:  # NaN-safe (finite above; a guard must not pass NaN)
        raise ValueError(
            f"w1_circle needs tokens on the unit circle: their norms are up to {worst:.3g} "
            f"away from 1 (tolerance {tolerance:.3g}). Normalise them, points / "
            "points.norm(dim=-1, keepdim=True)."
        )
    angles = torch.remainder(torch.atan2(points[:, 1], points[:, 0]), TWO_PI)
    angles = torch.where(angles >= TWO_PI, 0.0, angles)
    weights = mu.weights.detach().to(torch.float64)
    knots, inverse = torch.unique(torch.cat([angles.new_zeros(1), angles]), return_inverse=True)
    mass = torch.zeros_like(knots).index_add_(0, inverse[1:], weights)
    right = torch.cumsum(mass, 0) / weights.sum()
    return knots, right, right


def _knots_density(rho: CircleDensity) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(knots, F(x_p+), F(x_{p+1}−)) of a grid density: 0, then its angles in (0, 2π)."""
    M, h = rho.size, rho.spacing
    F = rho.cdf().detach().to(torch.float64)
    F = F / F[-1]  # F_j for j = 0 … M, F_M = 1
    start = math.fmod(-rho.offset, TWO_PI)
    r = (start + TWO_PI if start < 0 else start) / h  # the angle 0 at index r ∈ [0, M)
    j0 = min(math.floor(r), M - 1)
    at_zero = F[j0] + (r - j0) * (F[j0 + 1] - F[j0])
    j = torch.arange(j0 + 1, j0 + M + 1, device=F.device)
    values = F[j % M] + (j >= M).to(F.dtype) - at_zero  # extended F_{j+M} = F_j + 1
    positions = (j.to(F.dtype) - r) * h
    keep = positions < TWO_PI * (1 - 1e-15)  # a node at 2π is the knot 0
    knots = torch.cat([positions.new_zeros(1), positions[keep]])
    right = torch.cat([values.new_zeros(1), values[keep]])
    return knots, right, torch.cat([right[1:], right.new_ones(1)])


def _knots(measure, name: str):
    if isinstance(measure, CircleDensity | Empirical):
        check_measure_finite(measure, f"w1_circle's {name}")
    if isinstance(measure, CircleDensity):
        return _knots_density(measure)
    if isinstance(measure, Empirical):
        return _knots_empirical(measure)
    raise TypeError(
        f"w1_circle compares measures on the circle: Empirical tokens on S¹ (points (n, 2)) "
        f"or CircleDensity; received {type(measure).__name__} as {name}."
    )


def _evaluate(knots, right, left_next, y) -> tuple[torch.Tensor, torch.Tensor]:
    """(F(y+), F(y−)) at sorted points y ∈ [0, 2π) of a piecewise-linear F with jumps."""
    p = torch.searchsorted(knots, y, right=True) - 1
    ends = torch.cat([knots[1:], knots.new_full((1,), TWO_PI)])
    frac = (y - knots[p]) / (ends[p] - knots[p])
    inside = right[p] + frac * (left_next[p] - right[p])
    on_knot = y == knots[p]
    before = torch.cat([left_next.new_zeros(1), left_next[:-1]])  # F(x_p−), F(0−) = 0
    return torch.where(on_knot, right[p], inside), torch.where(on_knot, before[p], inside)


def _slope(low, high, length, c: float, right: bool) -> float:
    """φ'(c+) (``right``) or φ'(c−): Σ_q L_q (2·P_q(G ≤ c or G < c) − 1), summed directly."""
    flat = high <= low
    width = torch.where(flat, 1.0, high - low)
    below = ((c - low) / width).clamp(0, 1)
    step = (low <= c) if right else (low < c)
    share = torch.where(flat, step.to(low.dtype), below)
    return float((length * (2 * share - 1)).sum())


def _median(start, end, length) -> float:
    """argmin_c Σ_q L_q ∫_0^1 |s_q + (e_q − s_q)u − c| du (module notes).

    The smallest knot c_k of φ' (a segment's end value) with φ'(c_k+) ≥ 0, by bisection over
    the sorted knots with φ' summed directly at each (no cumulative sums: a nearly flat
    segment's slope 2L/Δ would drown them in rounding); then the root of φ', linear
    between c_{k−1} and c_k, or c_k itself where φ' jumps over 0."""
    low, high = torch.minimum(start, end), torch.maximum(start, end)
    where = torch.unique(torch.cat([low, high]))
    lo, hi = 0, len(where) - 1  # φ'(max+) = ΣL > 0: the answer exists
    while lo < hi:
        mid = (lo + hi) // 2
        if _slope(low, high, length, float(where[mid]), True) >= 0:
            hi = mid
        else:
            lo = mid + 1
    b = float(where[lo])
    if lo == 0 or _slope(low, high, length, b, False) <= 0:
        return b
    a = float(where[lo - 1])
    A, B = _slope(low, high, length, a, True), _slope(low, high, length, b, False)
    return min(max(a + (-A) * (b - a) / (B - A), a), b)


def _cost(start, end, length, c) -> torch.Tensor:
    """Σ_q L_q ∫_0^1 |s_q + (e_q − s_q)u − c| du, exactly."""
    low, high = torch.minimum(start, end) - c, torch.maximum(start, end) - c
    width = high - low
    straddles = (low < 0) & (high > 0)
    safe = torch.where(straddles, width, 1.0)
    split = (high**2 + low**2) / (2 * safe)
    one_side = (0.5 * (low + high)).abs()
    return (length * torch.where(straddles, split, one_side)).sum()


def w1_circle(mu, nu) -> torch.Tensor:
    r"""W1(μ, ν) on the unit circle with the arc-length cost, exact (module notes).

    Parameters
    ----------
    mu, nu : :class:`~tpde.measures.Empirical` (one cloud, points (n, 2) on the unit circle,
        any weights) or :class:`~tpde.measures.CircleDensity` (read as its exact cell masses,
        each spread evenly over its cell).

    Returns
    -------
    0-d float64 tensor in [0, π] (π: two antipodal Diracs); detached (no gradient).

    Notes
    -----
    Two Diracs at angular distance δ ≤ π: W1 = δ. The uniform law against a Dirac: π/2.
    A rotation by α of either measure moves W1 by at most |α|. Equals POT's
    ``ot.wasserstein_circle(u/2π, v/2π, p=1)``·2π on particles.
    """
    a, b = _knots(mu, "mu"), _knots(nu, "nu")
    knots = torch.unique(torch.cat([a[0], b[0].to(a[0].device)]))
    ra, la = _evaluate(*a, knots)
    rb, lb = _evaluate(*(t.to(knots.device) for t in b), knots)
    start = ra - rb  # G(y_q+)
    end = torch.cat([la[1:] - lb[1:], knots.new_zeros(1)])  # G(y_{q+1}−); G(2π−) = 1 − 1
    length = torch.diff(knots, append=knots.new_full((1,), TWO_PI))
    c = _median(start, end, length)
    return _cost(start, end, length, c)
