r"""The fixed-step path: one unbatched state stepped at fixed steps, without events.

This is the run of a pretrained model's forward pass (``integrate(model.schedule, mu, L,
dt=1, method="lie-trotter", events=())``: a Lie–Trotter step of size 1 per layer is the
network's block), and of any fixed-step run of one state without events. The one stepping
loop (:mod:`tpde.flows.loop`) steps it too, but keeps per-element numpy arrays (times,
steps, masks, step-size control, saves by element) that one state at fixed steps does not
need: on a model of width 16 they cost as much as the model itself (issue 34). Here the
clock is a float and each step is the loop's, with the same calls:

- the clock stops at every save time and at every jump of a piecewise field (a layer
  boundary), each step landing on it as in the loop (:func:`~tpde.flows.rules.lands`,
  :func:`~tpde.flows.rules.next_target`);
- the step is ``method.step`` through the same counting right-hand side
  (:class:`~tpde.flows.rules.RHS`), checked by :func:`~tpde.flows.rules.unpack`, then the
  system's projection (unless the method projects after each part itself);
- a method that takes the derivative at the step's start computes it first, and at the
  first step a non-finite one stops the run with "blow_up" (a warning says why);
- a new state that leaves the system's domain stops the run with its domain status
  (a warning names the fix), one that is not finite with "blow_up" and one that used an
  unconverged inner solve with "not_converged" (the state before the step is kept:
  :func:`~tpde.flows.rules.step_failures`); ``max_steps`` steps stop it with
  "max_steps";
- saves land on their times (:class:`~tpde.flows.saving.LandingSaves`); the trajectory and
  its statistics are the loop's (:func:`~tpde.flows.rules.trajectory`).

So the states, times, statuses, messages and statistics (but the wall time) are those of
the loop, bit for bit: ``tests/flows/test_fixed.py`` runs both on the same cases, and
``tests/pretrained/test_forward_path.py`` every registered family's tiny model.
:func:`applies` says when :func:`tpde.flows.integrate` takes this path; what it excludes
(a batch, events, an adaptive method, a method that observes its steps, a system with
its own step control such as a grid's CFL condition) goes through the loop.
"""

from __future__ import annotations

import time

import numpy as np

from tpde.flows.methods import Method
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
from tpde.flows.saving import LandingSaves
from tpde.flows.status import Status
from tpde.flows.systems import System
from tpde.flows.trajectory import Trajectory

__all__ = ["FixedSteps", "applies"]


def applies(system: System, method: Method, events) -> bool:
    """Whether a run of ``system`` by ``method`` with ``events`` takes the fixed-step path:
    a fixed-step method that does not observe its steps ("auto" does), no events, one
    unbatched state, and a system without a step control of its own (``propose_step``,
    ``check_step``: a grid's CFL condition)."""
    if method.adaptive or events:
        return False
    if getattr(method.observe, "__func__", None) is not Method.observe:
        return False
    kind = type(system)
    if kind.propose_step is not System.propose_step or kind.check_step is not System.check_step:
        return False
    return system.unbatched()


