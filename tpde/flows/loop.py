r"""The one stepping loop: step control, events, freezing and saving, for every system.

(One unbatched state at fixed steps without events — a network's forward — is stepped by
the fixed-step path, :mod:`tpde.flows.fixed`, with the rules written once in
:mod:`tpde.flows.rules` that this loop applies too: where a step lands, the statuses, a
step's finiteness and domain checks, the unsteppable start, the trajectory.)

Particles, Gaussians, grids (and any other :class:`~tpde.flows.systems.System`) are all
stepped here, by the same method objects (:mod:`tpde.flows.methods`).

**Per-element step control.** A batched run (a batch of Gaussians, of particle systems)
keeps for each element its own time t_b, step size h_b, accept/reject decision, step
counts, event and status, vectorised over the batch with masks (no Python loop over
elements). An adaptive method accepts element b when its own error norm is ≤ 1 and
updates h_b from its own error (the standard factor 0.9·err^{-1/(q+1)}, q the order of the
method's embedded solution — 1/5 for dopri5, 1/4 for rodas4 — capped by Gustafsson's
predictive factor; Hairer & Wanner, *Solving ODEs II*, §IV.8). So a batch whose elements
approach singularities at different times costs about what its slowest element costs
alone. Save times are common to the batch, saved by one of two policies
(:mod:`tpde.flows.saving`; ``integrate(..., saves=...)`` picks it): *interpolated* (the
default of a per-element run), every element steps freely and its state at a save time is
the cubic Hermite interpolant of its own step (O(h⁴)); *landed* (the default of a
synchronous run), every element lands exactly on each save time (its step is shortened to
reach it) and waits there until the others arrive, so the saved state is the method's own
solution there. An element stopped by an event is frozen at the state where it stopped.

**Synchronous runs.** Where elements cannot have their own clocks — a field whose
parameters depend on time (``field.time_dependent``: the right-hand side is evaluated at
one time for the whole batch), ``save="steps"`` (one saved time per step), or an
unbatched run — all elements step together: a step is accepted when every moving
element's error norm is ≤ 1, as in a classical integrator.

**Events and statuses.** After every accepted step: a non-finite state stops its element
with "blow_up" (the state before the step is kept), an inner solve that missed its
tolerance stops the moving elements with "not_converged" (same), then each event object
is checked on the new state. A step whose new state leaves the system's domain (a
covariance outside the PSD cone, a token the projection sent to the origin:
``System.degenerate``) is rejected: an adaptive method retries a quarter step, a
fixed-step method stops the element there with "stiff" or "lost_token" (and a warning
naming the fix). An adaptive step that collapses below max(1e-12·|t|, 1e-300) (relative to
the clock only: a state whose own time scale is 1e-20 is stepped, not called a blow-up)
stops the elements that refuse it with "blow_up", and so does a step that the system's own
controller (a grid's CFL condition) cuts below 1e-12·max(1, |t|); an element that used up
``max_steps`` attempts (accepted and rejected) stops with "max_steps"; so does, earlier and
with a warning, an element of an adaptive run whose steps would need more than the budget
it has left to reach t1 ((t1 − t)/h > attempts left) for 100 accepted steps in a row
while its step stayed within a factor 10, once a tenth of its budget is spent (a flow
that is not smooth at the scale of the state, or stiff without a stiff method; a step that
keeps shrinking approaches a singularity, judged by its collapse). A *non-smooth* element
(its rejected steps' errors fall like h¹ instead of h^{q+1}, :mod:`tpde.flows.smoothness`:
e.g. softmax scores of 1e12 that switch their argmax, where every step must resolve a
switch) has no transient exemption: it stops, with the warning naming that cause, as
soon as its steps would need more than a tenth of max_steps to reach t1 for 100 accepted
steps in a row (``stats["nonsmooth_at"]``: when the first element was found non-smooth).
An element whose velocity is not finite at its
initial state stops there at once with "blow_up" and a
warning (no step can start from it).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import torch

from tpde.flows.rules import (
    RHS,
    Outcome,
    exhausted,
    finite_velocity,
    lands,
    next_target,
    step_failures,
    trajectory,
    unpack,
    warn_left_domain,
    warn_unsteppable,
)
from tpde.flows.saving import DenseSaves, LandingSaves, extreme
from tpde.flows.smoothness import ObservedOrder
from tpde.flows.status import Status
from tpde.flows.trajectory import Trajectory

__all__ = ["Loop"]

#: Smallest step, relative to |t|, before an adaptive step counts as collapsed.
COLLAPSE = 1e-12
#: The floor of a collapsed step near t = 0 (a relative floor vanishes there).
TINY_STEP = 1e-300
#: Accepted steps in a row after which an element whose budget cannot reach t1 at its
#: current step size stops early with "max_steps" (the work bound, module notes).
HOPELESS_STEPS = 100
#: ... and only once this share of max_steps is spent: a transient at the start (a fast
# stretch before the flow relaxes, e.g. the rank histograms' first time unit of 8100) must
# not be judged by its early steps.
HOPELESS_AFTER = 0.1


def _collapse_floor(t: np.ndarray) -> np.ndarray:
    """The step below which an adaptive step has collapsed: 1e-12·|t| (the clock cannot
    resolve less), at least 1e-300. Relative to |t|, not max(1, |t|): a state whose time
    scale is short from the start (a covariance of 1e20 contracting at rate 1e20, its first
    steps ~1e-20) is stepped, not reported as a blow-up at t0."""
    return np.maximum(COLLAPSE * np.abs(t), TINY_STEP)


class Loop:
    """Steps one system with one method to t1 (module notes).

    Parameters
    ----------
    system : a :class:`~tpde.flows.systems.System`.
    method : a :class:`~tpde.flows.methods.Method` (its traits: ``step``, ``order``,
        ``adaptive``, ``splits``, ``uses_k1``, ``error_exponent``, ``observe``,
        ``run_stats``).
    events : tuple of event objects (:mod:`tpde.flows.events`).
    rtol, atol : tolerances of adaptive methods.
    max_steps : attempts (accepted and rejected steps) allowed per element.
    synchronous : step every element with one clock (module notes).
    interpolate : fill the save times by interpolation (:class:`DenseSaves`) instead of
        landing on them (:class:`LandingSaves`); never with ``save_times=None``.
    """

    def __init__(self, system, method, events, *, rtol, atol, max_steps, synchronous, interpolate):
        self.system, self.method, self.events = system, method, events
        self.rtol, self.atol, self.max_steps = rtol, atol, int(max_steps)
        self.synchronous, self.interpolate = synchronous, interpolate
        self.need_derivative = any(e.requires == "rhs_norm" for e in events)
        # The method's traits, read once (tpde.flows.methods.Method declares them): a
        # splitting method projects after each part's sub-step itself, and does not use
        # the derivative at the start of a step; a method that adapts to its run ("auto")
        # hears every step's decision.
        self.splits, self.uses_k1 = method.splits, method.uses_k1
        self.observe = method.observe

    # ------------------------------------------------------------------ bookkeeping
    def _stop(self, which: np.ndarray, status: Status, times) -> None:
        """Stop the active elements of ``which`` with ``status`` at ``times``."""
        self.outcome.stop(which, status, times)

    @property
    def active(self) -> np.ndarray:
        """The elements still moving (:class:`~tpde.flows.rules.Outcome`)."""
        return self.outcome.active

    def _device_mask(self, mask: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(mask, device=like.device)

    def _active_mask(self, like: torch.Tensor) -> torch.Tensor | None:
        """The active elements for the right-hand side; None when all are (no masking)."""
        return None if self.active.all() else self._device_mask(self.active, like)

    def _steps_for(self, h_try: np.ndarray, like: torch.Tensor):
        """The step of each element as the method wants it: a float (unbatched, or one step
        shared by every element: fixed steps; no broadcast product), or one tensor per part."""
        if not self.batched:
            return float(h_try)
        first = h_try.flat[0]
        if (h_try == first).all():
            return float(first)
        step = torch.as_tensor(h_try, dtype=like.dtype, device=like.device)
        return self.system.per_part(step)

    # ------------------------------------------------------------------ the loop
    def run(self, t0: float, t1: float, dt: float, save_times) -> Trajectory:
        """Integrate from t0 to t1 with first (or fixed) step dt; save at ``save_times``
        (a sorted list including t0 and t1), or at every step when it is None."""
        start = time.perf_counter()
        system, method = self.system, self.method
        state = system.initial()  # projected steps start from the state as given
        batch = tuple(system.batch_of(state))
        self.batched = batch != ()
        self.synchronous = self.synchronous or not self.batched
        rhs = RHS(system, self.batched)
        self.outcome = Outcome(batch)
        self.hopeless = np.zeros(batch, dtype=np.int64)
        self.hopeless_h = np.full(batch, math.inf)  # the step when the streak began
        self.smoothness = ObservedOrder(batch)
        self.switch_window = {  # a non-smooth element's progress since its window began
            "t": np.full(batch, math.nan),
            "used": np.zeros(batch, dtype=np.int64),
            "accepted": np.zeros(batch, dtype=np.int64),
        }
        t = np.full(batch, float(t0))
        h = np.full(batch, float(dt))
        steps = np.zeros(batch, dtype=np.int64)
        rejected = np.zeros(batch, dtype=np.int64)
        self.previous = (np.full(batch, math.nan), np.full(batch, math.nan))  # (h, err)
        if self.interpolate:
            saves = DenseSaves(save_times, t0, state, system.part_dims, t1)
        else:
            saves = LandingSaves(save_times, t0, state)
        jumps = [b for b in system.base_field.breakpoints if t0 < b < t1]
        k1, iterations = None, 0
        if self.need_derivative:
            rhs.active = self._active_mask(state[0])
            k1 = rhs(float(t0), state)
            self._unsteppable(k1, self.active.copy(), t)  # the loop's own check is skipped
        self.memory = [event.start(system, state, k1) for event in self.events]
        while True:
            target = saves.target(t1)
            moving = self.active & (t < target)
            if self.synchronous and moving.any():
                clock = extreme(t, moving, np.max)
                target = next_target(target, jumps, clock)
                moving = self.active & (t < target)
            if not moving.any():
                # Every active element reached the target; with none active (all stopped
                # before it, e.g. by an event) there is nothing to save there.
                if self.active.any() and saves.at_target(target, state):
                    continue  # a save time reached by every element
                if not self.active.any() or target >= t1:
                    break
                continue  # a jump reached by every element: go on
            over = moving & exhausted(steps + rejected, self.max_steps)
            if over.any():
                self._stop(over, Status.MAX_STEPS, t)
                continue
            clock = extreme(t, moving, np.min)
            if system.enter(clock):
                k1 = None  # a cached derivative belongs to the previous piece
            rhs.active = self._active_mask(state[0])
            if k1 is None and self.uses_k1:
                k1 = rhs(clock, state)
                if iterations == 0 and self._unsteppable(k1, moving, t):
                    continue
            h_prop = np.asarray(system.propose_step(clock, state, h), dtype=float)
            # A step the system itself cut below 1e-12·max(1, |t|) (a grid's CFL step at a
            # velocity that overflows the box) is a blow-up, as a collapsed adaptive step is.
            if h_prop is not h:  # (the step as proposed, h itself: nothing was cut)
                cut = moving & (h_prop < h) & (h_prop < COLLAPSE * np.maximum(1.0, np.abs(t)))
                if cut.any():
                    self._stop(cut, Status.BLOW_UP, t)
                    continue
            remaining = target - t
            landing = moving & lands(remaining, h_prop)
            h_try = np.where(moving, np.where(landing, remaining, h_prop), 0.0)
            h_clock = extreme(h_try, moving, np.max) if self.synchronous else 0.0
            new, error, k_new = unpack(
                method,
                method.step(
                    rhs, clock, state, self._steps_for(h_try, state[0]), k1, h_clock=h_clock
                ),
                state,
            )
            if not self.splits:
                new = system.project(new)
            if method.adaptive:
                norm = system.error_norm(error, state, new, self.rtol, self.atol)
                accept, h_next = self._control(norm, moving, h_try, h_prop, t)
            else:
                accept, h_next = moving.copy(), np.where(moving, h_prop, h)
            ok, retry = system.check_step(float(h_try.max()) if not self.batched else h_try)
            if not ok:
                accept, h_next = np.zeros_like(accept), np.where(moving, retry, h_next)
            left = system.degenerate(state, new, method.adaptive)
            if left is not None:
                accept, h_next = self._left_domain(left, accept, h_next, moving, h_try, t)
            self.observe(accept, t)  # "auto" counts stiff steps
            rejected += moving & ~accept
            iterations += 1
            h = h_next
            if not accept.any():
                continue
            t_new = np.where(landing, target, t + h_try)
            old, f_old = state, k1
            state, k1, advanced = self._after_step(
                rhs, state, new, k_new, k1, accept, t, t_new, saves
            )
            saves.after_step(t, t_new, old, state, f_old, k1, advanced, system)
            t = np.where(advanced, t_new, t)
            steps += accept
            system.record_step(float(h_try.max()), state)
            if method.adaptive:
                self._work_bound(accept, t, h, t1, steps + rejected)
        t_end = float(t.max())
        times, states = saves.finish(t_end, state, t, system)
        return self._trajectory(times, states, steps, rejected, iterations, rhs, h, start)

    def _work_bound(self, accept, t, h, t1: float, used) -> None:
        """Stop, with "max_steps" and a warning, the elements whose budget has been unable
        to reach t1 at their step size for HOPELESS_STEPS accepted steps in a row, once
        HOPELESS_AFTER of the budget is spent; a non-smooth element: :meth:`_switch_bound`."""
        self._switch_bound(accept, t, t1, used)
        left = self.max_steps - used
        with np.errstate(divide="ignore", invalid="ignore"):
            hopeless = (t1 - t) / h > left
        # A step that keeps shrinking (by 10× since the streak began) approaches a
        # singularity: the collapse of the step, not this bound, judges it ("blow_up"); a
        # step that grows tenfold makes the prediction stale.
        moved = (h < self.hopeless_h / 10) | (h > self.hopeless_h * 10)
        restart = accept & (~hopeless | moved)
        self.hopeless_h = np.where(restart, h, self.hopeless_h)
        counted = hopeless.astype(np.int64)
        self.hopeless = np.where(
            restart, counted, np.where(accept, self.hopeless + 1, self.hopeless)
        )
        spent = used >= HOPELESS_AFTER * self.max_steps
        stop = self.active & (self.hopeless >= HOPELESS_STEPS) & spent
        if not stop.any():
            return
        self._stop(stop, Status.MAX_STEPS, t)
        warnings.warn(
            f"{int(stop.sum())} element(s) stopped at t = {float(np.min(t[stop])):.6g} with "
            f"status 'max_steps': at step sizes near {float(np.min(h[stop])):.3g} they would "
            f"need more than the {int(np.max(left[stop]))} steps left of max_steps = "
            f"{self.max_steps} to reach t1 = {t1:.6g} (for {HOPELESS_STEPS} steps in a row). "
            "The flow is not smooth at the scale of the state (or stiff without a stiff "
            "method). Fix: rescale the state, raise max_steps, or use a fixed-step method.",
            RuntimeWarning,
            stacklevel=3,
        )

    def _switch_bound(self, accept, t, t1: float, used) -> None:
        """Stop, with "max_steps" and a warning naming the cause, the non-smooth elements
        (:mod:`tpde.flows.smoothness`) whose progress over their last HOPELESS_STEPS accepted
        steps, attempts included, projects more than HOPELESS_AFTER · max_steps attempts to
        reach t1 (no transient exemption: the steps are set by jumps, not by a transient)."""
        window = self.switch_window
        nonsmooth = self.smoothness.nonsmooth & self.active
        fresh = nonsmooth & np.isnan(window["t"])
        window["t"] = np.where(fresh, t, window["t"])
        window["used"] = np.where(fresh, used, window["used"])
        window["accepted"] = np.where(nonsmooth & ~fresh, window["accepted"] + accept, 0)
        full = nonsmooth & (window["accepted"] >= HOPELESS_STEPS)
        if not full.any():
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            need = (t1 - t) * (used - window["used"]) / (t - window["t"])
        stop = full & (need > HOPELESS_AFTER * self.max_steps)
        window["t"] = np.where(full, t, window["t"])  # a new window
        window["used"] = np.where(full, used, window["used"])
        window["accepted"] = np.where(full, 0, window["accepted"])
        if stop.any():
            self._stop(stop, Status.MAX_STEPS, t)
            self._warn_nonsmooth(stop, t, need, t1)

    def _warn_nonsmooth(self, which, t, need, t1: float) -> None:
        """The warning of a non-smooth element's early stop (its cause and the fixes)."""
        order = self.smoothness.order[which]
        warnings.warn(
            f"{int(which.sum())} element(s) stopped at t = {float(np.min(t[which])):.6g} with "
            "status 'max_steps': the flow is not smooth at the scale of its steps (its "
            f"rejected steps' errors fall like h^{float(np.nanmax(order)):.2g} instead of "
            f"h^{1 / self.exponent:.2g}: the velocity jumps inside the steps, e.g. softmax "
            "scores so large that attention is a hardmax switching its argmax), so every "
            "step must resolve a jump: at its progress over the last "
            f"{HOPELESS_STEPS} steps, reaching t1 = {t1:.6g} would take about "
            f"{float(np.max(need[which])):.3g} more steps, more than {HOPELESS_AFTER:g} × "
            f"max_steps = {self.max_steps}. A stiff method "
            "does not help (this is not stiffness). Fix: rescale the tokens (scores of order "
            "1–100), use a fixed-step method (method='rk4', dt=...) that steps across the "
            "jumps at first order, or raise max_steps.",
            RuntimeWarning,
            stacklevel=4,
        )

    def _unsteppable(self, k1, moving, t) -> bool:
        """Stop, with status "blow_up" and a warning naming the cause, the elements whose
        velocity is not finite at the initial state (a covariance of 1e160 whose moment ODE
        squares it past float64's range, a field returning NaN): no step can start from
        there. Returns whether any element stopped."""
        bad = moving & ~finite_velocity(k1, self.system.part_dims)
        if not bad.any():
            return False
        self._stop(bad, Status.BLOW_UP, t)
        warn_unsteppable(int(bad.sum()), float(np.min(t[bad])), stacklevel=3)
        return True

    def _left_domain(self, left, accept, h_next, moving, h_try, t):
        """Reject the steps that left the state's domain (``System.degenerate``): an
        adaptive method retries a quarter step, and an element whose step collapses there
        stops with "blow_up" (a finite-time singularity: every step, however short, leaves
        the domain); a fixed-step method stops the element there, with the system's domain
        status ("stiff", "lost_token") and a warning naming the fix."""
        left = np.broadcast_to(left.detach().cpu().numpy(), moving.shape) & moving
        if not left.any():
            return accept, h_next
        status = self.system.domain_status
        if self.method.adaptive:
            shorter = h_try * 0.25
            collapsed = left & (shorter < _collapse_floor(t))
            self._stop(collapsed, Status.BLOW_UP, t)
            everyone = self.synchronous
            accept = np.zeros_like(accept) if everyone else accept & ~left
            h_next = np.where(moving if everyone else left, shorter, h_next)
            return accept & self.active, h_next
        self._stop(left, status, t)
        warn_left_domain(int(left.sum()), float(np.max(t[left])), status, stacklevel=4)
        return accept & ~left & self.active, h_next

    def _after_step(self, rhs, state, new, k_new, k1, accept, t, t_new, saves):
        """Freeze, stop on overflow, inner failure and events.

        Returns (state, next k1, advanced): the elements in ``advanced`` now hold their
        state at t_new (an element stopped by overflow or an inner failure keeps its state
        at t; one stopped by an event is at t_new, where the event fired).
        """
        system = self.system
        blown, unconverged = step_failures(system, new)
        self._stop(accept & blown, Status.BLOW_UP, t)
        if unconverged:  # the step used an unconverged inner solve
            self._stop(accept, Status.NOT_CONVERGED, t)
        advanced = accept & self.active
        everyone = bool(advanced.all())  # no element to hold back: no masking
        if self.batched and not everyone:
            new = system.mask(self._device_mask(advanced, state[0]), new, state)
        elif not self.batched and not advanced:
            new = state
        if k_new is not None:  # FSAL: the derivative at the new state, valid where it moved
            if self.batched and k1 is not None and not everyone:
                k_new = system.mask(self._device_mask(advanced, state[0]), k_new, k1)
            elif not self.batched and not advanced:
                k_new = k1
        elif advanced.any() and (
            self.need_derivative or saves.needs_derivative(t, t_new, advanced)
        ):
            rhs.active = self._active_mask(state[0])
            k_new = rhs(extreme(t_new, advanced, np.max), new)  # at every element's own state
        for i, event in enumerate(self.events):
            check = advanced & self.active
            if check.any():
                fired, memory = event.check(system, new, k_new, self.memory[i])
                if memory is not None:  # elements that did not step keep theirs
                    keep = torch.as_tensor(check, device=memory.device)
                    self.memory[i] = torch.where(keep, memory, self.memory[i])
                self._stop(check & fired.detach().cpu().numpy(), Status.parse(event.name), t_new)
        return new, k_new, advanced

    @property
    def exponent(self) -> float:
        """Step-size exponent 1/(q + 1), q the order of the embedded solution of the method
        stepping now (dopri5: 1/5; "auto" may switch to rodas4: 1/4)."""
        return float(self.method.error_exponent)

    def _control(self, norm: torch.Tensor, moving, h_try, h, t):
        """Accept where the error norm is ≤ 1 (every moving element's in a synchronous run);
        the next step from the standard and the predictive factors (module notes)."""
        norm = norm.detach().double().cpu().numpy()  # bfloat16 has no numpy type
        norm = np.where(np.isfinite(norm), norm, math.inf)
        norm = np.where(moving, norm, 0.0)
        decision = np.full_like(norm, norm.max()) if self.synchronous else norm
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            factor = np.clip(0.9 * decision ** (-self.exponent), 0.2, 5.0)
        factor = np.where(np.isfinite(decision), factor, 0.2)
        accept = moving & (decision <= 1.0)
        self.smoothness.update(t, h_try, norm, moving, accept, self.exponent)
        shortened = h_try < h  # shortened to land on a save time: keep h
        prev_h, prev_err = self.previous
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            e = self.exponent
            predictive = 0.9 * decision ** (-e) * (h_try / prev_h) * (prev_err / decision) ** e
        usable = np.isfinite(predictive) & (decision > 0) & (prev_err > 0)
        predictive = np.where(usable, np.clip(predictive, 0.2, 5.0), 5.0)
        grown = h_try * np.minimum(factor, predictive)
        h_accept = np.where(shortened, np.maximum(h, h_try * factor), grown)
        update = accept & ~shortened
        self.previous = (np.where(update, h_try, prev_h), np.where(update, decision, prev_err))
        h_reject = h_try * factor
        collapsed = moving & ~accept & (h_reject < _collapse_floor(t))
        # The step collapsed: the elements that refuse every step blow up here.
        self._stop(collapsed & (norm > 1.0), Status.BLOW_UP, t)
        h_reject = np.where(collapsed, h_try, h_reject)
        return accept & self.active, np.where(accept, h_accept, np.where(moving, h_reject, h))

    def _trajectory(self, times, states, steps, rejected, iterations, rhs, h, start):
        counts = {
            "n_steps": int(steps.sum()),
            "n_rejected": int(rejected.sum()),
            "n_iterations": iterations,
            "n_rhs": rhs.calls,
            "steps": steps,
            "rejected": rejected,
            "last_dt": h,
            "synchronous": self.synchronous,
            "rtol": self.rtol,
            "atol": self.atol,
            "nonsmooth_at": self.smoothness.detected_at,
            "nonsmooth": self.smoothness.nonsmooth,
        }
        return trajectory(self.system, self.method, times, states, self.outcome, counts, start)
