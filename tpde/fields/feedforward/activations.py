"""Activation functions of the feed-forward fields: one table, name → elementwise function.

=========  ===========================================================================
relu       max(z, 0)
gelu       z·Φ(z), Φ the standard normal CDF (the erf form; hidden_act "gelu" of BERT, MiniLM)
silu       z·sigmoid(z) (swish with β = 1; SwiGLU's gate)
gelu-tanh  ½z(1 + tanh(√(2/π)(z + 0.044715z³))) (GPT-2's "gelu_new"; torch approximate="tanh")
gelu-tanh  ½z(1 + tanh(0.79788456·z(1 + 0.044715z²))): BLOOM's GELU, √(2/π) written to 8
-bloom     decimals (1.0e-9 below it, so 1e-10-relative away from "gelu-tanh")
=========  ===========================================================================

:class:`~tpde.fields.MLP` reads its ``activation`` here. A new activation is one entry
of :data:`ACTIVATIONS` (an elementwise torch function that keeps its input's dtype, device
and autograd graph) with its row above, and its formula written out in
``tests/fields/feedforward/test_mlp.py`` (``REFERENCE``, and torch's module in ``MODULES``); the
tests then check it, in an MLP, against torch (docs/EXTENDING.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from tpde._validation import finite_sum

__all__ = ["ACTIVATIONS", "check_activation_output", "resolve_activation"]

Activation = Callable[[torch.Tensor], torch.Tensor]

#: name -> σ, applied elementwise to the hidden pre-activations z = W₁x + b₁ (MATH.md §8).
ACTIVATIONS: dict[str, Activation] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "gelu-tanh": partial(F.gelu, approximate="tanh"),
    "gelu-tanh-bloom": lambda z: (
        z * 0.5 * (1.0 + torch.tanh(0.79788456 * z * (1 + 0.044715 * z * z)))
    ),
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
        name = getattr(activation, "__name__", type(activation).__name__)
        try:
            inspect.signature(activation).bind(None)  # arity only: one positional argument
        except TypeError:
            raise TypeError(
                f"the activation {name!r} must take one tensor (the hidden units z, applied "
                f"elementwise); its signature is {inspect.signature(activation)}. Wrap it, "
                "e.g. lambda z: f(z, ...)."
            ) from None
        except ValueError:  # no signature to read (some builtins): checked at every call
            pass
        return name, activation
    raise TypeError(
        f"activation must be a name ({', '.join(ACTIVATIONS)}) or an elementwise callable "
        f"tensor -> tensor; received {type(activation).__name__}."
    )


def check_activation_output(name: str, z: torch.Tensor, hidden) -> None:
    """Raise unless a callable activation returned, for the hidden units z, a torch tensor of
    z's shape and dtype, finite where z is (a user's σ is checked at every call; the table's
    functions are elementwise torch by construction)."""
    if not isinstance(hidden, torch.Tensor):
        raise TypeError(
            f"the activation {name!r} returned {type(hidden).__name__}; an activation must "
            "return a torch tensor of its input's shape, computed in torch (numpy breaks "
            "autograd and the device; convert with torch.as_tensor)."
        )
    if hidden.shape != z.shape:
        raise ValueError(
            f"the activation {name!r} returned shape {tuple(hidden.shape)} for hidden units of "
            f"shape {tuple(z.shape)}; an activation must act elementwise."
        )
    if hidden.dtype != z.dtype:
        raise TypeError(
            f"the activation {name!r} returned {hidden.dtype} for hidden units in {z.dtype}; "
            "an activation must keep its input's dtype (no .float() or .double() inside)."
        )
    if not finite_sum(hidden):
        bad = ~torch.isfinite(hidden.detach()) & torch.isfinite(z.detach())
        if bool(bad.any()):
            raise FloatingPointError(
                f"the activation {name!r} returned {int(bad.sum())} non-finite values (NaN or "
                "Inf) for finite hidden units: look for 0/0, a log of 0 or an exp that "
                "overflows in it."
            )
