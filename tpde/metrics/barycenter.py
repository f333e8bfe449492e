"""Wasserstein-2 barycenter of Gaussians (the Bures–Wasserstein barycenter), batched.

The barycenter of N(m_k, Σ_k) with weights w_k (Agueh & Carlier 2011) is N(m*, Σ*) with
m* = Σ_k w_k m_k and Σ* the unique positive definite solution of

    Σ = Σ_k w_k (Σ^{1/2} Σ_k Σ^{1/2})^{1/2}        (when one Σ_k with w_k > 0 is definite).

It is found by the fixed-point iteration of Álvarez-Esteban, del Barrio, Cuesta-Albertos &
Matrán (2016, Theorem 4.2), written with Monge matrices T_k(S) from S to Σ_k (MATH.md §5):

    S_{n+1} = T̄ S_n T̄,   T̄ = Σ_k w_k T_k(S_n)
            = S_n^{-1/2} (Σ_k w_k (S_n^{1/2} Σ_k S_n^{1/2})^{1/2})² S_n^{-1/2},

which converges from any definite start and leaves the barycenter fixed (T̄ = I there).
T̄ − I = Σ_k w_k log_S(Σ_k) is minus the Riemannian gradient of ½ Σ_k w_k W2²(·, Σ_k), so
the residual ‖T̄ − I‖_S = √tr((T̄ − I) S (T̄ − I)) (the gradient's norm, a length) measures
how far S is from stationary; the run stops when it is below tol · √tr S. The start
(Σ_k w_k Σ_k^{1/2})² is the barycenter itself when the Σ_k commute (one iteration then).

References: Agueh & Carlier, "Barycenters in the Wasserstein space", SIAM J. Math. Anal.
43 (2011); Álvarez-Esteban et al., "A fixed-point approach to barycenters in Wasserstein
space", J. Math. Anal. Appl. 441 (2016); Chewi, Maunu, Rigollet & Stromme, COLT 2020.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tpde._linalg import sqrtm_psd, symmetrize, trace
from tpde._status import Status, status_array, status_counts
from tpde._validation import as_tensor, check_finite, check_positive, check_positive_int, check_psd
from tpde.measures import Gaussian
from tpde.metrics._common import kind
from tpde.metrics._monge import monge_matrix

__all__ = ["BuresBarycenter", "bures_barycenter"]

FNAME = "bures_barycenter"
# The start must be definite for the Monge matrices from it: λ_min > this · d · eps · λ_max.
DEFINITE = 1e3


@dataclass(frozen=True)
class BuresBarycenter:
    """Result of :func:`bures_barycenter`.

    Attributes
    ----------
    gaussian : Gaussian with the batch shape (...)
        The barycenter N(m*, Σ*) (the last iterate where the run did not converge).
    status : :class:`~tpde._status.Status`, or a numpy array of them with the batch shape
        "converged" (residual ≤ tol) or "not_converged" (the iteration cap came first);
        comparing with an unknown name (a typo) raises.
    iterations : tensor (...) of int64
        Fixed-point iterations made by each batch element until it converged (or the cap).
    residual : tensor (...)
        ‖T̄ − I‖_S / √tr S at the returned covariance (relative gradient norm, see above).
    """

    gaussian: Gaussian
    status: Status | np.ndarray
    iterations: torch.Tensor
    residual: torch.Tensor

    @property
    def converged(self) -> bool:
        """Whether every batch element converged."""
        return bool(np.all(np.asarray(self.status) == "converged"))

    def __repr__(self) -> str:
        status = str(self.status) if isinstance(self.status, str) else status_counts(self.status)
        return (
            f"BuresBarycenter(d={self.gaussian.dim}, batch={tuple(self.gaussian.batch_shape)}, "
            f"status={status}, iterations ≤ {int(self.iterations.max())}, "
            f"residual ≤ {float(self.residual.max()):.3g})"
        )


# ----------------------------------------------------------------------------- input checks


def _stack(gaussians) -> tuple[torch.Tensor, torch.Tensor]:
    """Means (..., K, d) and covariances (..., K, d, d) from a sequence or a batched Gaussian."""
    if isinstance(gaussians, Gaussian):
        if not gaussians.batch_shape:
            raise ValueError(
                f"{FNAME}: a single Gaussian must carry the K measures along its last batch "
                f"dimension (batch shape (..., K)); received batch shape (). Pass a list of "
                "Gaussians or stack them."
            )
        return gaussians.mean(), gaussians.cov()
    if not isinstance(gaussians, Sequence) or isinstance(gaussians, str):
        raise TypeError(
            f"{FNAME}: gaussians must be a list of tpde.measures.Gaussian or one Gaussian of "
            f"batch shape (..., K); received {type(gaussians).__name__}."
        )
    if len(gaussians) == 0:
        raise ValueError(f"{FNAME}: gaussians is empty; pass at least one Gaussian.")
    for i, g in enumerate(gaussians):
        if not isinstance(g, Gaussian):
            raise TypeError(f"{FNAME}: gaussians[{i}] must be a Gaussian; received {kind(g)}.")
    dims = sorted({g.dim for g in gaussians})
    if len(dims) > 1:
        raise ValueError(
            f"{FNAME}: the Gaussians live in different dimensions {dims}; all must be on the "
            "same R^d."
        )
    devices = {g.device for g in gaussians}
    if len(devices) > 1:
        raise ValueError(
            f"{FNAME}: the Gaussians are on different devices {sorted(map(str, devices))}."
        )
    dtype = gaussians[0].dtype
    for g in gaussians[1:]:
        dtype = torch.promote_types(dtype, g.dtype)
    try:
        batch = torch.broadcast_shapes(*(g.batch_shape for g in gaussians))
    except RuntimeError:
        shapes = [tuple(g.batch_shape) for g in gaussians]
        raise ValueError(
            f"{FNAME}: the Gaussians' batch shapes {shapes} do not broadcast."
        ) from None
    d = dims[0]
    means = torch.stack([g.mean().to(dtype).expand(*batch, d) for g in gaussians], -2)
    covs = torch.stack([g.cov().to(dtype).expand(*batch, d, d) for g in gaussians], -3)
    return means, covs


def _weights(weights, K: int, like: torch.Tensor) -> torch.Tensor:
    """Weights (..., K): nonnegative, summing to 1 (√eps of their dtype), default uniform."""
    if weights is None:
        return torch.full((K,), 1.0 / K, dtype=like.dtype, device=like.device)
    w = as_tensor(weights, "weights", device=like.device)
    tol = torch.finfo(w.dtype).eps ** 0.5
    if w.ndim == 0 or w.shape[-1] != K:
        raise ValueError(
            f"{FNAME}: weights must have shape (..., K) with K = {K} Gaussians; received shape "
            f"{tuple(w.shape)}."
        )
    check_finite(w, "weights")
    if (w < 0).any():
        raise ValueError(
            f"{FNAME}: weights must be nonnegative; received minimum {float(w.min()):.3g}."
        )
    total = w.detach().sum(-1)
    if ((total - 1).abs() > tol).any():
        worst = float(total.flatten()[(total - 1).abs().argmax()])
        raise ValueError(
            f"{FNAME}: weights must sum to 1 (over the last dimension); received a sum of "
            f"{worst:.10g}. Normalise them with weights / weights.sum(-1, keepdim=True)."
        )
    return (w / w.sum(-1, keepdim=True)).to(like.dtype)


def _check_one_definite(covs: torch.Tensor, w: torch.Tensor) -> None:
    """Refuse unless every problem has a definite Σ_k with w_k > 0 (the fixed point's
    hypothesis): the barycenter of singular Σ_k can be singular (two covariances of rank 1
    on different lines: a covariance of rank 1), where T̄ = S^{-1/2}(…)S^{-1/2} is
    undefined and the iteration ends on a NaN residual."""
    evals = torch.linalg.eigvalsh(covs.detach())  # (..., K, d)
    top = evals[..., -1].clamp_min(torch.finfo(covs.dtype).tiny)
    definite = evals[..., 0] > DEFINITE * covs.shape[-1] * torch.finfo(covs.dtype).eps * top
    ok = (definite & (w.detach() > 0)).any(-1)
    if not bool(ok.all()):
        smallest = evals[..., 0] / top  # (..., K): each covariance's inverse condition
        raise ValueError(
            f"{FNAME}: the fixed point needs at least one definite covariance Σ_k with a "
            f"positive weight, and every Σ_k of {int((~ok).sum())} problem(s) is singular "
            f"(smallest eigenvalue / largest: {float(smallest[~ok].max()):.3g} at most): their "
            "barycenter can be singular, where the iteration is undefined. Regularise with "
            "cov + δI (δ > 0), or compute the barycenter of singular Gaussians on their "
            "common support."
        )


def _check_start(S: torch.Tensor) -> None:
    evals = torch.linalg.eigvalsh(S.detach())
    top = evals[..., -1].clamp_min(torch.finfo(S.dtype).tiny)
    if not bool((evals[..., 0] > DEFINITE * S.shape[-1] * torch.finfo(S.dtype).eps * top).all()):
        raise ValueError(
            f"{FNAME}: the barycenter of these covariances is degenerate (the start "
            f"(Σ_k w_k Σ_k^{{1/2}})² has smallest eigenvalue {float(evals[..., 0].min()):.3g}, "
            f"largest {float(evals[..., -1].max()):.3g}): the fixed point needs at least one "
            "definite Σ_k with a positive weight. Regularise with cov + δI."
        )


# ----------------------------------------------------------------------------- the iteration


def _residual(T_bar: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """‖T̄ − I‖_S / √tr S, shape (...)."""
    delta = T_bar - torch.eye(S.shape[-1], dtype=S.dtype, device=S.device)
    return (trace(delta @ S @ delta).clamp_min(0) / trace(S)).sqrt()


def _mean_map(S: torch.Tensor, covs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """T̄ = Σ_k w_k T(S → Σ_k), (..., d, d) from S (..., d, d), covs (..., K, d, d), w (..., K)."""
    T = monge_matrix(S.unsqueeze(-3).expand_as(covs), covs)
    return (w[..., None, None] * T).sum(-3)


def bures_barycenter(
    gaussians,
    weights=None,
    *,
    tol: float | None = None,
    max_iter: int = 100,
) -> BuresBarycenter:
    """W2 barycenter of Gaussians: N(Σ_k w_k m_k, Σ*) by the fixed point of Álvarez-Esteban et al.

    Σ* solves Σ = Σ_k w_k (Σ^{1/2} Σ_k Σ^{1/2})^{1/2}; iteration S ← T̄ S T̄ with
    T̄ = Σ_k w_k T(S → Σ_k), started at (Σ_k w_k Σ_k^{1/2})² (exact for commuting Σ_k).
    See the module docstring for the equations and references.

    Parameters
    ----------
    gaussians : list of K Gaussians (batch shapes broadcast), or one Gaussian of batch
        shape (..., K)
        The measures to average, stacked along the last batch dimension; leading batch
        dimensions (...) are independent problems (a sweep), solved in one computation.
    weights : tensor or array, shape (K,) or (..., K), optional
        Nonnegative, summing to 1 over the last dimension (to √eps of their dtype). Default
        uniform 1/K.
    tol : float > 0, optional
        Stop when ‖T̄ − I‖_S ≤ tol · √tr S (a relative gradient norm; the error of Σ* is of
        the same order). Default 1e-10 in float64, 100 eps (1.2e-5) in float32: reachable
        for condition numbers up to ~1e4.
    max_iter : int ≥ 1
        Iteration cap (default 100; well-conditioned problems take 5–20 iterations).

    Returns
    -------
    BuresBarycenter
        ``.gaussian`` (batch shape (...)), ``.status`` ("converged" / "not_converged" per
        batch element, as in :class:`tpde.flows.Trajectory`), ``.iterations``,
        ``.residual``. A run that hits the cap says so in ``.status``; its last iterate is
        returned.

    Notes
    -----
    Differentiable in means, covariances and weights: gradients are those of the
    computed iterate (autograd through the iterations, Monge matrices with the backward
    of :mod:`tpde.metrics._monge`), which converge to the barycenter's own derivative as
    the iterate converges. Converged batch elements are frozen while others iterate.
    At least one Σ_k with w_k > 0 must be definite (else the barycenter may be degenerate
    and the iteration is undefined): raises otherwise.
    """
    means, covs = _stack(gaussians)
    check_finite(means, f"{FNAME}: means")
    check_finite(covs, f"{FNAME}: covariances")
    check_psd(covs, f"{FNAME}: every covariance")
    w = _weights(weights, covs.shape[-3], covs)
    try:
        batch = torch.broadcast_shapes(covs.shape[:-3], w.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"{FNAME}: the weights' batch shape {tuple(w.shape[:-1])} does not broadcast with "
            f"the Gaussians' batch shape {tuple(covs.shape[:-3])}; pass weights (K,) or one "
            "row per batch element (..., K)."
        ) from None
    d = covs.shape[-1]
    K = covs.shape[-3]
    means, covs = means.expand(*batch, K, d), covs.expand(*batch, K, d, d)
    w = w.expand(*batch, K)
    max_iter = check_positive_int(max_iter, "max_iter")
    if tol is None:
        tol = 1e-10 if covs.dtype == torch.float64 else 100 * torch.finfo(covs.dtype).eps
    tol = check_positive(tol, "tol")

    _check_one_definite(covs, w)
    mean = (w.unsqueeze(-1) * means).sum(-2)
    root = (w[..., None, None] * sqrtm_psd(covs)).sum(-3)
    S = symmetrize(root @ root)
    _check_start(S)
    active = torch.ones(batch, dtype=torch.bool, device=S.device)
    iterations = torch.zeros(batch, dtype=torch.int64, device=S.device)
    T_bar = _mean_map(S, covs, w)
    residual = _residual(T_bar, S)
    for _ in range(max_iter):
        active = active & (residual.detach() > tol)
        if not bool(active.any()):
            break
        S_new = symmetrize(T_bar @ S @ T_bar)
        S = torch.where(active[..., None, None], S_new, S)
        iterations = iterations + active.long()
        T_bar = _mean_map(S, covs, w)
        residual = _residual(T_bar, S)
    ok = (residual.detach() <= tol).cpu().numpy()
    status = status_array(ok.shape, Status.NOT_CONVERGED)
    status[ok] = Status.CONVERGED
    status = status[()] if status.ndim == 0 else status
    return BuresBarycenter(Gaussian._trusted(mean, S), status, iterations, residual.detach())
