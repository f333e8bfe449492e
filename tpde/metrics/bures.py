"""Bures–Wasserstein geometry of Gaussian measures (MATH.md §5), batched and differentiable.

    W2²(N(m₀,Σ₀), N(m₁,Σ₁)) = |m₀ − m₁|² + tr Σ₀ + tr Σ₁ − 2 tr(Σ₀^{1/2} Σ₁ Σ₀^{1/2})^{1/2}

Monge map x ↦ m₁ + T(x − m₀), T = Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2}; geodesic: push
g₀ by (1−t)I + tT; tangent vectors at N(m, Σ) are pairs (u, S), u ∈ R^d, S symmetric, with
⟨(u,S),(v,R)⟩ = uᵀv + tr(SΣR); exp(u, S) = N(m + u, (I+S)Σ(I+S)); log = (m₁ − m₀, T − I).

All functions take :class:`~tpde.measures.Gaussian` with leading batch dimensions (which
broadcast between the two arguments) and keep autograd. Matrix square roots come from
:mod:`tpde._linalg` (eigenvalues below d·eps·λ_max are zero; stable backward); the Monge
matrix from :mod:`tpde.metrics._monge` (an SVD of Σ₁^{1/2}Σ₀^{1/2} that never squares the
condition number: its error tracks the problem's conditioning, also when both covariances
are near-singular, benchmarks/bures_accuracy.py).

References: Bhatia, Jain, Lim, "On the Bures–Wasserstein distance between positive
definite matrices" (2019); Takatsu, "Wasserstein geometry of Gaussian measures" (2011);
Peyré & Cuturi, "Computational Optimal Transport", Remark 2.31.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde._linalg import psd_factor, sqrt_eigenvalues, sqrtm_psd, symmetrize, trace
from tpde._validation import as_tensor, check_finite, check_symmetric
from tpde.measures import Gaussian
from tpde.metrics._common import gaussian_pair, kind
from tpde.metrics._monge import monge_matrix

__all__ = [
    "BuresTangent",
    "GaussianMap",
    "bures_exp",
    "bures_geodesic",
    "bures_inner",
    "bures_log",
    "bures_monge_map",
    "bures_wasserstein",
]

# A covariance is "degenerate" for the Monge map when λ_min ≤ DEGENERATE · d · eps · λ_max:
# T = Σ₀^{-1/2}(…)Σ₀^{-1/2} then loses all digits. 1e3 keeps maps with condition numbers up
# to ~1e12 (float64) / ~1e4 (float32).
DEGENERATE = 1e3


# ----------------------------------------------------------------------------- distance


class _SafeSqrt(torch.autograd.Function):
    """√max(x, 0) with derivative 1/(2√x) for x > 0 and 0 at x ≤ 0 (a subgradient).

    The backward uses differentiable operations on the saved input (double backward works).
    """

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0).sqrt()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        positive = x > 0
        root = torch.where(positive, x, 1).sqrt()
        return torch.where(positive, grad / (2 * root), 0)


def safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """Distance from a squared distance: √max(x, 0), finite derivative (0) at x ≤ 0.

    Squared distances computed as differences of traces can be −1e-16 by rounding; the
    clamp keeps the value real, and the zero subgradient keeps d(ν, μ)² differentiable at
    ν = μ (the starting point of a JKO step): there 2 d · d' = 0 as it should be.
    """
    return _SafeSqrt.apply(x)


def trace_sqrt_product(S0: torch.Tensor, S1: torch.Tensor) -> torch.Tensor:
    """tr (S₀^{1/2} S₁ S₀^{1/2})^{1/2} for PSD (..., d, d), shape (...).

    The eigenvalues of S₀^{1/2}S₁S₀^{1/2} are those of LᵀS₁L for any factor S₀ = LLᵀ, so a
    Cholesky factor (or, when S₀ is singular and Cholesky fails, the symmetric root) and one
    ``eigvalsh`` suffice: 5–10× faster than two matrix square roots at d = 512
    (benchmarks/metrics.py). The derivative of √λ is floored as in :func:`sqrt_eigenvalues`.
    """
    factor = psd_factor(S0)
    inner = symmetrize(factor.mT @ S1 @ factor)
    return sqrt_eigenvalues(torch.linalg.eigvalsh(inner)).sum(-1)


def bures_squared(m0, S0, m1, S1) -> torch.Tensor:
    """W2² between N(m₀, S₀) and N(m₁, S₁) from tensors (..., d), (..., d, d); no checks."""
    mean_part = ((m0 - m1) ** 2).sum(-1)
    return mean_part + trace(S0) + trace(S1) - 2 * trace_sqrt_product(S0, S1)


def bures_wasserstein(g0: Gaussian, g1: Gaussian) -> torch.Tensor:
    """Wasserstein-2 distance between Gaussians (the Bures–Wasserstein distance).

    W2² = |m₀ − m₁|² + tr Σ₀ + tr Σ₁ − 2 tr(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}  (MATH.md §5).

    Parameters
    ----------
    g0, g1 : Gaussian
        Batch shapes broadcast against each other; dtypes are promoted.

    Returns
    -------
    tensor, shape = broadcast batch shape (0-d for single Gaussians)
        The distance (not its square). Degenerate covariances are allowed. Differentiable
        in means and covariances; at g0 = g1 the derivative of the distance is 0 (a
        subgradient), so ``bures_wasserstein(g, h) ** 2`` is smooth there.

    Notes
    -----
    Route: Cholesky factor L of Σ₀ and the eigenvalues of LᵀΣ₁L (see
    :func:`trace_sqrt_product`); first derivatives are exact also at repeated eigenvalues.
    Second derivatives (Hessian-vector products) go through torch's ``eigvalsh``, whose
    double backward divides by eigenvalue gaps: reliable for distinct eigenvalues of
    Σ₀^{1/2}Σ₁Σ₀^{1/2}, not at repeated ones; with a singular Σ₀ they raise.
    """
    m0, S0, m1, S1 = gaussian_pair(g0, g1, "bures_wasserstein")
    return safe_sqrt(bures_squared(m0, S0, m1, S1))


# ----------------------------------------------------------------------------- Monge map


@dataclass(frozen=True)
class GaussianMap:
    """The affine map x ↦ target_mean + matrix (x − source_mean), batched.

    Attributes: ``matrix`` (..., d, d) (symmetric PSD for a Monge map, not for the
    barycentric map of an entropic plan), ``source_mean`` and ``target_mean`` (..., d).
    """

    matrix: torch.Tensor
    source_mean: torch.Tensor
    target_mean: torch.Tensor

    def __call__(self, points: torch.Tensor) -> torch.Tensor:
        """Apply to points (..., n, d); returns (..., n, d)."""
        centred = points - self.source_mean.unsqueeze(-2)
        return self.target_mean.unsqueeze(-2) + centred @ self.matrix.mT

    def push(self, g: Gaussian) -> Gaussian:
        """Image of a Gaussian: N(target + T(m − source), T Σ Tᵀ)."""
        shift = (g.mean() - self.source_mean).unsqueeze(-2) @ self.matrix.mT
        mean = self.target_mean + shift.squeeze(-2)
        cov = symmetrize(self.matrix @ g.cov() @ self.matrix.mT)
        batch = torch.broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
        return Gaussian._trusted(mean.expand(*batch, g.dim), cov.expand(*batch, g.dim, g.dim))


def _nondegenerate(S: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Boolean (...): λ_min(S) > rtol · λ_max(S), default rtol = DEGENERATE · d · eps."""
    if rtol is None:
        rtol = DEGENERATE * S.shape[-1] * torch.finfo(S.dtype).eps
    evals = torch.linalg.eigvalsh(S.detach())
    top = evals[..., -1].clamp_min(torch.finfo(S.dtype).tiny)
    return evals[..., 0] > rtol * top


