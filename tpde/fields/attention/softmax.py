"""Softmax self-attention, the field of the standard Transformer."""

from __future__ import annotations

import torch

from tpde._validation import as_tensor
from tpde.fields.attention._circle import circle_route, route_softmax
from tpde.fields.base import AffineDerivative, Field
from tpde.fields.forms import SoftmaxForm, key_log_weights
from tpde.fields.gradient_flow.softmax_energy import (
    softmax_domain,
    softmax_energy,
    softmax_first_variation,
    softmax_first_variation_grad,
    softmax_log_partition,
)
from tpde.fields.params import QKV, qkv_interaction
from tpde.fields.registry import register
from tpde.measures import Empirical, Gaussian

__all__ = ["Softmax"]


@register("softmax")
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
    On the circle (d = 2, tokens of norm 1) with A = βI, β > 0, and V = vI the sum is a
    Fourier series in the tokens' angles, exact to rounding in O(n·K): the "spectral" engine
    (:mod:`tpde._engines.spectral`), taken by ``engine="auto"`` for large clouds; on the
    sphere S² (d = 3) likewise a spherical-harmonic series in O(n·L²): the "harmonics"
    engine (:mod:`tpde._engines.harmonics`).
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
        value = as_tensor(A(0.0) if callable(A) else A, "A")
        if value.ndim < 2 or value.shape[-1] != value.shape[-2]:
            raise ValueError(
                f"A must be a square (..., d, d) interaction matrix (the score is yᵀAx); "
                f"received shape {tuple(value.shape)}."
            )
        eye = torch.eye(value.shape[-1], dtype=torch.float64, device=value.device)
        return cls(A, eye, V, scale=1.0)

    def softmax_form(self, t, mu: Empirical, x) -> SoftmaxForm:
        """Softmax attention as a key-biased softmax average (shared with MultiHead, Masked).

        The score yᵀ(Ax + c) is taken in d dimensions, or as scale·⟨Qx + b_q, Ky⟩ in the
        head dimension k when k < d (cheaper).
        """
        p = self.params.at(t, like=x)
        points, log_w = key_log_weights(mu)
        value = None if self.params.value_is_identity else p.V
        scalar = self.params.isotropic_interaction(x)
        if scalar is not None:  # A = cI: queries c·x, no d × d product per token
            return SoftmaxForm(scalar * x, points, log_w, points, value, p.bv)
        if self.params.k < self.dim:
            queries = x @ p.Q.transpose(-1, -2)
            if p.bq is not None:
                queries = queries + p.bq.unsqueeze(-2)
            queries, keys = p.scale * queries, points @ p.K.transpose(-1, -2)
        else:
            queries, keys = x @ p.A.transpose(-1, -2), points
            if p.bq is not None:
                queries = queries + p.query_shift.unsqueeze(-2)
        return SoftmaxForm(queries, keys, log_w, points, value, p.bv)

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, *, own=None
    ) -> torch.Tensor:
        route = circle_route(self, mu, x, engine, own)
        if route is not None:  # A = βI, V = vI on S¹ or S²: Fourier or harmonic series
            return route_softmax(route, x, mu.weights)
        return self.softmax_form(t, mu, x).velocity(engine)

    def gaussian_affine(self, t, mean, cov):
        """Γ[N(α, Σ)](x) = V(α + Σc) + b_v + VΣA x (c = scale·Kᵀb_q, 0 without bias)."""
        return self._affine(self.params.at(t, like=mean), mean, cov)

    def _affine(self, p, mean, cov):
        """(c, B) of :meth:`gaussian_affine` from parameters ``p`` resolved at t."""
        tilt = mean if p.bq is None else mean + (cov @ p.query_shift.unsqueeze(-1)).squeeze(-1)
        c = (p.V @ tilt.unsqueeze(-1)).squeeze(-1)
        if self.params.k < self.dim:  # A = scale·KᵀQ of rank k: O(d²k) instead of O(d³)
            slope = (p.V @ (cov @ p.K.transpose(-1, -2))) @ (p.scale * p.Q)
        else:
            slope = p.V @ cov @ p.A
        return (c if p.bv is None else c + p.bv), slope

    def gaussian_affine_derivative(self, t, mean, cov) -> AffineDerivative:
        """(c, B) and their derivative: dc = V dα + V dΣ c_q, dB = V dΣ A (c_q = scale·Kᵀb_q)."""
        p = self.params.at(t, like=mean)
        c, B = self._affine(p, mean, cov)
        return AffineDerivative(c, B, p.V, ((p.V, p.A, p.query_shift),))

    # ------------------------------------------------------------------ gradient flow
    #: Capability "gradient_flow": Γ = s·grad_g E in the Z-weighted metric (MATH.md §5).
    metric_weighted = True
    ascends_energy = True

    def interaction(self, t: float = 0.0):
        """(A, V, dtype) for the gradient structure (:mod:`tpde.fields.gradient_flow.structure`)."""
        return qkv_interaction(self, t)

    def energy(self, mu, *, t: float = 0.0, engine: str = "auto", info=None) -> torch.Tensor:
        """E(μ) = ½ ∬ e^{yᵀAx} dμ(x) dμ(y) (:mod:`tpde.fields.gradient_flow.softmax_energy`)."""
        self.check_measure(mu)
        return softmax_energy(self, mu, t=t, engine=engine)

    def first_variation(self, mu, x, *, t: float = 0.0, engine: str = "auto", info=None):
        """δE/δμ(x) = ½(Z_A(x) + Z_{Aᵀ}(x)), shape (m,)."""
        return softmax_first_variation(self, mu, x, t=t, engine=engine)

    def first_variation_grad(self, mu, x, *, t: float = 0.0, engine: str = "auto", info=None):
        """∇_x δE/δμ(x), shape (m, d)."""
        return softmax_first_variation_grad(self, mu, x, t=t, engine=engine)

    def log_metric_weight(self, mu, x, *, t: float = 0.0, engine: str = "auto"):
        """log Z_μ(x) = log ∫ e^{yᵀAx} dμ(y): the weight of the twisted metric, shape (m,)."""
        return softmax_log_partition(self, mu, x, t=t, engine=engine)

    def domain_hint(self, mu) -> str:
        """Why E may be infinite at a Gaussian: it is finite only while ρ < 1."""
        if not isinstance(mu, Gaussian):
            return ""
        rho = float(softmax_domain(self, mu))
        return (
            f" The softmax energy of a Gaussian is finite only while ρ = ‖Σ^(1/2) A Σ^(1/2)‖ "
            f"< 1; here ρ = {rho:.4g}. Start from a smaller covariance."
        )

    def __repr__(self) -> str:
        return f"Softmax(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g})"
