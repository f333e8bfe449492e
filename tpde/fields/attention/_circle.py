"""When a field's pairwise sum runs on the spectral engine: isotropic tokens on the circle."""

from __future__ import annotations

import math

import torch

from tpde._engines.spectral import pick_spectral, spectral_refusal, truncation
from tpde.fields.base import queries_are_keys
from tpde.measures import Empirical

__all__ = ["circle_route"]


def circle_route(field, mu: Empirical, x, engine: str, own=None):
    """(β, v) when the spectral engine computes ``field``'s sum at x, else None.

    The sums Σ_j w_j e^{β⟨x_i, x_j⟩}(1, x_j) of Softmax and Exponential attention run on
    :mod:`tpde._engines.spectral` when A = βI with β > 0 (constant, bias-free, outside
    autograd; one β per batch element), V = vI, d = 2, x is μ's own tokens (``own``, as the
    caller says it: :func:`~tpde.fields.base.queries_are_keys`), every token on the unit
    circle and every weight > 0. ``engine="auto"`` takes it there when it wins
    (:func:`~tpde._engines.spectral.pick_spectral`); ``engine="spectral"`` where it does not
    apply raises a ValueError naming the condition that fails.

    Returns
    -------
    None, or β of shape (...) and v of shape (..., 1, 1) (the parameters' batch shape).
    """
    if engine not in ("auto", "spectral"):
        return None
    reason, route = _route(field.params, mu, x, engine == "auto", own)
    if reason is not None and engine == "spectral":
        raise ValueError(
            f"engine 'spectral' does not apply to this {type(field).__name__} field: {reason}."
        )
    return route


def _route(params, mu: Empirical, x, auto: bool, own):
    """(reason it does not apply or None, (β, v) or None)."""
    scalar = params.isotropic_interaction(x)
    if scalar is None:
        return (
            "it needs a constant interaction A = scale·KᵀQ = βI (square Q and K, no biases, "
            "not a function of t, no gradient through Q, K, V)"
        ), None
    value = params.isotropic_value(x)
    if value is None:
        return "it needs V = vI (a multiple of the identity)", None
    if x.shape[-1] != 2:
        return f"it needs tokens in d = 2 (the circle S¹); these have d = {x.shape[-1]}", None
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
        floor = float(weights.min() / weights.sum())
        K = truncation(float(beta.max()), x.dtype, floor)
        if not pick_spectral(x.shape[-2], K, math.prod(batch)):
            return "too few tokens to win", None
    reason = spectral_refusal(x, mu.weights, beta)
    return (reason, None) if reason is not None else (None, (beta, value))