class FixedSteps:
    """Steps one unbatched state at fixed steps to t1 (module notes).

    Parameters
    ----------
    system : a :class:`~tpde.flows.systems.System` (an unbatched state).
    method : a fixed-step :class:`~tpde.flows.methods.Method`.
    rtol, atol : recorded in the statistics (a fixed step has no error control).
    max_steps : steps allowed.
    """

    def __init__(self, system, method, *, rtol: float, atol: float, max_steps: int):
        self.system, self.method = system, method
        self.rtol, self.atol, self.max_steps = rtol, atol, int(max_steps)

    def run(self, t0: float, t1: float, dt: float, save_times) -> Trajectory:
        """Integrate from t0 to t1 at step dt (the last step before each save time or jump
        shortened to land on it); save at ``save_times`` (a sorted list including t0 and
        t1), or at every step when it is None."""
        start = time.perf_counter()
        system, method = self.system, self.method
        state = system.initial()
        self.outcome = Outcome(())
        rhs = RHS(system, batched=False)
        saves = LandingSaves(save_times, t0, state)
        jumps = [b for b in system.base_field.breakpoints if t0 < b < t1]
        t, h = float(t0), float(dt)
        self.steps = self.rejected = self.iterations = 0
        while True:
            active = bool(self.outcome.active)
            target = saves.target(t1)
            if active and t < target:
                target = next_target(target, jumps, t)
            if not (active and t < target):
                if active and saves.at_target(target, state):
                    continue  # a save time reached
                if not active or target >= t1:
                    break
                continue  # a jump reached: go on
            if exhausted(self.steps + self.rejected, self.max_steps):
                self.outcome.stop(np.True_, Status.MAX_STEPS, t)
                continue
            system.enter(t)
            k1 = None
            if method.uses_k1:
                k1 = rhs(t, state)
                if self.iterations == 0 and self._unsteppable(k1, t):
                    continue
            remaining = target - t
            landing = lands(remaining, h)
            h_try = remaining if landing else h
            new = self._step(rhs, t, state, h_try, k1)
            self.iterations += 1
            if new is None:  # left the domain: stopped
                continue
            t_new = target if landing else t + h_try
            state, t = self._after_step(state, new, t, t_new, saves)
            self.steps += 1
            system.record_step(h_try, state)
        times, states = saves.finish(t, state, np.float64(t), system)
        counts = {
            "n_steps": self.steps,
            "n_rejected": self.rejected,
            "n_iterations": self.iterations,
            "n_rhs": rhs.calls,
            "steps": np.array(self.steps, dtype=np.int64),
            "rejected": np.array(self.rejected, dtype=np.int64),
            "last_dt": np.array(h),
            "synchronous": True,
            "rtol": self.rtol,
            "atol": self.atol,
        }
        # A fixed step is never judged non-smooth (ObservedOrder watches rejected steps).
        counts.update(nonsmooth_at=None, nonsmooth=np.zeros((), dtype=bool))
        return trajectory(system, method, times, states, self.outcome, counts, start)

    def _unsteppable(self, k1, t: float) -> bool:
        """Stop with "blow_up" and a warning if the velocity at the initial state is not
        finite (:func:`~tpde.flows.rules.finite_velocity`); returns whether it stopped."""
        if finite_velocity(k1, self.system.part_dims):
            return False
        self.outcome.stop(np.True_, Status.BLOW_UP, t)
        warn_unsteppable(1, t, stacklevel=3)
        return True

    def _step(self, rhs, t: float, state, h: float, k1):
        """The method's new state at t + h, projected; None where it left the system's
        domain (the run then stops with the domain status and a warning)."""
        system, method = self.system, self.method
        new = unpack(method, method.step(rhs, t, state, h, k1, h_clock=h), state)[0]
        if not method.splits:
            new = system.project(new)
        left = system.degenerate(state, new, False)
        if left is None or not bool(left.cpu()):
            return new
        status = system.domain_status
        self.outcome.stop(np.True_, status, t)
        warn_left_domain(1, t, status, stacklevel=4)
        self.rejected += 1
        return None

    def _after_step(self, state, new, t: float, t_new: float, saves):
        """(state, time) after a step: the new ones, or the old ones where the new state
        is not finite or used an unconverged inner solve (the run then stops)."""
        blown, unconverged = step_failures(self.system, new)
        if blown:
            self.outcome.stop(np.True_, Status.BLOW_UP, t)
        elif unconverged:
            self.outcome.stop(np.True_, Status.NOT_CONVERGED, t)
        advanced = self.outcome.active
        if not advanced:
            new = state
        saves.after_step(t, np.float64(t_new), state, new, None, None, advanced, self.system)
        return new, (t_new if advanced else t)
