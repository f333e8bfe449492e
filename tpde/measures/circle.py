r"""A probability density on the unit circle S¹, sampled on a uniform grid of angles.

The state of the circle PDE (:mod:`tpde.flows.systems.circle`): the density ρ(θ) with respect to
arc length of a measure on S¹ = {(cos θ, sin θ)}, known at M equally spaced angles
θ_j = θ_0 + jh, h = 2π/M, and read between them as its trigonometric interpolant

    ρ(θ) = Σ_{|k| ≤ M/2} c_k e^{ikθ},   c_k = (1/M) Σ_j ρ_j e^{−ikθ_j}

(the mode ±M/2 of an even M halved between its two signs), so c_k = (1/2π)∫ρe^{−ikθ}dθ
exactly and the trapezoidal rule h Σ_j f(θ_j) integrates every trigonometric polynomial of
degree < M exactly: the mass (2πc_0), the mean and the covariance below are exact.
"""

from __future__ import annotations

import math
import numbers

import torch

from tpde._validation import as_tensor, check_float_dtype, check_real
from tpde.measures._base import Measure, check_sample_size

__all__ = ["MIN_POINTS", "CircleDensity"]

#: The fewest grid points: the second moments (modes up to M/2 + 2) must stay below M.
MIN_POINTS = 8

#: Dtypes torch's FFT does not take on every device: their transforms run in float32 and
#: come back in the density's dtype.
HALF_DTYPES = (torch.float16, torch.bfloat16)

#: Refinement of the sampler's table of the distribution function (module notes of sample).
SAMPLE_REFINEMENT = 16


