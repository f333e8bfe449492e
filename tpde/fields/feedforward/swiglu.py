"""SwiGLU, the gated feed-forward block of Llama and SmolLM2, as a per-token velocity field."""

from __future__ import annotations

import torch

from tpde.fields.feedforward.activations import check_activation_output, resolve_activation
from tpde.fields.feedforward.base import FeedForward
from tpde.fields.params import Weights, linear

__all__ = ["SwiGLU"]


class SwiGLU(FeedForward):
    r"""Gated feed-forward field F(x) = W_down (σ(W_gate x) ⊙ W_up x) (MATH.md §8).

    σ = silu, silu(z) = z·sigmoid(z) (SwiGLU; Llama), or another activation of
    :data:`~tpde.fields.feedforward.activations.ACTIVATIONS` ("gelu-tanh": GeGLU, Gemma);
    ⊙ the elementwise product over the m hidden units.

    Parameters
    ----------
    W_gate, W_up : tensor (..., m, d) or callable ``t -> tensor``
        Gate and up projections (``gate_proj``, ``up_proj`` of Llama's MLP), d → m.
    W_down : tensor (..., d, m) or callable
        Down projection (``down_proj``), m → d.
    activation : str or callable, optional
        The gate's σ (default "silu"); a name of
        :data:`~tpde.fields.feedforward.activations.ACTIVATIONS` or an elementwise callable
        (checked at every call, as :class:`~tpde.fields.MLP` checks its own).

    Notes
    -----
    No biases (Llama's layout). Per token, no interaction: μ, the engine and ``info`` play
    no part, and one Euler step of size 1 is the residual update x ← x + F(x) of a decoder
    layer's MLP half (its RMSNorm in front is a separate concern). Three products per call,
    the same as the model's (``down_proj(act_fn(gate_proj(x)) * up_proj(x))``); weights with
    leading batch dimensions broadcast against batched points (…, n, d). Computed in torch
    in the points' dtype and device (autograd flows to x and the weights).

    F is not affine, so a Gaussian does not stay Gaussian: no closed moment ODE, Gaussians
    are refused (:class:`~tpde.fields.GaussianNotPreserved`); integrate particles.

    Not in the attention registry (:mod:`tpde.fields.registry`), which builds Q/K/V
    attention variants.

    Reference: Shazeer, "GLU variants improve Transformer", arXiv:2002.05202 (2020);
    Touvron et al., "LLaMA", arXiv:2302.13971 (2023); Allal et al., "SmolLM2",
    arXiv:2502.02737 (2025).
    """

    def __init__(self, W_gate, W_up, W_down, activation="silu"):
        self.params = Weights(
            "SwiGLU",
            {"W_gate": ("m", "d"), "W_up": ("m", "d"), "W_down": ("d", "m")},
            {"W_gate": W_gate, "W_up": W_up, "W_down": W_down},
        )
        self.dim, self.hidden = self.params.sizes["d"], self.params.sizes["m"]
        self.activation_name, self.activation = resolve_activation(activation)
        self._user_activation = not isinstance(activation, str)

    def feed_forward(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """W_down (σ(W_gate x) ⊙ W_up x) for x (..., n, d)."""
        W_gate, W_up, W_down = self.params.at(t, like=x)
        z = linear(x, W_gate, None)
        gate = self.activation(z)
        if self._user_activation:  # the table's functions are elementwise torch
            check_activation_output(self.activation_name, z, gate)
        return linear(gate * linear(x, W_up, None), W_down, None)

    def __repr__(self) -> str:
        extra = "" if self.activation_name == "silu" else f", activation={self.activation_name!r}"
        return f"SwiGLU(d={self.dim}, m={self.hidden}{extra})"
