"""Weighted particle clouds: the empirical measure μⁿ = Σ_i w_i δ_{x_i}."""

from __future__ import annotations

import torch

from tpde._scale_safe import unit
from tpde._validation import (
    as_tensor,
    check_finite,
    check_float_dtype,
    check_positions,
)
from tpde.measures._base import Measure, check_sample_size

__all__ = ["Empirical"]


def weight_tolerance(dtype: torch.dtype) -> float:
    """Tolerance on |Σ w − 1|: √eps (3.5e-4 in float32, 1.5e-8 in float64).

    The coarser of the weights' own dtype and the points' dtype is used."""
    return torch.finfo(dtype).eps ** 0.5


class Empirical(Measure):
    """Empirical measure μ = Σ_i w_i δ_{x_i}, optionally with token positions.

    Parameters
    ----------
    points : tensor or array, shape (n, d), or (..., n, d) for a batch of clouds
        Particle locations (tokens). Leading batch dimensions make a batch of particle
        systems with shared weights and positions (one per parameter set or seed): a flow
        steps and stops every element on its own; index one element with ``mu[i]``.
    weights : tensor or array, shape (n,), optional
        Nonnegative masses summing to 1 (within √eps of the dtype; they are then
        renormalised exactly). Default: uniform 1/n. Zero weights are allowed: such a
        particle moves with the flow but attracts no attention.
    positions : tensor or array, shape (n,), optional
        Token positions, finite and ≥ 0, for causal attention and positional encodings:
        integer token indices p_i = i for a model's sequence, or s_i = i/(n − 1) ∈ [0, 1]
        for a mean-field limit (the causal mask depends only on their order; RoPE and ALiBi
        on their values, :mod:`tpde.fields.attention.positions`). Positions never move.

    Notes
    -----
    Tensors keep their dtype, device and autograd history; numpy inputs are converted
    once (float64 stays float64).
    """

    def __init__(self, points, weights=None, positions=None):
        points = as_tensor(points, "points")
        if points.ndim < 2:
            raise ValueError(
                f"points must have shape (n, d); received shape {tuple(points.shape)}. Reshape "
                "a single cloud to (n, d), e.g. points.reshape(-1, d) (a batch of clouds is "
                "(..., n, d))."
            )
        if points.numel() == 0:
            raise ValueError(
                f"points must hold at least one point in dimension >= 1; received shape "
                f"{tuple(points.shape)}."
            )
        check_finite(points, "points")
        n = points.shape[-2]
        self._points = points
        self._weights = self._check_weights(weights, n)
        self._positions = self._check_positions(positions, n)

    def _check_weights(self, weights, n: int) -> torch.Tensor:
        points = self._points
        if weights is None:
            return torch.full((n,), 1.0 / n, dtype=points.dtype, device=points.device)
        weights = as_tensor(weights, "weights")
        # Judge the sum in the precision the weights were given in, then convert.
        tol = max(weight_tolerance(weights.dtype), weight_tolerance(points.dtype))
        weights = weights.to(dtype=points.dtype, device=points.device)
        if weights.shape != (n,):
            raise ValueError(
                f"weights must have shape (n,) = ({n},) to match points {tuple(points.shape)}; "
                f"received shape {tuple(weights.shape)}."
            )
        check_finite(weights, "weights")
        if (weights < 0).any():
            raise ValueError(
                f"weights must be nonnegative; received minimum {float(weights.min()):.3g}."
            )
        total = float(weights.detach().sum())
        if abs(total - 1.0) > tol:
            raise ValueError(
                f"weights must sum to 1; received a sum of {total:.10g}. Normalise them with "
                "weights / weights.sum()."
            )
        return weights / weights.sum()

    def _check_positions(self, positions, n: int) -> torch.Tensor | None:
        if positions is None:
            return None
        points = self._points
        return check_positions(
            positions, n, points,
            f"positions must have shape (n,) = ({n},) to match points {tuple(points.shape)}; "
            "received shape {got}.",
        )  # fmt: skip

    @classmethod
    def from_gaussian(cls, gaussian, n: int, generator: torch.Generator | None = None):
        """Sample ``n`` uniformly weighted particles from an unbatched Gaussian."""
        if gaussian.batch_shape != ():
            raise ValueError(
                f"from_gaussian needs a single Gaussian; received batch shape "
                f"{tuple(gaussian.batch_shape)}. Index it first, e.g. g[0]."
            )
        return cls(gaussian.sample(n, generator=generator))

    def normalized(self) -> Empirical:
        """The same measure with every point divided by its norm: tokens on the unit sphere
        S^{d−1} (x ↦ x/|x|, the normalisation of a Post-LN Transformer), right at every scale of
        the dtype (:mod:`tpde._scale_safe`). Zero points raise."""
        if bool((self._points == 0).all(-1).any()):
            raise ValueError(
                "normalized() needs nonzero points: a point at the origin has no direction. "
                "Move or drop it first."
            )
        return self.with_points(unit(self._points))

    @property
    def batch_shape(self) -> torch.Size:
        """Leading batch dimensions of the points (empty for one cloud)."""
        return self._points.shape[:-2]

    def __getitem__(self, index) -> Empirical:
        """One element (or a sub-batch) of a batch of clouds, with the same weights."""
        if self.batch_shape == ():
            raise TypeError(
                "this Empirical holds one cloud, not a batch: index its points instead "
                "(mu.points[i]), or build Empirical(points[idx], weights[idx])."
            )
        points = self._points[index]
        if points.ndim < 2 or points.shape[-2:] != self._points.shape[-2:]:
            raise IndexError(
                f"index the batch dimensions {tuple(self.batch_shape)} only; received {index!r}."
            )
        new = object.__new__(Empirical)
        new._points, new._weights, new._positions = points, self._weights, self._positions
        return new

    def values(self) -> dict[str, torch.Tensor]:
        return {"points": self._points, "weights": self._weights}

    def with_points(self, points: torch.Tensor) -> Empirical:
        """Same weights and positions, new locations (used by flows; checked for shape only)."""
        if points.shape != self._points.shape:
            raise ValueError(
                f"new points must have shape {tuple(self._points.shape)}; received "
                f"{tuple(points.shape)}."
            )
        new = object.__new__(Empirical)
        new._points, new._weights, new._positions = points, self._weights, self._positions
        return new

    @property
    def points(self) -> torch.Tensor:
        """Particle locations, shape (n, d) (or (..., n, d) for a batch)."""
        return self._points

    @property
    def weights(self) -> torch.Tensor:
        """Particle masses, shape (n,), summing to 1."""
        return self._weights

    @property
    def positions(self) -> torch.Tensor | None:
        """Token positions (finite, ≥ 0), shape (n,), or None."""
        return self._positions

    @property
    def n(self) -> int:
        """Number of particles."""
        return self._points.shape[-2]

    @property
    def dim(self) -> int:
        return self._points.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self._points.dtype

    @property
    def device(self) -> torch.device:
        return self._points.device

    def mean(self) -> torch.Tensor:
        """Weighted mean Σ_i w_i x_i, shape (d,) (or (..., d))."""
        return self._weights @ self._points

    def cov(self) -> torch.Tensor:
        """Weighted (population) covariance Σ_i w_i (x_i − m)(x_i − m)ᵀ, shape (d, d)
        (or (..., d, d))."""
        centred = self._points - self.mean().unsqueeze(-2)
        return (centred * self._weights[:, None]).mT @ centred

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Resample ``n`` points with replacement according to the weights, shape (n, d)."""
        n = check_sample_size(n)
        if self.batch_shape != ():
            raise ValueError(
                f"sample draws from one cloud; this Empirical is a batch of shape "
                f"{tuple(self.batch_shape)}: index an element first, mu[i].sample(n)."
            )
        index = torch.multinomial(
            self._weights.detach().to(torch.float64), n, replacement=True, generator=generator
        )
        return self._points[index.to(self._points.device)]

    def to(self, device=None, dtype=None) -> Empirical:
        if dtype is not None:
            check_float_dtype(dtype)

        def move(t):
            return None if t is None else t.to(device=device or t.device, dtype=dtype or t.dtype)

        new = object.__new__(Empirical)
        new._points, new._weights = move(self._points), move(self._weights)
        new._positions = move(self._positions)
        return new

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        extra = ", with positions" if self._positions is not None else ""
        if self.batch_shape != ():
            extra += f", batch={tuple(self.batch_shape)}"
        return f"Empirical(n={self.n}, d={self.dim}, dtype={self.dtype}{extra})"