class CircleDensity(Measure):
    r"""A density on the unit circle S¹ ⊂ R² at M uniform angles (module notes).

    Parameters
    ----------
    density : tensor or array, shape (M,), M ≥ 8
        Values ρ_j ≥ 0 of the density at θ_j = offset + 2πj/M (any positive total: the
        values are divided by their mass h Σ_j ρ_j, h = 2π/M, so the measure has mass 1).
    offset : float, the first angle θ_0 (default 0).

    Notes
    -----
    As a measure on R² it lives on the unit circle: mean ∫(cos θ, sin θ)ρ dθ and covariance
    exact by the trapezoidal rule (degree ≤ M/2 + 2 < M). :meth:`cdf` gives the
    distribution function at the grid angles, exactly (by the Fourier coefficients).
    """

    def __init__(self, density, offset: float = 0.0):
        density = as_tensor(density, "density")
        if density.ndim != 1:
            raise ValueError(
                f"density must have shape (M,): its values at M uniform angles; received "
                f"shape {tuple(density.shape)}."
            )
        if density.shape[0] < MIN_POINTS:
            raise ValueError(
                f"density needs at least {MIN_POINTS} grid points (its second moments are "
                f"exact on M ≥ {MIN_POINTS}); received M = {density.shape[0]}."
            )
        bad = ~torch.isfinite(density.detach())
        if bad.any():
            raise ValueError(
                f"density must be finite; received {int(bad.sum())} non-finite value(s), the "
                f"first at index {int(bad.nonzero()[0, 0])}."
            )
        if (density < 0).any():
            worst = int(density.detach().argmin())
            raise ValueError(
                f"density must be nonnegative; received {float(density[worst]):.3g} at index "
                f"{worst} (angle offset + 2π·{worst}/M). Clip rounding errors with "
                "density.clamp_min(0)."
            )
        mass = float(density.detach().sum()) * 2 * math.pi / density.shape[0]
        if not mass > 0:
            raise ValueError(
                "density has zero mass (every value is 0): a probability density on the "
                "circle needs a positive total. Pass at least one positive value."
            )
        self._density = density / (density.sum() * (2 * math.pi / density.shape[0]))
        self._offset = check_real(offset, "offset")

    @classmethod
    def _trusted(cls, density: torch.Tensor, offset: float = 0.0) -> CircleDensity:
        """Without checks or normalisation (a flow's state, whose mass is reported)."""
        new = object.__new__(cls)
        new._density, new._offset = density, float(offset)
        return new

    # ------------------------------------------------------------------ grid
    @property
    def density(self) -> torch.Tensor:
        """ρ_j at the grid angles, shape (M,)."""
        return self._density

    @property
    def offset(self) -> float:
        return self._offset

    @property
    def size(self) -> int:
        """M, the number of grid angles."""
        return self._density.shape[-1]

    @property
    def spacing(self) -> float:
        """h = 2π/M."""
        return 2 * math.pi / self.size

    def angles(self) -> torch.Tensor:
        """θ_j = offset + jh, shape (M,)."""
        j = torch.arange(self.size, dtype=self.dtype, device=self.device)
        return self._offset + j * self.spacing

    def mass(self) -> torch.Tensor:
        """h Σ_j ρ_j (1 unless a flow drifted; exact for the interpolant)."""
        return self._density.sum(-1) * self.spacing

    def values(self) -> dict[str, torch.Tensor]:
        return {"density": self._density}

    def _spectrum(self) -> torch.Tensor:
        """rfft of the values, in float32 for a half-precision density (:data:`HALF_DTYPES`)."""
        density = self._density
        return torch.fft.rfft(density.float() if density.dtype in HALF_DTYPES else density)

    def fourier(self) -> torch.Tensor:
        """c_k = (1/2π)∫ρ e^{−ikθ}dθ for k = 0 … ⌊M/2⌋ (complex, shape (⌊M/2⌋ + 1,); complex64
        for a half-precision density)."""
        coefficients = self._spectrum() / self.size
        k = torch.arange(coefficients.shape[-1], dtype=coefficients.real.dtype, device=self.device)
        return coefficients * torch.polar(torch.ones_like(k), -k * self._offset)

    def cdf(self) -> torch.Tensor:
        r"""F(θ_j) = ∫_{θ_0}^{θ_j} ρ dθ for j = 0 … M (F(θ_M) = F(θ_0 + 2π) = the mass).

        Exact for the interpolant: F(θ) = c_0(θ − θ_0) + G(θ) − G(θ_0) with
        G = Σ_{0<|k|<M/2} c_k e^{ikθ}/(ik) (the mode M/2 integrates to sin(M(θ − θ_0)/2),
        zero at the grid angles). Shape (M + 1,).
        """
        M = self.size
        spectrum = self._spectrum()
        work = spectrum.real.dtype  # float32 for a half-precision density
        k = torch.arange(spectrum.shape[-1], dtype=work, device=self.device)
        scale = torch.where(k > 0, 1 / torch.where(k > 0, k, 1.0), 0.0)
        if M % 2 == 0:
            scale[-1] = 0.0
        antiderivative = torch.fft.irfft(spectrum * scale / 1j, n=M)  # G(θ_j) with θ_0 ↦ 0
        c0 = spectrum[0].real / M
        j = torch.arange(M + 1, dtype=work, device=self.device)
        values = c0 * j * self.spacing
        out = values + torch.cat([antiderivative - antiderivative[0], values.new_zeros(1)])
        return out.to(self.dtype)

    # ------------------------------------------------------------------ Measure
    @property
    def dim(self) -> int:
        return 2

    @property
    def dtype(self) -> torch.dtype:
        return self._density.dtype

    @property
    def device(self) -> torch.device:
        return self._density.device

    def _moments(self) -> tuple[torch.Tensor, ...]:
        """(E cos θ, E sin θ, E cos 2θ, E sin 2θ) by the trapezoidal rule (exact, M ≥ 8)."""
        theta = self.angles()
        weights = self._density / self._density.sum()
        double = 2 * theta
        waves = (theta.cos(), theta.sin(), double.cos(), double.sin())
        return tuple((weights * wave).sum() for wave in waves)

    def mean(self) -> torch.Tensor:
        """∫(cos θ, sin θ)ρ dθ / mass, shape (2,)."""
        c1, s1, _, _ = self._moments()
        return torch.stack([c1, s1])

    def cov(self) -> torch.Tensor:
        """∫(x − m)(x − m)ᵀρ dθ / mass, shape (2, 2): E[cos²θ] = (1 + E cos 2θ)/2, etc."""
        c1, s1, c2, s2 = self._moments()
        xx, yy, xy = (1 + c2) / 2 - c1 * c1, (1 - c2) / 2 - s1 * s1, s2 / 2 - c1 * s1
        return torch.stack([torch.stack([xx, xy]), torch.stack([xy, yy])])

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        r"""``n`` i.i.d. points on S¹ (shape (n, 2)) by inverting the distribution function.

        F is tabulated exactly (:meth:`cdf` of the interpolant refined 16× by zero padding
        its spectrum, clipped to be nondecreasing where the interpolant dips below 0) and
        inverted linearly between the table's angles: the law sampled is within
        W1 ≤ 2π·h_f² max|ρ'|/8 of ρ, h_f = h/16 (about 1e-6·max|ρ'| at M = 512).
        """
        n = check_sample_size(n)
        fine = self.refined(SAMPLE_REFINEMENT)
        table = torch.cummax(fine.cdf().clamp_min(0), dim=0).values
        table = table / table[-1]
        u = torch.rand(n, generator=generator, dtype=self.dtype,
                       device=generator.device if generator is not None else "cpu")  # fmt: skip
        u = u.to(self.device)
        index = torch.searchsorted(table, u, right=True).clamp(1, fine.size) - 1
        low, high = table[index], table[index + 1]
        step = torch.where(high > low, (u - low) / (high - low), 0.5)
        theta = fine.offset + (index + step) * fine.spacing
        return torch.stack([torch.cos(theta), torch.sin(theta)], dim=-1)

    def refined(self, factor: int) -> CircleDensity:
        """The same interpolant at ``factor``·M angles (zero-padded spectrum; the mode M/2
        of an even M split evenly between ±M/2). ``factor``: an int ≥ 1."""
        if isinstance(factor, bool) or not isinstance(factor, numbers.Integral) or factor < 1:
            raise ValueError(
                f"refined takes the factor of angles to add, an int >= 1 (1: the same grid); "
                f"received {factor!r}."
            )
        M = self.size
        spectrum = self._spectrum()
        if M % 2 == 0:
            spectrum = spectrum.clone()
            spectrum[-1] = spectrum[-1] / 2
        values = torch.fft.irfft(spectrum, n=int(factor) * M) * int(factor)
        return CircleDensity._trusted(values.to(self.dtype), self._offset)

    def to(self, device=None, dtype=None) -> CircleDensity:
        if dtype is not None:
            check_float_dtype(dtype)
        moved = self._density.to(device=device or self.device, dtype=dtype or self.dtype)
        return CircleDensity._trusted(moved, self._offset)

    def __repr__(self) -> str:
        return f"CircleDensity(M={self.size}, offset={self._offset:.6g}, dtype={self.dtype})"
