"""``integrate``: one façade for particle, Gaussian and grid flows of the Transformer PDE."""

from __future__ import annotations

import math

import numpy as np

from tpde._engines import check_engine
from tpde._validation import check_choice, check_positive, check_positive_int, check_real
from tpde.attention.base import Field
from tpde.flows.eulerian import FiniteVolumes, GridSystem
from tpde.flows.events import parse_events
from tpde.flows.loop import Loop
from tpde.flows.methods import resolve_method
from tpde.flows.systems import GaussianSystem, ParticleSystem
from tpde.flows.trajectory import Trajectory
from tpde.measures import Empirical, Gaussian, Grid

__all__ = ["integrate"]


def _save_times(save, t0: float, t1: float, max_steps: int) -> list[float] | None:
    """Requested save times in [t0, t1] (t0 and t1 always included); None = every step.

    At most ``max_steps + 1`` times: each is a stored copy of the state (and, in a run that
    lands on its save times, the end of a step)."""
    if isinstance(save, str):
        check_choice(save, "save", ("steps",))
        return None
    if isinstance(save, bool):
        raise TypeError(
            f"save must be None, an int (a number of times), a sequence of times or 'steps'; "
            f"received {save!r}."
        )
    if save is None:
        times = [t0, t1]
    elif isinstance(save, int):
        if save < 2:
            raise ValueError(f"save as an int is a number of saved times >= 2; received {save}.")
        _check_save_count(save, max_steps)
        times = np.linspace(t0, t1, save).tolist()
    else:
        try:
            values = np.asarray(save, dtype=float).ravel()
        except (TypeError, ValueError):
            raise TypeError(
                f"save times must be numbers; received {save!r}. Pass a sequence of times in "
                "[t0, t1], an int (that many equally spaced times) or 'steps'."
            ) from None
        _check_save_count(len(values), max_steps)
        times = [float(s) for s in values]
        if not all(math.isfinite(s) for s in times):
            raise ValueError(f"save times must be finite; received {times}.")
        if any(s < t0 or s > t1 for s in times):
            raise ValueError(f"save times must lie in [t0, t1] = [{t0}, {t1}]; received {times}.")
    return sorted({t0, t1, *times})


def _check_save_count(count: int, max_steps: int) -> None:
    if count > max_steps + 1:
        raise ValueError(
            f"save asks for {count} saved times, more than max_steps + 1 = {max_steps + 1}: "
            "every saved time is a stored copy of the state. Ask for fewer times, or raise "
            "max_steps."
        )


def _grid_method(method, spec: FiniteVolumes):
    """The method of a grid flow: a strong-stability-preserving one (the scheme's default)."""
    chosen = resolve_method(spec.reconstruction.default_method if method is None else method)
    if not getattr(chosen, "ssp", False):
        raise ValueError(
            f"grid (Eulerian) flows step with the strong-stability-preserving methods "
            f"'euler' or 'heun' (positivity under the CFL condition); received method "
            f"{getattr(chosen, 'name', chosen)!r}. Leave method=None for the scheme's default."
        )
    return chosen


#: The systems of :func:`integrate`, with the measure each steps (for error messages).
_SYSTEMS = {
    ParticleSystem: "an Empirical mu0 (particles)",
    GaussianSystem: "a Gaussian mu0 (the moment ODE)",
    GridSystem: "a Grid or FiniteVolumes mu0 (finite volumes)",
}


def _check_jacobian(method, system: type) -> None:
    """A stiff method needs the system's Jacobian: refuse it, naming who has one."""
    if not getattr(method, "uses_jacobian", False) or callable(getattr(system, "jacobian", None)):
        return
    able = [f"{c.__name__} ({kind})" for c, kind in _SYSTEMS.items() if hasattr(c, "jacobian")]
    raise ValueError(
        f"method {getattr(method, 'name', method)!r} is a stiff (Rosenbrock) method: it "
        f"solves with the Jacobian of the right-hand side, which only {', '.join(able)} "
        f"provides; a {system.__name__} ({_SYSTEMS.get(system, 'this state')}) has none. "
        "Integrate a Gaussian, or use an explicit method ('dopri5', 'rk4'; grids: 'euler', "
        "'heun')."
    )


def _system(field: Field, mu0, t0: float, t1: float, dt, method, engine: str):
    """(system, method, first step) for the measure's kind.

    The measure is checked by the piece of the field acting at t0 (a Mix-LN stack started
    after its switch: Pre-LN, which takes tokens off the sphere)."""
    acting = field.piece(t0)
    if isinstance(mu0, Grid):
        mu0 = FiniteVolumes(mu0)
    if isinstance(mu0, FiniteVolumes):
        acting.check_measure(mu0.grid)
        if method is not None:
            _check_jacobian(resolve_method(method), GridSystem)
        chosen = _grid_method(method, mu0)
        system = GridSystem(field, mu0, engine, dt, t1 - t0)
        return system, chosen, system.dt_cap if dt is None else dt
    chosen = resolve_method(method)
    first = (t1 - t0) / 100 if dt is None else dt
    first = 1.0 if first == 0 else first  # t1 == t0 and no dt given
    if isinstance(mu0, Empirical):
        acting.check_measure(mu0)
        _check_jacobian(chosen, ParticleSystem)
        return ParticleSystem(field, mu0, engine), chosen, first
    if isinstance(mu0, Gaussian):
        acting.check_measure(mu0)
        return GaussianSystem(field, mu0, t0), chosen, first
    raise TypeError(
        "mu0 must be an Empirical (particles), a Gaussian (moment ODE), a Grid or "
        f"FiniteVolumes(grid, ...) (finite volumes); received {type(mu0).__name__}."
    )


