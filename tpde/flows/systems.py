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
- ``degenerate(old, new, adaptive) -> mask or None``: the elements whose new state
  (after ``project``) left the state's domain, with ``domain_status`` the status that
  says so: a covariance a fixed step took out of the PSD cone ("stiff": the exact flow
  keeps Σ PSD, only a too long explicit step leaves it), a token a projection sent to
  the origin ("lost_token"). The loop rejects such a step (adaptive methods retry a
  shorter one) or stops the element there (fixed steps); None: no domain to leave;
- ``propose_step(t, state, h) -> h`` and ``check_step(h) -> (ok, retry)``: a step-size
  controller of the system's own (the CFL condition of grids) besides the method's error
  estimate; ``record_step(h, state)`` sees every accepted step; ``stats()`` adds the
  system's diagnostics to the trajectory's;
- ``size``, ``trace``, ``rhs_norm``: per-element reductions read by the events;
- ``jacobian(t, state) -> Linearization``: the per-element Jacobian of ``rhs`` in flat
  coordinates, for the stiff methods (:mod:`tpde.flows.rosenbrock`); optional, and only
  the systems that have it can be stepped by them (today :class:`GaussianSystem`).

Inner solves (Sinkhorn scalings) report into the system's :class:`InnerSolves` collector,
passed explicitly to the field; the loop stops a run whose inner solve failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde._engines import check_engine
from tpde._linalg import trace as matrix_trace
from tpde._status import Status
from tpde.fields import InnerSolves
from tpde.fields.base import Field, check_velocity_shape, check_velocity_type
from tpde.measures import Empirical, Gaussian

__all__ = ["GaussianSystem", "Linearization", "ParticleSystem", "System"]


def _reduce(part: torch.Tensor, dims: int, op) -> torch.Tensor:
    """Reduce the last ``dims`` dimensions of ``part`` (one batch element's data)."""
    if dims == 0:
        return op(part.unsqueeze(-1), dim=-1)
    return op(part.reshape(*part.shape[: part.ndim - dims], -1), dim=-1)


def check_start(field, mu, t0: float, kind: type | None = None, system: str = "") -> None:
    """Raise unless ``mu`` is a ``kind`` (when given) that the field acting at t0 takes (a
    Mix-LN stack started after its switch is Pre-LN, which takes tokens off the sphere)."""
    if kind is not None and not isinstance(mu, kind):
        raise TypeError(
            f"a {system} steps {kind.__name__} measures; received {type(mu).__name__}. Let "
            "integrate(field, mu0, t1) choose the system of mu0 (tpde.flows.SYSTEMS)."
        )
    field.piece(t0).check_measure(mu)


