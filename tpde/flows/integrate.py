"""``integrate``: one façade for particle, Gaussian and grid flows of the Transformer PDE."""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np
import torch

from tpde._engines import check_engine
from tpde._validation import check_choice, check_positive, check_positive_int, check_real
from tpde.fields import Field, Sum
from tpde.flows import fixed
from tpde.flows.events import parse_events
from tpde.flows.loop import Loop
from tpde.flows.methods import METHODS, Method, method_listing, resolve_method
from tpde.flows.systems import FiniteVolumes, System, build_system
from tpde.flows.systems.particles import DENSE_JACOBIAN
from tpde.flows.trajectory import Trajectory
from tpde.measures import Measure

__all__ = ["integrate"]


def _save_times(save, t0: float, t1: float, max_steps: int) -> list[float] | None:
    """Requested save times in [t0, t1] (t0 and t1 always included); None = every step.

    At most ``max_steps + 1`` times: each is a stored copy of the state (and, in a run that
    lands on its save times, the end of a step)."""
    if isinstance(save, str):
        check_choice(save, "save", ("steps",))
        return None
    if isinstance(save, bool | np.bool_):
        raise TypeError(
            f"save must be None, an int (a number of times), a sequence of times or 'steps'; "
            f"received {save!r}."
        )
    if save is None:
        times = [t0, t1]
    elif isinstance(save, numbers.Integral):  # numpy integers too: a count, never a time
        save = int(save)
        if save < 2:
            raise ValueError(f"save as an int is a number of saved times >= 2; received {save}.")
        _check_save_count(save, max_steps)
        times = _linspace(t0, t1, save)
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


def _interpolate(saves, save_times, method: Method, lockstep: bool) -> bool:
    """Whether the save times are filled by interpolation (``saves``, :func:`integrate`)."""
    if not isinstance(saves, str):
        raise TypeError(
            f"saves must be 'auto', 'landed' or 'interpolated'; received {saves!r} "
            f"({type(saves).__name__})."
        )
    check_choice(saves, "saves", ("auto", "landed", "interpolated"))
    if saves != "interpolated":
        return saves == "auto" and not lockstep
    if save_times is None:
        raise ValueError(
            "saves='interpolated' needs save times to interpolate at; save='steps' saves "
            "every accepted step as it is. Pass save=None, an int or a sequence of times, or "
            "saves='landed'."
        )
    if method.splits:
        raise ValueError(
            f"saves='interpolated' needs the derivative at both ends of a step, which the "
            f"splitting method {method.name!r} does not form (its parts step one after the "
            "other). Use saves='landed' (or 'auto'), or a method that is not a splitting."
        )
    return True


def _linspace(t0: float, t1: float, count: int) -> list[float]:
    """``np.linspace(t0, t1, count).tolist()`` bit for bit (t0 + i·(t1 − t0)/(count − 1), the
    last t1; numpy forms i·step + t0 in float64 alike), without numpy's 3 µs per call."""
    step = (t1 - t0) / (count - 1)
    if step == 0.0:  # numpy: i/(count − 1)·(t1 − t0) + t0, every term t0
        return [t0 + i / (count - 1) * (t1 - t0) for i in range(count - 1)] + [t1]
    return [i * step + t0 for i in range(count - 1)] + [t1]


def _check_save_count(count: int, max_steps: int) -> None:
    if count > max_steps + 1:
        raise ValueError(
            f"save asks for {count} saved times, more than max_steps + 1 = {max_steps + 1}: "
            "every saved time is a stored copy of the state. Ask for fewer times, or raise "
            "max_steps."
        )


def _tolerance_floors(rtol: float, atol: float, dtype) -> tuple[float, float]:
    """(rtol, atol) raised to what ``dtype`` resolves: rtol ≥ 4·eps, atol ≥ its smallest
    normal number (a float16 run at rtol = 1e-6 rejected every step: issue 28)."""
    if not dtype.is_floating_point:
        return rtol, atol
    eps, tiny = _resolution(dtype)
    return max(rtol, 4 * eps), max(atol, tiny)


