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


@dataclass(frozen=True)
class BlowUp:
    """Stop an element when its size passes ``threshold`` (status ``"blow_up"``).

    Size (``size="max"``, the default): the largest covariance eigenvalue λ_max(Σ) for
    Gaussians and grids, the largest squared distance to the mean max_i |x_i − m|² for
    particles (both squared lengths). ``size="trace"``: the total variance tr Σ
    (particles: Σ_i w_i |x_i − m|²), the paper's stopping rule tr Σ > tol_high (MATH.md
    §6), cheaper than an eigenvalue and at most d times λ_max. The state overflowing, or
    the adaptive step size collapsing, also counts as blow-up (always, even without this
    event).
    """

    threshold: float = 1e6
    size: str = "max"
    name = "blow_up"
    requires = "size"

    def __post_init__(self):
        check_positive(self.threshold, "BlowUp threshold")
        check_choice(self.size, "BlowUp size", ("max", "trace"))

    def check(self, system, state, derivative) -> torch.Tensor:
        if self.size == "trace":
            return system.trace(state) > self.threshold
        return system.size(state) > self.threshold


@dataclass(frozen=True)
class Clustered:
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

    def check(self, system, state, derivative) -> torch.Tensor:
        return system.diameter(state) < self.threshold


@dataclass(frozen=True)
class Converged:
    """Stop an element when its velocity norm falls below ``tol`` (status ``"converged"``).

    Norm: (|α̇|² + ‖Σ̇‖²_F)^{1/2} for Gaussians (the paper's ‖rhs‖_F stopping rule),
    (Σ_i w_i |ẋ_i|²)^{1/2} for particles.
    """

    tol: float = 1e-8
    name = "converged"
    requires = "rhs_norm"

    def __post_init__(self):
        check_positive(self.tol, "Converged tol")

    def check(self, system, state, derivative) -> torch.Tensor:
        return system.rhs_norm(state, derivative) < self.tol


EVENTS = {"blow_up": BlowUp, "converged": Converged, "clustered": Clustered}


def parse_events(events) -> tuple:
    """Turn names and event objects into a tuple of event objects."""
    if events is None:
        return ()
    if isinstance(events, str | BlowUp | Converged | Clustered):
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
        elif not isinstance(event, BlowUp | Converged | Clustered):
            raise TypeError(
                f"events must be names or BlowUp/Converged/Clustered objects; received "
                f"{type(event).__name__}."
            )
        parsed.append(event)
    return tuple(parsed)