def _monge_matrix(S0: torch.Tensor, S1: torch.Tensor) -> torch.Tensor:
    """T = S₀^{-1/2}(S₀^{1/2}S₁S₀^{1/2})^{1/2}S₀^{-1/2} for S₀ nondegenerate (see _monge.py)."""
    return monge_matrix(S0, S1)


def _raise_degenerate(S0: torch.Tensor, fname: str) -> None:
    evals = torch.linalg.eigvalsh(S0.detach())
    raise ValueError(
        f"{fname}: g0's covariance is degenerate (smallest eigenvalue "
        f"{float(evals[..., 0].min()):.3g}, largest {float(evals[..., -1].max()):.3g}); the "
        "Monge map from a degenerate Gaussian does not exist in general. Use "
        "bures_geodesic (which handles degenerate endpoints), map from g1 instead, or "
        "regularise with cov + δI."
    )


def _monge(g0, g1, fname: str):
    """(m0, m1, Σ0, T): checked moments and the Monge matrix, Σ0 required nondegenerate."""
    m0, S0, m1, S1 = gaussian_pair(g0, g1, fname)
    if not bool(_nondegenerate(S0).all()):
        _raise_degenerate(S0, fname)
    return m0, m1, S0, _monge_matrix(S0, S1)


def bures_monge_map(g0: Gaussian, g1: Gaussian) -> GaussianMap:
    """The optimal (Monge) map from g0 to g1: x ↦ m₁ + T(x − m₀).

    T = Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2} (MATH.md §5), symmetric PSD. Needs Σ₀
    nondegenerate (λ_min > 1e3 · d · eps · λ_max); raises otherwise, saying what to use.

    Accuracy: relative error within a small multiple of eps · κ, κ the condition number of
    (Σ₀, Σ₁) ↦ T, also for near-singular pairs (eigenvalues 1e-8 next to O(1) in both:
    ~1e-9 at d = 8–32, where squaring Σ₀^{1/2}Σ₁Σ₀^{1/2} loses 4–30 %). Differentiable once in
    both covariances (implicit derivative of TΣ₀T = Σ₁, exact at repeated eigenvalues).
    """
    m0, m1, _, T = _monge(g0, g1, "bures_monge_map")
    return GaussianMap(T, m0, m1)


