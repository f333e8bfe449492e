r"""Metastability on S² measured (issue 35): the escape from uniform against ln N, the first
plateau's count against the peaks of the initial cloud's degree-l* part, the plateaus'
lifetimes and merges against β (MATH.md §9, "Metastability on S²").

The flow is the sphere study's post-LN softmax (Q = K = V = I, score β⟨x, y⟩, SA), tokens
i.i.d. uniform on S², dopri5 (rtol 1e-6, atol 1e-8) on the ``auto`` engine (harmonics from
~1500 tokens, :func:`tpde._engines.harmonics.pick_harmonics`), run in chunks by
:func:`experiments.circle_pde.run.follow` (dense saves: dopri5's own steps, the saves
interpolated between them). Clusters are counted at every save by
:class:`~experiments.common.sphere_clusters.SphereCells` (caps on a Fibonacci lattice,
the S¹ counter's rule); plateaus, lifetimes and merges of the count series are the S¹
study's (:mod:`experiments.common.circle_clusters`: they only read the series).

**Escape** (``escape_sizes`` × ``escape_draws`` clouds at β = ``escape_beta``, saves every
``meta_dense_step`` to ``escape_t1``). The degree-l amplitude A_l = √E_l, E_l =
(1/N²)Σ_{ij}P_l(⟨x_i, x_j⟩) (:func:`experiments.theory.sphere.harmonic_energy`), has
N·E_l(0) ~ χ²_{2l+1}/(2l + 1) for uniform tokens and grows as e^{λ_l t} while linear (all
2l + 1 components of degree l at the same rate), so A_l* reaches ε at
t = ln N/(2λ_l*) + (ln ε − ln z)/λ_l*, z² ~ χ²_{2l+1}/(2l + 1): a line in ln N of slope
1/(2λ_l*). The counts of these runs give the figure's count-over-time for every N.

**The β sweep** (``meta_seeds`` clouds of ``meta_size`` tokens per β of ``meta_betas``, saves
every ``meta_dense_step`` to ``meta_dense_until`` then every ``meta_step`` to ``meta_t1``; a
run stops once a count ≥ 2 has dropped to one cluster held over ABSORBED saves). Per run
the predictions are made from the initial cloud before it moves (:func:`predictions`).

**The rule, fixed before the full run** [ours, a heuristic: the papers name the degree l*,
not a count, MATH.md §9]: the linear stage multiplies every degree-l part by e^{λ_l t}, so
the density's excess at the end of it is dominated by the degree-l* part f_l*(x) =
Σ_j w_j P_l*(⟨x, x_j⟩) of the initial cloud, and the first plateau has one cluster per
positive local maximum of f_l* ("peaks"). Beside it, as a diagnostic, the peaks of the
linearly evolved profile g(x) = Σ_{l=1}^{LMAX} (2l + 1)e^{λ_l T}f_l(x) at
T = ln N/(2λ_l*) (the time the linear theory gives degree l* an O(1) amplitude): the
degrees next to l* grow almost as fast on S² (λ_3 = 0.683, λ_4 = 0.684 at β = 8), and g
keeps them. A degree-2 part is a quadratic form xᵀAx restricted to S², trace A = 0: two
antipodal maxima, always.

**Seeding** (diagnostics added after the full run, :mod:`.seeding`): every save of every
run records A_l (l ≤ LMAX); per draw the degree leading at the escape (the largest A_l at
the first save where max_l A_l ≥ ``escape_level``) against the one the linear growth of
the draw's own A_l(0) predicts, and the peaks of the leading degree's part, of g at the
measured escape time and of the cloud's own profile at that save (:class:`Watch`).
"""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import torch

from tpde.fields import Normalized, Softmax
from tpde.theory import dominant_mode, instability_rate

from ..circle_pde.metastable import dirac_rate
from ..common.circle_clusters import lifetimes, merges
from ..common.sphere_clusters import Profile, SphereCells
from ..theory.sphere import harmonic_energy
from .seeding import evolved_weights, own_peaks, seeding

__all__ = [
    "ABSORBED",
    "LMAX",
    "TOLERANCES",
    "Watch",
    "amplitudes",
    "check_meta",
    "diagnosed",
    "evolved_coefficients",
    "meta_cells",
    "meta_times",
    "plateau_row",
    "post_ln",
    "predictions",
    "summary",
]

#: Degrees recorded per save (and summed in the evolved profile); saves of one cluster that
#: end a sweep run; dopri5's tolerances (the S¹ study's).
LMAX, ABSORBED = 8, 4
TOLERANCES = SimpleNamespace(rtol=1e-6, atol=1e-8)


def check_meta(config) -> None:
    """Raise ValueError for a metastability part (the ``meta_*``, ``escape_*`` fields of
    the sphere study's Config) that cannot run."""
    if config.meta_betas and (min(config.meta_betas) <= 0 or max(config.meta_betas) > 1e3):
        raise ValueError(f"meta_betas must lie in (0, 1000]; received {config.meta_betas}.")
    if config.meta_size < 2 or config.meta_seeds < 1 or config.meta_count < 2:
        raise ValueError(
            f"meta_size >= 2, meta_seeds >= 1 and meta_count >= 2; received meta_size = "
            f"{config.meta_size}, meta_seeds = {config.meta_seeds}, meta_count = "
            f"{config.meta_count}."
        )
    steps = (config.meta_dense_step, config.meta_step, config.escape_t1, config.escape_beta)
    if min(steps) <= 0 or not config.meta_dense_step <= config.meta_dense_until <= config.meta_t1:
        raise ValueError(
            "meta_dense_step, meta_step, escape_t1 and escape_beta must be > 0 and "
            "meta_dense_step <= meta_dense_until <= meta_t1; received "
            f"{config.meta_dense_step}, {config.meta_step}, {config.escape_t1}, "
            f"{config.escape_beta}, {config.meta_dense_until}, {config.meta_t1}."
        )
    sizes, draws = config.escape_sizes, config.escape_draws
    if len(sizes) != len(draws) or (sizes and (min(sizes) < 2 or min(draws) < 1)):
        raise ValueError(
            f"escape_sizes (N >= 2) and escape_draws (>= 1) need one entry each per size; "
            f"received {sizes} and {draws}."
        )
    if not 0 < config.escape_level < 1:
        raise ValueError(f"escape_level is an amplitude √E_l in (0, 1); received "
                         f"{config.escape_level}.")  # fmt: skip


