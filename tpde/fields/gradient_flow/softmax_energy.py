r"""The softmax energy E(μ) = ½ ∬ e^{yᵀAx} dμ(x) dμ(y), its first variation and domain.

MATH.md §5 [ours]: with A symmetric, δE/δμ = Z_μ(x) = ∫ e^{yᵀAx} dμ(y); with M := V A⁻¹
symmetric definite and s = ±1 such that sM ≻ 0, the metric g_μ(v, w) = ∫ Z_μ ⟨(sM)⁻¹v, w⟩ dμ
gives grad_g E = sM ∇Z_μ / Z_μ and Γ = s · grad_g E: the softmax PDE is the gradient
*ascent* of E when M ≻ 0 and its *descent* when M ≺ 0. :class:`~tpde.fields.Softmax`
exposes these functions as its "gradient_flow" capability.
"""

from __future__ import annotations

import math

import torch

from tpde._engines import check_engine, logsumexp, softmax_average
from tpde._linalg import psd_factor, symmetrize
from tpde.fields.forms import key_log_weights
from tpde.fields.params import check_no_bias
from tpde.measures import Gaussian, Grid
from tpde.metrics.mobility import log_partition

# The field's energy functions, imported from here by Softmax (no package-level names).
__all__: list[str] = []

_LOG2 = math.log(2.0)


def _interaction(field, t: float, like: torch.Tensor):
    """(A, V) of the field at time t, in ``like``'s dtype and device."""
    p = field.params.at(t, like=like)
    return p.A, p.V


def _particles(mu):
    """Empirical view of particles and grids (a grid: its cell centres with their masses)."""
    return mu.to_empirical() if isinstance(mu, Grid) else mu


def softmax_log_partition(field, mu, x, *, t: float = 0.0, engine: str = "auto", transpose=False):
    """log Z_μ(x) = log ∫ e^{yᵀAx} dμ(y) at points x (m, d); shape (m,).

    ``transpose=True`` uses Aᵀ (the partition function of the keys' side). Gaussian μ: the
    tilt lemma, αᵀAx + ½ xᵀAᵀΣAx (MATH.md §3); particles and grids: one log-sum-exp
    reduction on the chosen engine.
    """
    A, _ = _interaction(field, t, x)
    return log_partition(mu, A.mT if transpose else A, x, engine=engine)


def _gaussian_log_energy(mean, cov, A):
    """(log E, ρ²) of the softmax energy of N(α, Σ): see :func:`softmax_energy`."""
    L = psd_factor(cov)
    P = A.mT @ cov @ A
    H = symmetrize(L.mT @ P @ L)
    eye = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
    rho2 = torch.linalg.eigvalsh(H.detach())[..., -1]
    chol, info = torch.linalg.cholesky_ex(eye - H)
    inside = (info == 0) & (rho2 < 1)
    # Outside the domain the value is replaced by +inf; keep the graph finite there.
    chol = torch.where(inside[..., None, None], chol, eye)
    b = (A.mT @ mean.unsqueeze(-1)).squeeze(-1) + (P @ mean.unsqueeze(-1)).squeeze(-1)
    c = (L.mT @ b.unsqueeze(-1)).squeeze(-1)
    solved = torch.cholesky_solve(c.unsqueeze(-1), chol).squeeze(-1)
    logdet = 2 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    quad_a = (mean * (A @ mean.unsqueeze(-1)).squeeze(-1)).sum(-1)
    quad_p = (mean * (P @ mean.unsqueeze(-1)).squeeze(-1)).sum(-1)
    log_e = quad_a + 0.5 * quad_p + 0.5 * (c * solved).sum(-1) - 0.5 * logdet - _LOG2
    return torch.where(inside, log_e, torch.full_like(log_e, math.inf)), rho2


def softmax_domain(field, g: Gaussian, *, t: float = 0.0) -> torch.Tensor:
    """ρ = ‖Σ^{1/2} A Σ^{1/2}‖₂ for a Gaussian: the softmax energy is finite iff ρ < 1."""
    A, _ = _interaction(field, t, g.mean())
    _, rho2 = _gaussian_log_energy(g.mean(), g.cov(), A)
    return rho2.clamp_min(0).sqrt()


