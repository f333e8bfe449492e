r"""Eulerian (finite-volume) flows of the Transformer PDE on a :class:`~tpde.measures.Grid`.

The PDE ∂t ρ + div(ρ Γ[ρ]) = 0 is discretised on the grid's cells (d = 1, 2) in
conservation form: the mass m_c of cell c changes only by fluxes through its faces,

    dm_c/dt = − Σ_k (F_{c+½e_k} − F_{c−½e_k}) / h_k,     F = u⁺ m_L − u⁻ m_R,

with u the normal velocity at the face, u± = max(±u, 0), and m_L, m_R the cell masses
reconstructed on the face's two sides. The velocity at the faces is the field evaluated
against the grid measure itself, Γ[Σ_c m_c δ_{x_c}](x_face), through the particle engines
with the cell masses as weights (midpoint quadrature of the attention integral, O(h²)).

Spatial schemes (``scheme``):

- ``"upwind"``: m_L, m_R are the cell masses (first order).
- ``"muscl"``: piecewise-linear reconstruction with minmod-limited slopes
  σ_c = minmod(m_c − m_{c−1}, m_{c+1} − m_c), m_L/R = m ± σ/2 (second order on smooth
  solutions; van Leer, J. Comput. Phys. 32, 1979).

Time methods (``method``): ``"euler"`` (forward Euler, order 1; the default with upwind)
and ``"heun"`` (SSP-RK2 = Heun, order 2; the default with MUSCL, so the scheme is second
order overall). Both are strong-stability preserving: each is a convex combination of
forward Euler steps, so positivity holds whenever it holds for one Euler step (Gottlieb,
Shu, Tadmor, SIAM Review 43, 2001).

Box boundary: the box is open. Nothing flows in (ghost cells outside hold no mass) and the
mass that leaves through the boundary is accumulated and reported in
``stats["outflow"]``; cell masses plus outflow equal the initial mass to rounding. After
outflow the field is evaluated against the mass left inside the box (renormalised),
whereas the PDE's field would still see the mass outside: enlarge the box when the
outflow is not negligible. Fields whose velocity depends on
the number of particles (Sigmoid with ``bias=None``, b = −log n) see n = the number of
nonempty cells: pass a numeric bias for grid flows.

Step size (CFL): the outflow rate of a cell c is
r_c = Σ_k (u⁺_{c+½} + u⁻_{c−½}) / h_k for upwind, and
r_c = Σ_k [(u⁺_{c+½} + u⁻_{c−½})/2 + max(u⁺_{c+½}, u⁻_{c−½})] / h_k for MUSCL (its face
values lie in [m_c/2, 3m_c/2] and add up to 2m_c). An Euler step keeps every mass
nonnegative when ν := dt · max_c r_c ≤ 1; ν is the Courant number reported.
With ``dt=None`` each step takes ν = ``cfl`` (default 0.5) from the current velocity, at
most 1/10 of the run length, and a Heun step whose second stage would exceed ν = 1 is
retried shorter. An explicit ``dt`` that gives ν > 1 at any stage raises an error.

Status: "completed"; "not_converged" when an inner solve of the field (Sinkhorn scaling)
missed its tolerance, at the start of the offending step; "blow_up" when the masses stop
being finite or every cell is empty (all mass left the box); "max_steps"; the events
``BlowUp`` (λ_max, or with ``size="trace"`` the trace, of the grid's covariance) and
``Converged`` ((Σ_c m_c |u_c|²)^{1/2} with u_c the mean of the cell's face velocities) as
for particles.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from tpde._validation import check_choice, check_positive
from tpde.flows.events import Converged
from tpde.flows.trajectory import Trajectory
from tpde.measures import Empirical, Grid

__all__ = [
    "MUSCL",
    "SCHEMES",
    "TIME_METHODS",
    "CFLViolation",
    "FiniteVolume",
    "Upwind",
    "integrate_grid",
]


def _minmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """minmod(a, b) = sign(a)·min(|a|, |b|) where a and b agree in sign, 0 elsewhere."""
    return torch.where(a * b > 0, torch.sign(a) * torch.minimum(a.abs(), b.abs()), 0.0 * a)


def _pad(m: torch.Tensor, axis: int, before: int, after: int) -> torch.Tensor:
    """Zero ghost cells along ``axis``."""
    pads = [0, 0] * m.ndim
    index = 2 * (m.ndim - 1 - axis)
    pads[index], pads[index + 1] = before, after
    return torch.nn.functional.pad(m, pads)


@dataclass(frozen=True)
class FiniteVolume:
    """A spatial reconstruction: it declares its name, order and default time method."""

    name: str
    order: int
    default_method: str

    def face_values(self, m: torch.Tensor, axis: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Masses on the left and right side of every face along ``axis`` (n_k + 1 faces).

        Face j separates cells j − 1 and j; outside the box the ghost masses are 0.
        """
        raise NotImplementedError

    def outflow_rate(self, u: torch.Tensor, axis: int, h: float) -> torch.Tensor:
        """Per-cell bound r_c on the outgoing mass fraction per unit time (this axis)."""
        raise NotImplementedError


