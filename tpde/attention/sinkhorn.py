"""Sinkhorn attention: the doubly stochastic (entropic optimal transport) normalisation."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from tpde._engines import logsumexp, softmax_average
from tpde._linalg import sqrtm_psd, symmetrize, trace
from tpde._validation import check_positive
from tpde.attention._params import QKV
from tpde.attention.base import Field
from tpde.attention.softmax import key_log_weights
from tpde.measures import Empirical, Gaussian, Measure

__all__ = ["Sinkhorn", "SinkhornInfo", "SinkhornNotConverged", "sinkhorn_potential"]

#: Iteration cap when ``iters`` is not given and a tolerance is.
DEFAULT_ITERS = 1000


class SinkhornNotConverged(RuntimeWarning):
    """The Sinkhorn scaling of a velocity call missed its marginal tolerance."""


@dataclass(frozen=True)
class SinkhornInfo:
    """What the last Sinkhorn scaling did.

    Attributes
    ----------
    converged : bool or None
        True if the column marginal error fell below ``tol``; False if ``iters`` ran out
        first; None when no tolerance was asked for (``tol=None``: a fixed number of
        iterations, not checked).
    iterations : int
        Row normalisations done (the last one is the final averaging step).
    marginal_error : float
        ‖Pᵀ1 − w‖₁ of the coupling whose rows the final step normalised (maximum over batch
        elements); NaN when not measured (``tol=None``).
    """

    converged: bool | None
    iterations: int
    marginal_error: float


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

    A velocity call that misses ``tol`` within ``iters`` warns :class:`SinkhornNotConverged`
    (public :meth:`velocity`) and records :class:`SinkhornInfo` in :attr:`last_info`;
    :func:`tpde.flows.integrate` reads it and stops a particle flow with status
    ``"not_converged"`` at the start of the offending step.

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
        #: :class:`SinkhornInfo` of the last particle velocity (None after a Gaussian one).
        self.last_info: SinkhornInfo | None = None

    # ------------------------------------------------------------------ particles
    def velocity(self, mu: Measure, x=None, *, t: float = 0.0, engine: str = "auto"):
        """Γ[μ](x) (see :meth:`Field.velocity`); warns :class:`SinkhornNotConverged`."""
        self.last_info = None
        out = super().velocity(mu, x, t=t, engine=engine)
        self._warn_if_not_converged()
        return out

    def _warn_if_not_converged(self) -> None:
        info = self.last_info
        if info is not None and info.converged is False:
            warnings.warn(
                SinkhornNotConverged(
                    f"Sinkhorn scaling did not reach tol = {self.tol:g} within iters = "
                    f"{self.iters}: marginal error {info.marginal_error:.3g}. Raise iters, "
                    "loosen tol, or increase eps (the kernel e^(yᵀAx/eps) is too peaked)."
                ),
                stacklevel=3,
            )

    def _particle_velocity(self, t, mu: Empirical, x, engine: str) -> torch.Tensor:
        p = self.params.at(t, like=x)
        A = p.A / self.eps
        points, log_w = key_log_weights(mu)
        G, self.last_info = sinkhorn_potential(
            points, log_w, A, iters=self.iters, tol=self.tol, engine=engine
        )
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

    def self_cost(self, mu: Measure, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
        """Entropic self-transport cost OT_ε(μ, μ) for the cost −yᵀAx.

        OT_ε(μ, ν) = min_π ∫ −yᵀAx dπ + ε KL(π | μ⊗ν). For a Gaussian (MATH.md §3, ε = 1;
        general ε: ε·OT_1 with A → A/ε):

            OT_1(μ, μ) = −αᵀAα − ½ tr(D − I) + ½ log det((I + D)/2).

        For particles, ε(Σ_i w_i F_i + Σ_j w_j G_j) at the Sinkhorn fixed point (exact when
        both marginals are, up to the marginal error of :attr:`last_info`); warns
        :class:`SinkhornNotConverged` like :meth:`velocity`.

        Returns
        -------
        tensor with the batch shape of the measure and parameters (0-d if unbatched).
        """
        self._check_measure(mu)
        self.last_info = None
        p = self.params.at(t, like=mu.mean())
        A = p.A / self.eps
        if isinstance(mu, Gaussian):
            mean, cov = mu.mean(), mu.cov()
            D = _entropic_D(sqrtm_psd(cov), cov, A)
            eye = _identity_like(D)
            quadratic = (mean.unsqueeze(-2) @ A @ mean.unsqueeze(-1))[..., 0, 0]
            value = -quadratic - 0.5 * trace(D - eye)
            value = value + 0.5 * torch.logdet((eye + D) / 2)
            return self.eps * value
        points, log_w = key_log_weights(mu)
        G, self.last_info = sinkhorn_potential(
            points, log_w, A, iters=self.iters, tol=self.tol, engine=engine
        )
        self._warn_if_not_converged()
        F = -logsumexp(points @ A.transpose(-1, -2), points, G + log_w, engine=engine)
        weights = log_w.exp()
        return self.eps * ((F + G) * weights).sum(-1)

    def energy(self, mu: Measure, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
        """F(μ) = ½ OT_ε(μ, μ) (:func:`tpde.attention.energies.sinkhorn_energy`)."""
        from tpde.attention.energies import sinkhorn_energy

        return sinkhorn_energy(self, mu, t=t, engine=engine)

    def gradient_structure(self, t: float = 0.0):
        """Γ = −(sM)∇(s δF/δμ): descent of sF with mobility sM, V = MA (MATH.md §5)."""
        from tpde.attention.energies import gradient_structure

        return gradient_structure(self, t)

    def __repr__(self) -> str:
        return (
            f"Sinkhorn(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g}, "
            f"eps={self.eps:g}, iters={self.iters}, tol={self.tol})"
        )


def sinkhorn_potential(points, log_w, A, *, iters: int, tol: float | None, engine: str = "auto"):
    """Column potential G of the self-coupling of Σ_j w_j δ_{x_j} with kernel e^{x_jᵀAx_i}.

    Log-domain Sinkhorn from G = 0 (see :class:`Sinkhorn`): each iteration is a row step
    F = −LSE_j(S_ij + G_j + log w_j) and a column step G' = −LSE_i(S_ij + F_i + log w_i).
    The column marginal of P(F, G) is w_j e^{G_j − G'_j}, so its L1 error costs nothing
    extra; the loop stops when it is below ``tol`` and returns G, whose row normalisation
    (the final softmax step) is the coupling that was measured. With ``tol=None`` it
    returns G after ``iters − 1`` full iterations, unchecked (``iters = 1``: G = 0, softmax).

    Parameters
    ----------
    points : (n, d) support;  log_w : (n,) log-weights (finite);
    A : (..., d, d) interaction matrix already divided by ε.

    Returns
    -------
    G : (..., n);  info : :class:`SinkhornInfo`.
    """
    row_queries = points @ A.transpose(-1, -2)  # A x_i: score of query i on key j
    column_queries = points @ A  # Aᵀ x_j: the same scores read along columns
    G = torch.zeros(row_queries.shape[:-1], dtype=points.dtype, device=points.device)
    weights = log_w.exp()
    if tol is None:
        for _ in range(iters - 1):
            F = -logsumexp(row_queries, points, G + log_w, engine=engine)
            G = -logsumexp(column_queries, points, F + log_w, engine=engine)
        return G, SinkhornInfo(None, iters, math.nan)
    for iteration in range(1, iters + 1):
        F = -logsumexp(row_queries, points, G + log_w, engine=engine)
        G_next = -logsumexp(column_queries, points, F + log_w, engine=engine)
        error = (weights * torch.expm1(G - G_next).abs()).sum(-1).detach()
        worst = float(error.max())
        if worst < tol or iteration == iters:
            converged = worst < tol
            return G, SinkhornInfo(converged, iteration, worst)
        G = G_next
    raise AssertionError("unreachable")  # pragma: no cover


# ---------------------------------------------------------------------- Gaussian algebra


def _identity_like(matrix: torch.Tensor) -> torch.Tensor:
    return torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)


def _entropic_D(root, cov, A):
    """D = (I + 4RAΣAᵀR)^{1/2} with R = Σ^{1/2} (symmetric, D ⪰ I)."""
    inner = root @ A @ cov @ A.transpose(-1, -2) @ root
    inner = symmetrize(inner)
    return sqrtm_psd(_identity_like(cov) + 4 * inner)


def conditional_slope(cov, A):
    """SA with S = 2Σ^{1/2}(I + D)⁻¹Σ^{1/2}, D = (I + 4Σ^{1/2}AΣAᵀΣ^{1/2})^{1/2}.

    E_π[y | x] = α + SA(x − α) for the entropic self-coupling of N(α, Σ) with cost −yᵀAx
    and ε = 1 (:class:`Sinkhorn` notes). (I + D) ⪰ 2I, so the solve is well conditioned;
    a singular Σ is fine (no inverse of Σ appears).
    """
    root = sqrtm_psd(cov)
    D = _entropic_D(root, cov, A)
    S = 2 * root @ torch.linalg.solve(_identity_like(cov) + D, root)
    return symmetrize(S) @ A
