r"""Saved states of the stepping loop at times common to the whole batch.

Two policies (``integrate(..., saves=...)`` picks one: "landed", "interpolated", or
"auto", the first for synchronous runs — unbatched, time-dependent fields, ``save="steps"``
— the second for per-element runs):

- :class:`LandingSaves` ("landed"): steps are shortened to land exactly on every save
  time, so a saved state is the method's own solution there; ``save="steps"`` records
  every accepted step.
- :class:`DenseSaves` ("interpolated"): every element steps freely and the state at a
  save time s inside its accepted step [t, t + h] is the cubic Hermite interpolant of the
  step's end values and derivatives,

      y(t + θh) = (2θ³ − 3θ² + 1) y₀ + (θ³ − 2θ² + θ) h f₀ + (−2θ³ + 3θ²) y₁ + (θ³ − θ²) h f₁,

  accurate to O(h⁴) of the element's own step (Hairer, Nørsett & Wanner, *Solving ODEs I*,
  §II.6), then projected like any state (covariances symmetrised, tokens on the sphere put
  back on it). No element shortens a step for a save, and none waits for the others. A
  step that ends exactly on a save time saves its end state as it is (no interpolation,
  no derivative at the new state), and the run's end t1 is no save slot at all: every
  element lands on it or is frozen before it, so the final state is the state there (a
  run chained over short segments, as a phase diagram's checkpoints, paid one more
  evaluation of the field and two copies of the state per segment). An element stopped by
  an event is frozen: later saved states repeat it.

Both save t0, every requested time up to the last time an element reached, and that time.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["DenseSaves", "LandingSaves"]


def extreme(values: np.ndarray, mask: np.ndarray, op) -> float:
    """``op`` (np.max or np.min) of ``values`` where ``mask`` holds, as a float; the mask
    holds somewhere. An unbatched run's 0-d arrays: the value itself (a boolean index of a
    0-d array costs more than the rest of the reduction)."""
    if values.ndim == 0:
        return float(values)
    return float(op(values[mask]))


class LandingSaves:
    """Save times as landing targets (module notes); ``times=None`` saves every step."""

    def __init__(self, times, t0: float, state):
        self.pending = None if times is None else [s for s in times if s > t0]
        self.times, self.states = [float(t0)], [state]

    def target(self, t1: float) -> float:
        return self.pending[0] if self.pending else t1

    def at_target(self, target: float, state) -> bool:
        """Every element reached ``target``: save there if it is a save time."""
        if not self.pending or target < self.pending[0]:
            return False
        self.times.append(target)
        self.states.append(state)
        self.pending.pop(0)
        return bool(self.pending)

    def needs_derivative(self, t, t_new, advanced) -> bool:
        return False

    def after_step(self, t, t_new, old, new, f_old, f_new, advanced, system) -> None:
        if self.pending is None and advanced.any():
            self.times.append(extreme(t_new, advanced, np.max))
            self.states.append(new)

    def finish(self, t_end: float, state, t, system):
        if self.times[-1] != t_end:
            self.times.append(t_end)
            self.states.append(state)
        return self.times, self.states


class DenseSaves:
    """Save times filled by per-element cubic Hermite interpolation (module notes).

    The saved states live in one buffer per state part, shape (T, B, *part) with the batch
    flattened to B; each step fills exactly the (save time, element) pairs it crossed.
    """

    def __init__(self, times, t0: float, state, part_dims, t1: float):
        # The state at t1 is the final state of every element (each lands on t1 or is
        # frozen before it): no buffer, no copy for it.
        self.requested = np.asarray([s for s in times if t0 < s < t1], dtype=float)
        self.part_dims = part_dims
        self.batch = state[0].shape[: state[0].ndim - part_dims[0]]
        flat = self._flat(state)
        # With autograd the buffers are rebuilt out of place; without, filled in place.
        self.differentiable = torch.is_grad_enabled() and any(p.requires_grad for p in state)
        self.buffers = tuple(p.unsqueeze(0).expand(len(self.requested), *p.shape) for p in flat)
        if not self.differentiable:
            self.buffers = tuple(b.detach().clone() for b in self.buffers)
        self.t0, self.initial = float(t0), state

    def _flat(self, state):
        """The state with its batch dimensions flattened into one, (B, *part) per part."""
        return tuple(
            p.reshape(-1, *p.shape[p.ndim - k :])
            for p, k in zip(state, self.part_dims, strict=True)
        )

    def target(self, t1: float) -> float:
        return t1

    def at_target(self, target: float, state) -> bool:
        return False

    def _pairs(self, t, t_new, advanced):
        """(save index k, flat element b) of every pair with t_b < s_k ≤ t_new_b, advanced b."""
        elements = np.flatnonzero(advanced.reshape(-1))
        if not len(elements):
            return elements, elements
        start = np.searchsorted(self.requested, t.reshape(-1)[elements], side="right")
        stop = np.searchsorted(self.requested, t_new.reshape(-1)[elements], side="right")
        counts = stop - start
        b = np.repeat(elements, counts)
        k = np.repeat(start - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        return k, b

    def _interior(self, k, b, t_new) -> np.ndarray:
        """Which pairs (k, b) lie strictly inside their step (the others end on s_k)."""
        return self.requested[k] < t_new.reshape(-1)[b]

    def needs_derivative(self, t, t_new, advanced) -> bool:
        k, b = self._pairs(t, t_new, advanced)
        return bool(self._interior(k, b, t_new).any())

    def after_step(self, t, t_new, old, new, f_old, f_new, advanced, system) -> None:
        k, b = self._pairs(t, t_new, advanced)
        if not len(k):
            return
        inside = self._interior(k, b, t_new)
        if not inside.all():  # steps that end on their save time: the state as it is
            ends = b[~inside]
            self._store(k[~inside], ends, self._picker(ends, new[0].device)(new))
        k, b = k[inside], b[inside]
        if not len(k):
            return
        t_b, h = t.reshape(-1)[b], (t_new - t).reshape(-1)[b]
        theta = (self.requested[k] - t_b) / h
        pick = self._picker(b, old[0].device)
        value = system.project(
            _hermite(system, pick(old), pick(new), pick(f_old), pick(f_new), h, theta)
        )
        self._store(k, b, value)

    def _picker(self, b, device):
        index = torch.as_tensor(b, device=device)
        return lambda y: tuple(p.index_select(0, index) for p in self._flat(y))

    def _store(self, k, b, value) -> None:
        """Write ``value`` (the parts of elements b, one row per pair) into save slots k."""
        device = self.buffers[0].device
        where = (torch.as_tensor(k, device=device), torch.as_tensor(b, device=device))
        if not self.differentiable:
            for buffer, part in zip(self.buffers, value, strict=True):
                buffer[where] = part.detach()
            return
        self.buffers = tuple(
            buffer.index_put(where, part) for buffer, part in zip(self.buffers, value, strict=True)
        )

    def finish(self, t_end: float, state, t, system):
        """Saved times up to ``t_end``; slots an element never reached hold its last state."""
        times, states = [self.t0], [self.initial]
        for k, s in enumerate(self.requested):
            if s > t_end:
                break
            saved = tuple(b[k].reshape(p.shape) for b, p in zip(self.buffers, state, strict=True))
            unreached = t < s
            if unreached.any():
                saved = system.mask(torch.as_tensor(unreached, device=state[0].device), state,
                                    saved)  # fmt: skip
            states.append(saved)
            times.append(float(s))
        if times[-1] != t_end:
            times.append(t_end)
            states.append(state)
        return times, states


def _hermite(system, y0, y1, f0, f1, h: np.ndarray, theta: np.ndarray):
    """Cubic Hermite interpolant at θ ∈ [0, 1] of steps of length h (module notes); the
    states carry one leading dimension, that of θ and h."""
    like = y0[0]
    th = torch.as_tensor(theta, dtype=like.dtype, device=like.device)
    step = torch.as_tensor(h, dtype=like.dtype, device=like.device)
    th2, th3 = th * th, th * th * th
    c0 = system.per_part(2 * th3 - 3 * th2 + 1)
    c1 = system.per_part((th3 - 2 * th2 + th) * step)
    c2 = system.per_part(3 * th2 - 2 * th3)
    c3 = system.per_part((th3 - th2) * step)
    return tuple(
        c0[i] * a + c1[i] * fa + c2[i] * b + c3[i] * fb
        for i, (a, b, fa, fb) in enumerate(zip(y0, y1, f0, f1, strict=True))
    )