# ----------------------------------------------------------------------------- tangent space


@dataclass(frozen=True)
class BuresTangent:
    """Tangent vector at a Gaussian N(m, Σ): a mean part u (..., d), a symmetric part S (..., d, d).

    The curve ε ↦ N(m + εu, (I + εS)Σ(I + εS)) has this velocity; the metric is
    ⟨(u, S), (v, R)⟩_Σ = uᵀv + tr(SΣR).
    """

    mean: torch.Tensor
    sym: torch.Tensor


def _check_tangent(tangent, g: Gaussian, name: str, fname: str) -> BuresTangent:
    if not isinstance(tangent, BuresTangent):
        raise TypeError(
            f"{fname}: {name} must be a BuresTangent(mean, sym); received {type(tangent).__name__}."
        )
    u = as_tensor(tangent.mean, f"{name}.mean", dtype=g.dtype, device=g.device)
    S = as_tensor(tangent.sym, f"{name}.sym", dtype=g.dtype, device=g.device)
    d = g.dim
    if u.shape[-1:] != (d,) or S.shape[-2:] != (d, d):
        raise ValueError(
            f"{fname}: {name} must have mean (..., {d}) and sym (..., {d}, {d}) to match the "
            f"Gaussian; received {tuple(u.shape)} and {tuple(S.shape)}."
        )
    check_finite(u, f"{name}.mean")
    check_finite(S, f"{name}.sym")
    check_symmetric(S, f"{name}.sym")
    return BuresTangent(u, symmetrize(S))


def _check_gaussian(g, name: str, fname: str) -> Gaussian:
    if not isinstance(g, Gaussian):
        raise TypeError(f"{fname}: {name} must be a tpde.measures.Gaussian; received {kind(g)}.")
    check_finite(g.mean(), f"{name} mean")
    check_finite(g.cov(), f"{name} cov")
    return g


