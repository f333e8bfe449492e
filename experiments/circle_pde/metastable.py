r"""Metastability measured (issue 35): the escape from uniform against ln N, the first
plateau's count against k* over β, the plateaus' lifetimes and merges against β.

**Escape.** The cloud's Fourier amplitudes |ĉ_k| = |(1/N)Σ_j e^{−ikθ_j}|, k = 1 … KMAX, are
recorded at every save; the escape time of a draw is the first time |ĉ_k*| reaches ε =
``escape_level``, log-linearly interpolated between the two saves around it (exact for
a mode growing as e^{λt}). While the modes are small, |ĉ_k*(t)| = e^{λ_k* t}|ĉ_k*(0)| with
N|ĉ_k*(0)|² ~ Exp(1) for N i.i.d. uniform tokens, so t = ln N/(2λ_k*) + (ln ε − ln|z|)/λ_k*:
a line in ln N of slope 1/(2λ_k*) (MATH.md §9) with a scatter of sd π/(√24 λ_k*) ≈ 0.94
at β = 5 per draw. :func:`line_fit` fits it by least squares with the slope's standard
error.

**The β sweep.** ``meta_seeds`` clouds of ``meta_size`` tokens per β of ``meta_betas``
follow the flow to ``meta_t1`` (saves every ``dense_step`` to ``dense_until``, then every
``meta_step``); a run stops early once a count ≥ 2 has dropped to one cluster held over
the last ``ABSORBED`` saves (one cluster does not split: the rest is filled with 1). Per
run: the first plateau, every state's lifetime and every merge
(:func:`~tpde.experiments.common.circle_clusters.lifetimes`,
:func:`~tpde.experiments.common.circle_clusters.merges`), and the mode leading at the escape
(:func:`leading_mode`: the largest |ĉ_k| once the largest reaches ``escape_level``).

**Seeding** [ours, MATH.md §9]: while linear, mode k of N uniform tokens reaches ε at
t_k = (ln ε√N − ln|z_k|)/λ_k, |z_k|² ~ Exp(1); :func:`lead_share` is the share of clouds
whose first is k*. At β = 8 (λ_3, λ_5 within 0.08 of λ_4) it is 41 % at N = 2000: the
noise, not the rates, decides the leading mode of most draws, and the first plateau's
misses are draws led by a neighbour mode (measured: 10 of 11 in 60 draws).

**Dirac clusters** [ours, MATH.md §9]: k equal clusters at spacing Δ = 2π/k are unstable at
the rate σ_k(β) = max_j 4 sin²(πj/k)(β sin²Δ − cos Δ)e^{−β(1−cos Δ)}; a plateau lasting
~ ln(1/δ)/σ is the heuristic the lifetimes are set against.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch

from tpde.theory import dominant_mode, instability_rate

from ..common.circle_clusters import lifetimes, merges
from .config import Config

__all__ = [
    "ABSORBED",
    "KMAX",
    "crossing",
    "dirac_rate",
    "escape_times",
    "lead_share",
    "leading_mode",
    "line_fit",
    "meta_times",
    "mode_amplitudes",
    "runner_up",
    "sweep_summary",
]

#: Fourier modes recorded per save; saves of one cluster that end a sweep run.
KMAX, ABSORBED = 8, 4


def mode_amplitudes(points: torch.Tensor, kmax: int = KMAX) -> np.ndarray:
    """|ĉ_k| = |(1/N)Σ_j e^{−ikθ_j}| for k = 1 … kmax of tokens (N, 2) on the circle: (kmax,)."""
    z = torch.complex(points[:, 0], points[:, 1])
    z = z / z.abs()
    power, out = torch.ones_like(z), []
    for _ in range(kmax):
        power = power * z
        out.append(float(power.mean().abs()))
    return np.array(out)


def crossing(times, amplitude, level: float) -> float:
    """The first time ``amplitude`` reaches ``level``, log-linear between the saves around it.

    NaN when it never does, or already does at the first save (no escape to time).
    """
    a = np.asarray(amplitude, dtype=float)
    above = np.flatnonzero(a >= level)
    if len(above) == 0 or above[0] == 0:
        return math.nan
    j = above[0]
    t0, t1 = float(times[j - 1]), float(times[j])
    share = (math.log(level) - math.log(a[j - 1])) / (math.log(a[j]) - math.log(a[j - 1]))
    return t0 + share * (t1 - t0)


def line_fit(x, y) -> dict:
    """Least squares y = offset + slope·x with standard errors.

    Parameters
    ----------
    x, y : (n,) values; n ≥ 3 with two distinct x at least.

    Returns
    -------
    dict
        ``slope``, ``slope_se`` = s/√Σ(x − x̄)², ``offset``, ``offset_se`` =
        s·√(1/n + x̄²/Σ(x − x̄)²), ``sd`` = s = √(RSS/(n − 2)), ``n``.

    Raises ValueError with fewer than 3 points or one distinct x.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y) or len(x) < 3 or len(np.unique(x)) < 2:
        raise ValueError(
            f"a line with standard errors needs n >= 3 points (x, y) at two distinct x at "
            f"least; received {len(x)} x and {len(y)} y, {len(np.unique(x))} distinct x."
        )
    mean, spread = x.mean(), float(((x - x.mean()) ** 2).sum())
    slope = float(((x - mean) * (y - y.mean())).sum() / spread)
    offset = float(y.mean() - slope * mean)
    sd = math.sqrt(float(((y - offset - slope * x) ** 2).sum()) / (len(x) - 2))
    return {
        "slope": slope,
        "slope_se": sd / math.sqrt(spread),
        "offset": offset,
        "offset_se": sd * math.sqrt(1 / len(x) + mean**2 / spread),
        "sd": sd,
        "n": len(x),
    }


