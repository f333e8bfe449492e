r"""Which degree leads the escape from uniform on S², and what its seeding predicts for the
first plateau (issue 35; MATH.md §9, "Metastability on S²"): the S² side of the circle
study's finite-N seeding (:func:`experiments.circle_pde.metastable.lead_share`).

**Linear stage.** While the cloud is near uniform, every component of degree l grows at
λ_l = l(l + 1)i_l(β)/(βi_0(β)), so the degree-l amplitude A_l = √E_l, E_l =
(1/N²)Σ_{ij}P_l(⟨x_i, x_j⟩), grows as A_l(t) = A_l(0)e^{λ_l t}.

- The **measured lead** of a run is the degree l with the largest A_l at the first save
  where max_l A_l ≥ ε (``escape_level``), S¹'s rule
  (:func:`~experiments.circle_pde.metastable.leading_mode`) on the saved A_l (T, LMAX), at
  the time t_e of that save (:func:`escape_save`).
- The **predicted lead** of a draw is argmax_l A_l(0)e^{λ_l t_e} (:func:`predicted_lead`):
  the linear growth of the draw's own t = 0 amplitudes, read at the measured t_e.
- The **lead share** (:func:`lead_share`): for N i.i.d. uniform tokens N·E_l(0) = z_l²,
  z_l² ~ χ²_{2l+1}/(2l + 1) (the 2l + 1 coefficients of degree l are asymptotically
  independent normal, independent over l), so degree l reaches ε at
  t_l = (ln ε√N − ln z_l)/λ_l and the first is argmin_l t_l; the share of clouds whose
  first is l* is sampled. Degrees l ≤ LMAX = 8 (λ_9 ≤ 0.11 at the study's β, far below λ_l*).

**Peaks at the escape** [ours, diagnostics of the rule "first plateau = peaks of f_l*",
chosen after the full run] (:func:`escape_peaks`): per draw the number of positive local
maxima of

- f_lead(x) = Σ_j w_j P_lead(⟨x, x_j⟩), the initial cloud's part of the measured leading
  degree (``lead_peaks``);
- g_T(x) = Σ_{l=1}^{LMAX} (2l + 1)e^{λ_l T} f_l(x), the initial cloud's profile evolved
  linearly (the density's excess is (1/4π)Σ_l(2l + 1)f_l), at the measured escape time
  T = t_e (``escape_evolved_peaks``) and at T_1 = t_e + ln(1/ε)/λ_lead, where the lead's
  linear amplitude reaches 1 (``evolved_peaks``). At t_e itself every degree l ≤ LMAX is
  still within a small factor of its noise (A_l(0) ~ 1/√N, ε = 0.1): g_te has 5–15 peaks
  in the full sweep, the noise's, not a pattern; by T_1 the fast degrees lead by 1/ε more;
- the cloud's *own* degree-lead part at the escape save (``own_peaks``, recorded by the
  run): linear growth keeps a degree's shape (its 2l + 1 components grow at one rate), so
  its peaks equal those of f_lead while the stage is linear.

References: Bruno, Pasqualotto, Agazzi (arXiv:2410.23228) for the degree l*; the seeding
model is ours (MATH.md §9).
"""

from __future__ import annotations

import math

import numpy as np

from tpde.theory import dominant_mode, instability_rate

from ..circle_pde.metastable import leading_mode
from ..common.sphere_clusters import Profile, SphereCells

__all__ = [
    "degree_rates",
    "escape_peaks",
    "escape_save",
    "lead_share",
    "predicted_lead",
    "seeding",
]


def degree_rates(beta: float, top: int) -> np.ndarray:
    """λ_l (top,) for l = 1 … top on S² (:func:`tpde.theory.instability_rate`, d = 3)."""
    return np.array([float(instability_rate(l, beta, d=3)) for l in range(1, top + 1)])


def escape_save(amplitudes, level: float) -> int | None:
    """The first save (index) where max_l A_l ≥ ``level`` (amplitudes (T, top), NaN rows of
    a stopped run ignored); None when there is none."""
    a = np.asarray(amplitudes, dtype=float)
    top = np.where(np.isfinite(a), a, -np.inf).max(axis=1)
    above = np.flatnonzero(top >= level)
    return None if len(above) == 0 else int(above[0])


