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
retried shorter. An explicit ``dt`` that gives ν > 1 at any stage raises an error. The
scheme and the CFL target belong to the grid system: pass
``FiniteVolumes(grid, scheme="upwind", cfl=0.8)`` to :func:`tpde.flows.integrate` in
place of the grid (a bare Grid means ``FiniteVolumes(grid)``).

Status: "completed"; "not_converged" when an inner solve of the field (Sinkhorn scaling)
missed its tolerance, at the start of the offending step; "blow_up" when the masses stop
being finite or a step would empty every cell (all mass left the box; the state before
that step is kept); "max_steps"; the events
``BlowUp`` (λ_max, or with ``size="trace"`` the trace, of the grid's covariance) and
``Converged`` ((Σ_c m_c |u_c|²)^{1/2} with u_c the mean of the cell's face velocities) as
for particles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde._engines import check_engine
from tpde._validation import check_choice, check_positive
from tpde.flows.systems import System
from tpde.measures import Empirical, Grid

__all__ = [
    "MUSCL",
    "SCHEMES",
    "CFLViolation",
    "FiniteVolumes",
    "GridSystem",
    "Reconstruction",
    "Upwind",
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
class Reconstruction:
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
class Upwind(Reconstruction):
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
class MUSCL(Reconstruction):
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


class CFLViolation(ValueError):
    """An explicit step size breaks the CFL (positivity) condition of the grid scheme."""


@dataclass(frozen=True)
class FiniteVolumes:
    """How :func:`tpde.flows.integrate` discretises a Grid: reconstruction and CFL target.

    Parameters
    ----------
    grid : Grid, the initial density (d = 1, 2).
    scheme : "muscl" (default; minmod-limited, second order) or "upwind" (first order).
    cfl : target Courant number ν of adaptive steps, in (0, 1] (positivity needs ν ≤ 1);
        default 0.5.
    """

    grid: Grid
    scheme: str = "muscl"
    cfl: float = 0.5

    def __post_init__(self):
        if not isinstance(self.grid, Grid):
            raise TypeError(
                f"FiniteVolumes discretises a Grid; received {type(self.grid).__name__}. "
                "Particles and Gaussians are integrated as they are."
            )
        check_choice(self.scheme, "scheme", tuple(SCHEMES))
        cfl = check_positive(self.cfl, "cfl")
        if cfl > 1:
            raise ValueError(
                f"cfl is the target Courant number and must lie in (0, 1] (positivity needs "
                f"ν ≤ 1); received {cfl}."
            )

    @property
    def reconstruction(self) -> Reconstruction:
        return SCHEMES[self.scheme]


class GridSystem(System):
    """Finite volumes of one field on one grid: state (masses m, cumulative outflow).

    The right-hand side is (dm/dt, outflow rate through the box boundary), so that an
    explicit Runge–Kutta step integrates the outflow with the masses and their sum stays
    the initial mass to rounding. The CFL condition is this system's step controller
    (:meth:`propose_step`, :meth:`check_step`; module notes).
    """

    def __init__(self, field, grid, engine: str = "auto", *, scheme: str = "muscl",
                 cfl: float = 0.5):  # fmt: skip
        super().__init__(field)
        spec = grid if isinstance(grid, FiniteVolumes) else FiniteVolumes(grid, scheme, cfl)
        grid = spec.grid
        field.check_measure(grid)
        self.scheme, self.cfl, self.engine = spec.reconstruction, spec.cfl, check_engine(engine)
        # Grids step with the SSP methods only: the reconstruction's own (upwind: euler,
        # muscl: heun) by default (module notes).
        self.default_method = spec.reconstruction.default_method
        self.fixed_dt, self.dt_cap = None, 1.0
        self.part_dims = (grid.dim, 0)
        self.lower, self.upper, self.shape = grid.lower, grid.upper, grid.shape
        self.h = [float(v) for v in grid.cell_size]
        self.centres = grid.centres()
        self.faces, self.face_shapes = self._faces(grid)
        self._initial = (grid.density, grid.density.new_zeros(()))
        self.reset_run()

    def reset_run(self) -> None:
        """Forget the counters of a previous run (a ready system may be integrated again)."""
        super().reset_run()
        self.n_field_evals = 0
        self._cache = None  # (masses, face velocities, rate) of the last evaluation
        self._step_rates: list[tuple[float, float]] = []
        self._retry = None
        self.nu_max, self.dt_seen = 0.0, []
        self.min_mass = float(self._initial[0].detach().min())

    def check_method(self, method) -> None:
        """Grids take the strong-stability-preserving methods (positivity under the CFL
        condition): 'euler' and 'heun'."""
        if not getattr(method, "ssp", False):
            raise ValueError(
                f"grid (Eulerian) flows step with the strong-stability-preserving methods "
                f"'euler' or 'heun' (positivity under the CFL condition); received method "
                f"{getattr(method, 'name', method)!r}. Leave method=None for the scheme's "
                "default."
            )

    def first_step(self, t0: float, t1: float, dt):
        """A fixed dt as given (checked against the CFL condition at every stage), else
        adaptive steps at ν = cfl, capped at 1/10 of the run."""
        span = t1 - t0
        self.fixed_dt, self.dt_cap = dt, (span / 10 if span > 0 else 1.0)
        return self.dt_cap if dt is None else dt

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

    # ------------------------------------------------------------------ physics
    def velocity(self, t: float, m: torch.Tensor) -> list[torch.Tensor]:
        """Normal velocity at the faces of each axis, Γ[Σ m_c δ_{x_c}](faces)."""
        if self._cache is not None and self._cache[0] is m:
            return self._cache[1]
        flat = m.reshape(-1)
        keep = flat > 0
        weights = flat[keep]
        mu = Empirical(self.centres[keep], weights / weights.sum())
        self.n_field_evals += 1
        u = self.field.particle_velocity(t, mu, self.faces, self.engine, info=self.inner)
        if u.shape != self.faces.shape:
            raise ValueError(
                f"grid flows need unbatched field parameters: the velocity has shape "
                f"{tuple(u.shape)} for {tuple(self.faces.shape)} face points. Integrate one "
                "parameter set at a time, or batch a Gaussian moment ODE instead."
            )
        sizes = [math.prod(s) for s in self.face_shapes]
        parts = torch.split(u, sizes)
        velocity = [
            p[:, k].reshape(s) for k, (p, s) in enumerate(zip(parts, self.face_shapes, strict=True))
        ]
        self._cache = (m, velocity, self.rate(velocity))
        return velocity

    def rate(self, velocity: list[torch.Tensor]) -> float:
        """max_c r_c: the Courant number of a unit step."""
        total = sum(
            self.scheme.outflow_rate(u, k, h)
            for k, (u, h) in enumerate(zip(velocity, self.h, strict=True))
        )
        return float(total.detach().max())

    def initial(self):
        return self._initial

    def rhs(self, t, state):
        """(dm/dt, outflow rate through the box boundary) for the masses m."""
        m = state[0]
        velocity = self.velocity(t, m)
        self._step_rates.append((t, self._cache[2]))
        dm = torch.zeros_like(m)
        outflow = m.new_zeros(())
        for k, (u, h) in enumerate(zip(velocity, self.h, strict=True)):
            left, right = self.scheme.face_values(m, k)
            flux = u.clamp_min(0) * left - (-u).clamp_min(0) * right
            n = m.shape[k]
            dm = dm - (flux.narrow(k, 1, n) - flux.narrow(k, 0, n)) / h
            outflow = outflow + (flux.narrow(k, n, 1).sum() - flux.narrow(k, 0, 1).sum()) / h
        return dm, outflow

    def measure(self, state) -> Grid:
        return Grid._trusted(state[0], self.lower, self.upper)

    def finite(self, state) -> torch.Tensor:
        """Finite masses, and some mass left in the box (an empty box is a blow-up)."""
        m = state[0]
        return super().finite(state) & (m > 0).any()

    # ------------------------------------------------------------------ CFL control
    def propose_step(self, t: float, state, h):
        """ν = cfl at the current velocity (capped at 1/10 of the run); a fixed dt as is."""
        self.velocity(t, state[0])
        rate = self._cache[2]
        self._step_rates = [(t, rate)]
        if self.fixed_dt is not None:
            return h
        proposal = self.dt_cap if rate <= 0 else min(self.dt_cap, self.cfl / rate)
        if self._retry is not None:
            proposal, self._retry = min(proposal, self._retry), None
        return proposal

    def check_step(self, h) -> tuple[bool, float | None]:
        """Every stage of the step within ν = h·rate ≤ 1; else retry shorter or raise."""
        for stage, (t, rate) in enumerate(self._step_rates):
            nu = h * rate
            if nu <= 1.0:
                continue
            if self.fixed_dt is not None:
                name = ("first", "second", "third", "fourth")[min(stage, 3)]
                raise CFLViolation(
                    f"dt = {h:.4g} violates the CFL condition of the {self.scheme.name} "
                    f"scheme at t = {t:.4g} ({name} stage): Courant number ν = {nu:.3g} > 1, "
                    f"so cell masses could turn negative. Pass dt <= {1.0 / rate:.4g}, or "
                    "dt=None for adaptive steps at ν = cfl."
                )
            self._retry = self.cfl / rate
            return False, self._retry
        return True, None

    def record_step(self, h, state) -> None:
        self.nu_max = max([self.nu_max, *(h * rate for _, rate in self._step_rates)])
        self.dt_seen.append(h)
        self.min_mass = min(self.min_mass, float(state[0].detach().min()))

    def stats(self, saved, final) -> dict:
        """Outflow, mass error, extreme masses, Courant numbers and steps of the run."""
        initial_mass = self._initial[0].sum()
        return {
            "n_field_evals": self.n_field_evals,
            "outflow": float(final[1].detach()),
            "outflow_saved": torch.stack([s[1].detach() for s in saved]),
            "mass_error": float((final[0].sum() + final[1] - initial_mass).detach().abs()),
            "min_mass": self.min_mass,
            "cfl": self.cfl if self.fixed_dt is None else None,
            "cfl_max": self.nu_max,
            "dt_min": min(self.dt_seen, default=math.nan),
            "dt_max": max(self.dt_seen, default=math.nan),
            "scheme": self.scheme.name,
        }

    # ------------------------------------------------------------------ events
    def centre_speed_norm(self, m: torch.Tensor, velocity: list[torch.Tensor]) -> torch.Tensor:
        """(Σ_c m_c |u_c|²)^{1/2} / mass^{1/2}, u_c the average of the face velocities."""
        total = m.new_zeros(())
        for k, u in enumerate(velocity):
            n = m.shape[k]
            centre = 0.5 * (u.narrow(k, 0, n) + u.narrow(k, 1, n))
            total = total + (m * centre**2).sum()
        return (total / m.sum()).sqrt()

    def _cov(self, state) -> torch.Tensor:
        return Grid._trusted(state[0], self.lower, self.upper).cov().detach()

    def size(self, state) -> torch.Tensor:
        return torch.linalg.eigvalsh(self._cov(state))[-1]

    def trace(self, state) -> torch.Tensor:
        return self._cov(state).trace()

    def rhs_norm(self, state, derivative) -> torch.Tensor:
        m = state[0]
        cached = self._cache is not None and self._cache[0] is m
        velocity = self._cache[1] if cached else self.velocity(0.0, m)
        return self.centre_speed_norm(m.detach(), velocity)