def _outgoing(u: torch.Tensor, axis: int):
    """Outgoing speeds through the right and left face of every cell along ``axis``."""
    n = u.shape[axis] - 1
    return u.narrow(axis, 1, n).clamp_min(0), (-u.narrow(axis, 0, n)).clamp_min(0)


@dataclass(frozen=True)
class Upwind(FiniteVolume):
    """First-order upwind: the face value is the upwind cell's mass."""

    name: str = "upwind"
    order: int = 1
    default_method: str = "euler"

    def face_values(self, m, axis):
        return _pad(m, axis, 1, 0), _pad(m, axis, 0, 1)

    def outflow_rate(self, u, axis, h):
        right, left = _outgoing(u, axis)
        return (right + left) / h


@dataclass(frozen=True)
class MUSCL(FiniteVolume):
    """Piecewise-linear reconstruction with minmod-limited slopes (second order)."""

    name: str = "muscl"
    order: int = 2
    default_method: str = "heun"

    def face_values(self, m, axis):
        padded = _pad(m, axis, 1, 1)
        n = m.shape[axis]
        backward = m - padded.narrow(axis, 0, n)
        forward = padded.narrow(axis, 2, n) - m
        half = 0.5 * _minmod(backward, forward)
        return _pad(m + half, axis, 1, 0), _pad(m - half, axis, 0, 1)

    def outflow_rate(self, u, axis, h):
        # Face values lie in [m/2, 3m/2] and add up to 2m: the outgoing flux is at most
        # ((u⁺_R + u⁻_L)/2 + max(u⁺_R, u⁻_L))·m.
        right, left = _outgoing(u, axis)
        return (0.5 * (right + left) + torch.maximum(right, left)) / h


SCHEMES = {scheme.name: scheme for scheme in (Upwind(), MUSCL())}
#: Strong-stability-preserving time methods: name -> order.
TIME_METHODS = {"euler": 1, "heun": 2}


class CFLViolation(ValueError):
    """An explicit step size breaks the CFL (positivity) condition of the grid scheme."""


