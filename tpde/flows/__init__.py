"""Flows: particle (Lagrangian), Gaussian (moment ODE) and grid (Eulerian) integrators.

:func:`integrate` is the façade over one stepping loop (:mod:`tpde.flows.loop`) and its
systems (:mod:`tpde.flows.systems`: particles, Gaussians; :class:`GridSystem`);
:class:`Trajectory` the result, its :class:`Status`; :class:`BlowUp` and :class:`Converged`
the events; ``SYSTEMS`` the table from a measure's type to its system (a ready system is
accepted too); ``SPLITTINGS`` the Lie–Trotter and Strang splittings over a sum's parts
(:class:`Splitting`); ``METHODS`` the Runge–Kutta tableaux with their orders
(:class:`ExplicitRK`) and the L-stable Rosenbrock method for stiff flows (:data:`RODAS4`,
:class:`Rosenbrock`); :class:`Auto` the default "auto" (dopri5, switching to rodas4 when
a Gaussian run turns stiff, :mod:`tpde.flows.auto`);
``SCHEMES`` the finite-volume schemes of grid flows, chosen with :class:`FiniteVolumes`
(:mod:`tpde.flows.eulerian`);
:func:`compare` the agreement harness (Gaussian ODE vs particles vs grid);
:func:`jko_step` and :func:`jko_flow` the JKO steps (:mod:`tpde.flows.jko`, ``GEOMETRIES``).
The geodesic convexity probe is a property of an energy: :func:`tpde.fields.convexity_probe`.
"""

from tpde.flows.auto import Auto
from tpde.flows.circle import CircleSystem  # registers CircleDensity with integrate
from tpde.flows.compare import Comparison, compare
from tpde.flows.eulerian import SCHEMES, CFLViolation, FiniteVolumes, GridSystem
from tpde.flows.events import BlowUp, Clustered, Converged
from tpde.flows.integrate import SYSTEMS, integrate, register_system
from tpde.flows.jko import GEOMETRIES, jko_flow, jko_step
from tpde.flows.methods import METHODS, ExplicitRK
from tpde.flows.rosenbrock import RODAS4, Rosenbrock
from tpde.flows.splitting import LIE_TROTTER, SPLITTINGS, STRANG, Splitting
from tpde.flows.systems import GaussianSystem, ParticleSystem, System
from tpde.flows.trajectory import STATUSES, JKOStep, Status, Trajectory

__all__ = [
    "GEOMETRIES",
    "LIE_TROTTER",
    "METHODS",
    "RODAS4",
    "SCHEMES",
    "SPLITTINGS",
    "STATUSES",
    "STRANG",
    "SYSTEMS",
    "Auto",
    "BlowUp",
    "CFLViolation",
    "CircleSystem",
    "Clustered",
    "Comparison",
    "Converged",
    "ExplicitRK",
    "FiniteVolumes",
    "GaussianSystem",
    "GridSystem",
    "JKOStep",
    "ParticleSystem",
    "Rosenbrock",
    "Splitting",
    "Status",
    "System",
    "Trajectory",
    "compare",
    "integrate",
    "jko_flow",
    "jko_step",
    "register_system",
]
