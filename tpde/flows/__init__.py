"""Flows: particle (Lagrangian), Gaussian (moment ODE) and grid (Eulerian) integrators.

:func:`integrate` is the façade; :class:`Trajectory` the result; :class:`BlowUp` and
:class:`Converged` the events; ``METHODS`` the Runge–Kutta tableaux with their orders;
``SCHEMES`` the finite-volume schemes of grid flows (:mod:`tpde.flows.eulerian`);
:func:`compare` the agreement harness (Gaussian ODE vs particles vs grid).
"""

from tpde.flows.compare import Comparison, compare
from tpde.flows.eulerian import SCHEMES, CFLViolation
from tpde.flows.events import BlowUp, Converged
from tpde.flows.integrate import integrate
from tpde.flows.methods import METHODS, ExplicitRK
from tpde.flows.trajectory import STATUSES, Trajectory

__all__ = [
    "METHODS",
    "SCHEMES",
    "STATUSES",
    "BlowUp",
    "CFLViolation",
    "Comparison",
    "Converged",
    "ExplicitRK",
    "Trajectory",
    "compare",
    "integrate",
]
