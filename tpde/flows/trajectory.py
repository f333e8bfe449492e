"""The result of a flow: saved times, measures, per-element status and statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from tpde.measures import Measure

#: Status values. "completed": reached t1; "blow_up": the size passed the threshold, the
#: state overflowed, or the adaptive step collapsed; "converged": the velocity fell below
#: tolerance; "max_steps": the step budget ran out; "not_converged": an inner solve (JKO,
#: Sinkhorn) did not reach its tolerance.
STATUSES = ("completed", "blow_up", "converged", "max_steps", "not_converged")


@dataclass(frozen=True)
class Trajectory:
    """Result of :func:`tpde.flows.integrate` or :func:`tpde.flows.jko_flow`.

    Attributes
    ----------
    times : tensor (T,)
        Saved times, increasing; the last one is where the run ended.
    measures : list of T measures
        The state at each saved time (batched like the run). A batch element that stopped
        at an event is frozen there: later entries repeat its last finite state.
    status : str, or numpy array of str with the batch shape for a batched run
        One of :data:`STATUSES` per batch element.
    event_time : tensor with the batch shape
        Time of the state at which an element stopped (blow-up, convergence); NaN where
        it reached t1 without an event. Events are checked after every accepted step, so
        an event time is the end of the step that crossed it (steps shrink near a
        blow-up, so blow-up times are sharp).
    stats : dict
        Step counts, rejected steps, right-hand-side evaluations, wall time, and any
        solver-specific diagnostics.
    """

    times: torch.Tensor
    measures: list[Measure]
    status: str | np.ndarray
    event_time: torch.Tensor
    stats: dict = field(default_factory=dict)

    @property
    def final(self) -> Measure:
        """The last saved measure."""
        return self.measures[-1]

    def __len__(self) -> int:
        return len(self.measures)

    def __repr__(self) -> str:
        status = (
            self.status
            if isinstance(self.status, str)
            else dict(zip(*np.unique(self.status, return_counts=True), strict=True))
        )
        return (
            f"Trajectory({len(self)} saved states, t ∈ [{float(self.times[0]):.4g}, "
            f"{float(self.times[-1]):.4g}], status={status})"
        )