def integrate(
    field: Field,
    mu0,
    t1: float,
    *,
    dt: float | None = None,
    method=None,
    save=None,
    events=("blow_up",),
    t0: float = 0.0,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_steps: int = 100_000,
    engine: str = "auto",
) -> Trajectory:
    """Integrate the Transformer PDE ∂t μ + div(μ Γ[μ]) = 0 from μ(t0) = mu0 to t1.

    Dispatches on the measure to a system of the one stepping loop
    (:mod:`tpde.flows.loop`, :mod:`tpde.flows.systems`): an :class:`Empirical` moves its
    particles (ẋ_i = Γ[μ_t](x_i), an exact weak solution; with a field that has a
    projection, e.g. tokens on the sphere, the projection follows every step); a
    :class:`Gaussian` follows the field's moment ODE (covariance kept symmetric); a
    :class:`Grid` (d ≤ 2), or :class:`~tpde.flows.eulerian.FiniteVolumes` to choose the
    scheme and CFL target, moves its cell masses by conservative finite volumes
    (:mod:`tpde.flows.eulerian`). A batched Gaussian (or batched parameters) integrates a
    whole sweep at once; each element has its own step size, events and status.

    Parameters
    ----------
    field : a tpde attention field.
    mu0 : Empirical, Gaussian, Grid or FiniteVolumes.
    t1 : final time (>= t0).
    dt : step size (fixed methods) or first step (adaptive methods). Default
        (t1 − t0)/100. Grids: default None = adaptive CFL steps; an explicit dt that
        breaks the CFL condition raises an error.
    method : a name of :data:`~tpde.flows.methods.METHODS` ("euler" (order 1), "heun" (2),
        "rk4" (4), "dopri5" (adaptive 5(4)), "rodas4" (adaptive 4(3), L-stable
        Rosenbrock, for stiff flows; Gaussians only)) or a method object (an
        :class:`~tpde.flows.methods.ExplicitRK` tableau, a
        :class:`~tpde.flows.rosenbrock.Rosenbrock` method). Default "rk4"; grids take the
        strong-stability-preserving methods only, default "euler" with scheme "upwind"
        and "heun" (SSP-RK2) with "muscl". Use "rodas4" where an explicit step is bounded
        by stability rather than accuracy (fast decaying modes beside slow ones, e.g. the
        rank histograms with V = GᵀG, MATH.md §6): its step follows the accuracy only.
        A Gaussian state outside the PSD cone is never returned: an adaptive method
        rejects such a step, a fixed-step one stops the element before it with status
        "stiff" and a warning naming method="rodas4" (:class:`~tpde._status.Status`).
    save : None (t0 and t1), an int (that many equally spaced times), a sequence of
        times, or "steps" (every accepted step; the batch then steps in lockstep). Every
        element lands exactly on every save time.
    events : names ("blow_up", "converged", "clustered") or event objects
        (:mod:`tpde.flows.events`: BlowUp, Converged, Clustered).
    rtol, atol : error tolerances of adaptive methods.
    max_steps : budget of steps (accepted and rejected) per batch element; status
        "max_steps" beyond.
    engine : pairwise engine for particle and grid flows (see :mod:`tpde._engines`).

    Returns
    -------
    Trajectory
    """
    t0 = check_real(t0, "t0")
    t1 = check_real(t1, "t1", finite=False)
    if not math.isfinite(t1) or t1 < t0:
        raise ValueError(f"t1 must be finite and >= t0 = {t0}; received t1 = {t1}.")
    if t0 < 0:
        raise ValueError(f"t0 must be >= 0 (depth-time); received {t0}.")
    if not isinstance(field, Field):
        raise TypeError(f"field must be a tpde attention field; received {type(field).__name__}.")
    dt = None if dt is None else check_positive(dt, "dt")
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    check_positive_int(max_steps, "max_steps")
    save_times = _save_times(save, t0, t1, max_steps)
    system, chosen, first = _system(field, mu0, t0, t1, dt, method, check_engine(engine))
    parsed = parse_events(events)
    for event in parsed:
        if not callable(getattr(system, event.requires, None)):
            raise ValueError(
                f"the {type(event).__name__} event reads the {event.requires} of the state, "
                f"which a {type(system).__name__} does not have: it applies to particle flows "
                "(Empirical measures)."
            )
    synchronous = field.time_dependent or bool(field.breakpoints) or save_times is None
    loop = Loop(
        system,
        chosen,
        parsed,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        synchronous=synchronous,
    )
    return loop.run(t0, t1, first, save_times)
