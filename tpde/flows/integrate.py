"""``integrate``: one façade for particle, Gaussian and grid flows of the Transformer PDE."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from tpde._engines import check_engine
from tpde._validation import check_choice, check_positive
from tpde.attention.base import Field
from tpde.flows.eulerian import integrate_grid
from tpde.flows.events import BlowUp, parse_events
from tpde.flows.methods import METHODS
from tpde.flows.systems import GaussianSystem, ParticleSystem
from tpde.flows.trajectory import Trajectory
from tpde.measures import Empirical, Gaussian, Grid

__all__ = ["integrate"]


def _save_times(save, t0: float, t1: float) -> list[float] | None:
    """Requested save times in [t0, t1] (t0 and t1 always included); None = every step."""
    if isinstance(save, str):
        check_choice(save, "save", ("steps",))
        return None
    if save is None:
        times = [t0, t1]
    elif isinstance(save, int) and not isinstance(save, bool):
        if save < 2:
            raise ValueError(f"save as an int is a number of saved times >= 2; received {save}.")
        times = np.linspace(t0, t1, save).tolist()
    else:
        times = [float(s) for s in np.asarray(save, dtype=float).ravel()]
        if any(s < t0 or s > t1 for s in times):
            raise ValueError(f"save times must lie in [t0, t1] = [{t0}, {t1}]; received {times}.")
    return sorted({t0, t1, *times})


def _system(field, mu0, t0: float, engine: str):
    if isinstance(mu0, Empirical):
        field._check_measure(mu0)
        return ParticleSystem(field, mu0, engine)
    if isinstance(mu0, Gaussian):
        field._check_measure(mu0)
        return GaussianSystem(field, mu0, t0)
    raise TypeError(
        "mu0 must be an Empirical (particles), a Gaussian (moment ODE) or a Grid (finite "
        f"volumes); received {type(mu0).__name__}."
    )


def integrate(
    field: Field,
    mu0,
    t1: float,
    *,
    dt: float | None = None,
    method: str | None = None,
    save=None,
    events=("blow_up",),
    t0: float = 0.0,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    max_steps: int = 100_000,
    engine: str = "auto",
    scheme: str | None = None,
    cfl: float | None = None,
) -> Trajectory:
    """Integrate the Transformer PDE ∂t μ + div(μ Γ[μ]) = 0 from μ(t0) = mu0 to t1.

    Dispatches on the measure: an :class:`Empirical` moves its particles
    (ẋ_i = Γ[μ_t](x_i), an exact weak solution); a :class:`Gaussian` follows the field's
    moment ODE (covariance kept symmetric); a :class:`Grid` (d ≤ 2) moves its cell masses
    by conservative finite volumes (:mod:`tpde.flows.eulerian`). A batched Gaussian (or
    batched parameters) integrates a whole sweep at once; each element stops at its own
    event and is frozen.

    Parameters
    ----------
    field : a tpde attention field.
    mu0 : Empirical, Gaussian or Grid.
    t1 : final time (>= t0).
    dt : step size (fixed methods) or first step (dopri5). Default (t1 − t0)/100.
        Grids: default None = adaptive CFL steps; an explicit dt that breaks the CFL
        condition raises an error.
    method : "euler" (order 1), "heun" (2), "rk4" (4) or "dopri5" (adaptive 5(4)).
        Default "rk4"; grids take "euler" or "heun" only (strong-stability preserving),
        default "euler" with scheme="upwind" and "heun" (SSP-RK2) with "muscl".
    save : None (t0 and t1), an int (that many equally spaced times), a sequence of
        times, or "steps" (every accepted step). Steps land exactly on save times.
    events : names ("blow_up", "converged") or :class:`BlowUp` / :class:`Converged`.
    rtol, atol : error tolerances of the adaptive method.
    max_steps : budget of steps (accepted and rejected); status "max_steps" beyond.
    engine : pairwise engine for particle and grid flows (see :mod:`tpde._engines`).
    scheme : grids only: "muscl" (default; minmod-limited, second order) or "upwind"
        (first order).
    cfl : grids only: target Courant number of adaptive steps, in (0, 1]; default 0.5.

    Returns
    -------
    Trajectory
    """
    t0 = float(t0)
    t1 = float(t1)
    if not math.isfinite(t1) or t1 < t0:
        raise ValueError(f"t1 must be finite and >= t0 = {t0}; received t1 = {t1}.")
    if t0 < 0:
        raise ValueError(f"t0 must be >= 0 (depth-time); received {t0}.")
    if isinstance(mu0, Grid):
        return integrate_grid(
            field,
            mu0,
            t0,
            t1,
            dt=None if dt is None else check_positive(dt, "dt"),
            scheme="muscl" if scheme is None else scheme,
            method=method,
            cfl=0.5 if cfl is None else cfl,
            save_times=_save_times(save, t0, t1),
            events=parse_events(events),
            max_steps=max_steps,
            engine=check_engine(engine),
        )
    if scheme is not None or cfl is not None:
        raise ValueError(
            f"scheme and cfl apply to Grid (Eulerian) flows only; received scheme={scheme!r}, "
            f"cfl={cfl!r} for a {type(mu0).__name__}. Remove them, or pass a Grid."
        )
    tableau = METHODS[check_choice("rk4" if method is None else method, "method", tuple(METHODS))]
    dt = (t1 - t0) / 100 if dt is None else check_positive(dt, "dt")
    if dt == 0:  # t1 == t0 and no dt given
        dt = 1.0
    check_positive(rtol, "rtol")
    check_positive(atol, "atol")
    system = _system(field, mu0, t0, check_engine(engine))
    runner = _Runner(system, tableau, parse_events(events), rtol, atol, max_steps)
    return runner.run(t0, t1, dt, _save_times(save, t0, t1))


class _Runner:
    """The stepping loop: step control, events, freezing, saving."""

    def __init__(self, system, tableau, events, rtol, atol, max_steps):
        self.system, self.tableau, self.events = system, tableau, events
        self.rtol, self.atol, self.max_steps = rtol, atol, int(max_steps)
        self.n_rhs = 0
        self.need_derivative = any(not isinstance(e, BlowUp) for e in events)

    def rhs(self, t, state):
        self.n_rhs += 1
        derivative = self.system.rhs(t, state)
        zeros = tuple(map(torch.zeros_like, derivative))
        return self.system.mask(self.active, derivative, zeros)

    def run(self, t0, t1, dt, save_times) -> Trajectory:
        start = time.perf_counter()
        state = self.system.normalize(self.system.initial())
        batch = self.system.batch_of(state)
        device = state[0].device
        self.active = torch.ones(batch, dtype=torch.bool, device=device)
        self.status = np.full(tuple(batch), "completed", dtype=object)
        self.event_time = torch.full(batch, math.nan, dtype=torch.float64)
        times, states = [t0], [state]
        pending = [] if save_times is None else [s for s in save_times if s > t0]
        # Parameters that jump (layer schedules): steps land on the jumps and every stage
        # of a step uses the piece of the field where the step starts.
        jumps = [b for b in getattr(self.system.base_field, "breakpoints", ()) if t0 < b < t1]
        t, h, k1 = t0, dt, None
        steps = rejected = 0
        self._last_accepted = None  # (h, error norm) of the last accepted full step
        while t < t1 and bool(self.active.any()):
            if steps + rejected >= self.max_steps:
                self._stop(self.active, "max_steps", t)
                break
            if self.system.enter(t):
                k1 = None  # a cached derivative belongs to the previous piece
            target = min([pending[0] if pending else t1, *(b for b in jumps if b > t)])
            # Land exactly on the target when the remainder is within rounding of a step.
            landing = target - t <= h * (1 + 1e-9)
            h_try = target - t if landing else h
            new, error, k_new = self.tableau.step(self.rhs, t, state, h_try, k1)
            new = self.system.normalize(new)
            if self.tableau.adaptive:
                accepted, h = self._control(state, new, error, h_try, h, t)
                if not accepted:
                    rejected += 1
                    continue
            t_new = target if landing else t + h_try
            state, k1 = self._after_step(state, new, k_new, t, t_new)
            t = t_new
            steps += 1
            if save_times is None or (pending and landing and t == pending[0]):
                times.append(t)
                states.append(state)
                if pending:
                    pending.pop(0)
        if times[-1] != t:
            times.append(t)
            states.append(state)
        stats = {
            "n_steps": steps,
            "n_rejected": rejected,
            "n_rhs": self.n_rhs,
            "last_dt": h,
            "wall_time_s": time.perf_counter() - start,
            "method": self.tableau.name,
        }
        if self.system.inner_failure is not None:
            stats["inner_failure"] = self.system.inner_failure
        return Trajectory(
            times=torch.tensor(times, dtype=torch.float64),
            measures=[self.system.measure(s) for s in states],
            status=self.status.item() if self.status.ndim == 0 else self.status.astype(str),
            event_time=self.event_time,
            stats=stats,
        )

    def _stop(self, which: torch.Tensor, status: str, t: float) -> None:
        which = which & self.active
        if bool(which.any()):
            self.status[which.cpu().numpy()] = status
            self.event_time[which.cpu()] = t
            self.active = self.active & ~which

    def _predictive_factor(self, h_try: float, worst: float) -> float:
        """Gustafsson's predictive step factor, from the last two accepted steps.

        0.9 · err⁻¹ᐟ⁵ · (h_n / h_{n−1}) · (err_{n−1} / err_n)¹ᐟ⁵ (Hairer & Wanner, *Solving
        ODEs II*, §IV.8, eq. 8.21; used as min with the standard factor, as in RADAU5).
        Where the error grows step after step (a batch element approaching its blow-up)
        the standard factor proposes a step that is rejected every other time; this one
        follows the trend.
        """
        if self._last_accepted is None or worst <= 0:
            return 5.0
        h_prev, err_prev = self._last_accepted
        if err_prev <= 0:
            return 5.0
        factor = 0.9 * worst ** (-0.2) * (h_try / h_prev) * (err_prev / worst) ** 0.2
        return min(5.0, max(0.2, factor))

    def _control(self, state, new, error, h_try, h, t):
        """Dormand–Prince step control: accept if the error norm of every active element ≤ 1."""
        norm = self.system.error_norm(error, state, new, self.rtol, self.atol)
        norm = torch.where(torch.isfinite(norm), norm, math.inf)
        norm = torch.where(self.active, norm, 0.0)
        worst = float(norm.max())
        factor = 0.2 if not math.isfinite(worst) else min(5.0, max(0.2, 0.9 * worst ** (-0.2)))
        if worst <= 1.0:
            if h_try < h:  # a step shortened to land on a save time: keep h
                return True, max(h, h_try * factor)
            factor = min(factor, self._predictive_factor(h_try, worst))
            self._last_accepted = (h_try, worst)
            return True, h_try * factor
        h_min = 1e-12 * max(1.0, abs(t))
        if h_try * factor < h_min:
            # The step collapsed: the elements that refuse every step blow up here.
            self._stop(norm > 1.0, "blow_up", t)
            return False, h_try
        return False, h_try * factor

    def _after_step(self, state, new, k_new, t, t_new):
        """Freeze stopped elements, stop on overflow and events; return (state, next k1)."""
        system = self.system
        self._stop(self.active & ~system.finite(new), "blow_up", t)
        if system.inner_failure is not None:  # the step used an unconverged inner solve
            self._stop(self.active, "not_converged", t)
        new = system.mask(self.active, new, state)
        derivative = k_new
        if self.need_derivative and derivative is None:
            derivative = self.rhs(t_new, new)
        for event in self.events:
            self._stop(event.check(system, new, derivative), event.name, t_new)
        if derivative is not None:
            # Elements stopped in this step must not move in the next one.
            derivative = system.mask(
                self.active, derivative, tuple(map(torch.zeros_like, derivative))
            )
        return new, derivative
