"""The twisted Wasserstein distance of softmax attention, frozen at a reference (MATH.md §5).

[ours] Softmax attention is Γ = V A^{-T} ∇ log Z_μ with Z_μ(x) = ∫ e^{yᵀAx} dμ(y). Take A
symmetric, the mobility M := V A⁻¹ symmetric and definite, and s = ±1 with sM ≻ 0. The metric
tensor at μ is g_μ(v, w) = ∫ Z_μ(x) ⟨(sM)⁻¹ v(x), w(x)⟩ dμ(x) and d_{A,V} its Benamou–Brenier
distance; the softmax PDE is then s · grad_g of E(μ) = ½ ∬ e^{yᵀAx} dμ dμ.

d_{A,V} itself, with Z_μ changing along the path, has no closed form and is not computed
here. What is computable, and what this module computes, is the distance with the metric
frozen at a reference measure ρ:

    d_ρ(μ, ν)² = min_{π ∈ Π(μ, ν)} ∫ Z_ρ(x) (x − y)ᵀ (sM)⁻¹ (x − y) dπ(x, y),

the proximal term of the twisted JKO step. Without a reference (Z ≡ 1) it is W2 after the
change of variables x ↦ (sM)^{-1/2} x: exact, symmetric, and in closed form on Gaussians
(Bures). With a reference, Z_ρ weights the source point x, so d_ρ(μ, ν) ≠ d_ρ(ν, μ) in
general; it is computed exactly on particles (network simplex on the weighted cost, or the
identity coupling of a particle flow) and has no closed form on Gaussians (Z_ρ makes the
cost non-quadratic), where it raises.
"""

from __future__ import annotations

import math

import torch

from tpde import _lu as lu
from tpde._linalg import sqrtm_psd, symmetrize
from tpde._validation import as_tensor, check_choice, check_finite
from tpde.measures import Gaussian
from tpde.metrics._common import (
    check_pair_kinds,
    gaussian_pair,
    is_particle_like,
    kind,
    particle_pair,
    raise_mixed,
)
from tpde.metrics.bures import bures_squared, safe_sqrt
from tpde.metrics.mobility import NotAGradientFlow, log_partition, mobility
from tpde.metrics.wasserstein import (
    MAX_ITER,
    emd_cost,
    squared_distances,
    w2_squared_particles,
)

__all__ = ["log_partition", "mobility", "twisted_w2"]

COUPLINGS = ("optimal", "identity")


def _matrix(value, name: str, d: int, like: torch.Tensor) -> torch.Tensor:
    matrix = as_tensor(value, name, dtype=like.dtype, device=like.device)
    if matrix.shape != (d, d):
        raise ValueError(
            f"twisted_w2: {name} must have shape ({d}, {d}) to match the measures; received "
            f"{tuple(matrix.shape)}."
        )
    check_finite(matrix, name)
    return matrix


def _mobility(M, A, V, d: int, like: torch.Tensor) -> torch.Tensor:
    """The positive definite sM from M or from M = V A⁻¹ (:mod:`tpde.metrics.mobility`)."""
    if M is not None and V is not None:
        raise ValueError(
            "twisted_w2: pass either the mobility M or the pair (A, V) with M = V A⁻¹, not "
            "both M and V."
        )
    if M is None and (A is None or V is None):
        raise ValueError(
            "twisted_w2 needs the mobility: pass M (symmetric definite) or A (symmetric) and "
            "V with M = V A⁻¹ symmetric definite. M = I is plain W2."
        )
    try:
        if M is not None:
            return mobility(M=_matrix(M, "M", d, like))[0]
        return mobility(_matrix(A, "A", d, like), _matrix(V, "V", d, like))[0]
    except NotAGradientFlow as err:
        raise NotAGradientFlow(
            f"twisted_w2: {err}. The softmax flow is a twisted gradient flow only for A "
            "symmetric and M = V A⁻¹ symmetric definite (MATH.md §5)."
        ) from None


def _check_reference(reference, d: int, A) -> None:
    if A is None:
        raise ValueError(
            "twisted_w2: a reference measure needs the interaction matrix A for its weight "
            "Z_ρ(x) = ∫ exp(yᵀAx) dρ(y); pass A (and M, or V with M = V A⁻¹)."
        )
    ok = is_particle_like(reference) or (
        isinstance(reference, Gaussian) and reference.batch_shape == ()
    )
    if not ok:
        raise TypeError(
            f"twisted_w2: reference must be an Empirical measure, a grid or a single "
            f"Gaussian; received {kind(reference)}."
        )
    if reference.dim != d:
        raise ValueError(
            f"twisted_w2: the reference lives in dimension {reference.dim}, the measures in {d}."
        )


