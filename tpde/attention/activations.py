"""Activation functions of the feed-forward fields: one table, name → elementwise function.

=========  ===========================================================================
relu       max(z, 0)
gelu       z·Φ(z), Φ the standard normal CDF (the erf form; hidden_act "gelu" of BERT, MiniLM)
silu       z·sigmoid(z) (swish with β = 1; SwiGLU's gate)
gelu-tanh  ½z(1 + tanh(√(2/π)(z + 0.044715z³))) (GPT-2's "gelu_new"; torch approximate="tanh")
=========  ===========================================================================

:class:`~tpde.attention.MLP` reads its ``activation`` here. A new activation is one entry
of :data:`ACTIVATIONS` (an elementwise torch function that keeps its input's dtype, device
and autograd graph) with its row above, and its formula written out in
``tests/attention/test_mlp.py`` (``REFERENCE``, and torch's module in ``MODULES``); the
tests then check it, in an MLP, against torch (docs/EXTENDING.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

__all__ = ["ACTIVATIONS", "resolve_activation"]

Activation = Callable[[torch.Tensor], torch.Tensor]

#: name -> σ, applied elementwise to the hidden pre-activations z = W₁x + b₁ (MATH.md §8).
ACTIVATIONS: dict[str, Activation] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "gelu-tanh": partial(F.gelu, approximate="tanh"),
}


def resolve_activation(activation: str | Activation) -> tuple[str, Activation]:
    """(name, σ) for a name of :data:`ACTIVATIONS` or a callable ``tensor -> tensor``.

    A callable is used as given (its ``__name__`` names it); it must act elementwise,
    returning a tensor of its input's shape (checked at every call of the field).
    """
    if isinstance(activation, str):
        if activation in ACTIVATIONS:
            return activation, ACTIVATIONS[activation]
        raise ValueError(
            f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}, or pass "
            "an elementwise callable tensor -> tensor."
        )
    if callable(activation):
        return getattr(activation, "__name__", type(activation).__name__), activation
    raise TypeError(
        f"activation must be a name ({', '.join(ACTIVATIONS)}) or an elementwise callable "
        f"tensor -> tensor; received {type(activation).__name__}."
    )