def bures_log(g0: Gaussian, g1: Gaussian) -> BuresTangent:
    """Riemannian logarithm at g0 of g1: (m₁ − m₀, T − I), T the Monge matrix.

    ``bures_exp(g0, bures_log(g0, g1))`` is g1, and the tangent's norm at g0 is the
    distance. Needs g0 nondegenerate (see :func:`bures_monge_map`).
    """
    m0, m1, S0, T = _monge(g0, g1, "bures_log")
    eye = torch.eye(S0.shape[-1], dtype=S0.dtype, device=S0.device)
    return BuresTangent(m1 - m0, T - eye)


def bures_exp(g: Gaussian, tangent: BuresTangent) -> Gaussian:
    """Riemannian exponential: N(m + u, (I + S)Σ(I + S)).

    Exact geodesic (a minimising one) while I + S ⪰ 0; beyond, still a Gaussian, no longer
    the end of a minimising geodesic. Batch shapes of g and the tangent broadcast.
    """
    g = _check_gaussian(g, "g", "bures_exp")
    tangent = _check_tangent(tangent, g, "tangent", "bures_exp")
    eye = torch.eye(g.dim, dtype=g.dtype, device=g.device)
    push = eye + tangent.sym
    cov = symmetrize(push @ g.cov() @ push)
    mean = g.mean() + tangent.mean
    batch = torch.broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
    return Gaussian._trusted(mean.expand(*batch, g.dim), cov.expand(*batch, g.dim, g.dim))


def bures_inner(g: Gaussian, u: BuresTangent, v: BuresTangent) -> torch.Tensor:
    """Bures–Wasserstein inner product at g: u.mean · v.mean + tr(u.sym Σ v.sym), shape (...)."""
    g = _check_gaussian(g, "g", "bures_inner")
    u = _check_tangent(u, g, "u", "bures_inner")
    v = _check_tangent(v, g, "v", "bures_inner")
    return (u.mean * v.mean).sum(-1) + trace(u.sym @ g.cov() @ v.sym)


# ----------------------------------------------------------------------------- geodesic


def _geodesic_by_map(S0, S1, t, backwards: bool = False):
    """((1−t)I + tT) S₀ ((1−t)I + tT), T the Monge matrix from S₀ (nondegenerate) to S₁.

    ``backwards``: S₀, S₁ and t are the caller's endpoints swapped and 1 − t (errors then
    speak of the caller's t)."""
    eye = torch.eye(S0.shape[-1], dtype=S0.dtype, device=S0.device)
    tt = t[..., None, None]
    T = _monge_matrix(S0, S1)
    if bool(((t < 0) | (t > 1)).any()):
        _check_extension(T, t, backwards)
    push = (1 - tt) * eye + tt * T
    return symmetrize(push @ S0 @ push)


def _check_extension(T: torch.Tensor, t: torch.Tensor, backwards: bool = False) -> None:
    """Beyond [0, 1] the geodesic extends while (1−t)I + tT ⪰ 0 (a Monge map); past that the
    formula returns the push-forward by a non-monotone map, a point off the geodesic.
    ``backwards``: t is 1 − the caller's t; the message maps t and the range back."""
    lam = torch.linalg.eigvalsh(symmetrize(T.detach()))
    lo, hi = lam[..., 0], lam[..., -1]
    tol = 1e3 * torch.finfo(T.dtype).eps * (1 + t.detach().abs() * hi)
    bad = ((1 - t) + t * lo < -tol) | ((1 - t) + t * hi < -tol)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        start = -1 / (hi[k] - 1) if hi[k] > 1 else -math.inf
        end = 1 / (1 - lo[k]) if lo[k] < 1 else math.inf
        shown = float(t[k])
        if backwards:
            shown, start, end = 1 - shown, 1 - end, 1 - start
        raise ValueError(
            f"bures_geodesic: t = {shown:.6g} lies beyond the geodesic's extension, "
            f"[{float(start):.6g}, {float(end):.6g}] for these Gaussians ((1−t)I + tT must stay "
            "positive semidefinite, T the Monge matrix); past it the formula is no point of "
            "the geodesic. Keep t inside that range."
        )