def escape_times(times, modes: np.ndarray, k: int, level: float) -> np.ndarray:
    """:func:`crossing` of |ĉ_k| at ``level`` for every draw of ``modes`` (draws, T, KMAX),
    NaN for draws not made (NaN at t = 0)."""
    out = np.full(modes.shape[0], math.nan)
    for s, draw in enumerate(modes):
        if np.isfinite(draw[0, k - 1]):
            seen = np.isfinite(draw[:, k - 1])
            out[s] = crossing(np.asarray(times)[seen], draw[seen, k - 1], level)
    return out


def leading_mode(amplitudes, level: float) -> int | None:
    """The mode k (1-based) with the largest |ĉ_k| at the first save where the largest
    reaches ``level`` (amplitudes (T, KMAX)); None when none does."""
    a = np.asarray(amplitudes, dtype=float)
    top = np.where(np.isfinite(a), a, -np.inf).max(axis=1)
    above = np.flatnonzero(top >= level)
    return None if len(above) == 0 else int(np.nanargmax(a[above[0]])) + 1


def runner_up(beta: float) -> tuple[int, float]:
    """The mode growing second fastest at β and its rate λ (MATH.md §9)."""
    k = dominant_mode(beta)
    rates = {j: float(instability_rate(j, beta)) for j in range(1, 4 * k + 4) if j != k}
    best = max(rates, key=rates.get)
    return best, rates[best]


def lead_share(beta: float, n: int, level: float, samples: int = 20_000, seed: int = 0):
    r"""The share of N = ``n`` i.i.d. uniform clouds whose first mode to reach |ĉ_k| = ε
    (``level``) under the linear growth is k*, and the median time it does (MATH.md §9).

    While linear, |ĉ_k(t)| = |z_k|e^{λ_k t}/√N with N|ĉ_k(0)|² = |z_k|² ~ Exp(1)
    (independent over k ≥ 1), so mode k reaches ε at t_k = (ln ε√N − ln|z_k|)/λ_k and the
    first is argmin_k t_k; sampled ``samples`` times (seeded) over k ≤ 4k* + 8.

    Returns
    -------
    (share, median min_k t_k) : floats.
    """
    k_star = dominant_mode(beta)
    rates = np.array([float(instability_rate(k, beta)) for k in range(1, 4 * k_star + 9)])
    rng = np.random.default_rng(seed)
    z = np.sqrt(rng.exponential(size=(samples, len(rates))))
    reach = (math.log(level * math.sqrt(n)) - np.log(z)) / rates
    first = reach.argmin(axis=1) + 1
    return float((first == k_star).mean()), float(np.median(reach.min(axis=1)))


def dirac_rate(k: int, beta: float) -> float:
    """σ_k(β) = max_j 4 sin²(πj/k)(β sin²Δ − cos Δ)e^{−β(1−cos Δ)}, Δ = 2π/k: the growth
    rate of the fastest perturbation of k equal, equally spaced SA Dirac clusters (MATH.md
    §9, a heuristic of ours); 0 for k = 1."""
    if k < 2:
        return 0.0
    delta = 2 * math.pi / k
    base = (beta * math.sin(delta) ** 2 - math.cos(delta)) * math.exp(-beta * (1 - math.cos(delta)))
    return max(4 * math.sin(math.pi * j / k) ** 2 * base for j in range(1, k))


def meta_times(config: Config) -> np.ndarray:
    """Every dense_step to dense_until, then every meta_step to meta_t1 (both ends in)."""
    dense = np.arange(0.0, config.dense_until + config.dense_step / 2, config.dense_step)
    sparse = np.arange(dense[-1] + config.meta_step, config.meta_t1, config.meta_step)
    reached = sparse[-1] if len(sparse) else dense[-1]
    last = [config.meta_t1] if config.meta_t1 > reached + 1e-9 else []
    return np.concatenate([dense, sparse, last])


def sweep_summary(config: Config, beta: float, times, counts: np.ndarray, runs: list,
                  amplitudes: list) -> dict:  # fmt: skip
    """Per β of the sweep: k*, its rate, the runner-up, every run's first plateau (the first
    joined state of :func:`lifetimes` with a count ≥ 1 that no larger count follows),
    states, merges, and the mode leading at the escape (:func:`leading_mode` of each run's
    |ĉ_k| (T, KMAX) in ``amplitudes``); counts (draws, T), runs one dict per draw."""
    k = dominant_mode(beta)
    second, second_rate = runner_up(beta)
    states = [lifetimes(times, c, config.min_plateau) for c in counts]
    first = [next((p for p in found if p.count >= 1 and (p.after is None or p.after < p.count)),
                  None) for found in states]  # fmt: skip
    return {
        "k_star": k,
        "rate": float(instability_rate(k, beta)),
        "runner_up": second,
        "runner_up_rate": second_rate,
        "dirac_rate": dirac_rate(k, beta),
        "first": [
            None if p is None else [p.count, p.start, p.duration, p.censored, p.after]
            for p in first
        ],
        "tally": dict(Counter(p.count for p in first if p is not None)),
        "states": [[[p.count, p.start, p.duration, p.censored] for p in found] for found in states],
        "merges": [
            [[m.before, m.after, m.time, m.error] for m in merges(times, c, config.min_plateau)]
            for c in counts
        ],
        "runs": runs,
        "leading": [leading_mode(a, config.escape_level) for a in amplitudes],
    }
