"""Systems: what the one stepping loop (:mod:`tpde.flows.loop`) steps, per kind of state.

A system turns a measure into a state (a tuple of tensors with leading batch dimensions),
evaluates the field's right-hand side on it, turns it back into a measure, and measures
per batch element what the loop and the events need. The loop knows nothing else about
particles, Gaussians or grids; a new kind of state is a new :class:`System`.

The protocol (everything but ``part_dims``, ``initial``, ``rhs`` and ``measure`` has a
default):

- ``part_dims``: trailing dimensions of one element in each state part (particles
  ``(2,)``: points (n, d); Gaussians ``(1, 2)``: mean and covariance);
- ``initial() -> state``;  ``rhs(t, state) -> derivative`` (same structure);
  ``measure(state) -> Measure``;
- ``project(state) -> state``: applied after every accepted step (not to the initial
  state, which the field checks), the retraction onto the state's manifold: identity on
  R^d, symmetrisation of covariances, renormalisation onto the sphere, a LayerNorm.
  Applying it after whole steps only keeps the method's order (stages may leave the
  manifold by O(h^{p+1}));
- ``propose_step(t, state, h) -> h`` and ``check_step(h) -> (ok, retry)``: a step-size
  controller of the system's own (the CFL condition of grids) besides the method's error
  estimate; ``record_step(h, state)`` sees every accepted step; ``stats()`` adds the
  system's diagnostics to the trajectory's;
- ``size``, ``trace``, ``rhs_norm``: per-element reductions read by the events;
- ``jacobian(t, state)``: per-element Jacobian of ``rhs`` for stiff methods (optional).

Inner solves (Sinkhorn scalings) report into the system's :class:`InnerSolves` collector,
passed explicitly to the field; the loop stops a run whose inner solve failed.
"""

from __future__ import annotations

import math

import torch

from tpde._linalg import trace as matrix_trace
from tpde.attention import InnerSolves
from tpde.measures import Empirical, Gaussian

__all__ = ["GaussianSystem", "ParticleSystem", "System"]


def _reduce(part: torch.Tensor, dims: int, op) -> torch.Tensor:
    """Reduce the last ``dims`` dimensions of ``part`` (one batch element's data)."""
    if dims == 0:
        return op(part.unsqueeze(-1), dim=-1)
    return op(part.reshape(*part.shape[: part.ndim - dims], -1), dim=-1)


class System:
    """Base class of systems: per-element reductions and the default hooks (module notes)."""

    part_dims: tuple[int, ...]

    def __init__(self, field):
        self.base_field = self.field = field
        #: Reports of the inner solves made by the field during this run.
        self.inner = InnerSolves()

    # ------------------------------------------------------------------ pieces in time
    def enter(self, t: float) -> bool:
        """Use the piece of a piecewise-in-time field (``field.piece(t)``) active at t.

        Returns True when the piece changed (the loop then drops cached stages).
        """
        if not self.base_field.breakpoints:
            return False
        current = self.base_field.piece(t)
        changed = current is not self.field
        self.field = current
        return changed

    # ------------------------------------------------------------------ per element
    def batch_of(self, state) -> torch.Size:
        return state[0].shape[: state[0].ndim - self.part_dims[0]]

    def finite(self, state) -> torch.Tensor:
        """Whether every entry of an element is finite (a state the loop may keep).

        One sum per element (a NaN or an infinite entry makes it non-finite: 10× faster
        than an elementwise isfinite map); an element whose sum is not finite is checked
        again by its smallest and largest entries, since a sum of huge finite entries can
        overflow.
        """
        flags = []
        for part, k in zip(state, self.part_dims, strict=True):
            flat = part.detach().reshape(*part.shape[: part.ndim - k], -1)
            if flat.shape[-1] == 0 or not flat.is_floating_point():
                flags.append(_reduce(torch.isfinite(part), k, torch.all))
                continue
            ok = torch.isfinite(flat.sum(-1))
            if not bool(ok.all()):
                suspect = ~ok
                low, high = torch.aminmax(flat[suspect], dim=-1)
                ok = ok.clone()
                ok[suspect] = torch.isfinite(low) & torch.isfinite(high)
            flags.append(ok)
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

    def per_part(self, step: torch.Tensor):
        """A per-element step (batch shape) as one broadcastable tensor per state part."""
        return tuple(step.reshape(*step.shape, *(1,) * k) for k in self.part_dims)

    # ------------------------------------------------------------------ default hooks
    def project(self, state):
        return state

    def propose_step(self, t: float, state, h):
        return h

    def check_step(self, h) -> tuple[bool, float | None]:
        return True, None

    def record_step(self, h, state) -> None:
        return None

    def stats(self, saved, final) -> dict:
        """Diagnostics of the run for ``Trajectory.stats`` (saved states, final state)."""
        return {}


