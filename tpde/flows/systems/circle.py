r"""The Transformer PDE on the circle S¹ as a density, solved pseudo-spectrally.

For post-LN tokens on S¹ with the isotropic kernel e^{β⟨x, y⟩} = e^{β cos(θ − φ)} (Q = K = I,
scale β > 0, V = vI; MATH.md §7, §9), the density ρ(t, θ) of the tokens' angles solves

    ∂_t ρ + ∂_θ(ρ u[ρ]) = 0,    u = v ∂_θ D/β   (USA),    u = v ∂_θ D/(β D)   (SA),
    D(θ) = ∫ e^{β cos(θ − φ)} ρ(φ) dφ,

since the tangential part of Γ[ρ](x) = v∫e^{β⟨x,y⟩} y ρ(y)dy (USA; divided by D for the
softmax, SA) is v∫e^{β cos(θ−φ)} sin(φ − θ) ρ dφ = v ∂_θD/β. With ρ = Σ_k c_k e^{ikθ} and
the Bessel generating function (:mod:`tpde._engines.spectral`), D = 2πe^{β} Σ_k
e^{−β}I_{|k|}(β) c_k e^{ikθ}: a product of Fourier modes. The scaled coefficients
e^{−β}I_k(β) are those of the spectral engine (:func:`~tpde._engines.spectral.bessel_ive`);
SA never forms e^{β}, USA multiplies by it (and overflows where e^{β} does).

Discretisation (:class:`CircleSystem`): ρ at M uniform angles (a
:class:`~tpde.measures.CircleDensity`); every right-hand side takes one real FFT of ρ, forms
D and ∂_θD from its modes, the velocity on the grid, the flux ρu on the grid and its
derivative by FFT. Dealiasing by the 2/3 rule: ρ, u and the flux keep only the modes
|k| ≤ K_c = ⌊M/3⌋ (a product of two such fields aliases only into modes > K_c, which are
dropped), and the initial density is projected onto them (it must already be resolved:
modes beyond K_c above the resolution tolerance refuse it). The mode k = 0 of ∂_θ(ρu) is
exactly zero, so the mass is conserved to rounding.

Linearisation. About the uniform density 1/2π, u = 0 and a perturbation ε e^{ikθ} evolves
by ȧ_k = λ_k a_k with λ_k = v k² I_k(β)/(β I_0(β)) (SA) and v k² I_k(β)/β (USA): the
system's right-hand side is this operator exactly on every resolved mode (the rates of
:func:`tpde.theory.instability_rate`, tested to 1e-13).

Resolution. The grid must hold every mode of the kernel above rounding: ⌊M/3⌋ ≥ K(β), K
the spectral engine's truncation (:func:`~tpde._engines.spectral.truncation` with floor 1:
2 Σ_{k>K} e^{−β}I_k(β) ≤ eps), else the system refuses naming the M needed (M ≥ 3K: 93 at
β = 10, 240 at β = 100 in float64). The flow concentrates the density (clusters), which
sooner or later sharpens past any grid: after every step the system checks that the
modes K_c/2 < |k| ≤ K_c stay below ``resolution`` times the mean mode c_0, that ρ ≥
−resolution·max ρ, and that the mass holds to 100·eps·M; the first failure stops the run
at the last resolved state with status "unresolved" (``stats["unresolved"]`` names the
check and the values).

Time stepping: the one loop (:mod:`tpde.flows.loop`) with "rk4" under the system's own step
control (:meth:`CircleSystem.propose_step`): dt = min(cfl·2.8/(K_c max|u| + max|∂_θu|),
0.1/λ_max, run/10) — 2.8 the reach of RK4's stability region on the imaginary axis, where
the spectrum of the advection lies, and 0.1/λ_max the growth of the fastest resolved mode
at uniform. A fixed dt is taken as given and refused where it breaks the stability bound.

Reference: Bruno, Pasqualotto, Agazzi, "Emergence of meta-stable clustering in mean-field
transformer models", arXiv:2410.23228 (the same Fourier picture of the circle dynamics).
"""

from __future__ import annotations

import math

import torch

from tpde._engines.spectral import bessel_ive, truncation
from tpde._status import Status
from tpde._validation import check_measure_finite, check_positive
from tpde.flows.systems.base import System
from tpde.flows.systems.registry import register_system
from tpde.measures.circle import CircleDensity

__all__ = ["RK4_REACH", "CircleSystem", "circle_model"]

#: The reach of the classical RK4 stability region on the imaginary axis (2√2).
RK4_REACH = 2 * math.sqrt(2)


