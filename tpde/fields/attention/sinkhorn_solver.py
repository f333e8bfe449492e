"""The Sinkhorn scaling of attention: potentials, their report, and the Gaussian algebra.

Shared by :class:`tpde.fields.Sinkhorn` (velocities) and
:mod:`tpde.fields.gradient_flow.sinkhorn_energy` (the energy F = ½ OT_ε(μ, μ)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde import _lu as lu
from tpde._engines import logsumexp
from tpde._linalg import sqrtm_psd, symmetrize

# The public names; the solver's functions (sinkhorn_potential, conditional_slope,
# entropic_D) are imported from here by the field and its energy.
__all__ = ["SinkhornInfo", "SinkhornNotConverged"]


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
    tol : float or None
        The tolerance asked for.
    """

    converged: bool | None
    iterations: int
    marginal_error: float
    tol: float | None = None

    def warning(self) -> SinkhornNotConverged:
        """The warning of a solve that missed its tolerance."""
        return SinkhornNotConverged(
            f"Sinkhorn scaling did not reach tol = {self.tol:g} within iters = "
            f"{self.iterations}: marginal error {self.marginal_error:.3g}. Raise iters, "
            "loosen tol, or increase eps (the kernel e^(yᵀAx/eps) is too peaked)."
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
            return G, SinkhornInfo(converged, iteration, worst, tol)
        G = G_next
    raise AssertionError("unreachable")  # pragma: no cover


def _identity_like(matrix: torch.Tensor) -> torch.Tensor:
    return torch.eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)


def entropic_D(root, cov, A):
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
    D = entropic_D(root, cov, A)
    S = 2 * root @ lu.solve(_identity_like(cov) + D, root)
    return symmetrize(S) @ A
