"""Softmax self-attention, the field of the standard Transformer."""

from __future__ import annotations

import torch

from tpde._engines import softmax_average
from tpde.attention._params import QKV
from tpde.attention.base import Field
from tpde.measures import Empirical


def key_log_weights(mu: Empirical) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys with positive mass and their log-weights (zero-mass particles attract nothing)."""
    weights, points = mu.weights, mu.points
    positive = weights > 0
    if not bool(positive.all()):
        weights, points = weights[positive], points[positive]
    return points, weights.log()


class Softmax(Field):
    r"""Softmax attention Γ[μ](x) = V ∫ e^{yᵀAx} y dμ(y) / ∫ e^{yᵀAx} dμ(y).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices. ``A = scale · Kᵀ Q`` (d × d) is the interaction matrix, so
        the score of query x on key y is yᵀ A x.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Default 1/√k, the usual Transformer scaling (the paper's figures use 1/√d: pass
        it explicitly).

    Notes
    -----
    Particles: ẋ_i = V Σ_j w_j e^{x_jᵀAx_i} x_j / Σ_j w_j e^{x_jᵀAx_i}; the weights enter
    the softmax as log-weights, so a particle of weight 2/n equals two copies of weight 1/n.
    Gaussian closure (tilt lemma, MATH.md §3): Γ[N(α, Σ)](x) = V(α + ΣAx), so
    α̇ = V(I + ΣA)α and Σ̇ = VΣAΣ + ΣAᵀΣVᵀ.

    Reference: Castin, Ablin, Carrillo, Peyré, "A Unified Perspective on the Dynamics of
    Deep Transformers", arXiv:2501.18322 (2025).
    """

    def __init__(self, Q, K, V, scale=None):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim

    @classmethod
    def from_interaction(cls, A, V) -> Softmax:
        """Build from the interaction matrix A (d × d) directly: Q = A, K = I, scale = 1."""
        dim = (A(0.0) if callable(A) else torch.as_tensor(A)).shape[-1]
        return cls(A, torch.eye(dim, dtype=torch.float64), V, scale=1.0)

    def softmax_form(self, t, mu: Empirical, x):
        """Softmax attention as a key-biased softmax average (shared with MultiHead, Masked).

        Returns (queries (..., m, e), keys (..., n, e), key_bias (..., n), points (n, d),
        V (..., d, d)) with Γ[μ](x) = softmax_average(queries, keys, points, key_bias) Vᵀ
        in row form; ``points`` are the particles of μ with positive mass. The score
        yᵀAx = ⟨Ax, y⟩ is scored in d dimensions, or as scale·⟨Qx, Ky⟩ in the head
        dimension k when k < d (cheaper).
        """
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        if self.params.k < self.dim:
            queries = p.scale * x @ p.Q.transpose(-1, -2)
            keys = points @ p.K.transpose(-1, -2)
        else:
            queries, keys = x @ p.A.transpose(-1, -2), points
        return queries, keys, log_w, points, p.V

    def _particle_velocity(self, t, mu: Empirical, x, engine: str) -> torch.Tensor:
        queries, keys, bias, points, V = self.softmax_form(t, mu, x)
        averaged = softmax_average(queries, keys, points, key_bias=bias, engine=engine)
        return averaged @ V.transpose(-1, -2)

    def gaussian_affine(self, t, mean, cov):
        """Γ[N(α, Σ)](x) = Vα + VΣA x."""
        p = self.params.at(t, like=mean)
        return (p.V @ mean.unsqueeze(-1)).squeeze(-1), p.V @ cov @ p.A

    def __repr__(self) -> str:
        return f"Softmax(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g})"