def softmax_energy(field, mu, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
    r"""Softmax interaction energy E(μ) = ½ ∬ e^{yᵀAx} dμ(x) dμ(y) (MATH.md §5).

    Parameters
    ----------
    field : Softmax (its A = scale·KᵀQ at time t).
    mu : Empirical, Grid (cell centres weighted by their masses) or Gaussian (batched).
    engine : pairwise engine of the particle sum (first-order gradients on every engine;
        "dense" or "chunked" for second derivatives).

    Returns
    -------
    tensor, 0-d (particles) or the Gaussian's batch shape. Differentiable.

    Notes
    -----
    Particles: E = ½ Σ_i w_i Z(x_i) with log Z(x_i) = LSE_j(x_jᵀAx_i + log w_j) on the engine,
    combined in the log domain (self-interaction included).

    Gaussian N(α, Σ), Σ = LLᵀ [derived]: E_y[e^{yᵀAx}] = exp(αᵀAx + ½xᵀPx), P = AᵀΣA, and
    with x = α + Lz, H = LᵀPL and c = Lᵀ(Aᵀα + Pα),

        E = ½ det(I − H)^{-1/2} exp(αᵀAα + ½αᵀPα + ½ cᵀ(I − H)⁻¹c),

    finite iff I − H ≻ 0, i.e. ρ = ‖Σ^{1/2}AΣ^{1/2}‖₂ < 1 (:func:`softmax_domain`); +inf
    beyond (never NaN). Twice differentiable inside the domain (Cholesky, no square root of
    a matrix unless Σ is singular).
    """
    engine = check_engine(engine)
    check_no_bias(field)
    if isinstance(mu, Gaussian):
        A, _ = _interaction(field, t, mu.mean())
        return _gaussian_log_energy(mu.mean(), mu.cov(), A)[0].exp()
    mu = _particles(mu)
    points, log_w = key_log_weights(mu)
    A, _ = _interaction(field, t, points)
    log_z = logsumexp(points @ A.mT, points, log_w, engine=engine)
    energy = (torch.logsumexp(log_w + log_z, dim=-1) - _LOG2).exp()
    _check_finite_energy(energy, mu)
    return energy


def _check_finite_energy(energy: torch.Tensor, mu) -> None:
    """The particle energy is finite for finite tokens unless the dtype overflows."""
    if not bool(torch.isfinite(energy).all()):
        largest = float(mu.points.detach().abs().max())
        raise OverflowError(
            f"the softmax energy overflowed in {energy.dtype}: E = ½∬e^(yᵀAx) of these tokens "
            f"(largest |coordinate| {largest:.3g}) exceeds its range. Compute in float64, or "
            "rescale the tokens or A."
        )


def softmax_first_variation(field, mu, x, *, t: float = 0.0, engine: str = "auto"):
    """δE/δμ(x) = ½(Z_A(x) + Z_{Aᵀ}(x)) (= Z_μ(x) for A symmetric), shape (m,)."""
    z = softmax_log_partition(field, mu, x, t=t, engine=engine).exp()
    A, _ = _interaction(field, t, x)
    if bool(torch.equal(A, A.mT)):
        return z
    z_t = softmax_log_partition(field, mu, x, t=t, engine=engine, transpose=True).exp()
    return 0.5 * (z + z_t)


def softmax_first_variation_grad(field, mu, x, *, t: float = 0.0, engine: str = "auto"):
    """∇_x δE/δμ(x) = ½(Z_A(x) Aᵀ m_A(x) + Z_{Aᵀ}(x) A m_{Aᵀ}(x)), shape (m, d).

    m_A(x) = ∫ y e^{yᵀAx} dμ / Z_A(x) is the softmax average (on the engine for particles,
    α + ΣAx for a Gaussian). For A symmetric: ∇Z_μ(x) = Z_μ(x) A m(x).
    """
    A, _ = _interaction(field, t, x)
    symmetric = bool(torch.equal(A, A.mT))
    if isinstance(mu, Gaussian):
        mean, cov = mu.mean(), mu.cov()
    else:
        points, log_w = key_log_weights(_particles(mu))
    total = 0
    for matrix in (A,) if symmetric else (A, A.mT):
        query = x @ matrix.mT
        if isinstance(mu, Gaussian):
            log_z = query @ mean + 0.5 * ((query @ cov) * query).sum(-1)
            average = mean + query @ cov
        else:
            log_z = logsumexp(query, points, log_w, engine=engine)
            average = softmax_average(query, points, points, key_bias=log_w, engine=engine)
        total = total + log_z.exp().unsqueeze(-1) * (average @ matrix)  # Z · Aᵀm (row form)
    return total if symmetric else 0.5 * total
