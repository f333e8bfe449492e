"""Gaussian measures N(α, Σ) with arbitrary leading batch dimensions."""

from __future__ import annotations

import torch

from tpde._linalg import sqrtm_psd
from tpde._validation import (
    as_tensor,
    check_finite,
    check_float_dtype,
    check_linalg_dtype,
    check_psd,
    check_symmetric,
)
from tpde.measures._base import Measure, check_sample_size

__all__ = ["Gaussian"]


class Gaussian(Measure):
    """Gaussian measure N(α, Σ), batched over leading dimensions.

    Parameters
    ----------
    mean : tensor or array, shape (..., d)
    cov : tensor or array, shape (..., d, d)
        Symmetric positive semidefinite (checked: asymmetry up to 1e3 eps relative,
        eigenvalues down to −d·1e3·eps·scale are accepted as rounding). Degenerate
        covariances are allowed: the rank-deficient limits of attention flows are Gaussians.

    The batch shapes of ``mean`` and ``cov`` broadcast against each other; a batched
    Gaussian is a whole sweep of measures integrated in one tensor computation.
    """

    def __init__(self, mean, cov):
        mean = as_tensor(mean, "mean")
        cov = as_tensor(cov, "cov", device=mean.device)
        if mean.ndim < 1 or mean.shape[-1] == 0:
            raise ValueError(
                f"mean must have shape (..., d) with d >= 1; received shape {tuple(mean.shape)}."
            )
        d = mean.shape[-1]
        if cov.ndim < 2 or cov.shape[-2:] != (d, d):
            raise ValueError(
                f"cov must have shape (..., {d}, {d}) to match mean {tuple(mean.shape)}; "
                f"received shape {tuple(cov.shape)}."
            )
        dtype = torch.promote_types(mean.dtype, cov.dtype)
        mean, cov = mean.to(dtype), cov.to(dtype)
        check_linalg_dtype(cov.dtype, "cov")
        try:
            batch = torch.broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
        except RuntimeError:
            raise ValueError(
                f"the batch shapes of mean {tuple(mean.shape[:-1])} and cov "
                f"{tuple(cov.shape[:-2])} do not broadcast."
            ) from None
        check_finite(mean, "mean")
        check_finite(cov, "cov")
        check_symmetric(cov, "cov")
        check_psd(cov, "cov")
        self._mean = mean.expand(*batch, d)
        self._cov = cov.expand(*batch, d, d)

    @classmethod
    def _trusted(cls, mean: torch.Tensor, cov: torch.Tensor) -> Gaussian:
        """Build without checks (integrators, after symmetrising); shapes must already match."""
        new = object.__new__(cls)
        new._mean, new._cov = mean, cov
        return new

    @property
    def batch_shape(self) -> torch.Size:
        """Leading batch dimensions (empty for a single Gaussian)."""
        return self._mean.shape[:-1]

    @property
    def dim(self) -> int:
        return self._mean.shape[-1]

    @property
    def dtype(self) -> torch.dtype:
        return self._mean.dtype

    @property
    def device(self) -> torch.device:
        return self._mean.device

    def values(self) -> dict[str, torch.Tensor]:
        return {"mean": self._mean, "cov": self._cov}

    def mean(self) -> torch.Tensor:
        """Mean α, shape (..., d)."""
        return self._mean

    def cov(self) -> torch.Tensor:
        """Covariance Σ, shape (..., d, d)."""
        return self._cov

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``n`` points per batch element, shape (..., n, d): x = α + Σ^{1/2} z."""
        n = check_sample_size(n)
        z = torch.randn(
            (*self.batch_shape, n, self.dim),
            dtype=self.dtype,
            device=self.device,
            generator=generator,
        )
        root = sqrtm_psd(self._cov)  # stable backward, also at repeated eigenvalues
        return self._mean.unsqueeze(-2) + z @ root.transpose(-1, -2)

    def to(self, device=None, dtype=None) -> Gaussian:
        if dtype is not None:
            check_linalg_dtype(check_float_dtype(dtype), "dtype")
        return Gaussian._trusted(
            self._mean.to(device=device or self.device, dtype=dtype or self.dtype),
            self._cov.to(device=device or self.device, dtype=dtype or self.dtype),
        )

    def __getitem__(self, index) -> Gaussian:
        if self.batch_shape == ():
            raise IndexError("an unbatched Gaussian cannot be indexed.")
        if not isinstance(index, tuple):
            index = (index,)
        return Gaussian._trusted(
            self._mean[(*index, ...)], self._cov[(*index, ..., slice(None), slice(None))]
        )

    def __repr__(self) -> str:
        batch = f", batch_shape={tuple(self.batch_shape)}" if self.batch_shape else ""
        return f"Gaussian(d={self.dim}{batch}, dtype={self.dtype})"