@functools.cache
def _resolution(dtype) -> tuple[float, float]:
    """(eps, smallest normal number) of a floating dtype (torch.finfo, read once)."""
    info = torch.finfo(dtype)
    return info.eps, info.tiny


def _check_jacobian(method: Method, system: System) -> None:
    """A stiff method needs the system's Jacobian: refuse it, naming who has one."""
    if not method.uses_jacobian or callable(getattr(system, "jacobian", None)):
        return
    raise ValueError(
        f"method {method.name!r} is a stiff (Rosenbrock) method: it "
        f"solves with the Jacobian of the right-hand side, which GaussianSystem (a "
        f"Gaussian mu0, the moment ODE) and ParticleSystem (dense up to n·d = "
        f"{DENSE_JACOBIAN} coordinates, an operator beyond) provide; this "
        f"{type(system).__name__} has none. Integrate a Gaussian or a cloud, or use an "
        "explicit method ('dopri5', 'rk4'; grids: 'euler', 'heun')."
    )


def _pieces(field: Field, t0: float, t1: float) -> list[Field]:
    """The fields acting on [t0, t1]: the piece at t0 and after every jump inside."""
    times = [t0, *(b for b in field.breakpoints if t0 < b < t1)]
    return [field.piece(t) for t in times]


def _check_splitting(method, field: Field, t0: float, t1: float) -> None:
    """A splitting method needs sums; a sum whose parts project differently needs one."""
    splits = method.splits
    for piece in _pieces(field, t0, t1):
        if splits and not isinstance(piece, Sum):
            raise ValueError(
                f"method {method.name!r} splits a sum of fields into its parts, but the field "
                f"acting here is a {type(piece).__name__}, not a sum. Write the layer as a sum "
                "(attention + mlp, tpde.fields.Sum), or use a method that steps any field: "
                f"{', '.join(n for n, m in METHODS.items() if not m.splits)}."
            )
        if not splits and isinstance(piece, Sum) and piece.projection_needs_split():
            raise ValueError(
                "the parts of this sum project differently (each behind its own norm scheme's "
                "retraction, e.g. two post-LayerNorms): only a splitting method applies each "
                "projection after its own part's step. Use method='lie-trotter' or 'strang' "
                "(tpde.flows.Splitting for another inner method)."
            )


def _start(system: System, field: Field, method, t0: float, t1: float, dt):
    """The method object and first step of a run (each system's rules)."""
    system.reset_run()  # a ready system integrated again starts afresh
    chosen = resolve_method(method if method is not None else system.default_method)
    chosen = chosen.bind(system)  # a method that adapts to the system ("auto") binds it
    _check_jacobian(chosen, system)
    system.check_method(chosen)
    _check_splitting(chosen, field, t0, t1)
    return chosen, system.first_step(t0, t1, dt)


def _arguments(field, mu0, t1):
    """(field or system, mu0, t1) from the two call forms integrate(field, mu0, t1) and
    integrate(system, t1)."""
    if isinstance(field, System):
        if t1 is None and mu0 is not None and not isinstance(mu0, Measure | FiniteVolumes):
            mu0, t1 = None, mu0  # integrate(system, t1)
        if mu0 is not None:
            raise TypeError(
                "a ready System carries its own state: call integrate(system, t1), without "
                f"mu0; received a {type(mu0).__name__} as well."
            )
        if t1 is None:
            raise TypeError("integrate needs the final time t1: integrate(system, t1).")
    elif not isinstance(field, Field):
        raise TypeError(
            f"field must be a tpde field (or a ready System); received {type(field).__name__}."
            " Call integrate(field, mu0, t1) or integrate(system, t1)."
        )
    elif t1 is None and not isinstance(mu0, Measure | FiniteVolumes):
        raise TypeError(
            f"integrate(field, mu0, t1) needs the initial measure mu0; received mu0 = "
            f"{mu0!r} ({type(mu0).__name__}) and no t1. Only a ready System carries its own "
            "state: integrate(system, t1)."
        )
    return field, mu0, t1


