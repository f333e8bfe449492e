"""When a field's pairwise sum runs on a sphere engine: isotropic tokens on S¹ ("spectral",
Fourier series) or on S² ("harmonics", spherical harmonics)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tpde._engines import harmonics, spectral
from tpde.fields.calls import check_own, queries_are_keys
from tpde.measures import Empirical

__all__ = ["circle_route", "route_exp_sum", "route_softmax"]


@dataclass(frozen=True)
class _SphereEngine:
    """One sphere engine: its tokens' dimension and the functions the routing calls."""

    dim: int
    truncation: Callable  # (β, dtype, floor) -> K
    wins: Callable  # (n, K, batch) -> bool: the "auto" rule
    softmax_average: Callable  # (x, weights, β) -> Σ_j w_j k_ij x_j / Σ_j w_j k_ij
    exp_sum: Callable  # (x, weights, β) -> Σ_j w_j e^{β⟨x_i, x_j⟩} x_j


#: The sphere engines: S¹ (d = 2, Fourier series) and S² (d = 3, spherical harmonics).
_ENGINES = {
    "spectral": _SphereEngine(2, spectral.truncation, spectral.pick_spectral,
                              spectral.softmax_average_spectral, spectral.exp_sum_spectral),
    "harmonics": _SphereEngine(3, harmonics.truncation,
                               lambda n, L, batch: harmonics.pick_harmonics(n, L),
                               harmonics.softmax_average_harmonics, harmonics.exp_sum_harmonics),
}  # fmt: skip
_ENGINE_OF_DIM = {engine.dim: name for name, engine in _ENGINES.items()}


def circle_route(field, mu: Empirical, x, engine: str, own=None):
    """(engine, β, v) when a sphere engine computes ``field``'s sum at x, else None.

    The sums Σ_j w_j e^{β⟨x_i, x_j⟩}(1, x_j) of Softmax and Exponential attention run on
    :mod:`tpde._engines.spectral` (d = 2, tokens on the unit circle) or
    :mod:`tpde._engines.harmonics` (d = 3, tokens on the unit sphere) when A = βI with
    β > 0 (constant, bias-free, outside autograd; one β per batch element), V = vI, x is
    μ's own tokens (``own``, as the caller says it:
    :func:`~tpde.fields.calls.queries_are_keys`) and every weight > 0. ``engine="auto"``
    takes them there when they win (:func:`~tpde._engines.spectral.pick_spectral`,
    :func:`~tpde._engines.harmonics.pick_harmonics`); ``engine="spectral"`` or
    ``"harmonics"`` where it does not apply raises a ValueError naming the condition that
    fails.

    Returns
    -------
    None, or ("spectral" or "harmonics", β of shape (...), v of shape (..., 1, 1)).
    """
    own = check_own(own, x, mu)
    if engine not in ("auto", "spectral", "harmonics"):
        return None
    name = _ENGINE_OF_DIM.get(x.shape[-1]) if engine == "auto" else engine
    if name is None:
        return None
    reason, route = _route(field.params, mu, x, engine == "auto", name, own)
    if reason is not None and engine != "auto":
        raise ValueError(
            f"engine '{engine}' does not apply to this {type(field).__name__} field: {reason}."
        )
    return None if route is None else (name, *route)


def route_softmax(route, x, weights):
    """The softmax average of :func:`circle_route`'s engine: v·Σ_j w_j k_ij x_j / Σ_j w_j k_ij."""
    name, beta, value = route
    return value * _ENGINES[name].softmax_average(x, weights, beta)


def route_exp_sum(route, x, weights):
    """The unnormalised sum of :func:`circle_route`'s engine: v·Σ_j w_j e^{β⟨x_i, x_j⟩} x_j."""
    name, beta, value = route
    return value * _ENGINES[name].exp_sum(x, weights, beta)


def _route(params, mu: Empirical, x, auto: bool, name: str, own):
    """(reason it does not apply or None, (β, v) or None) for engine ``name``."""
    scalar = params.isotropic_interaction(x)
    if scalar is None:
        return (
            "it needs a constant interaction A = scale·KᵀQ = βI (square Q and K, no biases, "
            "not a function of t, no gradient through Q, K, V)"
        ), None
    value = params.isotropic_value(x)
    if value is None:
        return "it needs V = vI (a multiple of the identity)", None
    engine = _ENGINES[name]
    if x.shape[-1] != engine.dim:
        return spectral.dimension_refusal(x.shape[-1], engine.dim), None
    if not queries_are_keys(own, x, mu):
        return (
            "it evaluates the field at μ's own tokens (the particle flow), not at other points "
            "x (nor at a Grid's cell centres: integrate particles on the circle instead)"
        ), None
    beta = scalar[..., 0, 0]
    if auto:
        weights = mu.weights.detach()
        if not (bool((beta > 0).all()) and bool((weights > 0).all())):
            return "β ≤ 0 or a weight of 0", None
        batch = torch.broadcast_shapes(x.shape[:-2], beta.shape)
        try:
            K = engine.truncation(float(beta.max()), x.dtype, float(weights.min() / weights.sum()))
        except ValueError as bound:  # β not finite, or past the engine's degree bound
            return str(bound), None
        if not engine.wins(x.shape[-2], K, math.prod(batch)):
            return "too few tokens to win", None
    reason = spectral.sphere_refusal(x, mu.weights, beta, engine.dim)
    return (reason, None) if reason is not None else (None, (beta, value))
