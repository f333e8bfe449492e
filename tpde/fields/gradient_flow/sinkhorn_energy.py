r"""The Sinkhorn energy F(μ) = ½ OT_ε(μ, μ) (cost −yᵀAx) and its first variation.

MATH.md §5 [derived]: δF/δμ = f (the symmetric entropic potential), ∇f(x) = −A E_π[y | x].
With A symmetric and V = MA, M symmetric definite, Γ = V E_π[y | x] = −M ∇f, so the Sinkhorn
PDE is the gradient flow (descent) of sF in the metric of mobility sM without weight
(Z ≡ 1). Checked numerically (tests/fields/gradient_flow/test_energies.py): on Gaussians the
closure is Σ̇ = −2(M∇_ΣF Σ + Σ∇_ΣF M), α̇ = −M∇_αF to 1e-15, so MATH.md's sign (descent of F for
M ≻ 0) is right. :class:`~tpde.fields.Sinkhorn` exposes these functions as its
"gradient_flow" capability.
"""

from __future__ import annotations

import warnings

import torch

from tpde._engines import check_engine, logsumexp, softmax_average
from tpde.fields.attention.sinkhorn_solver import conditional_slope, sinkhorn_potential
from tpde.fields.forms import key_log_weights
from tpde.fields.params import check_no_bias
from tpde.measures import Empirical, Gaussian, Grid

# The field's energy functions, imported from here by Sinkhorn (no package-level names).
__all__: list[str] = []


def _interaction(field, t: float, like: torch.Tensor):
    """(A, V) of the field at time t, in ``like``'s dtype and device."""
    p = field.params.at(t, like=like)
    return p.A, p.V


def _particles(mu):
    """Empirical view of particles and grids (a grid: its cell centres with their masses)."""
    return mu.to_empirical() if isinstance(mu, Grid) else mu


def _sinkhorn_potentials(field, mu: Empirical, t: float, engine: str, info):
    """(points, log_w, A/ε, G): the converged column potential G, no gradient.

    The solve's :class:`SinkhornInfo` goes to ``info`` (an InnerSolves, or None); a missed
    tolerance warns :class:`SinkhornNotConverged`.
    """
    points, log_w = key_log_weights(mu)
    A, _ = _interaction(field, t, points)
    A = A / field.eps
    with torch.no_grad():
        G, report = sinkhorn_potential(
            points.detach(), log_w.detach(), A.detach(), iters=field.iters, tol=field.tol,
            engine=engine,
        )  # fmt: skip
    if info is not None:
        info.record(report)
    if report.converged is False:
        warnings.warn(report.warning(), stacklevel=4)
    return points, log_w, A, G


def _row_potential(points, log_w, A, G, engine: str) -> torch.Tensor:
    """F_i = −LSE_j(x_jᵀAx_i + G_j + log w_j) at the points, no gradient."""
    with torch.no_grad():
        return -logsumexp(
            points.detach() @ A.detach().mT, points.detach(), G + log_w, engine=engine
        )


def sinkhorn_energy(field, mu, *, t: float = 0.0, engine: str = "auto", info=None):
    r"""Sinkhorn energy F(μ) = ½ OT_ε(μ, μ), cost −yᵀAx (MATH.md §5).

    Gaussian: ½ :meth:`Sinkhorn.self_cost` (closed form, MATH.md §3; once differentiable:
    it takes a matrix square root). Particles and grids: the semi-dual at the converged
    column potential G (Sinkhorn to the field's ``tol``, no gradient through the
    iterations), F = ½ ε Σ_i w_i (F_i(x) + G_i) with F_i(x) = −LSE_j(x_jᵀAx_i/ε + G_j + log w_j)
    recomputed with gradients: the value is OT_ε/2 at the fixed point and, by the envelope
    theorem (the semi-dual is a maximum over G), its gradient in the points is exact:
    ∂F/∂x_i = −w_i A E_π[y | x_i] for A symmetric. A missed tolerance warns
    :class:`~tpde.fields.SinkhornNotConverged` and is recorded in ``info`` (an
    :class:`~tpde.fields.InnerSolves`, optional).
    """
    engine = check_engine(engine)
    check_no_bias(field)
    if isinstance(mu, Gaussian):
        return 0.5 * field.self_cost(mu, t=t)
    points, log_w, A, G = _sinkhorn_potentials(field, _particles(mu), t, engine, info)
    F = -logsumexp(points @ A.mT, points, G + log_w, engine=engine)
    return 0.5 * field.eps * (log_w.exp() * (F + G)).sum(-1)


def sinkhorn_first_variation(field, mu, x, *, t: float = 0.0, engine: str = "auto", info=None):
    """δF/δμ(x) = ½(f(x) + g(x)) with the entropic potentials extended to x, shape (m,).

    f(x) = −ε LSE_j(x_jᵀAx/ε + G_j + log w_j), g(y) = −ε LSE_i(yᵀAx_i/ε + F_i + log w_i);
    for A symmetric f = g + const. Particles and grids only.
    """
    if isinstance(mu, Gaussian):
        raise NotImplementedError(
            "sinkhorn_first_variation on a Gaussian is not implemented; its gradient is "
            "(sinkhorn_first_variation_grad), and the energy itself is in closed form."
        )
    points, log_w, A, G = _sinkhorn_potentials(field, _particles(mu), t, engine, info)
    F = _row_potential(points, log_w, A, G, engine)
    f = -logsumexp(x @ A.mT, points, G + log_w, engine=engine)
    g = -logsumexp(x @ A, points, F + log_w, engine=engine)
    return 0.5 * field.eps * (f + g)


def sinkhorn_first_variation_grad(field, mu, x, *, t: float = 0.0, engine: str = "auto", info=None):
    """∇δF/δμ(x) = −½(Aᵀ E_π[y | x] + A E_π[x | y = ·]), shape (m, d); −A E_π[y | x] for A
    symmetric. Gaussians: E_π[y | x] = α + SA(x − α) (:class:`Sinkhorn` notes)."""
    A_raw, _ = _interaction(field, t, x)
    if isinstance(mu, Gaussian):
        mean, cov = mu.mean(), mu.cov()
        row = mean + (x - mean) @ conditional_slope(cov, A_raw / field.eps).mT
        col = mean + (x - mean) @ conditional_slope(cov, A_raw.mT / field.eps).mT
    else:
        points, log_w, A, G = _sinkhorn_potentials(field, _particles(mu), t, engine, info)
        F = _row_potential(points, log_w, A, G, engine)
        row = softmax_average(x @ A.mT, points, points, key_bias=G + log_w, engine=engine)
        col = softmax_average(x @ A, points, points, key_bias=F + log_w, engine=engine)
    return -0.5 * (row @ A_raw + col @ A_raw.mT)
