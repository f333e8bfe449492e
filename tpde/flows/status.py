"""The outcome of a flow or of a JKO step: one ``str`` enum, one meaning per value."""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["STATUSES", "Status", "status_array"]


class Status(str, enum.Enum):
    """Why a flow (or one batch element of it) stopped.

    A ``str`` enum: ``traj.status == "blow_up"`` and ``str(Status.BLOW_UP) == "blow_up"``
    both hold. Comparing with a string that names no status raises ``ValueError`` (a typo
    such as ``"blowup"`` would otherwise be silently False).
    """

    COMPLETED = "completed"
    BLOW_UP = "blow_up"
    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"
    MAX_STEPS = "max_steps"
    CLUSTERED = "clustered"

    @property
    def meaning(self) -> str:
        """One line: what this status says about the run."""
        return _MEANINGS[self]

    @classmethod
    def parse(cls, value) -> Status:
        """The status named ``value`` (a Status or its string); unknown names raise."""
        if isinstance(value, Status):
            return value
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(repr(s.value) for s in cls)
            raise ValueError(f"unknown status {value!r}; known statuses: {known}.") from None

    def __eq__(self, other) -> bool:
        if isinstance(other, str) and not isinstance(other, Status):
            other = Status.parse(other)
        return str.__eq__(self, other)

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
    Status.COMPLETED: "reached t1 (or took every JKO step) without an event",
    Status.BLOW_UP: "the size passed the blow-up threshold, the state overflowed, or the "
    "adaptive step collapsed (a finite-time singularity)",
    Status.CONVERGED: "the velocity fell below the Converged tolerance (a stationary state)",
    Status.NOT_CONVERGED: "an inner solve (Sinkhorn scaling, JKO minimisation) missed its "
    "tolerance; the state is the last one before it",
    Status.MAX_STEPS: "the step budget (max_steps, accepted and rejected) ran out",
    Status.CLUSTERED: "the tokens gathered into one cluster (Clustered event)",
}

#: Every status value, in declaration order.
STATUSES = tuple(s.value for s in Status)


def status_array(shape: tuple[int, ...], status: Status = Status.COMPLETED) -> np.ndarray:
    """A numpy object array of ``shape`` filled with ``status`` (0-d for an unbatched run)."""
    out = np.empty(shape, dtype=object)
    out[...] = status
    return out
