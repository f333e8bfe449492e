"""Sinkhorn attention: the doubly stochastic (entropic optimal transport) normalisation."""

from __future__ import annotations

import warnings

import torch

from tpde import _lu as lu
from tpde._engines import logsumexp, softmax_average
from tpde._linalg import sqrtm_psd, trace
from tpde._validation import check_positive
from tpde.fields.attention.sinkhorn_solver import (
    conditional_slope,
    entropic_D,
    sinkhorn_potential,
)
from tpde.fields.base import Field
from tpde.fields.forms import key_log_weights
from tpde.fields.gradient_flow.sinkhorn_energy import (
    sinkhorn_energy,
    sinkhorn_first_variation,
    sinkhorn_first_variation_grad,
)
from tpde.fields.params import QKV, qkv_interaction
from tpde.fields.registry import register
from tpde.measures import Empirical, Gaussian, Measure

__all__ = ["Sinkhorn"]

#: Iteration cap when ``iters`` is not given and a tolerance is.
DEFAULT_ITERS = 1000


@register("sinkhorn", head=False)
class Sinkhorn(Field):
    r"""Sinkhorn attention Γ[μ](x) = V E_π[y | x], π the entropic OT plan from μ to itself.

    Cost c(x, y) = −yᵀAx (A = scale·KᵀQ), regularisation ε:
    dπ = exp((f(x) + g(y) + yᵀAx)/ε) dμ(x) dμ(y) with both marginals μ (MATH.md §2).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Default 1/√k (the paper's Sinkhorn figures use scale 1, ε = 1: pass it).
    eps : float
        Entropic regularisation ε > 0, default 1 (the paper's). The kernel is e^{yᵀAx/ε}.
    iters : int, optional
        Cap on the row normalisations of a velocity call; default 1000. With ``tol=None``
        it is the exact number done (``iters=1`` is one row normalisation: softmax, the
        sinkformers observation).
    tol : float or None
        Stop when the column marginal error ‖Pᵀ1 − w‖₁ falls below ``tol`` (default 1e-6;
        rows are exact by construction). In float32 the rounding floor of this error is
        about 1e-7·max|score|: loosen ``tol`` for float32 clouds with large scores.
        None: run exactly ``iters`` iterations and report nothing.

    Notes
    -----
    Particles (weights w, uniform or not): with S_ij = x_jᵀAx_i/ε, the plan is
    P_ij = w_i w_j exp(F_i + G_j + S_ij). Log-domain Sinkhorn from G = 0 alternates

        F_i = −log Σ_j exp(S_ij + G_j + log w_j)      (rows sum to w_i),
        G_j = −log Σ_i exp(S_ij + F_i + log w_i)      (columns sum to w_j),

    both one :func:`tpde._engines.logsumexp` reduction. Then
    ẋ_i = V Σ_j P_ij x_j / w_i = V Σ_j softmax_j(S_ij + G_j + log w_j) x_j: the final step
    is a softmax average with key bias G + log w on any softmax engine, and it evaluates
    Γ at any x (the plan's conditional extends to every query through F(x)). For A
    symmetric the problem is symmetric and the converged potentials satisfy F = G + const.
    Gradients flow through the unrolled iterations.

    Every scaling reports a :class:`SinkhornInfo` into the ``info`` collector passed to the
    call (:class:`~tpde.fields.InnerSolves`); a public :meth:`velocity` call that misses
    ``tol`` within ``iters`` warns :class:`SinkhornNotConverged`, and
    :func:`tpde.flows.integrate` stops the flow with status ``"not_converged"`` at the start
    of the offending step. Nothing is stored on the field.

    Gaussian closure (MATH.md §3, A → A/ε): with R = Σ^{1/2},
    D = (I + 4RAΣAᵀR)^{1/2} and S = 2R(I + D)⁻¹R, the conditional mean is
    E_π[y | x] = α + SA(x − α), so Γ(x) = V(α + SA(x − α)), α̇ = Vα and
    Σ̇ = VSAΣ + ΣAᵀSVᵀ. S is the conditional covariance of y given x; it solves
    S + SAΣAᵀS = Σ. This equals MATH.md's G = 2ΣAR(I + D̃)⁻¹R⁻¹ (D̃ built on AᵀΣA) by
    the push-through identity, but needs no Σ^{-1/2}: for a singular Σ it is the
    reduced problem on the support of μ and, off the support, the plan's own affine
    extension. No finite-time blow-up (MATH.md §4.7).

    Reference: Sander, Ablin, Blondel, Peyré, "Sinkformers: Transformers with Doubly
    Stochastic Attention", AISTATS 2022; Castin, Ablin, Carrillo, Peyré, arXiv:2501.18322.
    """

    def __init__(
        self,
        Q,
        K,
        V,
        scale=None,
        *,
        eps: float = 1.0,
        iters: int | None = None,
        tol: float | None = 1e-6,
    ):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim
        self.eps = check_positive(eps, "eps")
        self.tol = None if tol is None else check_positive(tol, "tol")
        if iters is None:
            if tol is None:
                raise ValueError(
                    "tol=None runs a fixed number of iterations: pass iters too (iters=1 is "
                    "softmax attention)."
                )
            iters = DEFAULT_ITERS
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
            raise ValueError(f"iters must be an integer >= 1; received {iters!r}.")
        self.iters = iters

    # ------------------------------------------------------------------ particles
    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        p = self.params.at(t, like=x)
        A = p.A / self.eps
        points, log_w = key_log_weights(mu)
        G, report = sinkhorn_potential(
            points, log_w, A, iters=self.iters, tol=self.tol, engine=engine
        )
        if info is not None:
            info.record(report)
        averaged = softmax_average(
            x @ A.transpose(-1, -2), points, points, key_bias=G + log_w, engine=engine
        )
        return averaged @ p.V.transpose(-1, -2)

    # ------------------------------------------------------------------ Gaussians
    def gaussian_affine(self, t, mean, cov):
        """Γ[N(α, Σ)](x) = V(α − SAα) + VSA x (class notes; A → A/ε)."""
        p = self.params.at(t, like=mean)
        slope = conditional_slope(cov, p.A / self.eps)
        shift = mean - (slope @ mean.unsqueeze(-1)).squeeze(-1)
        return (p.V @ shift.unsqueeze(-1)).squeeze(-1), p.V @ slope

    def self_cost(
        self, mu: Measure, *, t: float = 0.0, engine: str = "auto", info=None
    ) -> torch.Tensor:
        """Entropic self-transport cost OT_ε(μ, μ) for the cost −yᵀAx.

        OT_ε(μ, ν) = min_π ∫ −yᵀAx dπ + ε KL(π | μ⊗ν). For a Gaussian (MATH.md §3, ε = 1;
        general ε: ε·OT_1 with A → A/ε):

            OT_1(μ, μ) = −αᵀAα − ½ tr(D − I) + ½ log det((I + D)/2).

        For particles, ε(Σ_i w_i F_i + Σ_j w_j G_j) at the Sinkhorn fixed point (exact when
        both marginals are, up to the marginal error reported into ``info``); warns
        :class:`SinkhornNotConverged` like :meth:`velocity`.

        Returns
        -------
        tensor with the batch shape of the measure and parameters (0-d if unbatched).
        """
        self.check_measure(mu)
        p = self.params.at(t, like=mu.mean())
        A = p.A / self.eps
        if isinstance(mu, Gaussian):
            mean, cov = mu.mean(), mu.cov()
            D = entropic_D(sqrtm_psd(cov), cov, A)
            eye = torch.eye(D.shape[-1], dtype=D.dtype, device=D.device)
            quadratic = (mean.unsqueeze(-2) @ A @ mean.unsqueeze(-1))[..., 0, 0]
            value = -quadratic - 0.5 * trace(D - eye)
            value = value + 0.5 * lu.logdet((eye + D) / 2)
            return self.eps * value
        points, log_w = key_log_weights(mu)
        G, report = sinkhorn_potential(
            points, log_w, A, iters=self.iters, tol=self.tol, engine=engine
        )
        if info is not None:
            info.record(report)
        if report.converged is False:
            warnings.warn(report.warning(), stacklevel=2)
        F = -logsumexp(points @ A.transpose(-1, -2), points, G + log_w, engine=engine)
        weights = log_w.exp()
        return self.eps * ((F + G) * weights).sum(-1)

    # ------------------------------------------------------------------ gradient flow
    #: Capability "gradient_flow": the descent of sF in the metric of mobility sM, no weight.
    metric_weighted = False
    ascends_energy = False

    def interaction(self, t: float = 0.0):
        """(A, V, dtype) for the gradient structure (:mod:`tpde.fields.gradient_flow.structure`)."""
        return qkv_interaction(self, t)

    def energy(self, mu: Measure, *, t: float = 0.0, engine: str = "auto", info=None):
        """F(μ) = ½ OT_ε(μ, μ)
        (:func:`tpde.fields.gradient_flow.sinkhorn_energy.sinkhorn_energy`)."""
        self.check_measure(mu)
        return sinkhorn_energy(self, mu, t=t, engine=engine, info=info)

    def first_variation(self, mu, x, *, t: float = 0.0, engine: str = "auto", info=None):
        """δF/δμ(x)
        (:func:`~tpde.fields.gradient_flow.sinkhorn_energy.sinkhorn_first_variation`)."""
        return sinkhorn_first_variation(self, mu, x, t=t, engine=engine, info=info)

    def first_variation_grad(self, mu, x, *, t: float = 0.0, engine: str = "auto", info=None):
        """∇δF/δμ(x), shape (m, d) (:mod:`tpde.fields.gradient_flow.sinkhorn_energy`)."""
        return sinkhorn_first_variation_grad(self, mu, x, t=t, engine=engine, info=info)

    def log_metric_weight(self, mu, x, *, t: float = 0.0, engine: str = "auto"):
        """0: the Sinkhorn metric carries no weight (MATH.md §5)."""
        return x.new_zeros(x.shape[:-1])

    def __repr__(self) -> str:
        return (
            f"Sinkhorn(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g}, "
            f"eps={self.eps:g}, iters={self.iters}, tol={self.tol})"
        )
