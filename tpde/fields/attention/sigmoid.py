"""Sigmoid attention: a pointwise sigmoid of the score, without normalisation."""

from __future__ import annotations

import math

import torch

from tpde._engines import kernel_sum
from tpde.fields.base import Field
from tpde.fields.forms import key_log_weights
from tpde.fields.params import QKV
from tpde.fields.registry import register
from tpde.measures import Empirical

__all__ = ["Sigmoid"]


@register("sigmoid", defaults={"bias": 0.0})
class Sigmoid(Field):
    r"""Sigmoid attention Γ[μ](x) = ∫ σ(yᵀAx + b) V y dμ(y), σ(s) = 1/(1 + e^{−s}).

    Parameters
    ----------
    Q, K : tensor (..., k, d) or callable ``t -> tensor``
        Query and key matrices; A = scale · KᵀQ.
    V : tensor (..., d, d) or callable
        Value matrix.
    scale : float, optional
        Default 1/√k.
    bias : float or None
        - ``None`` (default): the layer of the sigmoid-attention literature, with the
          particle weights *inside* the sigmoid,
          ẋ_i = Σ_j σ(x_jᵀAx_i + log w_j) V x_j. For uniform weights 1/n this is exactly
          Σ_j σ(x_jᵀAx_i − log n) V x_j, the bias −log n of Ramapuram et al. (2024).
        - a float b: the mean-field field of MATH.md §2 with that constant,
          ẋ_i = Σ_j w_j σ(x_jᵀAx_i + b) V x_j (b = 0 is MATH.md's default field).

    Notes
    -----
    Both forms run on the "dense", "chunked", "tiled" and "keops" engines ("auto": dense for
    small n, then tiled on the CPU, KeOps on CUDA); "sdpa" cannot express an unnormalised
    kernel and raises.

    The default (literature) layer is not a function of the measure alone: σ is not
    linear, so a particle of weight 2/n is not exactly two particles of weight 1/n (the
    gap is O(w) when the scores are moderate). As n → ∞ with weights 1/n,
    σ(s − log n) = e^s/n + O(e^{2s}/n²), so the layer tends to the unnormalised
    exponential field V ∫ e^{yᵀAx} y dμ(y) — softmax's numerator without its normaliser.
    A float bias gives a field that is linear in μ (a mean-field field whose particle
    flows converge as n → ∞ to the sigmoid PDE).

    Gaussians are not preserved: σ(yᵀAx + b) is not an exponential of y, so the tilt lemma
    does not apply and :meth:`gaussian_rhs` raises :class:`GaussianNotPreserved`; integrate
    particles sampled from the Gaussian instead.

    Reference: Ramapuram et al., "Theory, Analysis, and Best Practices for Sigmoid
    Self-Attention", arXiv:2409.04431 (2024); Castin, Ablin, Carrillo, Peyré,
    arXiv:2501.18322 (2025).
    """

    def __init__(self, Q, K, V, scale=None, bias: float | None = None):
        self.params = QKV(Q, K, V, scale)
        self.dim = self.params.dim
        if bias is not None:
            try:
                bias = float(bias)
            except (TypeError, ValueError):
                raise TypeError(
                    f"bias must be a number or None (the literature layer); received {bias!r}."
                ) from None
            if not math.isfinite(bias):
                raise ValueError(
                    f"bias contains 1 non-finite value ({bias!r}); pass a finite number, or "
                    "None for the literature layer."
                )
        self.bias = bias

    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        p = self.params.at(t, like=x)
        queries = x @ p.A.transpose(-1, -2)
        if self.bias is None:  # literature layer: weights inside, σ(s + log w_j)
            points, log_w = key_log_weights(mu)
            values, bias = points @ p.V.transpose(-1, -2), log_w
        else:  # mean-field field: weights outside, w_j σ(s + b)
            points, weights = mu.points, mu.weights
            values = (weights.unsqueeze(-1) * points) @ p.V.transpose(-1, -2)
            bias = torch.full_like(weights, self.bias)
        return kernel_sum(queries, points, values, key_bias=bias, kernel="sigmoid", engine=engine)

    def gaussian_refusal(self) -> str:
        return (
            "Sigmoid attention does not keep Gaussians Gaussian (σ(yᵀAx + b) is not an "
            "exponential in y, so the tilt lemma of MATH.md §3 does not apply): there is no "
            "moment ODE. Integrate particles instead: "
            "integrate(field, Empirical.from_gaussian(gaussian, n), t1)."
        )

    def __repr__(self) -> str:
        bias = "log w (literature layer)" if self.bias is None else f"{self.bias:.4g}"
        return f"Sigmoid(d={self.dim}, k={self.params.k}, scale={self.params.scale:.4g}, b={bias})"
