"""Spectral functions of symmetric PSD matrices with a stable backward pass.

The matrix square root is computed from a symmetric eigendecomposition S = U diag(λ) Uᵀ.
torch's own ``eigh`` backward divides by λ_i − λ_j and returns NaN or Inf for repeated
eigenvalues (the identity covariance is the most common input of all), so the square root
has its own backward, the Daleckii–Krein formula

    d(S^{1/2})[E] = U ( (UᵀEU) ∘ L ) Uᵀ,   L_ij = (√λ_i − √λ_j)/(λ_i − λ_j) = 1/(√λ_i + √λ_j),

which has no difference of eigenvalues in a denominator and is exact for repeated ones.

Tolerance (stated once, used everywhere in tpde): eigenvalues below
``tol = d · eps(dtype) · max(λ_max, tiny)`` are rounding of zero. They are clamped to 0 in
values; in the backward pass the denominators √λ_i + √λ_j are floored at √tol, so the
gradient at a rank-deficient matrix is finite (that of the square root of the matrix whose
null eigenvalues are lifted to tol). The square root is not differentiable at a singular
matrix; this is the standard convention of a finite subgradient.

Second derivatives: :func:`sqrt_eigenvalues` supports double backward; :func:`sqrtm_psd`
does not. Its backward is marked once-differentiable, which raises when the double-backward
graph must go through it alone, but when other paths also depend on the same variable its
contribution to a second derivative can be dropped without an error. Code that needs
second derivatives (the geodesic convexity probe) checks them against finite differences.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

__all__ = ["eig_tolerance", "psd_factor", "sqrt_eigenvalues", "sqrtm_psd", "symmetrize", "trace"]


def symmetrize(matrix: torch.Tensor) -> torch.Tensor:
    """(S + Sᵀ)/2 over the last two dimensions."""
    return 0.5 * (matrix + matrix.mT)


def trace(matrix: torch.Tensor) -> torch.Tensor:
    """Trace over the last two dimensions, shape (...)."""
    return matrix.diagonal(dim1=-2, dim2=-1).sum(-1)


def eig_tolerance(evals: torch.Tensor) -> torch.Tensor:
    """Rounding level of zero for eigenvalues (..., d): d·eps·max(λ_max, tiny), shape (..., 1)."""
    info = torch.finfo(evals.dtype)
    top = evals.detach().amax(dim=-1, keepdim=True).clamp_min(info.tiny)
    return evals.shape[-1] * info.eps * top


class _SqrtEigenvalues(torch.autograd.Function):
    """√max(λ, 0) with backward g / (2 √max(λ, tol)): finite at zero eigenvalues.

    The backward is written with differentiable operations on the saved input, so second
    derivatives are those of √λ wherever λ > tol.
    """

    @staticmethod
    def forward(ctx, evals, tol):
        ctx.save_for_backward(evals, tol)
        return evals.clamp_min(0).sqrt()

    @staticmethod
    def backward(ctx, grad):
        evals, tol = ctx.saved_tensors
        return grad / (2 * torch.maximum(evals, tol).sqrt()), None


def sqrt_eigenvalues(evals: torch.Tensor) -> torch.Tensor:
    """Square roots of eigenvalues (..., d), clamped at 0, with a floored derivative.

    Used for tr (S₀^{1/2} S₁ S₀^{1/2})^{1/2} = Σ √λ_i: the derivative 1/(2√λ) is evaluated at
    max(λ, tol) with tol from :func:`eig_tolerance`.
    """
    return _SqrtEigenvalues.apply(evals, eig_tolerance(evals))


class _SqrtmPSD(torch.autograd.Function):
    """S ↦ S^{1/2} for symmetric PSD S (..., d, d); Daleckii–Krein backward."""

    @staticmethod
    def forward(ctx, matrix):
        evals, evecs = torch.linalg.eigh(matrix)
        tol = eig_tolerance(evals)
        root = torch.where(evals > tol, evals, torch.zeros_like(evals)).sqrt()
        ctx.save_for_backward(evecs, root, tol)
        return (evecs * root.unsqueeze(-2)) @ evecs.mT

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        evecs, root, tol = ctx.saved_tensors
        inner = evecs.mT @ symmetrize(grad) @ evecs
        denom = (root.unsqueeze(-1) + root.unsqueeze(-2)).clamp_min(tol.sqrt().unsqueeze(-1))
        return evecs @ (inner / denom) @ evecs.mT


def sqrtm_psd(matrix: torch.Tensor) -> torch.Tensor:
    """Symmetric square root of symmetric PSD matrices (..., d, d).

    Eigenvalues below ``d · eps · λ_max`` are set to 0. The backward pass is the
    Daleckii–Krein formula 1/(√λ_i + √λ_j) in the eigenbasis (exact for repeated eigenvalues,
    denominators floored at √tol); second derivatives are not available (the backward is
    marked once-differentiable and raises if differentiated again).
    """
    return _SqrtmPSD.apply(matrix)


def psd_factor(cov: torch.Tensor) -> torch.Tensor:
    """A factor L with LLᵀ = Σ: Cholesky, or the symmetric root where Σ is singular."""
    factor, info = torch.linalg.cholesky_ex(cov)
    if bool((info != 0).any()):
        factor = sqrtm_psd(cov)
    return factor
