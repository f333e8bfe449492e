r"""The rules of a run that both steppers apply: the one stepping loop
(:mod:`tpde.flows.loop`, any run) and the fixed-step path (:mod:`tpde.flows.fixed`, one
unbatched state at fixed steps, no events: the network forward of a pretrained model).

Each rule is written once, here, and called by both, so the two cannot drift apart:

- where a step lands (:func:`lands`, :func:`next_target`): a step within a factor
  1 + 1e-9 of the distance left to the next save time or jump of a piecewise field is
  shortened (or stretched) to land on it exactly;
- the statuses (:class:`Outcome`): the first reason an element stops is kept, with the
  time of the state it holds, and the element stops moving;
- a step's verdict (:func:`step_failures`): a non-finite new state stops its element with
  "blow_up" and one computed with an unconverged inner solve with "not_converged", the
  state before the step kept either way;
- a velocity that is not finite at the initial state (:func:`finite_velocity`,
  :func:`warn_unsteppable`) stops the element at t0 with "blow_up";
- a fixed step that leaves the state's domain stops the element with the system's domain
  status (:func:`warn_left_domain`);
- an element that used up ``max_steps`` attempts stops with "max_steps" (:func:`exhausted`);
- the method's step is checked against the state (:func:`unpack`), and evaluated through
  one right-hand side that counts its calls (:class:`RHS`);
- the trajectory and its statistics (:func:`trajectory`).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import torch

from tpde.flows.status import Status, status_array
from tpde.flows.trajectory import Trajectory

__all__ = [
    "LANDING",
    "RHS",
    "Outcome",
    "exhausted",
    "finite_velocity",
    "lands",
    "next_target",
    "step_failures",
    "trajectory",
    "unpack",
    "warn_left_domain",
    "warn_unsteppable",
]

#: A step lands on its target when the distance left is at most (1 + LANDING)·h: the
#: target is reached exactly, not overshot by rounding nor missed by a sliver.
LANDING = 1e-9


def lands(remaining, h):
    """Whether a step of size ``h`` lands on a target ``remaining`` away: remaining ≤ h·(1 +
    :data:`LANDING`) (floats, or numpy arrays elementwise). The step is then ``remaining``
    and ends at the target itself, else ``h``, ending at t + h."""
    return remaining <= h * (1 + LANDING)


def next_target(target: float, jumps, clock: float) -> float:
    """The next time the clock stops at: ``target`` (a save time or t1), or the first jump
    of a piecewise field after ``clock`` (a layer boundary: no step straddles one)."""
    return min([target, *(b for b in jumps if b > clock)])


def exhausted(used, max_steps: int):
    """Whether an element has used its budget: attempts (accepted and rejected steps) ≥
    ``max_steps`` (it then stops with "max_steps")."""
    return used >= max_steps


class Outcome:
    """Per element: its status, the time of the state it stopped at (NaN while running),
    and whether it is still active; arrays of the batch shape (0-d for one state)."""

    def __init__(self, batch: tuple[int, ...]):
        self.active = np.ones(batch, dtype=bool)
        self.status = status_array(batch)
        self.event_time = np.full(batch, math.nan)

    def stop(self, which: np.ndarray, status: Status, times) -> None:
        """Stop the active elements of ``which`` with ``status`` at ``times`` (their first
        status is kept: a stopped element is not stopped again)."""
        which = which & self.active
        if which.any():
            self.status[which] = status
            self.event_time[which] = np.broadcast_to(times, which.shape)[which]
            self.active = self.active & ~which


def step_failures(system, new) -> tuple[np.ndarray, bool]:
    """(per element: whether the new state is not finite, whether the step used an inner
    solve that missed its tolerance): the first stops the element with "blow_up", the
    second every stepped element with "not_converged"; the state before the step is kept."""
    blown = ~system.finite(new).cpu().numpy()
    return blown, system.inner.failure is not None


def finite_velocity(k1, part_dims) -> np.ndarray:
    """Per element: whether every entry of the velocity ``k1`` is finite (not
    ``System.finite``: a grid's adds "mass left in the box", a condition on states)."""
    finite = None
    for part, k in zip(k1, part_dims, strict=True):
        flat = part.detach().reshape(*part.shape[: part.ndim - k], -1)
        ok = torch.isfinite(flat).all(-1)
        finite = ok if finite is None else finite & ok
    return finite.cpu().numpy()


def warn_unsteppable(count: int, t0: float, stacklevel: int) -> None:
    """The warning of elements whose velocity is not finite at the initial state."""
    warnings.warn(
        f"{count} element(s) stopped at t0 = {t0:.6g} with "
        "status 'blow_up': the velocity at the initial state is not finite (the field's "
        "arithmetic overflows at this scale, or the field returns NaN or Inf), so no "
        "step can start. Fix: rescale the initial state, or use float64.",
        RuntimeWarning,
        stacklevel=stacklevel + 1,
    )


def warn_left_domain(count: int, t: float, status: Status, stacklevel: int) -> None:
    """The warning of elements a fixed step took out of the state's domain."""
    warnings.warn(
        f"{count} element(s) stopped at t = {t:.6g} with "
        f"status {str(status)!r}: {status.meaning}. Fix: {status.fix}",
        RuntimeWarning,
        stacklevel=stacklevel + 1,
    )


class RHS:
    """The right-hand side the method sees: counts calls, zeroes stopped elements."""

    def __init__(self, system, batched: bool):
        self.system, self.batched, self.calls = system, batched, 0
        self.active: torch.Tensor | None = None

    def __call__(self, t, state):
        self.calls += 1
        return self._masked(self.system.rhs(t, state))

    def _masked(self, derivative):
        """The derivative with stopped elements zeroed (None: every element is active)."""
        if not self.batched or self.active is None:
            return derivative
        zeros = tuple(map(torch.zeros_like, derivative))
        return self.system.mask(self.active, derivative, zeros)

    def jacobian(self, t, state):
        return self.system.jacobian(t, state)

    # Splitting methods (:mod:`tpde.flows.methods.splitting`) step one part of a sum at a time.
    @property
    def parts(self) -> int:
        return self.system.parts

    def part(self, index: int):
        """The right-hand side of part ``index`` alone, stopped elements zeroed."""

        def f(t, state):
            self.calls += 1
            return self._masked(self.system.rhs_part(index, t, state))

        return f

    def project_part(self, index: int, state):
        return self.system.project_part(index, state)


def unpack(method, result, state):
    """The method's (new state, error, derivative), checked against the state."""
    name = method.name
    if not isinstance(result, tuple) or len(result) != 3:
        raise TypeError(
            f"method {name!r}: step must return (new state, error estimate, derivative) "
            f"(error and derivative may be None); received {type(result).__name__}."
        )
    new = result[0]
    if not isinstance(new, tuple) or len(new) != len(state):
        raise TypeError(
            f"method {name!r}: the new state must be a tuple of {len(state)} tensor(s), "
            f"like the state it was given; received {type(new).__name__}."
        )
    for part, old in zip(new, state, strict=True):
        if not isinstance(part, torch.Tensor) or part.shape != old.shape:
            shape = tuple(part.shape) if isinstance(part, torch.Tensor) else type(part)
            raise ValueError(
                f"method {name!r}: step changed the shape of the state from "
                f"{tuple(old.shape)} to {shape}; a step must return a state of the same "
                "structure and shapes."
            )
    return result


def trajectory(system, method, times, states, outcome: Outcome, counts: dict, start: float):
    """The :class:`Trajectory` of a run: the saved (times, states), the statuses, and the
    statistics (``counts``: the run's step counts and settings, then the method's
    ``run_stats``, an inner failure, the system's ``stats``, the wall time since ``start``)."""
    stats = {**counts, "method": method.name}
    stats.update(method.run_stats())
    if system.inner.failure is not None:
        stats["inner_failure"] = system.inner.failure
    stats.update(system.stats(states, states[-1]))
    stats["wall_time_s"] = time.perf_counter() - start
    device = states[0][0].device
    return Trajectory(
        times=torch.tensor(times, dtype=torch.float64, device=device),
        measures=[system.measure(s) for s in states],
        status=outcome.status,
        event_time=torch.as_tensor(outcome.event_time, dtype=torch.float64, device=device),
        stats=stats,
    )
