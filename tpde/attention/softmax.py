"""Softmax self-attention, the field of the standard Transformer."""

from __future__ import annotations

from typing import NamedTuple

import torch

from tpde._engines import softmax_average
from tpde.attention._params import QKV
from tpde.attention.base import Field
from tpde.measures import Empirical


class SoftmaxForm(NamedTuple):
    """A normalised attention written as one key-biased softmax average.

    Γ[μ](x) = softmax_average(queries, keys, points, key_bias) Vᵀ + b_v in row form;
    ``points`` are the particles of μ with positive mass (the values before V).
    """

    queries: torch.Tensor  # (..., m, e)
    keys: torch.Tensor  # (..., n, e)
    key_bias: torch.Tensor  # (..., n)
    points: torch.Tensor  # (n, d)
    V: torch.Tensor  # (..., d, d)
    value_bias: torch.Tensor | None  # (..., d) or None

    def finish(self, averaged: torch.Tensor) -> torch.Tensor:
        """V applied to the averaged points, plus the value bias: (..., m, d)."""
        out = averaged @ self.V.transpose(-1, -2)
        return out if self.value_bias is None else out + self.value_bias.unsqueeze(-2)

    def velocity(self, engine: str, **mask) -> torch.Tensor:
        averaged = softmax_average(
            self.queries, self.keys, self.points, key_bias=self.key_bias, engine=engine, **mask
        )
        return self.finish(averaged)


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
    query_bias, key_bias : tensor (..., k) or callable, optional
        Affine queries Qx + b_q and keys Ky + b_k (real Transformers). The score becomes
        yᵀ(Ax + c) with c = scale·Kᵀb_q plus terms free of y, which cancel in the softmax:
        b_k has no effect on softmax attention.
    value_bias : tensor (..., d) or callable, optional
        Affine values Vy + b_v: the weights sum to one, so b_v is added to Γ.

    Notes
    -----
    Particles: ẋ_i = V Σ_j w_j e^{x_jᵀAx_i} x_j / Σ_j w_j e^{x_jᵀAx_i}; the weights enter
    the softmax as log-weights, so a particle of weight 2/n equals two copies of weight 1/n.
    Gaussian closure (tilt lemma, MATH.md §3): Γ[N(α, Σ)](x) = V(α + ΣAx), so
    α̇ = V(I + ΣA)α and Σ̇ = VΣAΣ + ΣAᵀΣVᵀ. With biases the tilt is by Ax + c:
    Γ[N(α, Σ)](x) = V(α + Σc) + b_v + VΣAx, still affine.

    Reference: Castin, Ablin, Carrillo, Peyré, "A Unified Perspective on the Dynamics of
    Deep Transformers", arXiv:2501.18322 (2025).
    """

    def __init__(self, Q, K, V, scale=None, *, query_bias=None, key_bias=None, value_bias=None):
        self.params = QKV(
            Q, K, V, scale, query_bias=query_bias, key_bias=key_bias, value_bias=value_bias
        )
        self.dim = self.params.dim

    @classmethod
    def from_interaction(cls, A, V) -> Softmax:
        """Build from the interaction matrix A (d × d) directly: Q = A, K = I, scale = 1."""
        dim = (A(0.0) if callable(A) else torch.as_tensor(A)).shape[-1]
        return cls(A, torch.eye(dim, dtype=torch.float64), V, scale=1.0)

    def softmax_form(self, t, mu: Empirical, x) -> SoftmaxForm:
        """Softmax attention as a key-biased softmax average (shared with MultiHead, Masked).

        The score yᵀ(Ax + c) is taken in d dimensions, or as scale·⟨Qx + b_q, Ky⟩ in the
        head dimension k when k < d (cheaper).
        """
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        if self.params.k < self.dim:
            queries = x @ p.Q.transpose(-1, -2)
            if p.bq is not None:
                queries = queries + p.bq.unsqueeze(-2)
            queries, keys = p.scale * queries, points @ p.K.transpose(-1, -2)
        else:
            queries, keys = x @ p.A.transpose(-1, -2), points
            if p.bq is not None:
                queries = queries + p.query_shift.unsqueeze(-2)
        return SoftmaxForm(queries, keys, log_w, points, p.V, p.bv)

    def _particle_velocity(self, t, mu: Empirical, x, engine: str) -> torch.Tensor:
        return self.softmax_form(t, mu, x).velocity(engine)

    def gaussian_affine(self, t, mean, cov):
        """Γ[N(α, Σ)](x) = V(α + Σc) + b_v + VΣA x (c = scale·Kᵀb_q, 0 without bias)."""
        p = self.params.at(t, like=mean)
        tilt = mean if p.bq is None else mean + (cov @ p.query_shift.unsqueeze(-1)).squeeze(-1)
        c = (p.V @ tilt.unsqueeze(-1)).squeeze(-1)
        if self.params.k < self.dim:  # A = scale·KᵀQ of rank k: O(d²k) instead of O(d³)
            slope = (p.V @ (cov @ p.K.transpose(-1, -2))) @ (p.scale * p.Q)
        else:
            slope = p.V @ cov @ p.A
        return (c if p.bv is None else c + p.bv), slope

    def energy(self, mu, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
        """E(μ) = ½ ∬ e^{yᵀAx} dμ(x) dμ(y) (:func:`tpde.attention.energies.softmax_energy`)."""
        from tpde.attention.energies import softmax_energy

        return softmax_energy(self, mu, t=t, engine=engine)

    def gradient_structure(self, t: float = 0.0):
        """Γ = s·grad_g E in the Z-weighted metric with mobility M = V A⁻¹ (MATH.md §5)."""
        from tpde.attention.energies import gradient_structure

        return gradient_structure(self, t)

    def __repr__(self) -> str:
        return f"Softmax(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g})"
