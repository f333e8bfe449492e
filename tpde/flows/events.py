"""Events that stop a flow: finite-time blow-up, convergence to a stationary state, and
the gathering of tokens into one cluster.

An event has a ``name`` (its :class:`~tpde.flows.Status`), ``requires`` (the per-element
reduction of the system it reads: ``size``, ``rhs_norm``, ``diameter``) and
``check(system, state, derivative) -> bool tensor`` with the batch shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde._validation import check_choice, check_positive


class Event:
    """Base of the events: ``name`` (a Status), ``requires`` (the system reduction read).

    ``start(system, state, derivative)`` returns the per-element memory of the run (or
    None) from the initial state; ``check(system, state, derivative, memory)`` returns
    ``(fired, memory)`` after an accepted step, both with the batch shape. The loop keeps
    the memory of elements that did not step this time.
    """

    name: str
    requires: str

    def start(self, system, state, derivative):
        return None

    def check(self, system, state, derivative, memory):
        raise NotImplementedError


def _check_flag(value, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; received {value!r}.")


@dataclass(frozen=True)
class BlowUp(Event):
    """Stop an element when its size passes ``threshold`` upward (status ``"blow_up"``).

    Size (``size="max"``, the default): the largest covariance eigenvalue λ_max(Σ) for
    Gaussians and grids, the largest squared distance to the mean max_i |x_i − m|² for
    particles (both squared lengths). ``size="trace"``: the total variance tr Σ
    (particles: Σ_i w_i |x_i − m|²), the paper's stopping rule tr Σ > tol_high (MATH.md
    §6), cheaper than an eigenvalue and at most d times λ_max.

    ``relative=False`` (default): the threshold is absolute and the event fires when the
    size *crosses* it upward — an element that starts above it (a large cloud, a wide
    Gaussian) is not stopped for being large, only once it has been below the threshold
    and passes it again. ``relative=True``: the threshold is a growth factor, the event
    fires when size > threshold × size(t0): meaningful at any scale (a flow that is
    homogeneous in x fires at the same time for a cloud and for the same cloud scaled).
    The state overflowing, or the adaptive step size collapsing, also counts as blow-up
    (always, even without this event).
    """

    threshold: float = 1e6
    size: str = "max"
    relative: bool = False
    name = "blow_up"
    requires = "size"

    def __post_init__(self):
        _check_flag(self.relative, "BlowUp relative")
        check_positive(self.threshold, "BlowUp threshold")
        check_choice(self.size, "BlowUp size", ("max", "trace"))
        if self.relative and self.threshold <= 1:
            raise ValueError(
                f"a relative BlowUp threshold is a growth factor and must be > 1; received "
                f"{self.threshold}."
            )

    def _size(self, system, state) -> torch.Tensor:
        return system.trace(state) if self.size == "trace" else system.size(state)

    def start(self, system, state, derivative):
        size = self._size(system, state)
        # relative: the reference size; absolute: whether the element is below (armed).
        return size if self.relative else size <= self.threshold

    def check(self, system, state, derivative, memory):
        size = self._size(system, state)
        if self.relative:
            return size > self.threshold * memory, memory
        return memory & (size > self.threshold), memory | (size <= self.threshold)


@dataclass(frozen=True)
class Clustered(Event):
    """Stop an element when its tokens have gathered into one cluster (status "clustered").

    Fires when the diameter max_{i,j} |x_i − x_j| of the particles (of positive or zero
    weight alike) falls below ``threshold``: for tokens on the unit sphere, a chord; the
    largest angle is then 2·asin(threshold/2) ≈ threshold. Particle flows only.
    """

    threshold: float = 1e-3
    name = "clustered"
    requires = "diameter"

    def __post_init__(self):
        check_positive(self.threshold, "Clustered threshold")

    def check(self, system, state, derivative, memory):
        return system.diameter(state) < self.threshold, memory


@dataclass(frozen=True)
class Converged(Event):
    """Stop an element when its velocity norm falls below ``tol`` (status ``"converged"``).

    Norm: (|α̇|² + ‖Σ̇‖²_F)^{1/2} for Gaussians (the paper's ‖rhs‖_F stopping rule),
    (Σ_i w_i |ẋ_i|²)^{1/2} for particles, (Σ_c m_c |u_c|²)^{1/2} for grids.
    ``relative=False`` (default): ``tol`` is absolute, in the units of the state per unit
    time (a cloud of size 10⁻⁶ moves that slowly from the start; one of size 10⁶ never
    does). ``relative=True``: the event fires when the norm is at most ``tol`` times its
    value at t0 — the motion has slowed down by that factor, a statement that does not
    depend on the scale of the cloud; a state stationary from the start fires at once.
    """

    tol: float = 1e-8
    relative: bool = False
    name = "converged"
    requires = "rhs_norm"

    def __post_init__(self):
        _check_flag(self.relative, "Converged relative")
        check_positive(self.tol, "Converged tol")
        if self.relative and self.tol >= 1:
            raise ValueError(
                f"a relative Converged tol is a slow-down factor and must be < 1; received "
                f"{self.tol}."
            )

    def start(self, system, state, derivative):
        return system.rhs_norm(state, derivative) if self.relative else None

    def check(self, system, state, derivative, memory):
        norm = system.rhs_norm(state, derivative)
        if self.relative:
            return norm <= self.tol * memory, memory
        return norm < self.tol, memory


EVENTS = {"blow_up": BlowUp, "converged": Converged, "clustered": Clustered}


def parse_events(events) -> tuple:
    """Turn names and event objects into a tuple of event objects."""
    if events is None:
        return ()
    if isinstance(events, str | Event):
        events = (events,)
    parsed = []
    for event in events:
        if isinstance(event, str):
            if event not in EVENTS:
                known = ", ".join(repr(k) for k in EVENTS)
                raise ValueError(
                    f"unknown event {event!r}; choose among {known} or pass "
                    "an event object such as BlowUp(threshold=1e4)."
                )
            event = EVENTS[event]()
        elif not isinstance(event, Event):
            raise TypeError(
                f"events must be names or BlowUp/Converged/Clustered objects; received "
                f"{type(event).__name__}."
            )
        parsed.append(event)
    return tuple(parsed)
