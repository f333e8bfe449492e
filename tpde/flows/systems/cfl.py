r"""The CFL controller of grid flows: the step-size rule that keeps cell masses nonnegative.

An Euler step of a finite-volume scheme keeps every mass nonnegative when the Courant
number ν = dt · max_c r_c ≤ 1, r_c the outflow rate of cell c (its reconstruction's
bound, :mod:`tpde.flows.systems.reconstructions`); the SSP methods inherit this stage by
stage. :class:`CFLController` is that rule as an object the grid system delegates its
step control to (``propose_step``, ``check_step``, ``record_step`` of the system
protocol): with ``dt=None`` each step takes ν = ``cfl`` from the current velocity, at most
1/10 of the run; a step whose later stage would exceed ν = 1 is retried shorter; an
explicit ``dt`` that gives ν > 1 at any stage raises :class:`CFLViolation`.
"""

from __future__ import annotations

import math

__all__ = ["CFLController", "CFLViolation"]


class CFLViolation(ValueError):
    """An explicit step size breaks the CFL (positivity) condition of the grid scheme."""


class CFLController:
    """Step sizes at a target Courant number ``cfl`` in (0, 1] (module notes).

    ``start(t0, t1, dt)`` begins a run (``dt``: a fixed step to check, or None);
    ``propose(t, rate, h)`` the next step from the rate at the step's start;
    ``stage(t, rate)`` records the rate of a later stage; ``check(h)`` whether every stage
    stays within ν ≤ 1 (and the retry); ``record(h)`` an accepted step; ``stats()`` the
    run's Courant numbers and steps.
    """

    def __init__(self, cfl: float, scheme: str):
        self.cfl, self.scheme = cfl, scheme
        self.start(0.0, 1.0, None)

    def start(self, t0: float, t1: float, dt) -> float:
        """Begin a run; returns the first step: ``dt``, or 1/10 of the run."""
        span = t1 - t0
        self.fixed_dt, self.dt_cap = dt, (span / 10 if span > 0 else 1.0)
        self.rates: list[tuple[float, float]] = []
        self.retry = None
        self.nu_max, self.dt_seen = 0.0, []
        return self.dt_cap if dt is None else dt

    def propose(self, t: float, rate: float, h: float) -> float:
        """ν = cfl at ``rate`` (capped at 1/10 of the run); a fixed dt as is."""
        self.rates = [(t, rate)]
        if self.fixed_dt is not None:
            return h
        proposal = self.dt_cap if rate <= 0 else min(self.dt_cap, self.cfl / rate)
        if self.retry is not None:
            proposal, self.retry = min(proposal, self.retry), None
        return proposal

    def stage(self, t: float, rate: float) -> None:
        self.rates.append((t, rate))

    def check(self, h: float) -> tuple[bool, float | None]:
        """Every stage of the step within ν = h·rate ≤ 1; else retry shorter or raise."""
        for stage, (t, rate) in enumerate(self.rates):
            nu = h * rate
            if nu <= 1.0:
                continue
            if self.fixed_dt is not None:
                name = ("first", "second", "third", "fourth")[min(stage, 3)]
                raise CFLViolation(
                    f"dt = {h:.4g} violates the CFL condition of the {self.scheme} "
                    f"scheme at t = {t:.4g} ({name} stage): Courant number ν = {nu:.3g} > 1, "
                    f"so cell masses could turn negative. Pass dt <= {1.0 / rate:.4g}, or "
                    "dt=None for adaptive steps at ν = cfl."
                )
            self.retry = self.cfl / rate
            return False, self.retry
        return True, None

    def record(self, h: float) -> None:
        self.nu_max = max([self.nu_max, *(h * rate for _, rate in self.rates)])
        self.dt_seen.append(h)

    def stats(self) -> dict:
        return {
            "cfl": self.cfl if self.fixed_dt is None else None,
            "cfl_max": self.nu_max,
            "dt_min": min(self.dt_seen, default=math.nan),
            "dt_max": max(self.dt_seen, default=math.nan),
        }
