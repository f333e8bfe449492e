r"""Experiment 9: the mean-field theory of attention as executed checks (MATH.md §9).

Each part states one prediction of a paper (or of MATH.md §9), computes it with tpde and
sets the measured number beside it (:mod:`tpde.theory` holds the closed forms;
:mod:`.run` the computations).

1. **Equiangular laws** (Rigollet, arXiv:2512.01868): n tokens with equal pairwise inner
   products ρ stay so, and ρ(t) (with the common radius r(t) where it moves) follows a
   scalar ODE per normalisation scheme and kernel (SA: softmax, USA: 1/n normaliser). Particles
   started on an equiangular frame (ρ0 = −1/(2(n − 1)), d = n + 1), dopri5 at rtol
   ``eq_rtol``, against the law solved by DOP853 at 1e-13, for post-LN, pre-LN, peri-LN,
   mix-LN, nGPT; LayerNorm (no law at finite step) against its h → 0 limit, at steps h and
   h/2.
2. **Linear instability of the uniform measure on S¹** (Bruno, Pasqualotto, Agazzi,
   arXiv:2410.23228): λ_k = k²I_k(β)/(βI_0(β)) (SA), k²I_k(β)/β (USA). (a) From
   ``inst_tokens`` i.i.d. uniform tokens × ``inst_seeds`` seeds: the slope of
   log(Σ_s|m_k(t)|²/Σ_s|m_k(0)|²) over the window where every mode's mean power is
   ≤ ``inst_level`` (E|m_k|² ≈ e^{2λ_k t}/N), jackknife errors over the seeds. (b) Each mode
   alone on a lattice of ``lat_tokens`` tokens (amplitude ~kδ), which pins λ_k to ~1e-8
   and the dominant mode argmax_k k²I_k(β) for β = 1 … ``lat_beta_max``.
   **On S²** (:mod:`.sphere`): λ_k = k(k + 1)i_k(β)/(βi_0(β)) (SA), k(k + 1)i_k(β)/β (USA)
   for the degree-k spherical harmonics. (a) ``s2_tokens`` uniform tokens × ``s2_seeds``
   seeds on the ``harmonics`` engine: the degree-k energy E_k = (1/N²)Σ_{ij}P_k(⟨x_i, x_j⟩)
   (addition theorem, O(N·K²)) grows as e^{2λ_k t}/N; the same window rule (``s2_level``)
   and jackknife errors; beside each rate the second order about the uniform measure
   (:mod:`.forcing`, MATH.md §9: the Gaunt forcing of degree k by the products of degrees
   l1, l2), from the draw's own initial moments and in the mean over draws; a rate beyond
   3 % and 2 s.e. of λ_k must be within 2 s.e. of the first. Beside them every order at
   once (:mod:`.galerkin`: the draw's moments through the weak form itself, which the
   particles follow to ~1e-5 in E_k), shown, not judged: it says whether a miss of the
   second order is the expansion's (a higher order) or something else. (b) Each zonal mode alone on
   a Gauss–Legendre × equal-azimuth grid with its weights (exact to degree
   ``s2_lat_degree``, so stationary to rounding), tokens moved by ±``s2_lat_delta`` along
   ∇P_k: λ_k to 1e-6 relative (measured ≤ 5.3e-8 at the defaults), rates below 1e-4 (e.g.
   λ_8 ≈ 2e-6 at β = 1) to 1e-10 absolute (measured ≤ 3.1e-12; float64 resolves
   log c_k(T)/c_k(0) only to ~eps/δ).
3. **Causal clustering** (Karagodin, Polyanskiy, Rigollet, arXiv:2411.04990): post-LN,
   causal softmax, V = I, random Q, K: token 1 never moves, every token converges to it
   (stopped when the diameter is < ``causal_tol``). At large β (Q = K = V = I_2,
   β = ``renyi_beta``) the metastable cluster counts against their Rényi centres
   (δ = ``renyi_delta``/√β, their Fig. 2): between the strong and the plain Rényi counts.
4. **Zero temperature** (Alcalde, Geshkovski, Ruiz-Balet, arXiv:2508.09628): the
   Frank-Wolfe ODE ẋ = Γ(x) − x with hardmax Γ and a positive definite A: interior tokens go
   to the vertex of their Voronoi cell (:func:`tpde.theory.hardmax_vertices`); softmax with
   βA for β in ``hard_betas``: the share that still does by t = ``hard_t1``, and the mean
   distance to the hardmax solution against β.
5. **Synchronisation on S¹** (Criscitiello, Rebjock, McRae, Boumal, arXiv:2405.18273):
   the USA gradient ascent synchronises from almost every start for β ∈ (0, 1] (their
   corollary for φ(t) = e^{βt}, any n); the share of ``sync_seeds`` random starts that
   reach diameter < 1e-4 by t = ``sync_t1`` (time rescaled by e^{β}), against β and n.

Full size: the defaults; part 2 then flows 4 × 10⁶ tokens per β on the spectral engine
(about 1 s per field evaluation per 10⁶ tokens on one core, 80 evaluations per β and kernel),
and part 2 on S² 4 × 10⁵ tokens per β on the harmonics engine (about 1 s per evaluation
per 10⁵ tokens at β = 10, 48 per β and kernel: about 10 minutes of one core in all; the
second-order model adds 0.3–1.5 s per β and kernel at 4 × 10⁵ tokens, measured; the S² random
runs took 457 s in all at load ~8 on two cores; every order, :mod:`.galerkin`, adds its moments
to degree 22–42 and its RK4: 32 s of one core for the 6 runs at 4 × 10⁵ tokens, measured at
load ~1, 1.2–5.0 s and 0.3–5.7 s per β and kernel).
``--set inst_tokens=10000 --set inst_seeds=8`` is the size of the issue's first check (N ≥ 10⁴
averaged over seeds). Quick: ``QUICK`` (under a minute on one core).

Part 2 on S² alone at N = 10⁶ (MATH.md §9, the numbers under "Second order about the
uniform measure on S²"; 898 s CPU for 2 seeds, measured: too much for the full size)::

    python -c "import torch; torch.set_num_threads(1)
    from tpde.experiments.theory.config import Config
    from tpde.experiments.theory.sphere import part_sphere
    from tpde.experiments.theory.report import s2_cells
    a, r = part_sphere(Config(s2_tokens=10**6, s2_seeds=2, s2_lat_modes=0))
    for kernel in ('sa', 'usa'):
        print(*s2_cells(a, r, kernel, (1.0, 5.0, 10.0)), sep='\n')"

"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
