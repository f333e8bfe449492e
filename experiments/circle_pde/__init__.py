r"""Experiment 11: particles against the mean-field PDE on the circle — distance, rate in N,
metastable plateaus.

From one initial density ρ₀ ∝ 1 + a cos θ + a cos k*θ on S¹ (k* = dominant_mode(β), a =
``amplitude``, small: 2·10⁻⁴), the Transformer PDE is solved as a density
(:class:`tpde.flows.CircleSystem`, pseudo-spectral, SA post-LN, β) on each of ``grids``
angles until the clusters it forms sharpen past the grid (status "unresolved"), and N
tokens drawn from ρ₀ (N = 10³ … 10⁶; ``seeds`` draws below 10⁵, ``large_seeds`` at 10⁵,
one at 10⁶) follow the particle flow on the spectral engine (dopri5, to t1 = 300, saved
every 0.25 up to 20, then every 10; dopri5 takes its own steps and the saves between them
are its cubic Hermite interpolants: :func:`.flow.follow`). Then, from the saved data:

- W1 on the circle between the particles and the PDE (finest grid; :func:`tpde.metrics.
  w1_circle`, exact) and its rate in N: the median slope of log W1 against log N at the
  saved times where the noise of the smallest cloud is still linear, e^{λ_k* t}/√N_min ≤
  0.1 (the Monte-Carlo error N^{-1/2} carried by the linearised flow).
- W1 past the first clusters (issue 35; :mod:`.gap`): the PDE from the same ρ₀ on grids
  refined up to ``long_grid``, then along its characteristics, to ``long_t1``, against the
  first cloud of the largest N at every common save; beside it the Monte-Carlo level
  E W1(ρ(t), N-draw) (Brownian bridges) and the linear prediction (the initial deviation's
  modes grown by e^{λ_k t}); rules: it leaves the MC level where g > 2s̄, the linear
  prediction holds while |g/L − 1| ≤ 10%.
- The cluster count of every saved cloud and PDE density, one definition for both
  (:mod:`tpde.experiments.common.circle_clusters`: arcs where the density averaged over a
  window exceeds twice the uniform one, holding ≥ 5% of the mass), its plateaus (runs of
  one count lasting ≥ ``min_plateau``) and the first one per draw: start, count, duration
  until the count changes (a merge), censored at t1; and the first time with a cluster (count ≥ 1).
- The metastable picture of Bruno, Pasqualotto, Agazzi (arXiv:2410.23228): from
  near-uniform, the dominant mode k* grows at λ_k* (:func:`tpde.theory.instability_rate`)
  from the sampling noise 1/√N, so ≈ k* clusters form at log N/(2λ_k*) + c, and persist
  long before merging. The fitted slope of start against log N is compared with
  1/(2λ_k*); a ≪ 1/√N keeps the particles noise-driven, and the PDE, whose modes start at
  a/2, is the point N_eff = 4/a² of the same line. ``more_betas`` repeat the plateaus
  (sizes below the largest).
- Metastability measured (issue 35; :mod:`.metastable`, claims in :mod:`.meta_report`):
  the escape time (|ĉ_k*| reaches ``escape_level``) of every draw at β (at least
  ``escape_seeds`` per N; the extra ones stop once escaped) fitted as a + b·ln N with the
  slope's standard error, against 1/(2λ_k*) (agrees iff within 2 s.e.); a β sweep
  (``meta_betas``, ``meta_seeds`` clouds of ``meta_size`` tokens to ``meta_t1``, stopped
  once absorbed in one cluster): the first plateau's count against k* (agrees in ≥ 90% of
  draws), the lifetimes of the ``meta_count``-cluster state fitted as log T = c + κβ
  (uncensored only; censored ones are lower bounds), κ > 0 (Geshkovski, Koubbi, Polyanskiy,
  Rigollet) and κ against the Dirac heuristic's, and every merge. The lifetimes are those of
  each draw's first *settled* state of that count (one a larger count does not follow:
  :func:`~experiments.common.circle_clusters.settled`, S²'s rule too).
- Cost: every run (the PDE per grid, each draw) is a task on ``workers`` processes
  (:mod:`.draws`, :class:`~experiments.common.pool.Workers`; 2 at full size, 1 at the
  quick size, which ``make run`` runs beside another study), from clouds drawn
  beforehand in the serial order: the same arrays and results as on one process (tested).
  The results record each run's CPU seconds and each part's (pde, particles, escape,
  sweep, total).
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