def _geodesic_by_polar(S0, S1, t):
    """F_t F_tᵀ with F_t = (1−t)S₀^{1/2} + t S₁^{1/2} U Vᵀ, S₁^{1/2}S₀^{1/2} = U diag(s) Vᵀ.

    The coupling X₀ = S₀^{1/2}z, X₁ = S₁^{1/2}UVᵀz is optimal (its cross-covariance has trace
    Σ s = tr(S₀^{1/2}S₁S₀^{1/2})^{1/2}) for any PSD pair, degenerate ones included.
    """
    root0, root1 = sqrtm_psd(S0), sqrtm_psd(S1)
    U, _, Vh = torch.linalg.svd(root1 @ root0)
    tt = t[..., None, None]
    factor = (1 - tt) * root0 + tt * (root1 @ U @ Vh)
    return symmetrize(factor @ factor.mT)


def bures_geodesic(g0: Gaussian, g1: Gaussian, t) -> Gaussian:
    """The point at time t of the W2 geodesic from g0 (t = 0) to g1 (t = 1).

    Mean (1−t)m₀ + tm₁; covariance ((1−t)I + tT)Σ₀((1−t)I + tT) with T the Monge matrix
    (MATH.md §5), so that W2(g0, γ(t)) = t · W2(g0, g1). Where Σ₀ is degenerate or badly
    conditioned (cond > 1/√eps) and Σ₁ is not, the same geodesic is computed backwards from
    g1; where both are, from the optimal coupling by a polar decomposition (values only:
    that route's SVD has no reliable derivative, so it raises if gradients are required).

    Parameters
    ----------
    g0, g1 : Gaussian
    t : float or tensor
        Broadcasts against the batch shape; differentiable. Values outside [0, 1] extend the
        geodesic while (1−t)I + tT ⪰ 0.
    """
    m0, S0, m1, S1 = gaussian_pair(g0, g1, "bures_geodesic")
    t = as_tensor(t, "t", dtype=m0.dtype, device=m0.device)
    check_finite(t, "t")
    batch = torch.broadcast_shapes(m0.shape[:-1], t.shape)
    d = m0.shape[-1]
    m0, m1 = m0.expand(*batch, d), m1.expand(*batch, d)
    S0, S1, t = S0.expand(*batch, d, d), S1.expand(*batch, d, d), t.expand(batch)
    mean = (1 - t).unsqueeze(-1) * m0 + t.unsqueeze(-1) * m1
    flat0, flat1, flat_t = S0.reshape(-1, d, d), S1.reshape(-1, d, d), t.reshape(-1)
    # Route by conditioning: the map route solves with Σ^{1/2}, so it is taken only where
    # cond(Σ) < 1/√eps (1e8 in float64); worse-conditioned pairs go backwards or polar.
    rtol = torch.finfo(S0.dtype).eps ** 0.5
    ok0, ok1 = _nondegenerate(flat0, rtol), _nondegenerate(flat1, rtol)
    routes = (
        (ok0, lambda i: _geodesic_by_map(flat0[i], flat1[i], flat_t[i])),
        (~ok0 & ok1, lambda i: _geodesic_by_map(flat1[i], flat0[i], 1 - flat_t[i], True)),
        (~ok0 & ~ok1, lambda i: _geodesic_by_polar(flat0[i], flat1[i], flat_t[i])),
    )
    if bool((~ok0 & ~ok1).any()) and any(x.requires_grad for x in (S0, S1, t)):
        raise ValueError(
            "bures_geodesic: both covariances are degenerate; the geodesic is computed by a "
            "polar decomposition whose derivative tpde does not provide. Detach the inputs, "
            "or regularise one endpoint with cov + δI to get a differentiable geodesic."
        )
    parts, order = [], []
    for mask, route in routes:
        index = mask.nonzero().squeeze(-1)
        if index.numel():
            parts.append(route(index))
            order.append(index)
    cov = torch.cat(parts)[torch.argsort(torch.cat(order))]
    return Gaussian._trusted(mean, cov.reshape(*batch, d, d))
