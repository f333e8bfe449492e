"""Time-stepping methods: the :class:`Method` base and the table :data:`METHODS`.

Each module registers its methods when imported (:func:`register_method`):
:mod:`~tpde.flows.methods.explicit` (the Runge–Kutta tableaux "euler", "heun", "rk4",
"dopri5"), :mod:`~tpde.flows.methods.rosenbrock` ("rodas4", for stiff flows),
:mod:`~tpde.flows.methods.auto` (the default "auto") and
:mod:`~tpde.flows.methods.splitting` ("lie-trotter", "strang"). The protocol and the
table live in :mod:`~tpde.flows.methods.base`, which imports none of them.
"""

import importlib
import pkgutil

from tpde.flows.methods.auto import Auto
from tpde.flows.methods.base import (
    METHODS,
    Method,
    method_listing,
    part_step,
    register_method,
    resolve_method,
)
from tpde.flows.methods.explicit import DOPRI5, EULER, HEUN, RK4, ExplicitRK, State
from tpde.flows.methods.rosenbrock import RODAS4, Rosenbrock
from tpde.flows.methods.splitting import LIE_TROTTER, SPLITTINGS, STRANG, Splitting

# Every module of this folder registers its methods when imported: a new module is found
# here, with no list to edit.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DOPRI5",
    "EULER",
    "HEUN",
    "LIE_TROTTER",
    "METHODS",
    "RK4",
    "RODAS4",
    "SPLITTINGS",
    "STRANG",
    "Auto",
    "ExplicitRK",
    "Method",
    "Rosenbrock",
    "Splitting",
    "State",
    "method_listing",
    "part_step",
    "register_method",
    "resolve_method",
]
