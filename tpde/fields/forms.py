"""Shared forms of the normalised attentions: key log-weights and the softmax form."""

from __future__ import annotations

from typing import NamedTuple

import torch

from tpde._engines import softmax_average
from tpde._memo import TensorMemo
from tpde.measures import Empirical

__all__ = ["KernelForm", "SoftmaxForm", "key_log_weights", "key_positions"]


class SoftmaxForm(NamedTuple):
    """A normalised attention written as one key-biased softmax average.

    Γ[μ](x) = softmax_average(queries, keys, points, key_bias) Vᵀ + b_v in row form;
    ``points`` are the particles of μ with positive mass (the values before V).
    """

    queries: torch.Tensor  # (..., m, e)
    keys: torch.Tensor  # (..., n, e)
    key_bias: torch.Tensor  # (..., n)
    points: torch.Tensor  # (n, d)
    V: torch.Tensor | None  # (..., d, d); None for V = I (the values are the points)
    value_bias: torch.Tensor | None  # (..., d) or None

    def finish(self, averaged: torch.Tensor) -> torch.Tensor:
        """V applied to the averaged points, plus the value bias: (..., m, d)."""
        out = averaged if self.V is None else averaged @ self.V.transpose(-1, -2)
        return out if self.value_bias is None else out + self.value_bias.unsqueeze(-2)

    def velocity(self, engine: str, **mask) -> torch.Tensor:
        averaged = softmax_average(
            self.queries, self.keys, self.points, key_bias=self.key_bias, engine=engine, **mask
        )
        return self.finish(averaged)


class KernelForm(NamedTuple):
    """An unnormalised exponential attention: Γ[μ](x) = Σ_j e^{log w_j + ⟨q(x), k_j⟩} v_j."""

    queries: torch.Tensor  # (..., m, e)
    keys: torch.Tensor  # (..., n, e)
    log_weights: torch.Tensor  # (..., n): log w_j of the tokens with mass
    values: torch.Tensor  # (..., n, d): v_j


def _all_positive(weights: torch.Tensor) -> bool:
    return bool((weights > 0).all())


#: Whether every weight is positive, and the log-weights, remembered for the last weights
#: tensor: a flow's measures share theirs (:mod:`tpde._memo`).
_ALL_POSITIVE = TensorMemo(_all_positive, "weights")
_LOG = TensorMemo(torch.log, "weights")


def key_log_weights(mu: Empirical) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys with positive mass and their log-weights (zero-mass particles attract nothing)."""
    weights, points = mu.weights, mu.points
    if _ALL_POSITIVE(weights):
        return points, _LOG(weights)
    positive = weights > 0
    weights, points = weights[positive], points.index_select(-2, positive.nonzero()[:, 0])
    return points, weights.log()


def key_positions(mu: Empirical):
    """The positions of the keys of :func:`key_log_weights` (the tokens with positive mass):
    μ's own tensor when none is dropped, so that engines can tell self-attention (queries
    that are the keys) by identity."""
    positions = mu.positions
    if positions is None or _ALL_POSITIVE(mu.weights):
        return positions
    return positions[mu.weights > 0]
