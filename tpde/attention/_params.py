"""Attention parameters (Q, K, V, scale), constant or functions of depth-time t."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tpde._validation import as_parameter, as_tensor, check_finite, check_positive


@dataclass(frozen=True)
class HeadParams:
    """Parameters of one head resolved at a time t, on the measure's dtype and device.

    Q, K : (..., k, d);  V : (..., d, d);  scale : float.
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    scale: float

    @property
    def A(self) -> torch.Tensor:
        """Interaction matrix A = scale · Kᵀ Q, shape (..., d, d)."""
        return self.scale * self.K.transpose(-1, -2) @ self.Q


Param = torch.Tensor | Callable[[float], torch.Tensor]


class QKV:
    """Holds Q, K, V (tensors or callables ``t -> tensor``) and the scale of one head.

    Shapes are checked at construction; callables are evaluated once at t = 0 for that,
    and their outputs are shape-checked at every later evaluation.
    """

    def __init__(self, Q, K, V, scale=None, *, value_rows: int | None = None):
        self.Q = as_parameter(Q, "Q")
        self.K = as_parameter(K, "K")
        self.V = as_parameter(V, "V")
        self._value_rows = value_rows
        q0, k0, v0 = (self._evaluate(p, name, 0.0) for p, name in self._named())
        if q0.ndim < 2:
            raise ValueError(
                f"Q must have shape (..., k, d); received shape {tuple(q0.shape)}. "
                "A single query vector is Q of shape (1, d)."
            )
        self.k, self.dim = q0.shape[-2], q0.shape[-1]
        self._check_shapes(q0, k0, v0)
        self.scale = 1.0 / math.sqrt(self.k) if scale is None else check_positive(scale, "scale")

    def _named(self):
        return ((self.Q, "Q"), (self.K, "K"), (self.V, "V"))

    @staticmethod
    def _evaluate(param, name: str, t: float) -> torch.Tensor:
        if isinstance(param, torch.Tensor):
            return param
        value = as_tensor(param(t), f"{name}({t})")
        check_finite(value, f"{name}({t})")
        return value

    def _check_shapes(self, Q, K, V) -> None:
        k, d = self.k, self.dim
        rows = d if self._value_rows is None else self._value_rows
        if Q.shape[-2:] != (k, d):
            raise ValueError(
                f"Q changed shape over time: {tuple(Q.shape)} instead of (..., {k}, {d})."
            )
        if K.ndim < 2 or K.shape[-2:] != (k, d):
            raise ValueError(
                f"K must have shape (..., {k}, {d}) like Q {tuple(Q.shape)}; received "
                f"{tuple(K.shape)}."
            )
        if V.ndim < 2 or V.shape[-2:] != (rows, d):
            raise ValueError(
                f"V must have shape (..., {rows}, {d}) for tokens of dimension {d}; "
                f"received {tuple(V.shape)}."
            )
        try:
            torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
        except RuntimeError:
            raise ValueError(
                f"the batch shapes of Q {tuple(Q.shape[:-2])}, K {tuple(K.shape[:-2])} and "
                f"V {tuple(V.shape[:-2])} do not broadcast."
            ) from None

    @property
    def time_dependent(self) -> bool:
        return any(not isinstance(p, torch.Tensor) for p, _ in self._named())

    def at(self, t: float, like: torch.Tensor) -> HeadParams:
        """Resolve at time ``t`` in ``like``'s dtype and device (autograd preserved)."""
        values = [self._evaluate(p, name, t) for p, name in self._named()]
        if self.time_dependent:
            self._check_shapes(*values)
        Q, K, V = (v.to(dtype=like.dtype, device=like.device) for v in values)
        return HeadParams(Q, K, V, self.scale)