def integrate(
    field: Field | System,
    mu0=None,
    t1: float | None = None,
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
    saves: str = "auto",
) -> Trajectory:
    """Integrate the Transformer PDE ∂t μ + div(μ Γ[μ]) = 0 from μ(t0) = mu0 to t1.

        Dispatches on the measure to a system of the one stepping loop
        (:mod:`tpde.flows.loop`, :mod:`tpde.flows.systems`): an :class:`Empirical` moves its
        particles (ẋ_i = Γ[μ_t](x_i), an exact weak solution; with a field that has a
        projection, e.g. tokens on the sphere, the projection follows every step); a
        :class:`Gaussian` follows the field's moment ODE (covariance kept symmetric); a
        :class:`Grid` (d ≤ 2), or :class:`~tpde.flows.systems.FiniteVolumes` to choose the
        scheme and CFL target, moves its cell masses by conservative finite volumes
        (:mod:`tpde.flows.systems.grid`). A batched Gaussian (or batched parameters) integrates a
        whole sweep at once; each element has its own step size, events and status. One
        unbatched state at fixed steps without events (``events=()``: a network's forward)
        is stepped by :mod:`tpde.flows.fixed`, with the loop's rules and results, bit for
        bit, without its per-element bookkeeping.

        Parameters
        ----------
        field : a tpde field, or a ready :class:`~tpde.flows.systems.System` (its field and
            state included; then ``integrate(system, t1)``): a new kind of state needs no
            edit here, and grid options live on the system, ``GridSystem(field, grid,
            scheme="upwind", cfl=0.4)``.
        mu0 : Empirical, Gaussian, Grid (or FiniteVolumes(grid, scheme, cfl)); a table from
            the measure's type to its system (:data:`~tpde.flows.systems.SYSTEMS`,
            :func:`~tpde.flows.systems.register_system`; the most specific type wins).
        t1 : final time (>= t0).
        dt : step size (fixed methods) or first step (adaptive methods, the default). Default
            (t1 − t0)/100. Grids: default None = adaptive CFL steps; an explicit dt that
            breaks the CFL condition raises an error.
        method : "auto" (the default), a name of :data:`~tpde.flows.methods.METHODS`, or a
            method object (a :class:`~tpde.flows.methods.Method`: an
            :class:`~tpde.flows.methods.ExplicitRK` tableau, a
            :class:`~tpde.flows.methods.Rosenbrock` method, a
            :class:`~tpde.flows.methods.Splitting`). The registered methods:

    {METHODS}

            "auto" (:mod:`tpde.flows.methods.auto`) steps dopri5 and tests every accepted step
            for stiffness (Hairer's estimate hλ > 3.25 on 15 accepted steps in a row): a
            Gaussian or particle run then goes on with "rodas4" (``stats["switched_at"]``;
            clouds beyond n·d = 256 by GMRES stage solves), a grid run with dopri5 and a
            warning. A non-smooth flow (errors ∝ h: a hardmax switching its argmax) is not
            stiff: it stops early with "max_steps" and a warning naming the cause
            (:mod:`tpde.flows.smoothness`). Give a fixed method ("rk4", "euler") where
            ``dt`` must be the step itself (a discrete network, a convergence study). Grids
            take the strong-stability-preserving methods only, default "euler" with scheme
            "upwind" and "heun" (SSP-RK2) with "muscl". "rodas4" (systems with a Jacobian:
            Gaussians, particles) is for flows where an explicit step is bounded by
            stability rather than accuracy (fast decaying modes beside slow ones, e.g. the
            rank histograms with V = GᵀG, MATH.md §6): its step follows the accuracy only.
            No Gaussian state outside the PSD cone is returned: an adaptive method's error
            control keeps each covariance within its tolerance (atol + rtol·|Σ|) of the exact
            flow, which stays PSD, and a fixed-step method that leaves the cone stops the
            element before that step with status "stiff" and a warning naming
            method="rodas4" (:class:`~tpde._status.Status`).
            For a sum of fields (:class:`~tpde.fields.Sum`, a whole Transformer layer):
            "lie-trotter" (order 1) and "strang" (order 2) step its parts one after the other
            (:mod:`tpde.flows.methods.splitting`; ``Splitting(kind, inner=...)`` for another
            inner method); Lie–Trotter with Euler at dt = 1 over a layer schedule is the
            discrete network.
        save : None (t0 and t1), an int (that many equally spaced times), a sequence of
            times, or "steps" (every accepted step; the batch then steps in lockstep). How
            the times are saved: ``saves``.
        events : names ("blow_up", "converged", "clustered") or event objects
            (:mod:`tpde.flows.events`: BlowUp, Converged, Clustered).
        rtol, atol : error tolerances of adaptive methods, floored at what the state's dtype
        resolves: rtol ≥ 4·eps and atol ≥ the smallest normal number (float16: rtol ≥
        3.9e-3, bfloat16: 3.1e-2; float32 and float64 leave the defaults as they are); a
        tolerance below the dtype's rounding rejects every step. The values used are in
        ``stats["rtol"]`` and ``stats["atol"]``.
        max_steps : budget of steps (accepted and rejected) per batch element; status
            "max_steps" beyond.
        engine : pairwise engine for particle and grid flows (see :mod:`tpde._engines`).
        saves : how save times are saved (:mod:`tpde.flows.saving`). "landed": every element
            shortens its step to land exactly on each save time, so a saved state is the
            method's own solution there (and no step is longer than the save spacing).
            "interpolated": no step is shortened for a save; the state at a save time s
            inside an accepted step [t, t + h] is the cubic Hermite interpolant of the
            step's ends, y(t + θh) from y₀, f₀, y₁, f₁, error O(h⁴) (Hairer, Nørsett &
            Wanner, *Solving ODEs I*, §II.6), projected like any state; t1 is always landed
            on. "auto" (the default): "interpolated" for a batch whose elements step on
            their own clocks, "landed" for a run stepped in lockstep (one unbatched state,
            a time-dependent field or one with jumps, a splitting method). "interpolated"
            is refused with ``save="steps"`` (no time to interpolate) and with a splitting
            method (its sub-steps have no derivative at the step's ends).

        Returns
        -------
        Trajectory
    """
    field, mu0, t1 = _arguments(field, mu0, t1)
    t0 = check_real(t0, "t0")
    t1 = check_real(t1, "t1", finite=False)
    if not math.isfinite(t1) or t1 < t0:
        raise ValueError(f"t1 must be finite and >= t0 = {t0}; received t1 = {t1}.")
    if t0 < 0:
        raise ValueError(f"t0 must be >= 0 (depth-time); received {t0}.")
    dt = None if dt is None else check_positive(dt, "dt")
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    check_positive_int(max_steps, "max_steps")
    save_times = _save_times(save, t0, t1, max_steps)
    engine = check_engine(engine)
    if isinstance(field, System):
        system, field = field, field.base_field
    else:
        system = build_system(field, mu0, t0, engine)
    chosen, first = _start(system, field, method, t0, t1, dt)
    parsed = parse_events(events)
    for event in parsed:
        if not callable(getattr(system, event.requires, None)):
            raise ValueError(
                f"the {type(event).__name__} event reads the {event.requires} of the state, "
                f"which a {type(system).__name__} does not have: it applies to particle flows "
                "(Empirical measures)."
            )
    synchronous = (
        field.time_dependent
        or bool(field.breakpoints)
        or save_times is None
        or chosen.splits  # sub-steps land on save times, no interpolation
    )
    lockstep = synchronous or system.unbatched()
    interpolate = _interpolate(saves, save_times, chosen, lockstep)
    rtol, atol = _tolerance_floors(rtol, atol, system.initial()[0].dtype)
    if not interpolate and fixed.applies(system, chosen, parsed):  # fixed steps, one state
        steps = fixed.FixedSteps(system, chosen, rtol=rtol, atol=atol, max_steps=max_steps)
        return steps.run(t0, t1, first, save_times)
    loop = Loop(
        system,
        chosen,
        parsed,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        synchronous=synchronous,
        interpolate=interpolate,
    )
    return loop.run(t0, t1, first, save_times)


if integrate.__doc__:  # the list of methods derives from the table (python -OO: no doc)
    integrate.__doc__ = integrate.__doc__.replace(
        "{METHODS}", "\n".join(" " * 8 + line for line in method_listing().splitlines())
    )
