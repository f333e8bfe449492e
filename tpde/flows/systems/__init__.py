"""Systems: what the one stepping loop steps, one kind of state per module.

:mod:`~tpde.flows.systems.base` the protocol (:class:`System`);
:mod:`~tpde.flows.systems.particles` (:class:`ParticleSystem`, Empirical measures),
:mod:`~tpde.flows.systems.gaussian` (:class:`GaussianSystem`, the moment ODE),
:mod:`~tpde.flows.systems.grid` (:class:`GridSystem`, finite volumes, with its
:mod:`~tpde.flows.systems.reconstructions` and its
:mod:`~tpde.flows.systems.cfl` controller); :mod:`~tpde.flows.systems.jacobian` the
Jacobian machinery of the stiff methods; :mod:`~tpde.flows.systems.registry` the table
from a measure's type to its system (:data:`SYSTEMS`, :func:`register_system`), which
each system module fills when imported.
"""

import importlib
import pkgutil

from tpde.flows.systems.base import System, check_start, reduce_element
from tpde.flows.systems.cfl import CFLController, CFLViolation
from tpde.flows.systems.gaussian import GaussianSystem
from tpde.flows.systems.grid import FiniteVolumes, GridSystem
from tpde.flows.systems.jacobian import Linearization, SymmetricCoordinates, autograd_jacobian
from tpde.flows.systems.particles import ParticleSystem
from tpde.flows.systems.reconstructions import (
    MUSCL,
    RECONSTRUCTIONS,
    Reconstruction,
    Upwind,
    renamed,
)
from tpde.flows.systems.registry import SYSTEMS, build_system, register_system, system_builder

# Every module of this folder registers its systems when imported: a new module is found
# here, with no list to edit.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "MUSCL",
    "RECONSTRUCTIONS",
    "SYSTEMS",
    "CFLController",
    "CFLViolation",
    "FiniteVolumes",
    "GaussianSystem",
    "GridSystem",
    "Linearization",
    "ParticleSystem",
    "Reconstruction",
    "SymmetricCoordinates",
    "System",
    "Upwind",
    "autograd_jacobian",
    "build_system",
    "check_start",
    "reduce_element",
    "register_system",
    "system_builder",
]


def __getattr__(name: str):
    return renamed(__name__, name)  # SCHEMES: the former name of RECONSTRUCTIONS
