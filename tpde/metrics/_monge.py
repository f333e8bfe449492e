"""The Bures–Wasserstein Monge matrix, accurate for near-singular pairs, with its own backward.

    T = Σ₀^{-1/2} (Σ₀^{1/2} Σ₁ Σ₀^{1/2})^{1/2} Σ₀^{-1/2}            (MATH.md §5)

Forming C² = Σ₀^{1/2}Σ₁Σ₀^{1/2} and taking its square root squares the condition number: when
both covariances have eigenvalues ~1e-8 next to O(1), C² has eigenvalues ~1e-16 that are
lost to rounding, and Σ₀^{-1/2} on both sides amplifies the loss by 1e8 (4–40 % error at
d = 8–32, benchmarks/bures_accuracy.py). The route here never forms C²:

1. Σ₀ = Q diag(r²) Qᵀ (eigh), Σ₁^{1/2} = B (eigh);
2. the SVD B Σ₀^{1/2} Q = B Q diag(r) = U diag(s) Vᵀ. Then C = Σ₀^{1/2}(…)… :
   (Σ₀^{1/2}Σ₁Σ₀^{1/2}) = Q V diag(s²) Vᵀ Qᵀ, so C = Q V diag(s) Vᵀ Qᵀ, and s comes with an
   absolute error eps·‖B Σ₀^{1/2}‖ (not eps·‖C²‖ as through C²);
3. T = Q Gᵀ G Qᵀ with G = diag(√s) Vᵀ diag(1/r): Σ₀^{-1/2} = Q diag(1/r) Qᵀ applied in Σ₀'s
   own eigenbasis, and T symmetric PSD by construction.

Against a 40-digit reference its error stays at or below eps·κ, κ the relative condition
number of (Σ₀, Σ₁) ↦ T (tests/metrics/test_bures_accuracy.py).

Backward: implicit differentiation of T Σ₀ T = Σ₁ (T ≻ 0). With A = Σ₀^{1/2} and
C = ATA, a perturbation solves the Lyapunov equation YC + CY = A δΣ₁ A − C A⁻¹ δΣ₀ A⁻¹ C,
δT = A⁻¹ Y A⁻¹. Its adjoint: for an upstream gradient G (symmetrised),

    Z = L_C⁻¹(A⁻¹ G A⁻¹),   ∂/∂Σ₁ = A Z A,   ∂/∂Σ₀ = −T (A Z A) T,

with L_C⁻¹ solved in C's eigenbasis (Z_ij = H_ij / (s_i + s_j)): no difference of singular
values in a denominator, exact for repeated ones (Σ₀ = Σ₁ = I is the commonest input; the
SVD's own backward is infinite there). Denominators are floored at √(d·eps)·s_max as in
:func:`tpde._linalg.sqrtm_psd`. First derivatives only (once-differentiable).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from tpde._linalg import eig_tolerance, symmetrize

__all__ = ["monge_matrix"]


def _factors(S0: torch.Tensor, S1: torch.Tensor):
    """Q, r (Σ₀ = Q diag(r²) Qᵀ), and the SVD (s, Vᵀ) of Σ₁^{1/2} Q diag(r)."""
    lam0, Q = torch.linalg.eigh(S0)
    r = lam0.clamp_min(0).sqrt()
    lam1, P = torch.linalg.eigh(S1)
    B = (P * lam1.clamp_min(0).sqrt().unsqueeze(-2)) @ P.mT
    _, s, Vh = torch.linalg.svd((B @ Q) * r.unsqueeze(-2))
    return Q, r, s, Vh


class _MongeMatrix(torch.autograd.Function):
    """(Σ₀, Σ₁) ↦ T for Σ₀ nondegenerate (checked by the caller); Lyapunov backward."""

    @staticmethod
    def forward(ctx, S0, S1):
        Q, r, s, Vh = _factors(S0, S1)
        G = s.sqrt().unsqueeze(-1) * Vh / r.unsqueeze(-2)  # diag(√s) Vᵀ diag(1/r)
        T = symmetrize(Q @ (G.mT @ G) @ Q.mT)
        ctx.save_for_backward(Q, r, s, Vh, T)
        return T

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        Q, r, s, Vh = ctx.saved_tensors[:4]
        T = ctx.saved_tensors[4]
        rr = r.unsqueeze(-1) * r.unsqueeze(-2)
        H = (Q.mT @ symmetrize(grad) @ Q) / rr  # A⁻¹ G A⁻¹ in Σ₀'s eigenbasis
        floor = eig_tolerance(s**2).sqrt().unsqueeze(-1)
        denom = (s.unsqueeze(-1) + s.unsqueeze(-2)).clamp_min(floor)
        Z = Vh.mT @ ((Vh @ H @ Vh.mT) / denom) @ Vh  # L_C⁻¹ in C's eigenbasis (Q-frame)
        grad1 = symmetrize(Q @ (Z * rr) @ Q.mT)  # A Z A
        grad0 = -symmetrize(T @ grad1 @ T)
        return grad0, grad1


def monge_matrix(S0: torch.Tensor, S1: torch.Tensor) -> torch.Tensor:
    """T = Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2}, (..., d, d), Σ₀ nondegenerate.

    No checks: the caller refuses degenerate Σ₀ (bures._nondegenerate). Batched over leading
    dimensions (which must already agree); differentiable once in both arguments.
    """
    return _MongeMatrix.apply(S0, S1)