class System:
    """Base class of systems: per-element reductions and the default hooks (module notes)."""

    part_dims: tuple[int, ...]
    #: The method :func:`tpde.flows.integrate` uses when none is given.
    default_method: str | None = "auto"

    def __init__(self, field):
        if not isinstance(field, Field):
            raise TypeError(
                f"{type(self).__name__} steps a tpde field; received {type(field).__name__} as "
                f"the field. Call {type(self).__name__}(field, measure, ...)."
            )
        self.base_field = self.field = field
        #: Reports of the inner solves made by the field during this run.
        self.inner = InnerSolves()

    def reset_run(self) -> None:
        """Start a run afresh: the inner-solve reports and the piece in time of a previous
        run are dropped (:func:`tpde.flows.integrate` calls this; subclasses with per-run
        counters extend it)."""
        self.inner = InnerSolves()
        self.field = self.base_field

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

    # ------------------------------------------------------------------ starting a run
    def check_method(self, method) -> None:
        """Raise if this system cannot be stepped by ``method`` (default: any)."""

    def first_step(self, t0: float, t1: float, dt):
        """The first (or fixed) step: ``dt``, default (t1 − t0)/100."""
        if dt is not None:
            return dt
        first = (t1 - t0) / 100
        return 1.0 if first == 0 else first  # t1 == t0 and no dt given

    # ------------------------------------------------------------------ splitting
    @property
    def parts(self) -> int:
        """Number of parts of the field acting now (a :class:`~tpde.fields.Sum`'s parts;
        1 for any other field): what a splitting method steps one at a time."""
        return len(getattr(self.field, "parts", (None,)))

    def part_field(self, index: int):
        """The field of part ``index`` acting now."""
        parts = getattr(self.field, "parts", None)
        return self.field if parts is None else parts[index]

    def rhs_part(self, index: int, t, state):
        """The right-hand side of one part alone (splitting methods)."""
        return self.rhs(t, state, field=self.part_field(index))

    def project_part(self, index: int, state):
        """The retraction of one part after its sub-step (default: the system's own)."""
        return self.project(state)

    # ------------------------------------------------------------------ default hooks
    #: The status of an element whose state left the domain (see ``degenerate``).
    domain_status = None

    def project(self, state):
        return state

    def degenerate(self, old, new, adaptive: bool) -> torch.Tensor | None:
        """Per element: whether the step from ``old`` to ``new`` left the state's domain
        (module notes; ``adaptive``: the step comes from an adaptive method); None: never."""
        return None

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

    def __init__(self, field, mu: Empirical, engine: str = "auto", t0: float = 0.0):
        super().__init__(field)
        check_start(field, mu, t0, Empirical, "ParticleSystem")
        self.mu, self.engine = mu, check_engine(engine)

    def initial(self):
        return (self.mu.points,)

    def rhs(self, t, state, field=None):
        (points,) = state
        field = self.field if field is None else field
        velocity = field.particle_velocity(
            t, self.mu.with_points(points), points, self.engine, info=self.inner
        )
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

    domain_status = Status.LOST_TOKEN

    def degenerate(self, old, new, adaptive: bool) -> torch.Tensor | None:
        """Elements with a token that a projection sent to the origin (a norm scheme that
        loses a token: nGPT or post-LN with ``tangent=False`` landing on 0) and that was not
        there before the step. Fields without a projection (in no part): None."""
        parts = getattr(self.field, "parts", (self.field,))
        if not any(part.supports("projection") for part in (self.field, *parts)):
            return None
        zero_new = (new[0].detach() == 0).all(-1)
        zero_old = (old[0].detach() == 0).all(-1)
        return (zero_new & ~zero_old).any(-1)

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


@dataclass(frozen=True)
class Linearization:
    """A system's right-hand side linearised at one state, in flat coordinates.

    f(t, y + δ) ≈ f(t, y) + J δ per batch element, with states mapped to vectors of n
    coordinates (a system may drop redundant ones: a covariance's symmetric half). What
    the stiff methods (:mod:`tpde.flows.rosenbrock`) read.

    Attributes
    ----------
    matrix : (…, n, n), J per batch element (… the batch shape, empty when unbatched);
    time_derivative : (…, n) ∂f/∂t, or None when the field does not depend on time;
    to_vector : state -> (…, n);  to_state : (…, n) -> state;
    step_dims : trailing dimensions of the first state part (its per-element step tensor
        has shape (…, 1, …, 1) with that many ones).
    """

    matrix: torch.Tensor
    time_derivative: torch.Tensor | None
    to_vector: object
    to_state: object
    step_dims: int

    def per_element(self, h):
        """The loop's step (a float, or one tensor per state part) with the batch shape."""
        if not isinstance(h, tuple):
            return float(h)
        first = h[0]
        return first.reshape(first.shape[: first.ndim - self.step_dims])


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
        if self.field.supports("gaussian_derivative"):
            derivative = self.field.gaussian_affine_derivative(t, mean, cov)
            matrix = coords.closure_jacobian(derivative, mean, cov)
        else:
            matrix = self._autograd_jacobian(t, state, coords)
        f_t = None
        if self.field.time_dependent:
            delta = math.sqrt(torch.finfo(cov.dtype).eps) * max(1.0, abs(float(t)))
            after = coords.to_vector(self.field.gaussian_rhs(t + delta, mean, cov))
            f_t = (after - coords.to_vector(self.field.gaussian_rhs(t, mean, cov))) / delta
        return Linearization(matrix, f_t, coords.to_vector, coords.to_state, 1)

    def _coordinates(self, d: int, like: torch.Tensor) -> _SymmetricCoordinates:
        cached = getattr(self, "_coords", None)
        if cached is None or not cached.matches(d, like):
            cached = self._coords = _SymmetricCoordinates(d, like)
        return cached

    def _autograd_jacobian(self, t, state, coords) -> torch.Tensor:
        """J (…, n, n) by one backward pass through n copies of the state (see jacobian)."""
        y = coords.to_vector(state).detach()
        n = y.shape[-1]
        copies = y.expand(n, *y.shape).clone().requires_grad_(True)
        with torch.enable_grad():
            out = coords.to_vector(self.field.gaussian_rhs(t, *coords.to_state(copies)))
            pick = torch.eye(n, dtype=y.dtype, device=y.device).reshape(n, *(1,) * (y.ndim - 1), n)
            (rows,) = torch.autograd.grad((out * pick).sum(), copies)
        return rows.movedim(0, -2)


