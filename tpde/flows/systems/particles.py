"""Particles: the Lagrangian system of an :class:`~tpde.measures.Empirical` measure."""

from __future__ import annotations

import torch

from tpde._engines import check_engine
from tpde._status import Status
from tpde.fields.base import check_velocity_shape, check_velocity_type
from tpde.fields.calls import part_velocity
from tpde.flows.systems.base import System, check_start
from tpde.flows.systems.jacobian import (
    Linearization,
    backward_jacobian,
    forward_time_derivative,
)
from tpde.flows.systems.krylov import OperatorLinearization, operator_product
from tpde.flows.systems.registry import register_system
from tpde.measures import Empirical

__all__ = ["DENSE_JACOBIAN", "ParticleSystem"]

#: The largest n·d (coordinates of one batch element) whose Jacobian a particle system
#: forms, dense, by autograd (one evaluation, n·d backward passes batched by vmap: memory
#: ~ (n·d)·n² pairwise weights). Beyond it the Jacobian is an operator (products J v) and
#: the stiff methods solve their stages by GMRES (:mod:`tpde.flows.systems.krylov`).
DENSE_JACOBIAN = 256


class ParticleSystem(System):
    """Lagrangian particles: state (points,), ẋ_i = Γ[μ_t](x_i).

    Points may carry leading batch dimensions (…, n, d): a batch of particle systems
    with shared weights (one per batch element, stepped and stopped each on its own).
    A field with a projection (tokens on the sphere) declares it with ``project``; it is
    the system's retraction after every accepted step.
    """

    part_dims = (2,)

    def __init__(self, field, mu: Empirical, engine: str = "auto", t0: float = 0.0):
        super().__init__(field)
        check_start(field, mu, t0, Empirical, "ParticleSystem")
        self.mu, self.engine = mu, check_engine(engine)

    @classmethod
    def build(cls, field, mu0, t0: float, engine: str) -> ParticleSystem:
        """The builder :func:`~tpde.flows.systems.register_system` holds for Empirical."""
        return cls(field, mu0, engine, t0=t0)

    def initial(self):
        return (self.mu.points,)

    def rhs(self, t, state, field=None):
        (points,) = state
        field = self.field if field is None else field
        mu = self.mu.with_points(points)  # the queries are the keys: said, not inferred
        velocity = part_velocity(field, t, mu, points, self.engine, self.inner, None, own=True)
        check_velocity_type(velocity, field)
        if velocity.shape != points.shape:
            check_velocity_shape(velocity, points, f"{type(field).__name__}.particle_velocity")
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

    def project_part(self, index: int, state):
        """Part ``index``'s own projection (its norm scheme's retraction), if it has one."""
        return self.project(state, field=self.part_field(index))

    def project(self, state, field=None):
        # The piece acting now (a Mix-LN stack projects in its first part), or one part.
        field = self.field if field is None else field
        if not self.capable(field, "projection"):
            return state
        projected = field.project(state[0])
        if projected.shape != state[0].shape:
            raise ValueError(
                f"{type(field).__name__}.project returned shape "
                f"{tuple(projected.shape)} for points {tuple(state[0].shape)}: a projection "
                "(retraction) must return points of the same shape."
            )
        return (projected,)

    # ------------------------------------------------------------------ stiff methods
    @property
    def jacobian(self):
        """``jacobian(t, state) -> Linearization`` (the stiff path of "auto" and "rodas4"):
        the dense J for clouds of n·d ≤ :data:`DENSE_JACOBIAN` coordinates, an operator
        (products J v, stage solves by GMRES: :mod:`tpde.flows.systems.krylov`) beyond."""
        n, d = self.mu.points.shape[-2:]
        return self._dense_jacobian if n * d <= DENSE_JACOBIAN else self._operator_jacobian

    def _flat(self, t, state):
        """(f on flat vectors, to_vector, to_state) at time t for points (…, n, d)."""
        n, d = state[0].shape[-2:]

        def to_vector(s):
            return s[0].reshape(*s[0].shape[:-2], n * d)

        def to_state(v):
            return (v.reshape(*v.shape[:-1], n, d),)

        def f(v):
            return to_vector(self.rhs(t, to_state(v)))

        return f, to_vector, to_state

    def _time_derivative(self, t, state, to_vector, value):
        """∂f/∂t by a forward difference (time-dependent fields; None otherwise)."""
        if not self.field.time_dependent:
            return None
        return forward_time_derivative(
            lambda s: to_vector(self.rhs(s, state)), t, state[0].dtype, value
        ).detach()

    def _dense_jacobian(self, t, state) -> Linearization:
        r"""J = ∂ẋ/∂x per batch element, (…, n·d, n·d) in the flat coordinates of the
        points (row-major), by reverse-mode autograd: one evaluation, n·d backward passes
        (the projection is not part of f: it follows each accepted step). A time-dependent
        field adds ∂f/∂t by a forward difference of step √ε·max(1, |t|), as Gaussians do.
        """
        f, to_vector, to_state = self._flat(t, state)
        matrix, value = backward_jacobian(f, to_vector(state))
        f_t = self._time_derivative(t, state, to_vector, value)
        return Linearization(matrix, f_t, to_vector, to_state, 2)

    def _operator_jacobian(self, t, state) -> OperatorLinearization:
        """J as products J v (one backward pass each through the double-backward graph
        built here), for clouds beyond DENSE_JACOBIAN coordinates; ∂f/∂t as the dense one."""
        f, to_vector, to_state = self._flat(t, state)
        product, value = operator_product(f, to_vector(state))
        f_t = self._time_derivative(t, state, to_vector, value)
        return OperatorLinearization(None, f_t, to_vector, to_state, 2, product)

    domain_status = Status.LOST_TOKEN

    def degenerate(self, old, new, adaptive: bool) -> torch.Tensor | None:
        """Elements with a token that a projection sent to the origin (a norm scheme that
        loses a token: nGPT or post-LN with ``tangent=False`` landing on 0) and that was not
        there before the step. Fields without a projection (in no part): None."""
        if not self._projects():
            return None
        zero_new = (new[0] == 0).all(-1)  # (a comparison records no graph: no detach)
        zero_old = (old[0] == 0).all(-1)
        return (zero_new & ~zero_old).any(-1)

    def _projects(self) -> bool:
        """Whether the piece acting now or one of its parts has a projection (asked once
        per piece and run)."""
        key = (id(self.field), "projection in a part")
        cached = self._capabilities.get(key)
        if cached is None or cached[0] is not self.field:
            fields = {id(f): f for f in (self.field, *self.split_fields)}.values()
            projects = any(self.capable(part, "projection") for part in fields)
            cached = self._capabilities[key] = (self.field, projects)
        return cached[1]

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


register_system(Empirical, ParticleSystem.build)
