"""Linear attention: the unnormalised bilinear kernel yᵀAx."""

from __future__ import annotations

import torch

from tpde._engines import kernel_sum
from tpde.fields.base import Field
from tpde.fields.params import QKV
from tpde.fields.registry import register
from tpde.measures import Empirical

__all__ = ["Linear"]


@register("linear")
class Linear(Field):
    r"""Linear attention Γ[μ](x) = ∫ (yᵀAx) V y dμ(y) = V M₂(μ) A x, M₂(μ) = ∫ y yᵀ dμ(y).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices; A = scale · KᵀQ.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Default 1/√k.

    Notes
    -----
    The kernel yᵀAx is used as it is, without a feature map and without normalisation
    (MATH.md §2), so the field is linear in x and in the second moment of μ.

    Engines: ``engine="auto"`` evaluates the exact factorisation V M₂ A x in O(n d²) (the
    reason linear attention exists); "dense", "chunked", "tiled" and "keops" evaluate the pairwise
    sum Σ_j w_j (x_jᵀAx_i) V x_j in O(n²) through the unnormalised kernel-sum engines, an
    independent route kept for checks and benchmarks. "sdpa" cannot express an
    unnormalised kernel and raises.

    Gaussian closure (MATH.md §3): with M₂ = Σ + ααᵀ, Γ[N(α, Σ)](x) = V M₂ A x, so
    α̇ = V(Σ + ααᵀ)Aα and Σ̇ = V(Σ + ααᵀ)AΣ + ΣAᵀ(Σ + ααᵀ)Vᵀ. The right-hand side is cubic
    in the state: unlike softmax-normalised variants, linear attention can blow up in finite
    time even from a centred start (e.g. d = 1: ṡ = 2vas², blow-up at t* = 1/(2vas₀)).

    Reference: Katharopoulos et al., "Transformers are RNNs", ICML 2020 (linear attention);
    Castin, Ablin, Carrillo, Peyré, arXiv:2501.18322 (2025).
    """

    def __init__(self, Q, K, V, scale=None):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim

    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        p = self.params.at(t, like=x)
        points, weights = mu.points, mu.weights
        if engine == "auto":
            second_moment = (points * weights.unsqueeze(-1)).transpose(-1, -2) @ points
            return x @ (p.V @ second_moment @ p.A).transpose(-1, -2)
        # score yᵀAx = ⟨Ax, y⟩ with values w_j V x_j (no normalisation, weights enter linearly).
        values = (weights.unsqueeze(-1) * points) @ p.V.transpose(-1, -2)
        queries = x @ p.A.transpose(-1, -2)
        return kernel_sum(queries, points, values, kernel="linear", engine=engine)

    def gaussian_affine(self, t, mean, cov):
        """Γ[N(α, Σ)](x) = V(Σ + ααᵀ)A x (no constant term)."""
        p = self.params.at(t, like=mean)
        second_moment = cov + mean.unsqueeze(-1) * mean.unsqueeze(-2)
        B = p.V @ second_moment @ p.A
        return torch.zeros(B.shape[:-1], dtype=B.dtype, device=B.device), B

    def __repr__(self) -> str:
        return f"Linear(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g})"
