"""Weighted particle clouds: the empirical measure μⁿ = Σ_i w_i δ_{x_i}."""

from __future__ import annotations

import torch

from tpde._validation import as_tensor, check_finite
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
    points : tensor or array, shape (n, d)
        Particle locations (tokens).
    weights : tensor or array, shape (n,), optional
        Nonnegative masses summing to 1 (within √eps of the dtype; they are then
        renormalised exactly). Default: uniform 1/n. Zero weights are allowed: such a
        particle moves with the flow but attracts no attention.
    positions : tensor or array, shape (n,), optional
        Token positions s_i ∈ [0, 1] for masked (causal) attention. Positions never move.

    Notes
    -----
    Tensors keep their dtype, device and autograd history; numpy inputs are converted
    once (float64 stays float64).
    """

    def __init__(self, points, weights=None, positions=None):
        points = as_tensor(points, "points")
        if points.ndim != 2:
            raise ValueError(
                f"points must have shape (n, d); received shape {tuple(points.shape)}. "
                "Reshape a single cloud to (n, d), e.g. points.reshape(-1, d)."
            )
        if points.shape[0] == 0 or points.shape[1] == 0:
            raise ValueError(
                f"points must hold at least one point in dimension >= 1; received shape "
                f"{tuple(points.shape)}."
            )
        check_finite(points, "points")
        n = points.shape[0]
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
        positions = as_tensor(positions, "positions", dtype=points.dtype, device=points.device)
        if positions.shape != (n,):
            raise ValueError(
                f"positions must have shape (n,) = ({n},) to match points "
                f"{tuple(points.shape)}; received shape {tuple(positions.shape)}."
            )
        check_finite(positions, "positions")
        if (positions < 0).any() or (positions > 1).any():
            raise ValueError(
                f"positions must lie in [0, 1]; received values in [{float(positions.min()):.3g}"
                f", {float(positions.max()):.3g}]. Rescale token indices i to i / (n - 1)."
            )
        return positions.detach()

    @classmethod
    def from_gaussian(cls, gaussian, n: int, generator: torch.Generator | None = None):
        """Sample ``n`` uniformly weighted particles from an unbatched Gaussian."""
        if gaussian.batch_shape != ():
            raise ValueError(
                f"from_gaussian needs a single Gaussian; received batch shape "
                f"{tuple(gaussian.batch_shape)}. Index it first, e.g. g[0]."
            )
        return cls(gaussian.sample(n, generator=generator))

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
        """Particle locations, shape (n, d)."""
        return self._points

    @property
    def weights(self) -> torch.Tensor:
        """Particle masses, shape (n,), summing to 1."""
        return self._weights

    @property
    def positions(self) -> torch.Tensor | None:
        """Token positions in [0, 1], shape (n,), or None."""
        return self._positions

    @property
    def n(self) -> int:
        """Number of particles."""
        return self._points.shape[0]

    @property
    def dim(self) -> int:
        return self._points.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self._points.dtype

    @property
    def device(self) -> torch.device:
        return self._points.device

    def mean(self) -> torch.Tensor:
        """Weighted mean Σ_i w_i x_i, shape (d,)."""
        return self._weights @ self._points

    def cov(self) -> torch.Tensor:
        """Weighted (population) covariance Σ_i w_i (x_i − m)(x_i − m)ᵀ, shape (d, d)."""
        centred = self._points - self.mean()
        return (centred * self._weights[:, None]).T @ centred

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Resample ``n`` points with replacement according to the weights, shape (n, d)."""
        n = check_sample_size(n)
        index = torch.multinomial(
            self._weights.detach().to(torch.float64), n, replacement=True, generator=generator
        )
        return self._points[index.to(self._points.device)]

    def to(self, device=None, dtype=None) -> Empirical:
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
        return f"Empirical(n={self.n}, d={self.dim}, dtype={self.dtype}{extra})"