class _GridFlow:
    """Right-hand side of the finite-volume system of one field on one grid."""

    def __init__(self, field, grid: Grid, scheme: FiniteVolume, engine: str):
        self.field, self.scheme, self.engine = field, scheme, engine
        self.lower, self.upper, self.shape = grid.lower, grid.upper, grid.shape
        self.h = [float(v) for v in grid.cell_size]
        self.centres = grid.centres()
        self.faces, self.face_shapes = self._faces(grid)
        self.n_field_evals = 0
        self.inner_failure = None

    @staticmethod
    def _faces(grid: Grid):
        """Face midpoints of every axis, concatenated (F, d), and each axis' face shape."""
        axes, edges = grid.axes(), grid.edges()
        points, shapes = [], []
        for k in range(grid.dim):
            coords = [edges[j] if j == k else axes[j] for j in range(grid.dim)]
            mesh = torch.meshgrid(*coords, indexing="ij")
            points.append(torch.stack([c.reshape(-1) for c in mesh], dim=-1))
            shapes.append(tuple(len(c) for c in coords))
        return torch.cat(points), shapes

    def velocity(self, t: float, m: torch.Tensor) -> list[torch.Tensor]:
        """Normal velocity at the faces of each axis, Γ[Σ m_c δ_{x_c}](faces)."""
        flat = m.reshape(-1)
        keep = flat > 0
        weights = flat[keep]
        mu = Empirical(self.centres[keep], weights / weights.sum())
        self.n_field_evals += 1
        u = self.field._particle_velocity(t, mu, self.faces, self.engine)
        info = getattr(self.field, "last_info", None)  # inner solves (Sinkhorn) report here
        if getattr(info, "converged", None) is False:
            self.inner_failure = info
        if u.shape != self.faces.shape:
            raise ValueError(
                f"grid flows need unbatched field parameters: the velocity has shape "
                f"{tuple(u.shape)} for {tuple(self.faces.shape)} face points. Integrate one "
                "parameter set at a time, or batch a Gaussian moment ODE instead."
            )
        sizes = [math.prod(s) for s in self.face_shapes]
        parts = torch.split(u, sizes)
        return [
            p[:, k].reshape(s) for k, (p, s) in enumerate(zip(parts, self.face_shapes, strict=True))
        ]

    def rate(self, velocity: list[torch.Tensor]) -> float:
        """max_c r_c: the Courant number of a unit step."""
        total = sum(
            self.scheme.outflow_rate(u, k, h)
            for k, (u, h) in enumerate(zip(velocity, self.h, strict=True))
        )
        return float(total.detach().max())

    def rhs(self, m: torch.Tensor, velocity: list[torch.Tensor]):
        """(dm/dt, outflow rate through the box boundary) for the masses m."""
        dm = torch.zeros_like(m)
        outflow = m.new_zeros(())
        for k, (u, h) in enumerate(zip(velocity, self.h, strict=True)):
            left, right = self.scheme.face_values(m, k)
            flux = u.clamp_min(0) * left - (-u).clamp_min(0) * right
            n = m.shape[k]
            dm = dm - (flux.narrow(k, 1, n) - flux.narrow(k, 0, n)) / h
            outflow = outflow + (flux.narrow(k, n, 1).sum() - flux.narrow(k, 0, 1).sum()) / h
        return dm, outflow

    def centre_speed_norm(self, m: torch.Tensor, velocity: list[torch.Tensor]) -> torch.Tensor:
        """(Σ_c m_c |u_c|²)^{1/2} / mass^{1/2}, u_c the average of the face velocities."""
        total = m.new_zeros(())
        for k, u in enumerate(velocity):
            n = m.shape[k]
            centre = 0.5 * (u.narrow(k, 0, n) + u.narrow(k, 1, n))
            total = total + (m * centre**2).sum()
        return (total / m.sum()).sqrt()

    # The system interface of the shared events (tpde.flows.events): state = masses m,
    # derivative = (m, face velocities).
    def _cov(self, m: torch.Tensor) -> torch.Tensor:
        return Grid._trusted(m, self.lower, self.upper).cov().detach()

    def size(self, m: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvalsh(self._cov(m))[-1]

    def trace(self, m: torch.Tensor) -> torch.Tensor:
        return self._cov(m).trace()

    def rhs_norm(self, derivative) -> torch.Tensor:
        m, u = derivative
        return self.centre_speed_norm(m.detach(), u)


def integrate_grid(
    field,
    grid: Grid,
    t0: float,
    t1: float,
    *,
    dt: float | None,
    scheme: str,
    method: str | None,
    cfl: float,
    save_times: list[float] | None,
    events: tuple,
    max_steps: int,
    engine: str,
) -> Trajectory:
    """Finite-volume flow of ``field`` from ``grid`` at t0 to t1 (called by ``integrate``).

    Parameters are those of :func:`tpde.flows.integrate` (already checked there, except
    the grid-specific ones checked here): ``scheme`` in :data:`SCHEMES`, ``method`` in
    :data:`TIME_METHODS` (None: the scheme's default), ``cfl`` in (0, 1], ``dt`` None
    (adaptive) or a fixed step, ``save_times`` None (every step) or a sorted list.

    Returns
    -------
    Trajectory whose measures are Grids (total mass 1 − outflow so far) and whose stats
    hold ``outflow`` (total mass that left the box), ``outflow_saved`` (tensor (T,):
    cumulative outflow at each saved time), ``mass_error`` (|Σ m + outflow − initial mass|
    at the end), ``min_mass`` (smallest cell mass over the run), ``cfl`` (target),
    ``cfl_max`` (largest Courant number ν of an accepted stage), ``dt_min``, ``dt_max``,
    ``n_steps``, ``n_rejected``, ``n_field_evals``, ``scheme``, ``method``, ``wall_time_s``.
    """
    fv = SCHEMES[check_choice(scheme, "scheme", tuple(SCHEMES))]
    method = fv.default_method if method is None else method
    if method not in TIME_METHODS:
        raise ValueError(
            f"grid (Eulerian) flows step with the strong-stability-preserving methods "
            f"'euler' or 'heun' (positivity under the CFL condition); received method "
            f"{method!r}. Leave method=None for the scheme's default."
        )
    cfl = check_positive(cfl, "cfl")
    if cfl > 1:
        raise ValueError(
            f"cfl is the target Courant number and must lie in (0, 1] (positivity needs "
            f"ν ≤ 1); received {cfl}."
        )
    if grid.dim != field.dim:
        raise ValueError(
            f"dimension mismatch: the grid lives in d = {grid.dim} but the field's parameters "
            f"act on d = {field.dim}."
        )
    flow = _GridFlow(field, grid, fv, engine)
    runner = _GridRunner(flow, method, cfl, dt, events, int(max_steps), t1 - t0)
    return runner.run(grid, t0, t1, save_times)


class _GridRunner:
    """Stepping loop of a grid flow: CFL step control, outflow accounting, events, saving."""

    def __init__(self, flow, method, cfl, dt, events, max_steps, span):
        self.flow, self.method, self.cfl, self.fixed_dt = flow, method, cfl, dt
        self.events, self.max_steps = events, max_steps
        self.dt_cap = span / 10 if span > 0 else 1.0
        self.nu_max, self.dt_seen = 0.0, []
        self.min_mass = math.inf

    def _check_cfl(self, dt: float, rate: float, t: float, stage: str) -> bool:
        """True if ν = dt·rate ≤ 1; raise for an explicit dt that breaks it."""
        nu = dt * rate
        if nu <= 1.0:
            return True
        if self.fixed_dt is not None:
            raise CFLViolation(
                f"dt = {dt:.4g} violates the CFL condition of the {self.flow.scheme.name} "
                f"scheme at t = {t:.4g} ({stage}): Courant number ν = {nu:.3g} > 1, so cell "
                f"masses could turn negative. Pass dt <= {1.0 / rate:.4g}, or dt=None for "
                f"adaptive steps at ν = cfl."
            )
        return False

    def step(self, t: float, m, u0, rate0, h: float):
        """One step of size h; returns (new m, outflow, accepted, next h suggestion)."""
        flow = self.flow
        if not self._check_cfl(h, rate0, t, "first stage"):
            return None, None, False, self.cfl / rate0
        dm, out0 = flow.rhs(m, u0)
        m1 = m + h * dm
        if self.method == "euler":
            nu = h * rate0
            self.nu_max = max(self.nu_max, nu)
            return m1, h * out0, True, None
        u1 = flow.velocity(t + h, m1)
        rate1 = flow.rate(u1)
        if not self._check_cfl(h, rate1, t + h, "second stage"):
            return None, None, False, self.cfl / rate1
        dm1, out1 = flow.rhs(m1, u1)
        self.nu_max = max(self.nu_max, h * rate0, h * rate1)
        return 0.5 * (m + m1 + h * dm1), 0.5 * h * (out0 + out1), True, None

    def _proposed(self, rate: float) -> float:
        if self.fixed_dt is not None:
            return self.fixed_dt
        return min(self.dt_cap, self.cfl / rate) if rate > 0 else self.dt_cap

    def run(self, grid: Grid, t0: float, t1: float, save_times) -> Trajectory:
        start = time.perf_counter()
        flow = self.flow
        m = grid.density
        initial_mass = m.sum()
        outflow = m.new_zeros(())
        status, event_time = "completed", math.nan
        times, masses, outflows = [t0], [m], [outflow]
        pending = [] if save_times is None else [s for s in save_times if s > t0]
        t, steps, rejected = t0, 0, 0
        self.min_mass = float(m.detach().min())
        u, h_next = None, None
        while t < t1:
            if steps + rejected >= self.max_steps:
                status, event_time = "max_steps", t
                break
            if not bool((m > 0).any()):
                status, event_time = "blow_up", t  # every cell is empty: all mass left
                break
            if u is None:
                u = flow.velocity(t, m)
            if flow.inner_failure is not None:
                status, event_time = "not_converged", t
                break
            rate = flow.rate(u)
            target = pending[0] if pending else t1
            h = h_next if h_next is not None else self._proposed(rate)
            landing = target - t <= h * (1 + 1e-9)
            h_try = target - t if landing else h
            new, out, accepted, h_retry = self.step(t, m, u, rate, h_try)
            if flow.inner_failure is not None:
                status, event_time = "not_converged", t  # keep the state before the step
                break
            if not accepted:
                rejected += 1
                h_next = h_retry
                continue
            h_next = None
            t = target if landing else t + h_try
            m, outflow = new, outflow + out
            steps += 1
            self.dt_seen.append(h_try)
            self.min_mass = min(self.min_mass, float(m.detach().min()))
            u = None  # the velocity of the new state, computed when first needed
            if not bool(torch.isfinite(m).all()):
                stop = "blow_up"
            else:
                stop, u = self._events(m, t)
            if save_times is None or (pending and landing and t == pending[0]) or stop:
                times.append(t)
                masses.append(m)
                outflows.append(outflow)
                if pending and t == pending[0]:
                    pending.pop(0)
            if stop:
                status, event_time = stop, t
                break
        if times[-1] != t:
            times.append(t)
            masses.append(m)
            outflows.append(outflow)
        stats = {
            "n_steps": steps,
            "n_rejected": rejected,
            "n_field_evals": flow.n_field_evals,
            "outflow": float(outflow.detach()),
            "outflow_saved": torch.stack([o.detach() for o in outflows]),
            "mass_error": float((m.sum() + outflow - initial_mass).detach().abs()),
            "min_mass": self.min_mass,
            "cfl": self.cfl if self.fixed_dt is None else None,
            "cfl_max": self.nu_max,
            "dt_min": min(self.dt_seen, default=math.nan),
            "dt_max": max(self.dt_seen, default=math.nan),
            "scheme": flow.scheme.name,
            "method": self.method,
            "wall_time_s": time.perf_counter() - start,
        }
        return Trajectory(
            times=torch.tensor(times, dtype=torch.float64),
            measures=[Grid._trusted(mass, flow.lower, flow.upper) for mass in masses],
            status=status,
            event_time=torch.tensor(event_time, dtype=torch.float64),
            stats=stats,
        )

    def _events(self, m, t: float):
        """(name of the first event that fires on the new state or None, velocity or None)."""
        u = None
        for event in self.events:
            derivative = None
            if isinstance(event, Converged):  # the velocity only when an event needs it
                u = self.flow.velocity(t, m) if u is None else u
                derivative = (m, u)
            if bool(event.check(self.flow, m, derivative)):
                return event.name, u
        return None, u
