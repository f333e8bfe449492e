"""Flows: particle (Lagrangian) and Gaussian (moment ODE) integrators of the Transformer PDE.

:func:`integrate` is the façade; :class:`Trajectory` the result; :class:`BlowUp` and
:class:`Converged` the events; ``METHODS`` the Runge–Kutta tableaux with their orders.
"""

from tpde.flows.events import BlowUp, Converged
from tpde.flows.integrate import integrate
from tpde.flows.methods import METHODS, ExplicitRK
from tpde.flows.trajectory import STATUSES, Trajectory

__all__ = ["METHODS", "STATUSES", "BlowUp", "Converged", "ExplicitRK", "Trajectory", "integrate"]
