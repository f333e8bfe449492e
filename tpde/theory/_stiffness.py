"""A bound on the work of a scipy ODE solve, checked before solving (the solves of
:mod:`tpde.theory.equiangular`).

The Jacobian J of the right-hand side at the start (eigenvalues λ) tells apart what costs
work and what does not:

- **a time scale below √tiny**: a rate |λ| > 1/√tiny ≈ 6.7e153 (tiny the smallest normal
  float64) gives steps whose squares in DOP853's step-size control underflow, and scipy
  stops ("required step size is less than spacing between numbers"): refused, whatever its
  sign and the horizon (measured: nGPT solves at α = 1e155 and fails at 1e160, pre-ln at
  r0 = 1e-155 and 1e-160). Any smaller rate solves over any horizon (post-ln at T = 1e300);
- **stiffness**, a decay rate s = max(0, −Re λ): an explicit solver keeps h·s inside its
  stability interval while the stiffness lasts, at least 12·s·τ/6 evaluations (DOP853:
  interval about [−6, 0], 12 evaluations a step) over τ = min(T, |y|/|f(y)|), the time the
  state takes to move by its own size (the Jacobian cannot change before). Not s·T: the
  horizon is not the work. In the equiangular ODEs the stiffness does not outlast the
  motion — ρ only rises (ρ̇ = c ≥ 0) to ρ = 1, where the clip of ρ to [−1/(n − 1), 1]
  leaves no decay to follow, and r (pre-ln, peri-ln) keeps growing, which slows every rate
  (1/r) — so s·T refused solvable runs (pre-ln, β = 4, T = 1e9: 2.4 s);
- **growth**, a rate g = max(0, Re λ): the state leaves the start on the time scale 1/g, in
  a number of steps that does not grow with the horizon (the states are bounded), so no
  work is charged (post-ln, β = 1, ρ0 = 0 grows at 0.866: T = 1e6 solves in 0.4 s).
"""

from __future__ import annotations

import math

import numpy as np


class WorkBound(Exception):
    """Raised inside the right-hand side when a solve reaches its ``max_evals``."""


# DOP853's stability interval on the negative real axis is about [−6, 0] and it spends 12
# evaluations per step: a decay rate s over a horizon T costs at least 12·sT/6 evaluations.
_DOP853_STABILITY, _DOP853_STAGES = 6.0, 12
#: The largest rate DOP853's step-size control follows: 1/√tiny (module notes).
_FASTEST_RATE = 1 / math.sqrt(np.finfo(float).tiny)
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
        Where a rate of the start's Jacobian exceeds 1/√tiny (DOP853's step-size control
        underflows), or its decay rate s makes an explicit solver need more than ``budget``
        evaluations while the state moves (12·s·τ/6).
    """
    y0 = np.asarray(state, dtype=float)
    decay, growth, radius = rates(start_jacobian(rhs, y0))
    kind = f"a decay rate {decay:.3g}" if decay >= growth else f"a growth rate {growth:.3g}"
    if not radius <= _FASTEST_RATE:
        raise ValueError(
            f"the equiangular ODE {why} moves too fast to solve: its Jacobian at the start has "
            f"an eigenvalue of size {radius:.3g} ({kind}), past {_FASTEST_RATE:.2g}, where the "
            f"solver's step-size control underflows. {_ADVICE}"
        )
    with np.errstate(all="ignore"):
        speed = float(np.max(np.abs(np.asarray(rhs(0.0, y0), dtype=float))))
    moving = float(np.max(np.abs(y0))) / speed if speed > 0 else 0.0  # f = 0: it stays
    lasts = min(horizon, moving)
    needed = _DOP853_STAGES * decay * lasts / _DOP853_STABILITY
    if not needed <= budget:
        raise ValueError(
            f"the equiangular ODE {why} is too stiff to solve: its Jacobian at the start has "
            f"an eigenvalue of size {radius:.3g} (a decay rate {decay:.3g}, lasting while the "
            f"state moves, {lasts:.3g} time units), so an explicit solver needs at least "
            f"{needed:.3g} right-hand side evaluations, past max_evals ({budget} left). "
            f"{_ADVICE}"
        )
