"""Flows: particle (Lagrangian), Gaussian (moment ODE) and grid (Eulerian) integrators.

:func:`integrate` is the façade over one stepping loop (:mod:`tpde.flows.loop`; one
unbatched state at fixed steps without events, a network's forward, takes the fixed-step
path :mod:`tpde.flows.fixed`, with the same rules, :mod:`tpde.flows.rules`, and the same
results bit for bit) and its systems (:mod:`tpde.flows.systems`, one kind of state per
module: :class:`ParticleSystem`, :class:`GaussianSystem`, :class:`GridSystem`);
:class:`Trajectory` the result, its :class:`Status`; :class:`BlowUp` and :class:`Converged`
the events; ``SYSTEMS`` the table from a measure's type to its system
(:func:`register_system`; a ready system is accepted too); ``METHODS`` the table of every
method by name (:mod:`tpde.flows.methods`, each module registers its own with
:func:`register_method`; base :class:`Method`): the Runge–Kutta tableaux with their orders
(:class:`ExplicitRK`), the L-stable Rosenbrock method for stiff flows (:data:`RODAS4`,
:class:`Rosenbrock`), :class:`Auto` the default "auto" (dopri5, switching to rodas4 when a
Gaussian run turns stiff), and the Lie–Trotter and Strang splittings over a sum's parts
(:class:`Splitting`, ``SPLITTINGS``); ``RECONSTRUCTIONS`` the finite-volume schemes of grid
flows, chosen with :class:`FiniteVolumes` (:mod:`tpde.flows.systems.grid`); :func:`compare`
the agreement harness (Gaussian ODE vs particles vs grid); :func:`integrate_circle` the
circle PDE on grids refined as it sharpens (then, optionally, along its characteristics:
:mod:`tpde.flows.circle_adaptive`); :func:`jko_step` and :func:`jko_flow` the JKO steps
(:mod:`tpde.flows.jko`, ``GEOMETRIES``); :func:`structured_jko_step` those of a nearest
gradient field (semidefinite mobility, :mod:`tpde.flows.jko_structured`) and
:func:`frozen_metric_distance` its frozen metric. The geodesic convexity probe is a property
of an energy: :func:`tpde.fields.convexity_probe`.
"""

from tpde.flows.circle_adaptive import integrate_circle
from tpde.flows.compare import Comparison, compare
from tpde.flows.events import BlowUp, Clustered, Converged
from tpde.flows.integrate import integrate
from tpde.flows.jko import GEOMETRIES, jko_flow, jko_step
from tpde.flows.jko_structured import (
    FrozenDistance,
    StructuredJKOStep,
    frozen_metric_distance,
    structured_jko_step,
)
from tpde.flows.methods import (
    LIE_TROTTER,
    METHODS,
    RODAS4,
    SPLITTINGS,
    STRANG,
    Auto,
    ExplicitRK,
    Method,
    Rosenbrock,
    Splitting,
    register_method,
)
from tpde.flows.systems import (
    RECONSTRUCTIONS,
    SYSTEMS,
    CFLViolation,
    FiniteVolumes,
    GaussianSystem,
    GridSystem,
    ParticleSystem,
    System,
    register_system,
)
from tpde.flows.systems.circle import CircleSystem
from tpde.flows.trajectory import STATUSES, JKOStep, Status, Trajectory

__all__ = [
    "GEOMETRIES",
    "LIE_TROTTER",
    "METHODS",
    "RECONSTRUCTIONS",
    "RODAS4",
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
    "FrozenDistance",
    "GaussianSystem",
    "GridSystem",
    "JKOStep",
    "Method",
    "ParticleSystem",
    "Rosenbrock",
    "Splitting",
    "Status",
    "StructuredJKOStep",
    "System",
    "Trajectory",
    "compare",
    "frozen_metric_distance",
    "integrate",
    "integrate_circle",
    "jko_flow",
    "jko_step",
    "register_method",
    "register_system",
    "structured_jko_step",
]


def __getattr__(name: str):
    from tpde.flows.systems.reconstructions import renamed

    return renamed(__name__, name)  # SCHEMES: the former name of RECONSTRUCTIONS
