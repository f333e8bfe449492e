"""The two-layer perceptron as a per-token velocity field (a Transformer's MLP block)."""

from __future__ import annotations

import torch

from tpde.fields.feedforward.activations import check_activation_output, resolve_activation
from tpde.fields.feedforward.base import FeedForward
from tpde.fields.params import Weights, linear

__all__ = ["MLP"]


class MLP(FeedForward):
    r"""Feed-forward field F(x) = W₂ σ(W₁x + b₁) + b₂, the same at every token (MATH.md §8).

    Parameters
    ----------
    W1 : tensor (..., m, d) or callable ``t -> tensor``
        First layer: d token coordinates to m hidden units.
    b1 : tensor (..., m), callable, or None
        First bias (None: no bias).
    W2 : tensor (..., d, m) or callable
        Second layer, back to the d token coordinates.
    b2 : tensor (..., d), callable, or None
        Second bias.
    activation : str or callable, default "gelu"
        σ, applied elementwise: a name of :data:`tpde.fields.feedforward.activations.ACTIVATIONS`
        (the table lists them with their formulas; "gelu" is the erf form z·Φ(z)), or a
        callable ``tensor -> tensor`` that keeps its input's shape, dtype and device.

    Notes
    -----
    The velocity at x depends on x alone: ẋ = F(x) moves each token on its own, and μ, the
    engine and ``info`` play no part. With ``W1``, ``W2`` laid out as ``nn.Linear`` weights
    (out, in), F is ``fc2(σ(fc1(x)))`` of a BERT or GPT-2 block; one Euler step of size 1
    is the residual update x ← x + F(x) (a norm in front is
    :class:`~tpde.fields.Normalized`'s business). Weights with leading batch dimensions
    give one MLP per batch element of batched points (…, n, d). Every tensor is computed in
    the points' dtype and device, in torch (autograd flows to x and to the weights).

    A nonlinear F maps a Gaussian to a measure that is not Gaussian: there is no closed
    moment ODE, and a Gaussian is refused (:class:`~tpde.fields.GaussianNotPreserved`);
    integrate particles drawn from it, or a grid (d ≤ 2).

    Not in the attention registry (:mod:`tpde.fields.registry`): the registry builds
    Q/K/V attention variants, and a feed-forward field has no Q, K, V.

    Reference: Vaswani et al., "Attention is all you need", NeurIPS 2017 (the position-wise
    feed-forward network); Hendrycks & Gimpel, arXiv:1606.08415 (GELU).
    """

    def __init__(self, W1, b1, W2, b2, activation="gelu"):
        self.activation_name, self.activation = resolve_activation(activation)
        self._user_activation = not isinstance(activation, str)
        self.params = Weights(
            "MLP",
            {"W1": ("m", "d"), "b1": ("m",), "W2": ("d", "m"), "b2": ("d",)},
            {"W1": W1, "b1": b1, "W2": W2, "b2": b2},
            optional=("b1", "b2"),
        )
        self.dim, self.hidden = self.params.sizes["d"], self.params.sizes["m"]

    def feed_forward(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """W₂ σ(W₁x + b₁) + b₂ for x (..., n, d)."""
        W1, b1, W2, b2 = self.params.at(t, like=x)
        z = linear(x, W1, b1)
        hidden = self.activation(z)
        if self._user_activation:  # the table's functions are elementwise torch
            check_activation_output(self.activation_name, z, hidden)
        return linear(hidden, W2, b2)

    def __repr__(self) -> str:
        return f"MLP(d={self.dim}, m={self.hidden}, activation={self.activation_name!r})"
