"""The table from a kind of measure to the system that steps it.

``integrate(field, mu0, t1)`` builds its system with :func:`build_system`: the builder
registered for the most specific type of ``mu0`` (its class first, then its bases in
method-resolution order), so a subclass of :class:`~tpde.measures.Empirical` registered on
its own is stepped by its own system. Each system module registers its measure types when
imported (:mod:`~tpde.flows.systems.particles`, :mod:`~tpde.flows.systems.gaussian`,
:mod:`~tpde.flows.systems.grid`); a new kind of state is its own module that does the same
(docs/EXTENDING.md, "A new kind of state").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from tpde.flows.systems.base import System

__all__ = ["SYSTEMS", "build_system", "register_system", "system_builder"]

#: Measure type → ``build(field, mu0, t0, engine) -> System``, in registration order.
SYSTEMS: dict[type, Callable] = {}


def register_system(kind: type, build: Callable) -> None:
    """Make :func:`tpde.flows.integrate` step measures of type ``kind`` (and of its
    subclasses that have no entry of their own) with ``build(field, mu0, t0, engine) ->
    System`` (checks of the measure included).

    Raises
    ------
    TypeError
        ``kind`` is not a type, or ``build`` is not a callable of (field, mu0, t0, engine).
    ValueError
        ``kind`` is registered already (``del tpde.flows.SYSTEMS[kind]`` first to replace
        its builder).
    """
    if not isinstance(kind, type) or not callable(build):
        raise TypeError(
            "register_system takes a measure type and a callable building its system; "
            f"received {kind!r} and {type(build).__name__}."
        )
    try:
        inspect.signature(build).bind(None, None, 0.0, "auto")
    except TypeError:
        raise TypeError(
            f"register_system: the builder {getattr(build, '__name__', build)!r} must take "
            "(field, mu0, t0, engine) and return a System."
        ) from None
    except ValueError:  # no signature to read (a builtin): trust it
        pass
    if kind in SYSTEMS:
        raise ValueError(
            f"register_system: {kind.__name__} already has a system builder "
            f"({getattr(SYSTEMS[kind], '__qualname__', SYSTEMS[kind])}); to replace it, "
            f"remove it first: del tpde.flows.SYSTEMS[{kind.__name__}]."
        )
    SYSTEMS[kind] = build


def system_builder(mu0) -> Callable:
    """The builder of the most specific registered type of ``mu0`` (its MRO, in order)."""
    for kind in type(mu0).__mro__:
        if kind in SYSTEMS:
            return SYSTEMS[kind]
    names = [f"{'an' if n[0] in 'AEIOU' else 'a'} {n}" for n in sorted(k.__name__ for k in SYSTEMS)]
    known = " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))
    raise TypeError(
        f"mu0 must be {known} (the measure types of tpde.flows.SYSTEMS); received "
        f"{type(mu0).__name__}. A new kind of state registers its system "
        "(register_system); a ready System is passed in place of the field: "
        "integrate(system, t1)."
    )


def build_system(field, mu0, t0: float, engine: str) -> System:
    """The system stepping ``mu0`` under ``field`` from t0 (its builder checks mu0)."""
    system = system_builder(mu0)(field, mu0, t0, engine)
    if not isinstance(system, System):
        raise TypeError(
            f"the builder registered for {type(mu0).__name__} (tpde.flows.SYSTEMS) returned "
            f"a {type(system).__name__}, not a System: register_system(kind, build) needs "
            "build(field, mu0, t0, engine) -> System."
        )
    return system
