"""Modified Bessel functions of the first kind in log space, at every scale of their
arguments: what :mod:`tpde.theory`'s growth rates and dominant modes need where scipy's
exponentially scaled ``ive`` underflows or returns NaN."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["log_ive"]


def log_ive(order, beta: float) -> np.ndarray:
    """log(I_μ(β)e^{−β}) for orders μ ≥ 0 (an array) and β > 0, at every scale.

    scipy's ive where it is a normal float; where it underflows (β → 0, or μ ≫ β) or is NaN
    (β past ~1e9): the large-argument (Hankel) expansion when μ² < β/10, Debye's uniform
    expansion (two correction terms) when μ ≥ 10, else the power series (DLMF 10.25.2,
    10.40.1, 10.41.3). Relative accuracy of I_μ: 1e-15 (scipy), ~1e-8 (the expansions).
    """
    from scipy.special import gammaln, ive, logsumexp

    mu = np.asarray(order, dtype=float)
    with np.errstate(all="ignore"):
        direct = ive(mu, beta)
        out = np.log(direct)
    bad = ~(np.isfinite(direct) & (direct > 1e-290))
    if not bad.any():
        return out
    m = np.broadcast_to(mu, out.shape)[bad]
    value = np.empty_like(m)
    hankel = (m * m < beta / 10) & (beta > 1e4)
    if hankel.any():  # 1 − (4μ²−1)/(8β) + (4μ²−1)(4μ²−9)/(2(8β)²)
        a = 4 * m[hankel] ** 2
        series = 1 - (a - 1) / (8 * beta) + ((a - 1) / (8 * beta)) * ((a - 9) / (8 * beta)) / 2
        value[hankel] = -0.5 * math.log(2 * math.pi * beta) + np.log(series)
    debye = ~hankel & (m >= 10)
    if debye.any():  # I_μ(μz) ~ e^{μη}(1 + u₁(t)/μ + u₂(t)/μ²)/(√(2πμ)(1 + z²)^{1/4})
        md = m[debye]
        z = beta / md
        root = np.sqrt(1 + z * z)
        t = 1 / root
        u1 = (3 * t - 5 * t**3) / 24
        u2 = (81 * t**2 - 462 * t**4 + 385 * t**6) / 1152
        # μη − β = μ²/(√(μ² + β²) + β) − μ asinh(μ/β): no cancellation of two terms ~β
        exponent = md * md / (np.hypot(md, beta) + beta) - md * np.arcsinh(md / beta)
        value[debye] = (exponent - 0.5 * np.log(2 * math.pi * md) - 0.5 * np.log(root)
                        + np.log1p(u1 / md + u2 / md**2))  # fmt: skip
    small = ~hankel & ~debye
    if small.any():  # Σ_j (β²/4)^j / (j! Γ(μ + j + 1)), 800 terms (β < 1000 here)
        ms = m[small][:, None]
        j = np.arange(800)
        terms = 2 * j * math.log(beta / 2) - gammaln(j + 1) - gammaln(ms + j + 1)
        value[small] = ms[:, 0] * math.log(beta / 2) + logsumexp(terms, axis=1) - beta
    out = np.array(out, dtype=float)
    out[bad] = value
    return out
