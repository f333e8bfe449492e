"""The interface every measure implements."""

from __future__ import annotations

import abc

import torch

from tpde._validation import check_positive_int


class Measure(abc.ABC):
    """A probability measure on R^d that tpde can evolve and compare.

    Every measure exposes its dimension, its first two moments, sampling and a device /
    dtype move. Subclasses: :class:`~tpde.measures.Empirical` (weighted particles),
    :class:`~tpde.measures.Gaussian` (mean and covariance, batched).
    """

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Ambient dimension d."""

    @property
    @abc.abstractmethod
    def dtype(self) -> torch.dtype:
        """Floating dtype of the measure's tensors."""

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """Device of the measure's tensors."""

    @abc.abstractmethod
    def mean(self) -> torch.Tensor:
        """Mean ∫ x dμ, shape (..., d)."""

    @abc.abstractmethod
    def cov(self) -> torch.Tensor:
        """Covariance ∫ (x − m)(x − m)ᵀ dμ, shape (..., d, d)."""

    @abc.abstractmethod
    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``n`` i.i.d. points, shape (..., n, d)."""

    @abc.abstractmethod
    def to(self, device=None, dtype=None) -> Measure:
        """Return the same measure with tensors on ``device`` and/or in ``dtype``."""

    def values(self) -> dict[str, torch.Tensor]:
        """The tensors that hold this measure's values, by name: what a public boundary
        checks finite again (:func:`tpde._validation.check_measure_finite`), since a tensor
        may change in place after the measure checked it when built."""
        return {}


def check_sample_size(n) -> int:
    """Validate the number of samples requested from a measure."""
    return check_positive_int(n, "the number of samples")