def predicted_lead(start, rates, t: float) -> int:
    """argmax_l A_l(0)e^{λ_l t} (1-based degree) of the amplitudes ``start`` (top,) and
    the rates ``rates`` (top,) at time t: the degree the linear growth puts first."""
    start, rates = np.asarray(start, dtype=float), np.asarray(rates, dtype=float)
    if start.shape != rates.shape or start.ndim != 1:
        raise ValueError(f"start and rates must be (top,) each; received shapes {start.shape} "
                         f"and {rates.shape}.")  # fmt: skip
    return int(np.argmax(np.log(start) + rates * t)) + 1


def lead_share(beta: float, n: int, level: float, samples: int = 20_000, seed: int = 0,
               top: int = 8) -> tuple[float, float]:  # fmt: skip
    r"""The share of N = ``n`` i.i.d. uniform clouds on S² whose first degree to reach
    A_l = ε (``level``) under the linear growth is l*, and the median time it does.

    N·E_l(0) = z_l², z_l² ~ χ²_{2l+1}/(2l + 1) independent over l ≤ ``top``; degree l
    reaches ε at t_l = (ln ε√N − ln z_l)/λ_l (module notes); sampled ``samples`` times
    (seeded).

    Returns
    -------
    (share, median min_l t_l) : floats.
    """
    if n < 2 or not 0 < level < 1 or samples < 1:
        raise ValueError(f"need n >= 2, level in (0, 1) and samples >= 1; received n = {n}, "
                         f"level = {level}, samples = {samples}.")  # fmt: skip
    rates = degree_rates(beta, top)
    dof = 2 * np.arange(1, top + 1) + 1
    z = np.sqrt(np.random.default_rng(seed).chisquare(dof, size=(samples, top)) / dof)
    reach = (math.log(level * math.sqrt(n)) - np.log(z)) / rates
    first = reach.argmin(axis=1) + 1
    return float((first == dominant_mode(beta, d=3)).mean()), float(np.median(reach.min(axis=1)))


def evolved_weights(beta: float, horizon: float, top: int) -> np.ndarray:
    """(top + 1,): 0 at l = 0, (2l + 1)e^{(λ_l − λ_max)·horizon} at l ≥ 1 (the common
    factor e^{λ_max·horizon} does not move the peaks)."""
    rates = np.concatenate([[0.0], degree_rates(beta, top)])
    out = (2 * np.arange(top + 1) + 1) * np.exp((rates - rates.max()) * horizon)
    out[0] = 0.0
    return out


def escape_peaks(points, beta: float, lead: int, escape: float, level: float,
                 cells: SphereCells, top: int = 8) -> dict:  # fmt: skip
    """The peaks of the initial cloud's degree-``lead`` part (``lead_peaks``) and of its
    profile evolved linearly to the escape time ``escape`` (``escape_evolved_peaks``) and
    to escape + ln(1/level)/λ_lead (``evolved_peaks``) (module notes)."""
    profile = Profile(points, top)
    only = np.zeros(top + 1)
    only[lead] = 1.0
    later = escape + math.log(1 / level) / float(instability_rate(lead, beta, d=3))
    return {
        "lead_peaks": len(profile.maxima(only, cells)),
        "escape_evolved_peaks": len(profile.maxima(evolved_weights(beta, escape, top), cells)),
        "evolved_peaks": len(profile.maxima(evolved_weights(beta, later, top), cells)),
    }


def own_peaks(points, degree: int, cells: SphereCells) -> int:
    """The peaks of a cloud's own degree-``degree`` part f_degree (module notes)."""
    only = np.zeros(degree + 1)
    only[degree] = 1.0
    return len(Profile(points, degree).maxima(only, cells))


#: The keys of :func:`seeding` (all None for a draw that never reaches the level).
KEYS = ("lead", "escape_time", "predicted", "lead_peaks", "escape_evolved_peaks",
        "evolved_peaks")  # fmt: skip


def seeding(points, amplitudes, times, beta: float, level: float, cells: SphereCells) -> dict:
    """Per draw: the measured lead and its time (``lead``, ``escape_time``), the predicted
    lead (``predicted``) and :func:`escape_peaks` at the measured escape time, from the
    initial cloud ``points`` (N, 3) and the saved amplitudes (T, top) at ``times`` (T,);
    every entry None when no save reaches ``level``."""
    a = np.asarray(amplitudes, dtype=float)
    j = escape_save(a, level)
    if j is None:
        return dict.fromkeys(KEYS)
    top, t = a.shape[1], float(times[j])
    lead = leading_mode(a, level)
    return {"lead": lead, "escape_time": t,
            "predicted": predicted_lead(a[0], degree_rates(beta, top), t),
            **escape_peaks(points, beta, lead, t, level, cells, top)}  # fmt: skip