def post_ln(beta: float) -> Normalized:
    """The sphere model on S²: post-LN softmax, Q = K = V = I, score β⟨x, y⟩."""
    eye = torch.eye(3, dtype=torch.float64)
    return Normalized(Softmax(eye, eye, eye, scale=beta), "post-ln")


def amplitudes(points: torch.Tensor, top: int = LMAX) -> np.ndarray:
    """A_l = √E_l for l = 1 … top of equally weighted tokens (N, 3): (top,)."""
    return harmonic_energy(points.to(torch.float64), top).clamp_min(0).sqrt().numpy()


def evolved_coefficients(beta: float, n: int, top: int = LMAX) -> np.ndarray:
    """a (top + 1,): a_0 = 0, a_l = (2l + 1)e^{λ_l T} with T = ln N/(2λ_l*), scaled by
    e^{−λ_l* T} (the peaks do not depend on a common factor):
    :func:`~.seeding.evolved_weights` at that T."""
    star = float(instability_rate(dominant_mode(beta, d=3), beta, d=3))
    return evolved_weights(beta, math.log(n) / (2 * star), top)


def predictions(points: torch.Tensor, beta: float, cells: SphereCells) -> dict:
    """The rule's count (the peaks of f_l*) and the diagnostic's (the peaks of the evolved
    profile g) of an initial cloud (module notes), with l*."""
    star = dominant_mode(beta, d=3)
    profile = Profile(points, LMAX)
    only = np.zeros(LMAX + 1)
    only[star] = 1.0
    evolved = evolved_coefficients(beta, len(points))
    return {"l_star": star, "peaks": len(profile.maxima(only, cells)),
            "evolved": len(profile.maxima(evolved, cells))}  # fmt: skip


def meta_times(config) -> np.ndarray:
    """Every meta_dense_step to meta_dense_until, then every meta_step to meta_t1."""
    dense = np.arange(0.0, config.meta_dense_until + config.meta_dense_step / 2,
                      config.meta_dense_step)  # fmt: skip
    sparse = np.arange(dense[-1] + config.meta_step, config.meta_t1 + 1e-9, config.meta_step)
    return np.concatenate([dense, sparse])


def meta_cells(config) -> SphereCells:
    """The counter of the metastability part (the ``meta_cells`` … ``meta_min_share``
    fields)."""
    return SphereCells(config.meta_cells, config.meta_radius, config.meta_level,
                       config.meta_min_share)  # fmt: skip


class Watch:
    """A save's visit: the cluster count into ``counts`` (T,), A_l into ``modes`` (T, LMAX)
    and, at the first save where max_l A_l ≥ ``level``, the peaks of the cloud's own part
    of the degree leading there (:func:`~.seeding.own_peaks`) as ``own``."""

    def __init__(self, counts: np.ndarray, modes: np.ndarray, level: float, cells) -> None:
        self.counts, self.modes, self.level, self.cells = counts, modes, level, cells
        self.own: int | None = None

    def __call__(self, j: int, mu) -> None:
        a = amplitudes(mu.points)
        self.modes[j], self.counts[j] = a, self.cells.count(mu.points)
        if self.own is None and a.max() >= self.level:
            self.own = own_peaks(mu.points, int(np.argmax(a)) + 1, self.cells)


def diagnosed(points, watch: Watch, times, beta: float) -> dict:
    """The draw's seeding (:func:`~.seeding.seeding`) from its initial ``points`` (N, 3)
    and ``own_peaks``."""
    found = seeding(points, watch.modes, times, beta, watch.level, watch.cells)
    return {**found, "own_peaks": watch.own}


def summary(config, beta: float, times, counts: np.ndarray, runs: list) -> dict:
    """Per β: l*, the rates, every run's first plateau (the S¹ rule: the first state of a
    count ≥ 1 that no larger count follows), its predictions, states and merges."""
    star, shortest = dominant_mode(beta, d=3), config.meta_min_plateau
    states = [lifetimes(times, c, shortest) for c in counts]
    first = [next((p for p in found if p.count >= 1 and (p.after is None or p.after < p.count)),
                  None) for found in states]  # fmt: skip
    return {
        "l_star": star,
        "rates": [float(instability_rate(l, beta, d=3)) for l in range(1, LMAX + 1)],
        "dirac_rate": dirac_rate(config.meta_count, beta),
        "first": [plateau_row(p) for p in first],
        "peaks": [r["peaks"] for r in runs],
        "evolved": [r["evolved"] for r in runs],
        "tally": dict(Counter(p.count for p in first if p is not None)),
        "states": [[[p.count, p.start, p.duration, p.censored] for p in found] for found in states],
        "merges": [_merge_rows(times, c, shortest) for c in counts],
        "runs": runs,
    }


def plateau_row(p) -> list | None:
    """[count, start, duration, censored, count after] of a plateau, or None."""
    return None if p is None else [p.count, p.start, p.duration, p.censored, p.after]


def _merge_rows(times, counts, shortest: float) -> list:
    return [[m.before, m.after, m.time, m.error] for m in merges(times, counts, shortest)]
