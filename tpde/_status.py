"""The one status enum of tpde: why a flow, a JKO run or an iterative solve stopped.

Every result with a status (a :class:`~tpde.flows.Trajectory`, a JKO step, the Bures
barycentre, :func:`~tpde.metrics.sinkhorn_solve`, the sweep studies' rows) holds a
:class:`Status` (or a numpy array of them, one per batch element). Each value has one
meaning (:attr:`Status.meaning`) and a one-line fix-it text (:attr:`Status.fix`).
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["STATUSES", "Status", "status_array", "status_counts"]


class Status(str, enum.Enum):
    """Why a flow (or one batch element of it), a JKO run or an iterative solve stopped.

    A ``str`` enum: ``traj.status == "blow_up"`` and ``str(Status.BLOW_UP) == "blow_up"``
    both hold. Comparing with a string that names no status raises ``ValueError`` (a typo
    such as ``"convergd"`` would otherwise be silently False), and comparing with anything
    that is not a string (3, None) raises ``TypeError``.
    """

    COMPLETED = "completed"
    BLOW_UP = "blow_up"
    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"
    MAX_STEPS = "max_steps"
    CLUSTERED = "clustered"
    STIFF = "stiff"
    LOST_TOKEN = "lost_token"
    UNRESOLVED = "unresolved"

    @property
    def meaning(self) -> str:
        """One line: what this status says about the run."""
        return _MEANINGS[self][0]

    @property
    def fix(self) -> str:
        """One line: what to do about it."""
        return _MEANINGS[self][1]

    @classmethod
    def parse(cls, value) -> Status:
        """The status named ``value`` (a Status or its string); unknown names raise."""
        if isinstance(value, Status):
            return value
        if not isinstance(value, str):
            raise TypeError(
                f"cannot compare a Status with {value!r} ({type(value).__name__}); compare a "
                "Status with a status name (a str such as 'completed') or another Status."
            )
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(repr(s.value) for s in cls)
            raise ValueError(f"unknown status {value!r}; known statuses: {known}.") from None

    def __eq__(self, other) -> bool:
        return str.__eq__(self, Status.parse(other))

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:
        return f"Status.{self.name}"


_MEANINGS = {
    Status.COMPLETED: (
        "reached its end (t1, or every JKO step) without an event",
        "nothing to fix.",
    ),
    Status.BLOW_UP: (
        "the size passed the blow-up threshold, the state overflowed, or the adaptive step "
        "collapsed (a finite-time singularity)",
        "expected for a singular flow (event_time is when); else use float64 or a smaller dt.",
    ),
    Status.CONVERGED: (
        "reached its fixed point within the tolerance: a flow's velocity (Converged event), "
        "the Bures barycentre's residual or sinkhorn_solve's error estimate",
        "nothing to fix.",
    ),
    Status.NOT_CONVERGED: (
        "an iterative solve (Sinkhorn scaling, JKO minimisation, Bures barycentre, "
        "sinkhorn_solve) missed its tolerance; the state is its last iterate",
        "raise the iteration cap (iters, max_iter, max_solves) or loosen the tolerance.",
    ),
    Status.MAX_STEPS: (
        "the step budget (max_steps, accepted and rejected) ran out before t1",
        'raise max_steps, or for a stiff Gaussian flow integrate with method="rodas4".',
    ),
    Status.CLUSTERED: (
        "the tokens gathered into one cluster (Clustered event)",
        "nothing to fix.",
    ),
    Status.STIFF: (
        "an explicit step left the PSD cone (a covariance with a negative eigenvalue): the "
        "flow is stiff for this method and step; the state is the last one inside",
        'integrate with method="rodas4" (L-stable, steps bounded by accuracy only).',
    ),
    Status.LOST_TOKEN: (
        "the norm scheme mapped a token to the origin (no direction left); the state is "
        "the one before that step",
        "use a smaller dt, an adaptive method (it retries smaller steps), or tangent=True.",
    ),
    Status.UNRESOLVED: (
        "a density on a grid sharpened past what the grid resolves (its top Fourier modes "
        "passed the tolerance, it went negative, or its mass drifted); the state is the last "
        "resolved one, and stats['unresolved'] names the cause",
        "refine the grid (more points), or stop the run earlier.",
    ),
}

#: Every status value, in declaration order.
STATUSES = tuple(s.value for s in Status)


def status_array(shape: tuple[int, ...], status: Status = Status.COMPLETED) -> np.ndarray:
    """A numpy object array of ``shape`` filled with ``status`` (0-d for an unbatched run)."""
    out = np.empty(shape, dtype=object)
    out[...] = status
    return out


def status_counts(status) -> dict[str, int]:
    """How many elements of a status array (or one status) have each value, by name."""
    values, counts = np.unique(np.asarray(status).astype(str), return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))
