"""Gaussians: the moment ODE of a :class:`~tpde.measures.Gaussian` measure."""

from __future__ import annotations

import math

import torch

from tpde._linalg import trace as matrix_trace
from tpde._status import Status
from tpde.flows.systems.base import System, check_start
from tpde.flows.systems.jacobian import (
    Linearization,
    SymmetricCoordinates,
    autograd_jacobian,
    forward_time_derivative,
)
from tpde.flows.systems.registry import register_system
from tpde.measures import Gaussian

__all__ = ["GaussianSystem"]


class GaussianSystem(System):
    """Gaussian moment ODE: state (mean, cov), (α̇, Σ̇) from ``field.gaussian_rhs``."""

    part_dims = (1, 2)

    def __init__(self, field, mu: Gaussian, t0: float = 0.0):
        super().__init__(field)
        check_start(field, mu, t0, Gaussian, "GaussianSystem")
        # The batch shape of the run broadcasts the measure's with the parameters'.
        dmean, _ = field.gaussian_rhs(t0, mu.mean(), mu.cov())
        batch = dmean.shape[:-1]
        d = mu.dim
        cov = mu.cov()
        cov = 0.5 * (cov + cov.transpose(-1, -2))  # symmetric to rounding, as every state
        self._initial = (mu.mean().expand(*batch, d), cov.expand(*batch, d, d))

    @classmethod
    def build(cls, field, mu0, t0: float, engine: str) -> GaussianSystem:
        """The builder :func:`~tpde.flows.systems.register_system` holds for Gaussian."""
        return cls(field, mu0, t0)

    def initial(self):
        return self._initial

    def rhs(self, t, state, field=None):
        return (self.field if field is None else field).gaussian_rhs(t, *state)

    def measure(self, state) -> Gaussian:
        return Gaussian._trusted(*state)

    def project(self, state):
        mean, cov = state
        return mean, 0.5 * (cov + cov.transpose(-1, -2))

    domain_status = Status.STIFF

    def degenerate(self, old, new, adaptive: bool) -> torch.Tensor | None:
        """Elements whose covariance a fixed step took out of the PSD cone: Cholesky fails on
        Σ + τI, τ = √eps·s, s = max(1, max |Σ_ij|), and succeeded on the state before (a
        state already outside by more than τ — rounding drift of a rank-deficient Σ, e.g. a
        real model's n tokens in d > n, which no shorter step can undo — is left to the
        blow-up event). Non-finite covariances are left to the overflow check ("blow_up").

        Adaptive steps: None. Their error control keeps a PSD flow inside the cone to their
        tolerance (dopri5 and rodas4 are right on the stiff flows), and near a blow-up the
        drift above is no stiffness: the blow-up event judges those runs.
        """
        if adaptive:
            return None
        cov = new[1].detach()
        last_cov, last_inside = getattr(self, "_last_verdict", (None, None))
        # The state before the step was the last step's new state, already judged.
        was_inside = last_inside if old[1] is last_cov else self._inside_cone(old[1].detach())
        inside = self._inside_cone(cov)
        self._last_verdict = (new[1], inside)
        return ~inside & was_inside & torch.isfinite(cov).all(-1).all(-1)

    @staticmethod
    def _inside_cone(cov) -> torch.Tensor:
        """Whether Σ + τI is positive definite (τ as in :meth:`degenerate`), per element."""
        scale = cov.abs().amax((-2, -1), keepdim=True).clamp_min(1.0)
        tau = math.sqrt(torch.finfo(cov.dtype).eps) * scale
        eye = torch.eye(cov.shape[-1], dtype=cov.dtype, device=cov.device)
        _, info = torch.linalg.cholesky_ex(torch.nan_to_num(cov) + tau * eye)
        return info == 0

    @staticmethod
    def _finite_cov(state) -> torch.Tensor:
        """Σ detached, NaN/Inf read as 0 (overflow is caught by ``finite``)."""
        cov = state[1].detach()
        return torch.where(torch.isfinite(cov), cov, torch.zeros_like(cov))

    def size(self, state) -> torch.Tensor:
        return torch.linalg.eigvalsh(self._finite_cov(state))[..., -1]

    def trace(self, state) -> torch.Tensor:
        """tr Σ per element."""
        return matrix_trace(self._finite_cov(state))

    def rhs_norm(self, state, derivative) -> torch.Tensor:
        dmean, dcov = (p.detach() for p in derivative)
        return ((dmean**2).sum(-1) + (dcov**2).sum((-2, -1))).sqrt()

    # ------------------------------------------------------------------ stiff methods
    def jacobian(self, t, state) -> Linearization:
        r"""The Jacobian of the moment ODE per batch element, for the stiff methods.

        Coordinates: y = [α, Σ_ab (a ≤ b)], n = d + d(d+1)/2 (covariances stay symmetric,
        so the other half is redundant; unit Σ_ab, a < b, moves both Σ_ab and Σ_ba).

        - A field with the capability ``"gaussian_derivative"`` (softmax, L2) gives its
          closure's derivative in closed form (:class:`tpde.fields.AffineDerivative`);
          then dα̇ = (C + B)dα + Σ_h P_h dΣ (r_h + R_hα) and
          dΣ̇ = B dΣ + dΣ Bᵀ + Σ_h (P_h dΣ R_hΣ + ΣR_hᵀ dΣ P_hᵀ), assembled as sums of
          Kronecker products (vec(X dΣ Z) = (X ⊗ Zᵀ) vec dΣ), elementwise over the batch:
          no autograd, O(d⁴) per element.
        - Any other Gaussian field: reverse-mode autograd on n copies of the state (copy
          j's j-th output is backpropagated, so one backward pass gives every row of every
          element's J). This J is not differentiated through (a gradient of a run then
          treats it as constant).

        A time-dependent field also gets ∂f/∂t by a forward difference of step
        δ = √ε·max(1, |t|) (relative error ~√ε; the parameters are user callables of a
        float t, which autograd cannot see into); it enters a step as O(h²·δ).
        """
        mean, cov = state
        coords = self._coordinates(mean.shape[-1], cov)
        if self.capable(self.field, "gaussian_derivative"):
            derivative = self.field.gaussian_affine_derivative(t, mean, cov)
            matrix = coords.closure_jacobian(derivative, mean, cov)
        else:
            matrix = self._autograd_jacobian(t, state, coords)
        f_t = None
        if self.field.time_dependent:
            f_t = forward_time_derivative(
                lambda s: coords.to_vector(self.field.gaussian_rhs(s, mean, cov)), t, cov.dtype
            )
        return Linearization(matrix, f_t, coords.to_vector, coords.to_state, 1)

    def _coordinates(self, d: int, like: torch.Tensor) -> SymmetricCoordinates:
        cached = getattr(self, "_coords", None)
        if cached is None or not cached.matches(d, like):
            cached = self._coords = SymmetricCoordinates(d, like)
        return cached

    def _autograd_jacobian(self, t, state, coords) -> torch.Tensor:
        """J (…, n, n) by one backward pass through n copies of the state (see jacobian)."""
        y = coords.to_vector(state).detach()
        return autograd_jacobian(
            lambda v: coords.to_vector(self.field.gaussian_rhs(t, *coords.to_state(v))), y
        )


register_system(Gaussian, GaussianSystem.build)