def _weighted(x, a, y, b, root_inv, log_z, coupling: str) -> torch.Tensor:
    """d_ρ² on particles: costs Z(x_i)|W(x_i − y_j)|², scaled by max Z for the solver."""
    top = log_z.detach().max()
    # exp(top) times squared distances must stay finite: keep 10 nats of headroom.
    if not bool(torch.isfinite(top)) or float(top) > math.log(torch.finfo(x.dtype).max) - 10:
        raise ValueError(
            f"twisted_w2: the reference weight Z_ρ = ∫ exp(yᵀAx) dρ overflows at the measure's "
            f"points (max log Z = {float(top):.3g}); rescale A or the points."
        )
    z = torch.exp(log_z - top)
    xw, yw = x @ root_inv, y @ root_inv  # root_inv symmetric
    if coupling == "identity":
        return torch.exp(top) * (a * z * ((xw - yw) ** 2).sum(-1)).sum()
    cost = z[:, None] * squared_distances(xw, yw)
    return torch.exp(top) * emd_cost(cost, a, b, max_iter=MAX_ITER, fname="twisted_w2")


def _check_identity(x, a, y, b) -> None:
    if x.shape != y.shape or not torch.allclose(a.detach(), b.detach(), rtol=0, atol=1e-12):
        raise ValueError(
            f"twisted_w2: coupling='identity' pairs particle i of mu with particle i of nu; it "
            f"needs equal sizes and equal weights; received {x.shape[0]} and {y.shape[0]} "
            "particles (or different weights). Use coupling='optimal'."
        )


def twisted_w2(
    mu,
    nu,
    *,
    M=None,
    A=None,
    V=None,
    reference=None,
    coupling: str = "optimal",
) -> torch.Tensor:
    """Twisted Wasserstein distance d_ρ(μ, ν) with mobility M (or M = V A⁻¹), MATH.md §5.

    d_ρ(μ, ν)² = min_π ∫ Z_ρ(x) (x − y)ᵀ(sM)⁻¹(x − y) dπ, Z_ρ(x) = ∫ e^{yᵀAx} dρ(y), and
    Z ≡ 1 when ``reference`` is None (see the module docstring for what this is and is not).

    Parameters
    ----------
    mu, nu : Gaussian (both) or particle-like (both: Empirical, grids)
    M : tensor (d, d), optional
        Symmetric definite mobility; s = ±1 is chosen so that sM ≻ 0. M = I gives W2.
    A, V : tensor (d, d), optional
        Attention parameters: A symmetric interaction matrix, V value matrix; M = V A⁻¹
        (must be symmetric definite). A is also the exponent of Z_ρ.
    reference : Empirical, grid or single Gaussian, optional
        The measure ρ at which the metric is frozen. None: Z ≡ 1.
    coupling : {"optimal", "identity"}
        "optimal": minimise over couplings (exact, network simplex). "identity": particle i
        of μ moves to particle i of ν (a particle flow's own coupling, as in a particle JKO
        step): Σ_i w_i Z_ρ(x_i)|y_i − x_i|²_{(sM)⁻¹}.

    Returns
    -------
    tensor
        The distance (0-d; the batch shape for Gaussians without reference). Reduces to
        :func:`w2` for M = I and no reference. Differentiable as :func:`w2`.
    """
    check_choice(coupling, "coupling", COUPLINGS)
    pair = check_pair_kinds(mu, nu, "twisted_w2")
    if pair == "mixed":
        raise_mixed(
            mu,
            nu,
            "twisted_w2",
            "Compare two Gaussians (closed form without reference) or two particle clouds; "
            "sample a Gaussian explicitly with Empirical.from_gaussian(g, n, generator=...).",
        )
    if pair == "gaussian":
        m0, S0, m1, S1 = gaussian_pair(mu, nu, "twisted_w2")
        like, d = m0, m0.shape[-1]
    else:
        x, a, y, b = particle_pair(mu, nu, "twisted_w2")
        like, d = x, x.shape[1]
    sM = _mobility(M, A, V, d, like)
    root_inv = lu.inv(sqrtm_psd(sM))
    root_inv = symmetrize(root_inv)
    if reference is not None:
        _check_reference(reference, d, A)
    if pair == "gaussian":
        if reference is not None:
            raise ValueError(
                "twisted_w2: with a reference the cost Z_ρ(x)|x − y|² is not quadratic and "
                "the distance between Gaussians has no closed form. Computable: "
                "reference=None (Bures after x ↦ (sM)^(-1/2) x), or particles sampled from "
                "the Gaussians (Empirical.from_gaussian) with the reference."
            )
        if coupling == "identity":
            raise ValueError(
                "twisted_w2: coupling='identity' is for particles; Gaussians use the optimal "
                "(Monge) coupling."
            )
        W = root_inv
        squared = bures_squared(
            (W @ m0.unsqueeze(-1)).squeeze(-1), symmetrize(W @ S0 @ W),
            (W @ m1.unsqueeze(-1)).squeeze(-1), symmetrize(W @ S1 @ W),
        )  # fmt: skip
        return safe_sqrt(squared)
    if coupling == "identity":
        _check_identity(x, a, y, b)
    if reference is None:
        if coupling == "identity":
            return safe_sqrt((a * (((x - y) @ root_inv) ** 2).sum(-1)).sum())
        return safe_sqrt(w2_squared_particles(x @ root_inv, a, y @ root_inv, b))
    A = _matrix(A, "A", d, like)
    log_z = log_partition(reference, A, x, engine="dense")
    return safe_sqrt(_weighted(x, a, y, b, root_inv, log_z, coupling))