class _SymmetricCoordinates:
    """Flat coordinates [α, Σ_ab (a ≤ b)] of a Gaussian state (see GaussianSystem.jacobian).

    ``spread`` (m, d²) maps the m = d(d+1)/2 covariance coordinates to vec Σ (row-major,
    unit Σ_ab put at (a, b) and (b, a)).
    """

    def __init__(self, d: int, like: torch.Tensor):
        device = like.device
        self.d, self.dtype, self.device = d, like.dtype, device
        self.upper, self.lower = torch.triu_indices(d, d, device=device)
        m = len(self.upper)
        spread = torch.zeros(m, d * d, dtype=like.dtype, device=device)
        index = torch.arange(m, device=device)
        spread[index, self.upper * d + self.lower] = 1.0
        spread[index, self.lower * d + self.upper] = 1.0
        self.spread = spread

    def matches(self, d: int, like: torch.Tensor) -> bool:
        return (d, like.dtype, like.device) == (self.d, self.dtype, self.device)

    def to_vector(self, state) -> torch.Tensor:
        mean, cov = state
        return torch.cat([mean, cov[..., self.upper, self.lower]], dim=-1)

    def to_state(self, vector: torch.Tensor):
        d = self.d
        full = vector[..., d:] @ self.spread
        return vector[..., :d], full.reshape(*vector.shape[:-1], d, d)

    def closure_jacobian(self, derivative, mean, cov) -> torch.Tensor:
        r"""J (…, n, n) of α̇ = c + Bα, Σ̇ = BΣ + ΣBᵀ from an
        :class:`~tpde.fields.AffineDerivative` (formulas in GaussianSystem.jacobian).

        Σ-Σ block: Σ_t X_t ⊗ W_t with (X, W) = (B, I), (I, B), (P_h, ΣR_hᵀ), (ΣR_hᵀ, P_h),
        i.e. ∂Σ̇_ik/∂Σ_jl = T[(i, j), (k, l)] with T = Σ_t vec(X_t) vec(W_t)ᵀ (one batched
        product); a coordinate Σ_jl, j < l, adds the (l, j) column. α-Σ block:
        ∂α̇_i/∂Σ_jl = Σ_h P_h,ij v_h,l with v_h = r_h + R_hα; Σ-α block: 0.
        """
        d, up, lo = self.d, self.upper, self.lower
        B = derivative.B
        eye = torch.eye(d, dtype=B.dtype, device=B.device)
        left, right, mixed = [B, eye], [eye, B], 0
        for P, R, r in derivative.terms:
            U = cov @ R.transpose(-1, -2)
            left += [P, U]
            right += [U, P]
            v = (R @ mean.unsqueeze(-1)).squeeze(-1)
            v = v if r is None else v + r
            mixed = mixed + P.unsqueeze(-1) * v.unsqueeze(-2).unsqueeze(-2)  # [i, j, l]
        batch = torch.broadcast_shapes(*(x.shape[:-2] for x in left + right), mean.shape[:-1])
        X = torch.stack([x.expand(*batch, d, d) for x in left], -3).flatten(-2)  # (…, T, d²)
        W = torch.stack([w.expand(*batch, d, d) for w in right], -3).flatten(-2)
        T = (X.transpose(-1, -2) @ W).flatten(-2)  # [(i, j), (k, l)] flattened
        off = (up != lo).to(B.dtype)  # a coordinate Σ_jl with j < l moves Σ_lj too
        i, k = up[:, None], lo[:, None]  # rows (i, k), i ≤ k
        j, l = up[None, :], lo[None, :]  # columns (j, l), j ≤ l
        cov_cov = (
            T[..., (i * d + j) * d * d + k * d + l] + off * T[..., (i * d + l) * d * d + k * d + j]
        )
        mixed = torch.as_tensor(mixed, dtype=B.dtype, device=B.device).expand(*batch, d, d, d)
        mixed = mixed.flatten(-2)
        mean_cov = mixed[..., up * d + lo] + off * mixed[..., lo * d + up]
        m = len(up)
        J = torch.zeros(*batch, d + m, d + m, dtype=B.dtype, device=B.device)
        J[..., :d, :d] = derivative.C + B
        J[..., :d, d:] = mean_cov
        J[..., d:, d:] = cov_cov
        return J