class ParticleSystem(System):
    """Lagrangian particles: state (points,), ẋ_i = Γ[μ_t](x_i).

    Points may carry leading batch dimensions (…, n, d): a batch of particle systems
    with shared weights (one per batch element, stepped and stopped each on its own).
    A field with a projection (tokens on the sphere) declares it with ``project``; it is
    the system's retraction after every accepted step.
    """

    part_dims = (2,)

    def __init__(self, field, mu: Empirical, engine: str):
        super().__init__(field)
        self.mu, self.engine = mu, engine

    def initial(self):
        return (self.mu.points,)

    def rhs(self, t, state):
        (points,) = state
        velocity = self.field.particle_velocity(
            t, self.mu.with_points(points), points, self.engine, info=self.inner
        )
        if velocity.shape != points.shape:
            raise ValueError(
                f"particle flows need unbatched field parameters, or parameters whose batch "
                f"dimensions the points carry too: the velocity has shape "
                f"{tuple(velocity.shape)} for points {tuple(points.shape)}. Batch the points "
                "(…, n, d) like the parameters, integrate one parameter set at a time, or "
                "batch a Gaussian moment ODE."
            )
        return (velocity,)

    def measure(self, state) -> Empirical:
        return self.mu.with_points(state[0])

    def project(self, state):
        field = self.field  # the piece acting now (a Mix-LN stack projects in its first part)
        if not field.supports("projection"):
            return state
        projected = field.project(state[0])
        if projected.shape != state[0].shape:
            raise ValueError(
                f"{type(field).__name__}.project returned shape "
                f"{tuple(projected.shape)} for points {tuple(state[0].shape)}: a projection "
                "(retraction) must return points of the same shape."
            )
        return (projected,)

    def _squared_spread(self, state) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, |x_i − m|²) of the detached particles."""
        points, weights = state[0].detach(), self.mu.weights.detach()
        mean = (weights @ points).unsqueeze(-2)
        return weights, ((points - mean) ** 2).sum(-1)

    def size(self, state) -> torch.Tensor:
        return self._squared_spread(state)[1].amax(-1)

    def trace(self, state) -> torch.Tensor:
        """Total variance Σ_i w_i |x_i − m|² (tr of the weighted covariance)."""
        weights, spread = self._squared_spread(state)
        return spread @ weights

    def rhs_norm(self, state, derivative) -> torch.Tensor:
        velocity = derivative[0].detach()
        return ((velocity**2).sum(-1) @ self.mu.weights.detach()).sqrt()

    def diameter(self, state) -> torch.Tensor:
        """max_{i,j} |x_i − x_j| per element, in batch chunks of ~64 MB of distances."""
        points = state[0].detach()
        flat = points.reshape(-1, *points.shape[-2:])
        n = points.shape[-2]
        chunk = max(1, (64 * 2**20) // (n * n * points.element_size()))
        parts = [torch.cdist(c, c).amax((-2, -1)) for c in flat.split(chunk)]
        return torch.cat(parts).reshape(points.shape[:-2])


class GaussianSystem(System):
    """Gaussian moment ODE: state (mean, cov), (α̇, Σ̇) from ``field.gaussian_rhs``."""

    part_dims = (1, 2)

    def __init__(self, field, mu: Gaussian, t0: float):
        super().__init__(field)
        # The batch shape of the run broadcasts the measure's with the parameters'.
        dmean, _ = field.gaussian_rhs(t0, mu.mean(), mu.cov())
        batch = dmean.shape[:-1]
        d = mu.dim
        cov = mu.cov()
        cov = 0.5 * (cov + cov.transpose(-1, -2))  # symmetric to rounding, as every state
        self._initial = (mu.mean().expand(*batch, d), cov.expand(*batch, d, d))

    def initial(self):
        return self._initial

    def rhs(self, t, state):
        return self.field.gaussian_rhs(t, *state)

    def measure(self, state) -> Gaussian:
        return Gaussian._trusted(*state)

    def project(self, state):
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

    def rhs_norm(self, state, derivative) -> torch.Tensor:
        dmean, dcov = (p.detach() for p in derivative)
        return ((dmean**2).sum(-1) + (dcov**2).sum((-2, -1))).sqrt()
