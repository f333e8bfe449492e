"""A bound on the work of a scipy ODE solve, checked before solving (the solves of
:mod:`tpde.theory.equiangular`)."""

from __future__ import annotations

import math

import numpy as np


class WorkBound(Exception):
    """Raised inside the right-hand side when a solve reaches its ``max_evals``."""


# DOP853's stability interval on the negative real axis is about [−6, 0] and it spends 12
# evaluations per step: an eigenvalue λ over a horizon T costs at least 12·λT/6 evaluations.
_DOP853_STABILITY, _DOP853_STAGES = 6.0, 12


def check_stiffness(rhs, state, horizon: float, budget: int, why: str, n: int) -> None:
    """Refuse, before solving, an ODE whose stiffness makes ``budget`` evaluations hopeless.

    The Jacobian of the right-hand side at the start, by forward differences (ρ stepped
    inwards, since ρ ≤ 1; r relatively), has spectral radius λ; an explicit solver needs at
    least λ·T/6 steps on a horizon T (module constants above). The estimate is a lower
    bound on the work, so a refused solve could not have met the bound.
    """
    y0 = np.asarray(state, dtype=float)
    jac = np.empty((2, 2))
    with np.errstate(all="ignore"):  # an overflowing difference is an infinite λ: refused
        f0 = np.asarray(rhs(0.0, y0), dtype=float)
        for j in range(2):
            h = 1e-7 * (1.0 if j == 0 else abs(y0[1]))
            if j == 0 and y0[0] + h > 1.0:
                h = -h
            y = y0.copy()
            y[j] += h
            jac[:, j] = (np.asarray(rhs(0.0, y), dtype=float) - f0) / h
        finite = np.all(np.isfinite(jac))
        lam = float(np.max(np.abs(np.linalg.eigvals(jac)))) if finite else math.inf
    needed = _DOP853_STAGES * lam * horizon / _DOP853_STABILITY
    if not needed <= budget:
        raise ValueError(
            f"the equiangular ODE {why} is too stiff to solve: its Jacobian at the start has "
            f"an eigenvalue of size {lam:.3g}, so an explicit solver needs at least "
            f"{needed:.3g} right-hand side evaluations over the horizon {horizon:g}, past "
            f"max_evals ({budget} left). Give rates of order 1: pre-ln and peri-ln move rho "
            "at rate 1/r (rho(t; r0) = rho(t/r0; 1)), ngpt at rate alpha (rho(t; alpha) = "
            "rho(alpha t; 1))."
        )
