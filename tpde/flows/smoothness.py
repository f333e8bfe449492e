r"""The observed order of an adaptive run's rejected steps: is the flow smooth at its step?

An adaptive method of embedded order q estimates a local error that falls like h^{q+1} on a
smooth flow (dopri5: h⁵, rodas4: h⁴), so a step rejected with error norm e₁ at h₁ and tried
again from the same state at h₂ < h₁ gives e₂ ≈ e₁ (h₂/h₁)^{q+1}. Where the velocity jumps
inside the step (a softmax whose scores of ~1e12 make it a hardmax that switches its argmax,
a ReLU kink) the error is the jump times the time spent past it, e ∝ h: the observed order

    p = log(e₁/e₂) / log(h₁/h₂)

is ≈ 1 instead of q + 1. The standard controller, which assumes q + 1, then crawls: each
step must shrink until the jump's error h·|Δv| is below the tolerance, and this is *not*
stiffness (a stiff flow's error explodes past the stability boundary, p ≫ q + 1, and a
stiff method would not help: rodas4 needs as many steps here, its Jacobian is 0 in a
saturated softmax). Hairer, Nørsett & Wanner, *Solving ODEs I*, 2nd ed., §II.6
("discontinuous right-hand sides") describe the symptom: many rejections, each near a
switching point, and a step size of the order of tol/|Δv|.

An element is *non-smooth* from the time LOW_PAIRS retry pairs in a row (a rejected step
and the next attempt from the same time) showed p in FIRST_ORDER = [0.7, 1.5]; a pair
outside the band resets the count, not the finding (a jump that leaves the shorter retry's
step reads p ≫ q + 1, measured 8–250, between runs of p = 1.00). The band is narrow on
purpose: a stiff transient out of the asymptotic regime gives p ≈ 0 (the error does not
shrink with h: measured −0.2 to 0.6 with rodas4 on the rank histograms' Gaussian ODE), a
smooth flow p ≈ q + 1, a jump p = 1.00 (measured on the hardmax cloud of issue 36).
:mod:`tpde.flows.loop` then gives the element a work bound without the transient exemption
(module notes there).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FIRST_ORDER", "LOW_PAIRS", "ObservedOrder"]

#: First-order retry pairs in a row that make an element non-smooth.
LOW_PAIRS = 5
#: The observed orders that read as a jump inside the step (e ∝ h).
FIRST_ORDER = (0.7, 1.5)


class ObservedOrder:
    """Per-element observed order of retried steps (module notes).

    Parameters
    ----------
    batch : the batch shape of the run.
    """

    def __init__(self, batch: tuple[int, ...]):
        self.t = np.full(batch, math.nan)  # start time of the last rejected attempt
        self.h = np.full(batch, math.nan)
        self.err = np.full(batch, math.nan)
        self.low = np.zeros(batch, dtype=np.int64)  # first-order retry pairs in a row
        self.order = np.full(batch, math.nan)  # the last observed order
        self.nonsmooth = np.zeros(batch, dtype=bool)
        self.detected_at: float | None = None

    def update(self, t, h_try, norm, moving, accept, exponent: float) -> None:
        """Record one attempt: ``t`` its start, ``h_try`` its step, ``norm`` each element's
        error norm, ``exponent`` 1/(q + 1) of the method stepping now (a method of
        embedded order q ≤ 1 cannot tell a jump from smoothness: never non-smooth)."""
        retried = moving & (t == self.t) & (h_try < self.h)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            p = np.log(self.err / norm) / np.log(self.h / h_try)
        retried &= np.isfinite(p) & (norm > 0)
        self.order = np.where(retried, p, self.order)
        low = retried & (p >= FIRST_ORDER[0]) & (p <= FIRST_ORDER[1]) & (exponent < 0.4)
        self.low = np.where(retried, np.where(low, self.low + 1, 0), self.low)
        newly = (self.low >= LOW_PAIRS) & ~self.nonsmooth
        if newly.any() and self.detected_at is None:
            self.detected_at = float(np.min(np.broadcast_to(t, newly.shape)[newly]))
        self.nonsmooth = self.nonsmooth | newly
        rejected = moving & ~accept & np.isfinite(norm)
        self.t = np.where(rejected, t, np.where(moving, math.nan, self.t))
        self.h = np.where(rejected, h_try, self.h)
        self.err = np.where(rejected, norm, self.err)
