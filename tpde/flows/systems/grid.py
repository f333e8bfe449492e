r"""Eulerian (finite-volume) flows of the Transformer PDE on a :class:`~tpde.measures.Grid`.

The PDE ∂t ρ + div(ρ Γ[ρ]) = 0 is discretised on the grid's cells (d = 1, 2) in
conservation form: the mass m_c of cell c changes only by fluxes through its faces,

    dm_c/dt = − Σ_k (F_{c+½e_k} − F_{c−½e_k}) / h_k,     F = u⁺ m_L − u⁻ m_R,

with u the normal velocity at the face, u± = max(±u, 0), and m_L, m_R the cell masses
reconstructed on the face's two sides. The velocity at the faces is the field evaluated
against the grid measure itself, Γ[Σ_c m_c δ_{x_c}](x_face), through the particle engines
with the cell masses as weights (midpoint quadrature of the attention integral, O(h²)).

Spatial schemes (``scheme``, :mod:`tpde.flows.systems.reconstructions`): ``"upwind"``
(first order) and ``"muscl"`` (minmod-limited, second order).

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
retried shorter. An explicit ``dt`` that gives ν > 1 at any stage raises an error
(:class:`~tpde.flows.systems.cfl.CFLController`). The
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
from tpde.fields.calls import part_velocity
from tpde.flows.methods import METHODS
from tpde.flows.systems.base import System
from tpde.flows.systems.cfl import CFLController
from tpde.flows.systems.reconstructions import RECONSTRUCTIONS, Reconstruction
from tpde.flows.systems.registry import register_system
from tpde.measures import Empirical, Grid

__all__ = ["FiniteVolumes", "GridSystem"]


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
        check_choice(self.scheme, "scheme", tuple(RECONSTRUCTIONS))
        cfl = check_positive(self.cfl, "cfl")
        if cfl > 1:
            raise ValueError(
                f"cfl is the target Courant number and must lie in (0, 1] (positivity needs "
                f"ν ≤ 1); received {cfl}."
            )

    @property
    def reconstruction(self) -> Reconstruction:
        return RECONSTRUCTIONS[self.scheme]


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
        self.controller = CFLController(spec.cfl, spec.reconstruction.name)
        self.part_dims = (grid.dim, 0)
        self.lower, self.upper, self.shape = grid.lower, grid.upper, grid.shape
        self.h = [float(v) for v in grid.cell_size]
        self.centres = grid.centres()
        self.faces, self.face_shapes = self._faces(grid)
        self._initial = (grid.density, grid.density.new_zeros(()))
        self.reset_run()

    @classmethod
    def build(cls, field, mu0, t0: float, engine: str) -> GridSystem:
        """The builder :func:`~tpde.flows.systems.register_system` holds for Grid and
        FiniteVolumes."""
        return cls(field, mu0, engine)

    def reset_run(self) -> None:
        """Forget the counters of a previous run (a ready system may be integrated again)."""
        super().reset_run()
        self.n_field_evals = 0
        self._cache = None  # (masses, face velocities, rate) of the last evaluation
        self.min_mass = float(self._initial[0].detach().min())

    def check_method(self, method) -> None:
        """Grids take the strong-stability-preserving methods (positivity under the CFL
        condition): 'euler' and 'heun'."""
        if not method.ssp:
            names = [repr(name) for name, m in METHODS.items() if m.ssp]
            ssp = " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))
            raise ValueError(
                f"grid (Eulerian) flows step with the strong-stability-preserving methods "
                f"{ssp} (positivity under the CFL condition); received method "
                f"{method.name!r}. Leave method=None for the scheme's "
                "default."
            )

    def first_step(self, t0: float, t1: float, dt):
        """A fixed dt as given (checked against the CFL condition at every stage), else
        adaptive steps at ν = cfl, capped at 1/10 of the run."""
        return self.controller.start(t0, t1, dt)

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
        u = part_velocity(self.field, t, mu, self.faces, self.engine, self.inner, None, own=False)
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
        self.controller.stage(t, self._cache[2])
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
        """The controller's step at the current velocity (ν = cfl; a fixed dt as is)."""
        self.velocity(t, state[0])
        return self.controller.propose(t, self._cache[2], h)

    def check_step(self, h) -> tuple[bool, float | None]:
        """Every stage of the step within ν ≤ 1 (the controller retries or raises)."""
        return self.controller.check(h)

    def record_step(self, h, state) -> None:
        self.controller.record(h)
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
            **self.controller.stats(),
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


register_system(Grid, GridSystem.build)
register_system(FiniteVolumes, GridSystem.build)
