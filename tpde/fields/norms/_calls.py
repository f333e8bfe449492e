"""The calls the norm schemes make of their field: tokens on the sphere, the normalised
call, and the rounding test that keeps an exact zero velocity at zero (helpers of
:mod:`tpde.fields.norms.schemes`)."""

from __future__ import annotations

import torch

from tpde._scale_safe import safe_norm, unit
from tpde._validation import check_positive


def _check_on_sphere(mu, name: str, atol) -> None:
    norms = safe_norm(mu.points.detach())  # 1e200, not Inf, in the message
    atol = atol if atol is not None else 1e3 * torch.finfo(norms.dtype).eps
    low, high = torch.aminmax(norms)  # one pass: max | |x| − 1 | from the extremes
    worst = max(float(high) - 1, 1 - float(low))
    if not worst <= atol:  # NaN-safe (a NaN norm must not pass a guard)
        raise ValueError(
            f"{name} attention moves tokens on the unit sphere, but the tokens have norms up "
            f"to {worst:.3g} away from 1 (tolerance {atol:.3g}). Normalise them first: "
            "mu.normalized() (tpde.measures.Empirical.normalized), or draw them with "
            "tpde.measures.uniform_on_sphere."
        )


def _check_tangent(value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"tangent must be True or False; received {value!r}.")
    return value


def _check_atol(value):
    return None if value is None else check_positive(value, "atol")


def _on_sphere(field, t, mu, x, engine, info):
    """(Γ[N#μ](N(x)), N(x), N#μ) for the tangent sphere schemes: Γ[μ](x) on the sphere, and
    off it (where Runge–Kutta stages evaluate) the 0-homogeneous extension, so that a field
    with a sphere-only engine (softmax and exponential with A = βI on S¹ or S²: "spectral",
    "harmonics") keeps it at every stage; N(x) for the tangent projection and N#μ for the
    rounding test (each computed once)."""
    return _normalised_call(unit, field, t, mu, x, engine, info)


def _normalised_call(norm, field, t, mu, x, engine, info):
    """(Γ[N#μ](N(x)), N(x), N#μ): the field on normalised keys and queries. Where x is μ's
    own points tensor (a flow's call) N is applied once: the queries are the keys' tensor."""
    queries = norm(x)
    keys = mu.with_points(queries if x is mu.points else norm(mu.points))
    return field.particle_velocity(t, keys, queries, engine, info), queries, keys


def _resolved(field, t, mu, x, out: torch.Tensor) -> torch.Tensor:
    """Γ[μ](x) with every row at its rounding level set to 0: what PeriLN and NGPT normalise.

    N(Γ) turns any nonzero Γ into a unit vector, so a Γ that is the rounding of an exact 0
    (the regular simplex at β = 0: 6e-17) would move at unit speed where the law is
    stationary (tpde.theory). Γ_i is computed from terms of size at most S; the error of
    summing n terms and of a d-term inner product is at most γ_{n+d} S ≈ (n + d) u S (u the
    unit roundoff, Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1,
    §3.5), so a |Γ_i| at or below (n + d) u S is no direction and counts as 0. S, the scale
    of the terms: for a field with a softmax form (Γ an average of the values v_j = V y_j +
    b_v) the largest |v_j|; for any other field the largest |Γ_j| over the evaluated points
    (a zero among moving tokens is recognised; a cloud whose every velocity is rounding
    noise is recognised only through the softmax form).
    """
    scale = _term_scale(field, t, mu, x)
    scale = safe_norm(out).amax(-1) if scale is None else scale
    n = mu.points.shape[-2]
    floor = (n + out.shape[-1]) * (torch.finfo(out.dtype).eps / 2) * scale
    return torch.where(safe_norm(out, keepdim=True) > floor[..., None, None], out, 0.0)


def _term_scale(field, t, mu, x):
    """The largest value |v_j| = |V y_j + b_v| a field averages (batch shape), or None.

    A softmax form gives its values; a field whose velocity is the sum of its children's
    (``sums_children``: a sum, a parallel block) the sum over its children, and a multi-head
    field the sum over its heads of the head's scale times |W_h| (Frobenius, a bound on the
    operator norm), plus |b_O|. Any other field: None (unknown)."""
    if field.supports("softmax_form"):
        form = field.softmax_form(t, mu, x)
        return safe_norm(form.finish(form.points)).amax(-1)
    if not field.sums_children:
        return None
    scales = [_term_scale(part, t, mu, x) for part in field.children()]
    if any(scale is None for scale in scales):
        return None
    W, bias = field.children_output(t, x)
    if W is not None:
        gains = safe_norm(W.flatten(-2), keepdim=False)  # (..., H)
        scales = [scale * gains[..., h] for h, scale in enumerate(scales)]
    total = sum(scales)
    return total if bias is None else total + safe_norm(bias)


def _pre_velocity(norm, field, t, mu, x, engine, info) -> torch.Tensor:
    """Γ[N#μ](N(x)): the field sees normalised keys and queries (every pre-norm scheme)."""
    return _normalised_call(norm, field, t, mu, x, engine, info)[0]
