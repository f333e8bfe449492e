"""Results of flows and JKO steps: saved times, measures, per-element status, statistics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from tpde._status import status_counts
from tpde.flows.status import STATUSES, Status
from tpde.measures import Measure

__all__ = ["STATUSES", "JKOStep", "Status", "Trajectory"]


@dataclass(frozen=True)
class Trajectory:
    """Result of :func:`tpde.flows.integrate` or :func:`tpde.flows.jko_flow`.

    Attributes
    ----------
    times : tensor (T,)
        Saved times, increasing, common to the whole batch; the last one is where the run
        ended (the latest time any element reached).
    measures : list of T measures
        The state at each saved time (batched like the run). A batch element that stopped
        at an event is frozen there: later entries repeat its last finite state.
    status : numpy array of :class:`Status` with the batch shape (0-d for an unbatched run)
        Why each element stopped; ``traj.status == "blow_up"`` compares elementwise
        (an unknown name raises). See :class:`Status` for the meaning of each value.
    event_time : tensor with the batch shape
        Time of the state at which an element stopped (blow-up, convergence, …); NaN where
        it reached t1 without an event. Events are checked after every accepted step, so
        an event time is the end of the step that crossed it (steps shrink near a
        blow-up, so blow-up times are sharp).
    stats : dict
        Step counts (``n_steps``, ``n_rejected``: totals over the batch; ``steps``,
        ``rejected``: per element; ``n_iterations``: vectorised steps, the cost),
        right-hand-side evaluations, wall time, and system-specific diagnostics.
    """

    times: torch.Tensor
    measures: list[Measure]
    status: np.ndarray
    event_time: torch.Tensor
    stats: dict = field(default_factory=dict)

    @property
    def final(self) -> Measure:
        """The last saved measure."""
        return self.measures[-1]

    def __len__(self) -> int:
        return len(self.measures)

    def __repr__(self) -> str:
        status = status_counts(self.status)
        return (
            f"Trajectory({len(self)} saved states, t ∈ [{float(self.times[0]):.4g}, "
            f"{float(self.times[-1]):.4g}], status={status})"
        )


@dataclass(frozen=True)
class JKOStep:
    """One JKO step (:func:`tpde.flows.jko_step`).

    Attributes
    ----------
    measure : the new measure μ_{k+1} (the best iterate found, also when not converged).
    status : :class:`Status`: "completed" when the inner solve met its tolerance (grids:
        always, the step is in closed form), "not_converged" otherwise.
    iterations : L-BFGS iterations (grids: 1 kernel update).
    evaluations : evaluations of G (with its gradient).
    grad_norm : final ‖∇J‖_∞ / ‖∇J(0)‖_∞ in whitened coordinates (grids: NaN).
    energy, previous_energy : G(μ_{k+1}) and G(μ_k) (floats).
    distance : d(μ_{k+1}, μ_k) in the step's metric (grids: NaN).
    tau : the step.
    message : why the inner solve stopped.
    """

    measure: object
    status: Status
    iterations: int
    evaluations: int
    grad_norm: float
    energy: float
    previous_energy: float
    distance: float
    tau: float
    message: str

    @property
    def converged(self) -> bool:
        """Whether the inner solve met its tolerance (status "completed")."""
        return self.status == Status.COMPLETED