def circle_model(field) -> tuple[str, float, float]:
    """("sa" or "usa", β, v) of a post-LN isotropic softmax or exponential field on S¹.

    Raises ValueError naming the condition that fails: the field must be
    ``Normalized(Softmax(...) or Exponential(...), "post-ln")`` in d = 2 with a constant
    A = βI, β > 0, and V = vI, unbatched.
    """
    from tpde.fields import KERNELS, Normalized, PostLN

    if not isinstance(field, Normalized) or not isinstance(field.scheme, PostLN):
        raise ValueError(
            f"the circle PDE is the post-LN flow of tokens on S¹: it takes "
            f"Normalized(Softmax(...) or Exponential(...), 'post-ln'); received "
            f"{type(field).__name__}"
            + (f" with scheme {field.scheme.name!r}" if isinstance(field, Normalized) else "")
            + ". Wrap the attention field in Normalized(field, 'post-ln')."
        )
    inner = field.field
    kernel = next((k for k, cls in KERNELS.items() if type(inner) is cls), None)
    if kernel is None:
        raise ValueError(
            f"the circle PDE sums the kernel e^(beta cos(theta - phi)) of Softmax (SA) or "
            f"Exponential (USA) attention; received {type(inner).__name__} inside Normalized."
        )
    if inner.dim != 2:
        raise ValueError(
            f"the circle PDE needs tokens in d = 2 (S¹); the field has d = {inner.dim}."
        )
    like = torch.zeros(1, 2, dtype=torch.float64, device="cpu")  # a probe of the field's A
    scalar = inner.params.isotropic_interaction(like)
    if scalar is None or scalar.numel() != 1:
        raise ValueError(
            "the circle PDE needs one constant interaction A = scale·KᵀQ = βI (square Q and "
            "K, no biases, not a function of t, unbatched); this field's A is not."
        )
    value = inner.params.isotropic_value(like)
    if value is None or value.numel() != 1:
        raise ValueError(
            "the circle PDE needs V = vI, one constant multiple of the identity; this "
            "field's V is not."
        )
    beta = float(scalar)
    if not beta > 0:
        raise ValueError(
            f"the circle PDE needs beta > 0 (A = beta·I; the Bessel series of "
            f"e^(beta cos u)); received beta = {beta:.6g}."
        )
    return kernel, beta, float(value)


