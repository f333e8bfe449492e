"""Adapters between a measure and the tensor state an integrator steps.

A system knows how to turn a measure into a state (a tuple of tensors), evaluate the
field's right-hand side on it, turn it back into a measure, and measure per batch
element what the events need (size, velocity norm, error norm, finiteness).
"""

from __future__ import annotations

import math

import torch

from tpde._linalg import trace as matrix_trace
from tpde.measures import Empirical, Gaussian


def _reduce(part: torch.Tensor, dims: int, op) -> torch.Tensor:
    """Reduce the last ``dims`` dimensions of ``part`` (one batch element's data)."""
    return op(part.reshape(*part.shape[: part.ndim - dims], -1), dim=-1)


class System:
    """Common per-element reductions; subclasses set ``part_dims`` and the physics."""

    part_dims: tuple[int, ...]
    #: The field's ``last_info`` when an inner solve (Sinkhorn) missed its tolerance.
    inner_failure = None

    def enter(self, t: float) -> bool:
        """Use the piece of a piecewise-in-time field (``piece(t)``) active at time t.

        Returns True when the piece changed (the integrator then drops cached stages).
        """
        piece = getattr(self.base_field, "piece", None)
        if piece is None:
            return False
        current = piece(t)
        changed = current is not self.field
        self.field = current
        return changed

    def batch_of(self, state) -> torch.Size:
        return state[0].shape[: state[0].ndim - self.part_dims[0]]

    def finite(self, state) -> torch.Tensor:
        parts = zip(state, self.part_dims, strict=True)
        flags = [_reduce(torch.isfinite(p), k, torch.all) for p, k in parts]
        return torch.stack(flags).all(dim=0)

    def error_norm(self, error, y0, y1, rtol: float, atol: float) -> torch.Tensor:
        """RMS of error / (atol + rtol·max(|y0|, |y1|)) per element (Hairer's norm)."""
        total, count = 0.0, 0
        for e, a, b, k in zip(error, y0, y1, self.part_dims, strict=True):
            scaled = e.detach() / (atol + rtol * torch.maximum(a.detach().abs(), b.detach().abs()))
            total = total + _reduce(scaled**2, k, torch.sum)
            count += math.prod(e.shape[e.ndim - k :])
        return (total / count).sqrt()

    def mask(self, keep: torch.Tensor, new, old):
        """Per-element choice between two states (keep → new)."""
        return tuple(
            torch.where(keep.reshape(*keep.shape, *(1,) * k), a, b)
            for a, b, k in zip(new, old, self.part_dims, strict=True)
        )


class ParticleSystem(System):
    """Lagrangian particles: state (points,), ẋ_i = Γ[μ_t](x_i)."""

    part_dims = (2,)

    def __init__(self, field, mu: Empirical, engine: str):
        self.field, self.mu, self.engine = field, mu, engine
        self.base_field = field

    def initial(self):
        return (self.mu.points,)

    def rhs(self, t, state):
        (points,) = state
        velocity = self.field._particle_velocity(
            t, self.mu.with_points(points), points, self.engine
        )
        info = getattr(self.field, "last_info", None)
        if getattr(info, "converged", None) is False:
            self.inner_failure = info
        if velocity.shape != points.shape:
            raise ValueError(
                f"particle flows need unbatched field parameters: the velocity has shape "
                f"{tuple(velocity.shape)} for points {tuple(points.shape)}. Integrate one "
                "parameter set at a time, or batch a Gaussian moment ODE instead."
            )
        return (velocity,)

    def measure(self, state) -> Empirical:
        return self.mu.with_points(state[0])

    def normalize(self, state):
        return state

    def _squared_spread(self, state) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, |x_i − m|²) of the detached particles."""
        points, weights = state[0].detach(), self.mu.weights.detach()
        return weights, ((points - weights @ points) ** 2).sum(-1)

    def size(self, state) -> torch.Tensor:
        return self._squared_spread(state)[1].amax()

    def trace(self, state) -> torch.Tensor:
        """Total variance Σ_i w_i |x_i − m|² (tr of the weighted covariance)."""
        weights, spread = self._squared_spread(state)
        return weights @ spread

    def rhs_norm(self, derivative) -> torch.Tensor:
        velocity = derivative[0].detach()
        return (self.mu.weights.detach() @ (velocity**2).sum(-1)).sqrt()


class GaussianSystem(System):
    """Gaussian moment ODE: state (mean, cov), (α̇, Σ̇) from ``field.gaussian_rhs``."""

    part_dims = (1, 2)

    def __init__(self, field, mu: Gaussian, t0: float):
        self.field = self.base_field = field
        # The batch shape of the run broadcasts the measure's with the parameters'.
        dmean, _ = field.gaussian_rhs(t0, mu.mean(), mu.cov())
        batch = dmean.shape[:-1]
        d = mu.dim
        self._initial = (mu.mean().expand(*batch, d), mu.cov().expand(*batch, d, d))

    def initial(self):
        return self._initial

    def rhs(self, t, state):
        return self.field.gaussian_rhs(t, *state)

    def measure(self, state) -> Gaussian:
        return Gaussian._trusted(*state)

    def normalize(self, state):
        mean, cov = state
        return mean, 0.5 * (cov + cov.transpose(-1, -2))

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

    def rhs_norm(self, derivative) -> torch.Tensor:
        dmean, dcov = (p.detach() for p in derivative)
        return ((dmean**2).sum(-1) + (dcov**2).sum((-2, -1))).sqrt()
