r"""Closed-form entropic optimal transport between Gaussians, for bilinear costs.

    OT_ε(μ, ν) = min_{π ∈ Π(μ, ν)} ∫ c dπ + ε KL(π | μ ⊗ ν),   μ = N(m₀, Σ₀), ν = N(m₁, Σ₁).

Costs: ``"quadratic"`` c(x, y) = |x − y|² (Janati, Muzellec, Peyré, Cuturi 2020; ε → 0 gives
W2²) and ``"attention"`` c(x, y) = −yᵀAx, the cost of Sinkhorn attention (MATH.md §2, §3).

Derivation [derived; checked against POT's Sinkhorn on samples in the tests]. Both costs
are c(x, y) = q(x) + r(y) − xᵀPy with P = 2I (quadratic; q = |x|², r = |y|²) or P = Aᵀ
(attention; q = r = 0). The optimal plan has density e^{(f(x)+g(y)−c(x,y))/ε} against μ ⊗ ν,
so for Gaussian marginals it is Gaussian, with a cross-covariance C = Cov(X, Y). The
separable part integrates to a constant, E[xᵀPy] = m₀ᵀPm₁ + tr(PCᵀ), and for a Gaussian
coupling KL(π | μ⊗ν) = −½ log det(I − KKᵀ) with K = Σ₀^{-1/2} C Σ₁^{-1/2}. Writing
N = Σ₀^{1/2} P Σ₁^{1/2} = U diag(s) Wᵀ, the problem min_K −⟨K, N⟩ − (ε/2) log det(I − KKᵀ)
aligns K = U diag(k) Wᵀ and decouples: s k² + ε k − s = 0, k = (r − ε)/(2s), r = √(ε² + 4s²).
In matrix form, with

    D = (ε² I + 4 Σ₀^{1/2} P Σ₁ Pᵀ Σ₀^{1/2})^{1/2},

    OT_ε = E[q] + E[r] − m₀ᵀPm₁ − ½ tr(D − εI) + (ε/2) log det((D + εI)/(2ε)),
    C    = 2 Σ₀^{1/2} (D + εI)⁻¹ Σ₀^{1/2} P Σ₁.

Quadratic: OT_ε = |m₀ − m₁|² + tr Σ₀ + tr Σ₁ − ½ tr(D − εI) + (ε/2) log det((D + εI)/(2ε)),
D = (ε²I + 16 Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}: Janati et al.'s formula with their σ² = ε/2, and
C = ¼Σ₀^{1/2}DΣ₀^{-1/2} − (ε/4)I as theirs. Attention with μ = ν, ε = 1: MATH.md §3's
self-cost −αᵀAα − ½tr(D − I) + ½ log det((I + D)/2), and E[y | x] = m₁ + CᵀΣ₀⁻¹(x − m₀) is
the Sinkhorn-attention closure G = 2ΣAΣ^{1/2}(I + D)⁻¹Σ^{-1/2}. Written with Σ₀^{1/2} only (no
inverse), the formula holds for degenerate covariances too. As ε → 0 the log term is
O(ε log 1/ε) and the quadratic value tends to the Bures W2².
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde import _lu as lu
from tpde._linalg import sqrtm_psd, symmetrize, trace
from tpde._validation import as_tensor, check_choice, check_finite, check_positive
from tpde.measures import Gaussian
from tpde.metrics._common import gaussian_pair
from tpde.metrics.bures import GaussianMap

__all__ = ["EntropicGaussianOT", "entropic_ot_gaussian"]

COSTS = ("quadratic", "attention")


@dataclass(frozen=True)
class EntropicGaussianOT:
    """Entropic OT between Gaussians: value and optimal (Gaussian) coupling.

    Attributes
    ----------
    value : tensor (...)
        OT_ε(μ, ν) = ∫ c dπ* + ε KL(π* | μ⊗ν). Not a distance (the attention cost makes it
        negative; the quadratic one is biased: OT_ε(μ, μ) > 0).
    cross_cov : tensor (..., d, d)
        C = Cov_{π*}(X, Y), X ~ μ, Y ~ ν.
    mean0, cov0, mean1, cov1 : tensors
        The marginals, broadcast to the batch shape.
    eps : float
    cost : str
    """

    value: torch.Tensor
    cross_cov: torch.Tensor
    mean0: torch.Tensor
    cov0: torch.Tensor
    mean1: torch.Tensor
    cov1: torch.Tensor
    eps: float
    cost: str

    def coupling(self) -> Gaussian:
        """The optimal plan as a Gaussian on R^{2d}: mean (m₀, m₁), cov [[Σ₀, C], [Cᵀ, Σ₁]]."""
        top = torch.cat([self.cov0, self.cross_cov], dim=-1)
        bottom = torch.cat([self.cross_cov.mT, self.cov1], dim=-1)
        cov = symmetrize(torch.cat([top, bottom], dim=-2))
        return Gaussian._trusted(torch.cat([self.mean0, self.mean1], dim=-1), cov)

    def barycentric_map(self) -> GaussianMap:
        """x ↦ E_{π*}[Y | X = x] = m₁ + CᵀΣ₀⁻¹(x − m₀) (needs Σ₀ invertible).

        For the attention cost with μ = ν this is Sinkhorn attention's conditional mean
        (MATH.md §3), before the value matrix V.
        """
        gain = lu.solve(self.cov0, self.cross_cov).mT  # Cᵀ Σ₀⁻¹ (Σ₀ symmetric)
        return GaussianMap(gain, self.mean0, self.mean1)


def _bilinear(cost: str, A, d: int, like: torch.Tensor) -> torch.Tensor:
    """P with c(x, y) = q(x) + r(y) − xᵀPy: 2I (quadratic) or Aᵀ (attention)."""
    if cost == "quadratic":
        if A is not None:
            raise ValueError(
                "entropic_ot_gaussian: A is only used with cost='attention'; received an A "
                "with cost='quadratic'. Drop A or pass cost='attention'."
            )
        return 2 * torch.eye(d, dtype=like.dtype, device=like.device)
    if A is None:
        raise ValueError(
            "entropic_ot_gaussian: cost='attention' (c(x, y) = −yᵀAx) needs the interaction "
            "matrix A (d × d); pass A=scale * K.T @ Q."
        )
    A = as_tensor(A, "A", dtype=like.dtype, device=like.device)
    if A.ndim < 2 or A.shape[-2:] != (d, d):
        raise ValueError(
            f"entropic_ot_gaussian: A must have shape (..., {d}, {d}); received {tuple(A.shape)}."
        )
    check_finite(A, "A")
    return A.mT


def _entropic_part(inner: torch.Tensor, eps: float) -> torch.Tensor:
    """−½ tr(D − εI) + (ε/2) log det((D + εI)/(2ε)), from the eigenvalues λ_i of ``inner``.

    With r_i = √(ε² + 4λ_i) and q_i = (r_i − ε)/2 = 2λ_i/(r_i + ε) it is
    Σ_i −q_i + (ε/2) log(1 + q_i/ε): no difference of nearly equal terms (r − ε, or
    log(r + ε) − log 2ε multiplied by a large ε), so it is accurate for every ε > 0 (the
    matrix form lost all digits near ε = 1e150 and overflowed beyond 1e154). Eigenvalues
    only: torch's eigvalsh has a stable gradient, also at repeated eigenvalues.
    """
    lam = torch.linalg.eigvalsh(symmetrize(inner)).clamp_min(0)
    r = eps * torch.sqrt(1 + (4 / eps / eps) * lam) if eps > 1 else torch.sqrt(eps**2 + 4 * lam)
    q = 2 * lam / (r + eps)
    small = q < eps  # log1p(q/ε) where q/ε is moderate; log(ε + q) − log ε where it is large
    log_term = torch.where(
        small, torch.log1p(torch.where(small, q, 0) / eps), torch.log(q + eps) - math.log(eps)
    )
    return (0.5 * eps * log_term - q).sum(-1)


def entropic_terms(m0, S0, m1, S1, P, eps: float, quadratic: bool, with_cross: bool = True):
    """Value and cross-covariance from tensors (see the module docstring); no checks.

    ``with_cross=False`` skips the cross-covariance (returned as None) when only the value
    is wanted.
    """
    d = S0.shape[-1]
    eye = torch.eye(d, dtype=S0.dtype, device=S0.device)
    root0 = sqrtm_psd(S0)
    inner = symmetrize(root0 @ P @ S1 @ P.mT @ root0)
    entropic = _entropic_part(inner, eps)
    if quadratic:
        linear = ((m0 - m1) ** 2).sum(-1) + trace(S0) + trace(S1)
    else:
        linear = -(m0.unsqueeze(-2) @ P @ m1.unsqueeze(-1)).squeeze(-1).squeeze(-1)
    if not with_cross:
        return linear + entropic, None
    if eps > 1:  # D = ε (I + 4 inner/ε²)^{1/2}: ε² would overflow beyond 1e154
        D = eps * sqrtm_psd(eye + (4 / eps / eps) * inner)
    else:
        D = sqrtm_psd(eps**2 * eye + 4 * inner)
    cross = 2 * root0 @ lu.solve(D + eps * eye, root0 @ P @ S1)
    return linear + entropic, cross


def entropic_ot_gaussian(
    g0: Gaussian, g1: Gaussian, eps: float, cost: str = "quadratic", *, A=None
) -> EntropicGaussianOT:
    """Closed-form entropic OT between Gaussians (value and coupling), batched.

    Parameters
    ----------
    g0, g1 : Gaussian
        μ = N(m₀, Σ₀) (the source, x) and ν = N(m₁, Σ₁) (the target, y); batch shapes
        broadcast; degenerate covariances are allowed.
    eps : float > 0
        Regularisation ε of ε KL(π | μ⊗ν).
    cost : {"quadratic", "attention"}
        ``"quadratic"``: c = |x − y|² (so ε → 0 gives W2², not ½W2²). ``"attention"``:
        c = −yᵀAx with A given (score of query x on key y, as in the attention fields).
    A : tensor (..., d, d), only with cost="attention"

    Returns
    -------
    EntropicGaussianOT
        ``.value`` OT_ε (batch shape), ``.cross_cov``, ``.coupling()``,
        ``.barycentric_map()``.

    Notes
    -----
    Formula and derivation in the module docstring. GeomLoss's convention (cost |x − y|²/2,
    ε_G = blur²) is OT_ε with ε = 2 blur², halved. References: Janati, Muzellec, Peyré,
    Cuturi, "Entropic optimal transport between unbalanced Gaussian measures has a closed
    form", NeurIPS 2020; del Barrio & Loubes (2020); MATH.md §3, §5.
    """
    eps = check_positive(eps, "eps")
    check_choice(cost, "cost", COSTS)
    m0, S0, m1, S1 = gaussian_pair(g0, g1, "entropic_ot_gaussian")
    P = _bilinear(cost, A, m0.shape[-1], m0)
    value, cross = entropic_terms(m0, S0, m1, S1, P, eps, cost == "quadratic")
    batch = value.shape
    d = m0.shape[-1]
    return EntropicGaussianOT(
        value=value,
        cross_cov=cross,
        mean0=m0.expand(*batch, d),
        cov0=S0.expand(*batch, d, d),
        mean1=m1.expand(*batch, d),
        cov1=S1.expand(*batch, d, d),
        eps=eps,
        cost=cost,
    )
