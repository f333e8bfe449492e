"""Gradient flows of energies as fields, and the checks of a field's gradient structure.

- :class:`GradientFlowField`: the (mobility-M) Wasserstein gradient flow of an energy,
  the explicit flow that JKO steps converge to as τ → 0.
- :func:`gradient_flow_gap`: the relative gap between Γ[μ] and s·grad_g E.
- :func:`energy_dissipation`: the identity dE/dt = s‖Γ‖²_g along a trajectory.

Conventions and the energies themselves: :mod:`tpde.fields.gradient_flow.energies` (MATH.md §5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde import _lu as lu
from tpde._linalg import psd_factor, sqrtm_psd, symmetrize, trace
from tpde._scale_safe import safe_norm
from tpde._validation import as_tensor
from tpde.fields.base import Field
from tpde.fields.calls import check_own, queries_are_keys
from tpde.fields.gradient_flow.energies import as_energy
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics.mobility import spd_mobility

__all__ = [
    "Dissipation",
    "GradientFlowField",
    "GradientFlowGap",
    "energy_dissipation",
    "gradient_flow_gap",
]


# ============================================================================ gradient flows


class GradientFlowField(Field):
    r"""The Wasserstein gradient flow of an energy as a field: Γ[μ](x) = −M ∇(δG/δμ)(x).

    Parameters
    ----------
    energy : field, :class:`Energy` or callable (see :func:`as_energy`; a field gives its
        Lyapunov functional G = c·E).
    mobility : (d, d) symmetric positive definite, optional. Default I (plain W2).

    Notes
    -----
    Particles: the first variation's gradient where the energy provides it (fields,
    potential and interaction energies: Γ at any point, so grids work too); otherwise
    autograd in the particles, ẋ_i = −M ∂G/∂x_i / w_i (at the particles only, and without
    a graph back to the points: a flow of this field is not differentiable by autograd).
    Gaussians: the Bures (Gaussian-restricted) gradient flow by autograd of G(α, Σ):
    α̇ = −M∇_αG, Σ̇ = −2(M ĝ Σ + Σ ĝ M), ĝ = sym ∇_ΣG, exact where G's W2 flow keeps
    Gaussians Gaussian (Sinkhorn, quadratic potentials). This is the τ → 0 limit of the
    "w2"/"bures" JKO steps and their reference flow in the tests.
    """

    def __init__(self, energy, mobility=None):
        self.energy_functional = as_energy(energy)
        self.dim = energy.dim if isinstance(energy, Field) else None
        if mobility is not None:
            matrix = as_tensor(mobility, "mobility")
            if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
                raise ValueError(
                    "mobility must be a symmetric positive definite (d, d) matrix; received "
                    f"shape {tuple(matrix.shape)}."
                )
            mobility = spd_mobility(matrix, matrix.shape[-1], matrix)
            self.dim = mobility.shape[-1]
        self.mobility = mobility

    @property
    def time_dependent(self) -> bool:
        return False

    def check_measure(self, mu) -> None:
        if self.dim is None:
            if not isinstance(mu, Empirical | Gaussian | Grid):
                raise TypeError(f"mu must be a tpde measure; received {type(mu).__name__}.")
            return
        super().check_measure(mu)

    def _apply_mobility(self, grad):
        return grad if self.mobility is None else grad @ self.mobility.to(grad).mT

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, *, own=None
    ) -> torch.Tensor:
        own = check_own(own, x, mu)
        energy = self.energy_functional
        try:
            grad = energy.first_variation_grad(mu, x, engine)
        except NotImplementedError:
            if not queries_are_keys(own, x, mu):
                raise ValueError(
                    "this energy gives its gradient at the particles only (autograd in the "
                    "points); velocities at other points (grid faces, x=...) need an Energy "
                    "with first_variation, e.g. PotentialEnergy or a field."
                ) from None
            grad = _particle_gradient(energy, mu, engine)
        return -self._apply_mobility(grad)

    def gaussian_rhs(self, t, mean, cov):
        """Bures gradient flow of G: (α̇, Σ̇) = (−M∇_αG, −2(MĝΣ + ΣĝM)) by autograd."""
        with torch.enable_grad():
            m = mean.detach().requires_grad_(True)
            S = cov.detach().requires_grad_(True)
            value = self.energy_functional(Gaussian._trusted(m, S)).sum()
            _check_autograd_path(value, self.energy_functional)
            grad_m, grad_S = torch.autograd.grad(value, (m, S))
        g = symmetrize(grad_S)
        if self.mobility is None:
            M = torch.eye(mean.shape[-1], dtype=mean.dtype, device=mean.device)
        else:
            M = self.mobility.to(mean)
        MgS = M @ g @ cov
        return -(grad_m @ M.mT), -2 * (MgS + MgS.mT)

    def energy(self, mu, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
        """The energy G whose gradient flow this field is."""
        return self.energy_functional(mu, engine)

    def __repr__(self) -> str:
        return f"GradientFlowField({self.energy_functional!r})"


def _particle_gradient(energy, mu: Empirical, engine: str) -> torch.Tensor:
    """∂G/∂x_i / w_i by autograd (the particle gradient of G in W2), (n, d)."""
    if bool((mu.weights <= 0).any()):
        raise ValueError(
            "the particle gradient ∂G/∂x_i / w_i needs positive weights; drop the particles "
            "of zero mass first."
        )
    with torch.enable_grad():
        x = mu.points.detach().requires_grad_(True)
        value = energy(mu.with_points(x), engine)
        _check_autograd_path(value, energy)
        (grad,) = torch.autograd.grad(value, x)
    return grad / mu.weights[:, None]


def _check_autograd_path(value: torch.Tensor, energy) -> None:
    """A gradient flow differentiates the energy: its value must depend on the state."""
    if not value.requires_grad:
        raise ValueError(
            f"the energy {energy!r} has no autograd path to the measure (its value does not "
            "depend on the points, mean or covariance as torch sees them), so it has no "
            "gradient flow: compute it from mu's tensors in torch, without .detach(), "
            ".item() or numpy."
        )


# ============================================================================ checks


@dataclass(frozen=True)
class GradientFlowGap:
    """Result of :func:`gradient_flow_gap`.

    Attributes
    ----------
    relative_gap : 0-d tensor, ‖Γ − s·grad_g E‖ / ‖Γ‖ (metric norm on particles; Euclidean
        on the affine field's values or on (α̇, Σ̇) for Gaussians).
    velocity : Γ as the field computes it ((n, d) on particles; (α̇, Σ̇) or (m, d) values
        for Gaussians).
    gradient : s·grad_g E in the same form, from autograd of the energy.
    """

    relative_gap: torch.Tensor
    velocity: object
    gradient: object


def gradient_flow_gap(field, mu, *, t: float = 0.0, x=None, engine: str = "auto"):
    r"""Relative gap between Γ[μ] and s·grad_g E (zero up to rounding where the structure holds).

    The gradient side is computed independently of the field's velocity formula, by
    autograd of the energy: on particles ∂E/∂x_i, and Γ_i is compared with
    −(sM)(c ∂E/∂x_i)/(w_i ω_i); on a Gaussian, for softmax (weighted metric) the affine
    fields M∇log Z_μ(x) (autograd of the closed-form log Z) and Γ(x) are compared at points
    x (default: α and α ± √d columns of Σ^{1/2}), for Sinkhorn the closure (α̇, Σ̇) is
    compared with the Bures gradient (−M∇_αF, −2(M∇_ΣFΣ + Σ∇_ΣFM)) of the closed-form F.
    """
    if not isinstance(field, Field):
        raise TypeError(f"gradient_flow_gap checks a tpde field; received {type(field).__name__}.")
    structure = field.gradient_structure(t=t)
    c = structure.lyapunov_sign
    if isinstance(mu, Empirical):
        if x is not None:
            raise ValueError(
                "gradient_flow_gap compares the fields at the particles of an Empirical; x= "
                "applies to Gaussians (points where the affine fields are compared). Drop x."
            )
        velocity = field.velocity(mu, t=t, engine=engine)
        grad = _particle_gradient(lambda m, e: field.energy(m, t=t, engine=e), mu, engine)
        weight = structure.log_weight(mu, mu.points, engine).exp().unsqueeze(-1)
        gradient = -c * (grad @ structure.mobility.to(grad).mT) / weight
        num = structure.metric_norm2(mu, velocity - gradient, engine)
        den = structure.metric_norm2(mu, velocity, engine)
        return GradientFlowGap((num / den).sqrt(), velocity, gradient)
    if not isinstance(mu, Gaussian) or mu.batch_shape != ():
        raise TypeError(
            "gradient_flow_gap takes an Empirical measure or a single Gaussian; received "
            f"{type(mu).__name__}. For a grid, use grid.to_empirical()."
        )
    mean, cov = mu.mean(), mu.cov()
    if structure.weighted:
        if x is None:
            root = sqrtm_psd(cov) * math.sqrt(mu.dim)
            x = torch.cat([mean[None], mean + root.mT, mean - root.mT])
        velocity = field.velocity(mu, x, t=t)
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            log_z = structure.log_weight(mu, xg).sum()
            (grad,) = torch.autograd.grad(log_z, xg)
        gradient = grad @ structure.M.to(grad).mT  # s · sM ∇log Z = M ∇log Z
        gap = safe_norm((velocity - gradient).flatten()) / safe_norm(velocity.flatten())
        return GradientFlowGap(gap, velocity, gradient)
    velocity = field.gaussian_rhs(t, mean, cov)
    gradient = GradientFlowField(field, mobility=structure.mobility).gaussian_rhs(t, mean, cov)
    num = sum(((a - b) ** 2).sum() for a, b in zip(velocity, gradient, strict=True))
    den = sum((a**2).sum() for a in velocity)
    return GradientFlowGap((num / den).sqrt(), velocity, gradient)


@dataclass(frozen=True)
class Dissipation:
    """Result of :func:`energy_dissipation`: the identity dE/dt = −c‖Γ‖²_g along a trajectory.

    Attributes
    ----------
    times : (T,) saved times.
    energy : (T,) E at the saved measures.
    rate : (T,) the predicted dE/dt = −c‖Γ‖²_g (= s‖Γ‖²_g for softmax).
    predicted : (T,) E(t₀) + ∫ rate dt (cumulative quadrature).
    relative_error : 0-d, max_k |energy_k − predicted_k| / max_k |energy_k − energy_0|.
    quadrature : "simpson" (uniform times: composite Simpson, O(h⁴)) or "trapezoid".
    """

    times: torch.Tensor
    energy: torch.Tensor
    rate: torch.Tensor
    predicted: torch.Tensor
    relative_error: torch.Tensor
    quadrature: str


def _cumulative_integral(times: torch.Tensor, f: torch.Tensor):
    """∫_{t₀}^{t_k} f for every k: composite Simpson on uniform times, else trapezoid."""
    h = times[1:] - times[:-1]
    uniform = len(times) >= 3 and bool((h - h.mean()).abs().max() <= 1e-9 * h.mean().abs())
    if not uniform:
        steps = 0.5 * h * (f[1:] + f[:-1])
        return torch.cat([f.new_zeros(1), steps.cumsum(0)]), "trapezoid"
    step = float(h.mean())
    out = [f.new_zeros(())]
    for k in range(1, len(times)):
        if k % 2 == 0:  # Simpson over [t_{k-2}, t_k]
            out.append(out[k - 2] + step / 3 * (f[k - 2] + 4 * f[k - 1] + f[k]))
        elif k == 1:  # one interval, three-point (local error O(h⁴))
            out.append(step / 12 * (5 * f[0] + 8 * f[1] - f[2]))
        else:
            out.append(out[k - 1] + step / 12 * (-f[k - 2] + 8 * f[k - 1] + 5 * f[k]))
    return torch.stack(out), "simpson"


def _dissipation_rate(structure, field, mu, energy, t: float, engine: str) -> torch.Tensor:
    """‖Γ‖²_g at μ (particles: metric sum; Gaussians: closed-form Gaussian integrals).

    ``energy``: E(μ), already computed by the caller (the Z-weighted Gaussian case uses it).
    """
    if isinstance(mu, Empirical):
        return structure.metric_norm2(mu, field.velocity(mu, t=t, engine=engine), engine)
    mean, cov = mu.mean(), mu.cov()
    c, B = field.gaussian_affine(t, mean, cov)
    K = lu.inv(structure.mobility.to(mean))
    scale = mean.new_ones(())
    if structure.weighted:  # ∫ Z|Γ|² dμ = 2E · E_ν̃|Γ|², ν̃ = Z·μ / ∫Z dμ (Gaussian)
        A = structure.A.to(mean)
        L = psd_factor(cov)
        P = A.mT @ cov @ A
        H = symmetrize(L.mT @ P @ L)
        eye = torch.eye(mu.dim, dtype=mean.dtype, device=mean.device)
        inv = lu.inv(eye - H)
        cvec = L.mT @ (A.mT @ mean + P @ mean)
        mean, cov = mean + L @ inv @ cvec, symmetrize(L @ inv @ L.mT)
        scale = 2 * energy
    avg = c + B @ mean
    return scale * (avg @ K @ avg + trace(B.mT @ K @ B @ cov))


def energy_dissipation(field, trajectory, *, t: float = 0.0, engine: str = "auto"):
    r"""Check the dissipation identity dE/dt = −c‖Γ‖²_g (= s‖Γ‖²_g for softmax) along a flow.

    E and ‖Γ‖²_g are evaluated at every saved measure of ``trajectory`` (from
    :func:`tpde.flows.integrate`; particles or a single Gaussian), and E(t_k) is compared
    with E(t₀) + ∫ rate. On a Gaussian ‖Γ‖²_g is a Gaussian integral: for Sinkhorn
    E|Γ|²_{(sM)⁻¹}; for softmax ∫Z_μ|Γ|² dμ = 2E(μ) E_ν̃|Γ|², ν̃ the tilted Gaussian
    N(α + L(I − H)⁻¹c, L(I − H)⁻¹Lᵀ) of :func:`softmax_energy`. Save every step of a
    uniform fixed-step run (``save="steps"``) for the O(h⁴) Simpson rule. Parameters are
    taken at time ``t`` (autonomous fields).
    """
    if not isinstance(field, Field):
        raise TypeError(f"energy_dissipation checks a tpde field; received {type(field).__name__}.")
    if not hasattr(trajectory, "measures") or not hasattr(trajectory, "times"):
        raise TypeError(
            "energy_dissipation takes the Trajectory of a flow (tpde.flows.integrate); "
            f"received {type(trajectory).__name__}."
        )
    structure = field.gradient_structure(t=t)
    energies, rates = [], []
    with torch.no_grad():
        for mu in trajectory.measures:
            energies.append(field.energy(mu, t=t, engine=engine))
            rates.append(_dissipation_rate(structure, field, mu, energies[-1], t, engine))
    energy = torch.stack(energies).to(torch.float64)
    rate = -structure.lyapunov_sign * torch.stack(rates).to(torch.float64)
    times = trajectory.times.to(torch.float64)
    integral, rule = _cumulative_integral(times, rate)
    predicted = energy[0] + integral
    change = (energy - energy[0]).abs().max().clamp_min(torch.finfo(energy.dtype).tiny)
    error = (energy - predicted).abs().max() / change
    return Dissipation(times, energy, rate, predicted, error, rule)
