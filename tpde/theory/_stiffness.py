"""A bound on the work of a scipy ODE solve, checked before solving (the solves of
:mod:`tpde.theory.equiangular`).

The Jacobian J of the right-hand side at the start tells two things apart:

- **stiffness**, a decay rate s = max(0, −Re λ) over its eigenvalues λ: an explicit solver
  must keep h·s inside its stability interval on the whole horizon T, so it needs at
  least 12·s·T/6 evaluations (DOP853: interval about [−6, 0], 12 evaluations a step). This
  is work, and it grows with the horizon;
- **growth**, a rate g = max(0, Re λ): the state leaves the start on the time scale 1/g. An
  accurate solver follows it in a number of steps that does not grow with the horizon
  (the equiangular states are bounded: ρ ∈ [−1/(n − 1), 1]), so a long horizon is no
  work; only a time scale below what the float64 times of [0, T] can resolve is hopeless
  (g·T·eps > 1e-3: fewer than 1000 float64 spacings of the horizon in 1/g).
"""

from __future__ import annotations

import math

import numpy as np


class WorkBound(Exception):
    """Raised inside the right-hand side when a solve reaches its ``max_evals``."""


# DOP853's stability interval on the negative real axis is about [−6, 0] and it spends 12
# evaluations per step: a decay rate s over a horizon T costs at least 12·sT/6 evaluations.
_DOP853_STABILITY, _DOP853_STAGES = 6.0, 12
#: The largest g·T·eps of a growth rate g on a horizon T (module notes).
_RESOLVED_TIME_SCALE = 1e-3
_ADVICE = (
    "Give rates of order 1: pre-ln and peri-ln move rho at rate 1/r (rho(t; r0) = "
    "rho(t/r0; 1)), ngpt at rate alpha (rho(t; alpha) = rho(alpha t; 1))."
)


def start_jacobian(rhs, state) -> np.ndarray:
    """The 2 × 2 Jacobian of ``rhs`` at ``state`` by forward differences (ρ stepped inwards,
    since ρ ≤ 1; r relatively); an overflowing difference gives a non-finite entry."""
    y0 = np.asarray(state, dtype=float)
    jac = np.empty((2, 2))
    with np.errstate(all="ignore"):
        f0 = np.asarray(rhs(0.0, y0), dtype=float)
        for j in range(2):
            h = 1e-7 * (1.0 if j == 0 else abs(y0[1]))
            if j == 0 and y0[0] + h > 1.0:
                h = -h
            y = y0.copy()
            y[j] += h
            jac[:, j] = (np.asarray(rhs(0.0, y), dtype=float) - f0) / h
    return jac


def rates(jac: np.ndarray) -> tuple[float, float, float]:
    """(decay s, growth g, spectral radius) of a Jacobian; infinite where it is not finite."""
    if not np.all(np.isfinite(jac)):
        return math.inf, math.inf, math.inf
    eigenvalues = np.linalg.eigvals(jac)
    decay = max(0.0, float(-eigenvalues.real.min()))
    growth = max(0.0, float(eigenvalues.real.max()))
    return decay, growth, float(np.abs(eigenvalues).max())


def check_stiffness(rhs, state, horizon: float, budget: int, why: str, n: int) -> None:
    """Refuse, before solving, an ODE that ``budget`` evaluations cannot solve (module notes).

    Raises
    ------
    ValueError
        Where the start's decay rate s makes an explicit solver need more than ``budget``
        evaluations over the horizon (12·s·T/6: stiffness), or its growth rate g is a time
        scale that the float64 times of the horizon cannot resolve (g·T·eps > 1e-3).
    """
    decay, growth, radius = rates(start_jacobian(rhs, state))
    needed = _DOP853_STAGES * decay * horizon / _DOP853_STABILITY
    if not needed <= budget:
        raise ValueError(
            f"the equiangular ODE {why} is too stiff to solve: its Jacobian at the start has "
            f"an eigenvalue of size {radius:.3g} (a decay rate {decay:.3g}), so an explicit "
            f"solver needs at least {needed:.3g} right-hand side evaluations over the horizon "
            f"{horizon:g}, past max_evals ({budget} left). {_ADVICE}"
        )
    if not growth * horizon * np.finfo(float).eps <= _RESOLVED_TIME_SCALE:
        raise ValueError(
            f"the equiangular ODE {why} moves too fast to solve: its Jacobian at the start has "
            f"an eigenvalue of size {radius:.3g} (a growth rate {growth:.3g}), a time scale "
            f"1/rate below what float64 times on the horizon {horizon:g} resolve. {_ADVICE}"
        )