class CircleSystem(System):
    """The circle PDE of one post-LN field on one :class:`CircleDensity` (module notes).

    Parameters
    ----------
    field : Normalized(Softmax or Exponential with A = βI, V = vI, d = 2, "post-ln").
    rho : CircleDensity, the initial density (M ≥ 3K(β) points, resolved: module notes).
    cfl : fraction of RK4's stability reach taken by each step, in (0, 1]; default 0.5.
    resolution : tolerance of the resolution and positivity checks; default
        max(1e-8, 100·eps) of the density's dtype (1e-8 in float64, 1.2e-5 in float32: a
        tolerance below the dtype's rounding would refuse every density).
    """

    part_dims = (1,)
    default_method = "rk4"
    domain_status = Status.UNRESOLVED

    def __init__(self, field, rho, *, cfl: float = 0.5, resolution: float | None = None):
        super().__init__(field)
        if not isinstance(rho, CircleDensity):
            raise TypeError(f"a CircleSystem steps a CircleDensity; received {type(rho).__name__}.")
        check_measure_finite(rho, "rho")
        if rho.dtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"the circle PDE computes in float32 or float64 (its FFTs); received a "
                f"{rho.dtype} density. Convert it: rho.to(dtype=torch.float32)."
            )
        self.kernel, self.beta, self.value = circle_model(field)
        self.cfl = check_positive(cfl, "cfl")
        if self.cfl > 1:
            raise ValueError(f"cfl must lie in (0, 1]; received {self.cfl}.")
        self.resolution = _resolution(resolution, rho.dtype)
        if self.kernel == "usa":
            _check_usa_range(self.beta, rho.dtype)
        self.offset, self.size_m = rho.offset, rho.size
        self.modes = rho.size // 3
        needed = truncation(self.beta, rho.dtype, 1.0)
        if self.modes < needed:
            raise ValueError(
                f"a grid of M = {rho.size} angles is too coarse for beta = {self.beta:.6g}: "
                f"the kernel e^(beta cos u) has {needed} Fourier modes above rounding in "
                f"{rho.dtype} and the dealiased grid keeps M/3 = {self.modes}. Use M >= "
                f"{3 * needed} angles."
            )
        dtype, device = rho.dtype, rho.device
        k = torch.arange(rho.size // 2 + 1, dtype=dtype, device=device)
        self.mask = (k <= self.modes).to(dtype)
        ive = bessel_ive(torch.tensor(self.beta, dtype=torch.float64, device="cpu"), rho.size // 2)
        self.kernel_modes = (2 * math.pi * ive.to(dtype=dtype, device=device)) * self.mask
        self.derivative = 1j * k
        self.prefactor = (
            self.value / self.beta * (math.exp(self.beta) if self.kernel == "usa" else 1)
        )
        rates = k[1:] ** 2 * ive[1:].to(dtype) * self.prefactor
        if self.kernel == "sa":
            rates = rates / float(ive[0])
        # λ_max at uniform over the resolved modes; ≤ 0 (v ≤ 0: every mode decays) sets no bound
        self.growth = max(float(rates[: self.modes].max()), 0.0)
        self._initial = (self._resolved(rho.density),)
        self.mass0 = float(self._initial[0].sum()) * rho.spacing
        self.reset_run()

    def _resolved(self, density: torch.Tensor) -> torch.Tensor:
        """The density projected onto |k| ≤ M/3, refused if that moves it by more than the
        resolution tolerance (relative to its largest value)."""
        filtered = torch.fft.irfft(torch.fft.rfft(density) * self.mask, n=self.size_m)
        change = float((filtered - density).abs().max()) / float(density.abs().max())
        if not change <= self.resolution:  # NaN-safe
            raise ValueError(
                f"the initial density is not resolved on its grid of M = {self.size_m} "
                f"angles: its modes above M/3 = {self.modes} move it by {change:.3g} of its "
                f"maximum (resolution tolerance {self.resolution:.3g}). Sample it on more "
                "angles, or smooth it."
            )
        return filtered

    def reset_run(self) -> None:
        super().reset_run()
        self.fixed_dt, self.dt_cap, self.cause = None, 1.0, None
        self._velocity_at: tuple | None = None  # (density, u) of the last right-hand side
        self.dt_seen: list[float] = []
        self.min_density = float(self._initial[0].min())
        self.mass_error = 0.0

    def check_method(self, method) -> None:
        if getattr(method, "name", None) != "rk4":
            raise ValueError(
                f"the circle PDE steps with method 'rk4' under its own step control (its "
                f"stability region covers the imaginary axis, where the advection's spectrum "
                f"lies; the resolution checks stop a run at its last resolved state, which an "
                f"adaptive method's retries would not); received "
                f"{getattr(method, 'name', method)!r}. Leave method=None."
            )

    def first_step(self, t0: float, t1: float, dt):
        span = t1 - t0
        self.fixed_dt, self.dt_cap = dt, (span / 10 if span > 0 else 1.0)
        return self.dt_cap if dt is None else dt

    # ------------------------------------------------------------------ physics
    def velocity(self, density: torch.Tensor) -> torch.Tensor:
        """u = v∂_θD/β (USA) or v∂_θD/(βD) (SA) at the grid angles, shape (M,)."""
        spectrum = torch.fft.rfft(density) * self.kernel_modes
        slope = torch.fft.irfft(spectrum * self.derivative, n=self.size_m)
        if self.kernel == "usa":
            return self.prefactor * slope
        quotient = slope / torch.fft.irfft(spectrum, n=self.size_m)
        return self.prefactor * self._filter(quotient)  # dealiased (module notes)

    def _filter(self, values: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft(torch.fft.rfft(values) * self.mask, n=self.size_m)

    def initial(self):
        return self._initial

    def rhs(self, t, state, field=None):
        """(−∂_θ(ρu),) with ρ and u on the resolved modes (module notes)."""
        (density,) = state
        density = self._filter(density)
        u = self.velocity(density)
        flux = torch.fft.rfft(density * u) * self.mask
        self._velocity_at = (state[0], u)  # the step's rate is read from the start's u only
        return (-torch.fft.irfft(flux * self.derivative, n=self.size_m),)

    def _rate(self, state) -> float:
        """M/3·max|u| + max|u'| at ``state`` (the stability rate of the step it starts)."""
        if self._velocity_at is None or self._velocity_at[0] is not state[0]:
            self.rhs(0.0, state)
        u = self._velocity_at[1].detach()
        slope = torch.fft.irfft(torch.fft.rfft(u) * self.derivative, n=self.size_m)
        return self.modes * float(u.abs().max()) + float(slope.abs().max())

    def measure(self, state) -> CircleDensity:
        return CircleDensity._trusted(state[0], self.offset)

    # ------------------------------------------------------------------ step control
    def propose_step(self, t: float, state, h):
        rate = self._rate(state)
        if self.fixed_dt is not None:
            if h * rate > RK4_REACH:
                raise ValueError(
                    f"dt = {h:.4g} breaks RK4's stability bound for this density at t = "
                    f"{t:.4g}: dt·(M/3·max|u| + max|u'|) = {h * rate:.3g} > 2√2. Pass dt <= "
                    f"{RK4_REACH / rate:.4g}, or dt=None for the system's own steps."
                )
            return h
        bounds = [self.dt_cap]
        if self.growth > 0:
            bounds.append(0.1 / self.growth)
        if rate > 0:
            bounds.append(self.cfl * RK4_REACH / rate)
        return min(bounds)

    def degenerate(self, old, new, adaptive: bool) -> torch.Tensor:
        """Whether the new density is unresolved (module notes); the cause in ``self.cause``."""
        density = new[0].detach()
        if not bool(torch.isfinite(density).all()):
            return torch.tensor(False, device=density.device)  # the loop's overflow check
        modes = torch.fft.rfft(density).abs()
        tail = float(modes[self.modes // 2 + 1 : self.modes + 1].max()) / float(modes[0])
        low, high = float(density.min()), float(density.max())
        mass = float(density.sum()) * 2 * math.pi / self.size_m
        drift = abs(mass - self.mass0)
        mass_tolerance = 100 * torch.finfo(density.dtype).eps * self.size_m * abs(self.mass0)
        if tail > self.resolution:
            self.cause = (
                f"resolution: the modes {self.modes // 2} < |k| <= {self.modes} reach "
                f"{tail:.3g} of the mean mode (tolerance {self.resolution:.3g}): the density "
                f"sharpened past the grid of M = {self.size_m} angles"
            )
        elif low < -self.resolution * high:
            self.cause = (
                f"positivity: the density reached {low:.3g} (maximum {high:.3g}, tolerance "
                f"{self.resolution:.3g} of it)"
            )
        elif drift > mass_tolerance:
            self.cause = f"mass: drifted by {drift:.3g} (tolerance {mass_tolerance:.3g})"
        else:
            self.min_density = min(self.min_density, low)
            self.mass_error = max(self.mass_error, drift)
            return torch.tensor(False, device=density.device)
        return torch.tensor(True, device=density.device)

    def record_step(self, h, state) -> None:
        self.dt_seen.append(h)

    def stats(self, saved, final) -> dict:
        return {
            "unresolved": self.cause,
            "mass_error": self.mass_error,
            "min_density": self.min_density,
            "modes": self.modes,
            "kernel": self.kernel,
            "dt_min": min(self.dt_seen, default=math.nan),
            "dt_max": max(self.dt_seen, default=math.nan),
        }

    # ------------------------------------------------------------------ events
    def size(self, state) -> torch.Tensor:
        """λ_max of the covariance of the density (as a measure on R²)."""
        return torch.linalg.eigvalsh(self.measure(state).cov().detach())[-1]

    def trace(self, state) -> torch.Tensor:
        return self.measure(state).cov().detach().trace()

    def rhs_norm(self, state, derivative) -> torch.Tensor:
        """(∫ρu²dθ / mass)^{1/2}: the tokens' mean squared speed."""
        density = state[0].detach()
        u = self.velocity(self._filter(density))
        return ((density * u**2).sum() / density.sum()).sqrt()


def _resolution(resolution, dtype: torch.dtype) -> float:
    """The tolerance of the resolution checks: ``resolution``, or by default max(1e-8,
    100·eps) of ``dtype``; refused below 100·eps, where rounding alone fails the checks."""
    floor = 100 * torch.finfo(dtype).eps
    if resolution is None:
        return max(1e-8, floor)
    resolution = check_positive(resolution, "resolution")
    if resolution < floor:
        raise ValueError(
            f"resolution = {resolution:.3g} is below the rounding of the density's {dtype} "
            f"(100·eps = {floor:.3g}): rounding alone would fail the resolution checks. Pass "
            f"resolution >= {floor:.3g}, leave the default, or compute in float64."
        )
    return resolution


def _check_usa_range(beta: float, dtype: torch.dtype) -> None:
    """Refuse USA where its factor e^β overflows ``dtype`` (the SA normaliser never forms it)."""
    limit = math.log(torch.finfo(dtype).max)
    if beta >= limit:
        raise ValueError(
            f"the circle PDE of USA attention multiplies by e^beta, which overflows {dtype} "
            f"at beta = {beta:.6g} (beyond beta ≈ {limit:.5g}). Use Softmax (SA: the "
            "normaliser cancels e^beta), a smaller beta"
            + (", or float64." if dtype != torch.float64 else ".")
        )


def _build(field, rho, t0: float, engine: str) -> CircleSystem:
    if engine != "auto":
        raise ValueError(
            f"the circle PDE sums its kernel in Fourier space; engine = {engine!r} applies to "
            "particles and grids. Leave engine='auto'."
        )
    return CircleSystem(field, rho)


register_system(CircleDensity, _build)
