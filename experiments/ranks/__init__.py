"""Experiment 2: rank histograms of the stationary covariances, d ∈ {3, 4, 5} (MATH.md §6).

Q = randn(d//2, d) (``np.random.seed(40)``, 100 per d), K = −Q, so A = −QᵀQ/√d ⪯ 0 and
(MATH.md §4 item 4) stationary points have rank ≤ dim ker Q = ⌈d/2⌉; V = I or V = GᵀG
(seed 26 for softmax, 27 for L2); one Σ₀ = SSᵀ per run from the stream of
``np.random.seed(41)`` (reset per d). The authors' protocol draws Σ₀ after Σ₀ and moves on
to the next Q only when a run converges (‖Σ̇‖_F < tol before max_iter · h, tr Σ ≤ 1e3);
rank = #{eigenvalues > 0.1} of the converged Σ, and ranks above ⌈d/2⌉ are left out.

Here every run is a batched Gaussian ODE (tpde, one batch per d, each to its own horizon)
with the same stopping rules and horizons. The protocol's pairing of Q's with draws depends
on which runs fail; it is resolved by speculative rounds (each round evaluates the pairs
every possible shift may need, in one batch), so the pairs are exactly those the authors'
loop would visit if it solved the ODE exactly (:mod:`tpde.experiments.common.rank_protocol`).

The method: Dormand–Prince for V = I; the L-stable Rosenbrock method ``"rodas4"`` for
V = GᵀG, whose flows are stiff. Near the stationary manifold the fast modes of the moment
ODE decay at rates ~‖V‖‖A‖‖Σ‖ (10–10³) while the slow ones creep (‖Σ̇‖ ~ 1/t²) over
horizons of 10³–10⁴, so an explicit step is bounded by stability, not accuracy: on 20
starts of the softmax d = 4 row dopri5 took 3100 iterations (max 3100 attempts of one
element) where rodas4 takes 118, with the same ranks. The paper's own Euler step sits at
that stability bound and beyond it: its loop blows up (tr Σ > 1e3 within a few steps) on
many starts the ODE brings to convergence. So for V = GᵀG the records are also re-run at
``tight_rtol`` (the converged reference), and the paper's loop on a subset of them at h and
at h / ``subset_refine``, each compared with it. Timings are CPU seconds on one thread.

For V = I the limit is known in closed form: W(WᵀΣ₀⁻¹W)⁻¹Wᵀ with W an orthonormal basis of
ker Q (WᵀΣ⁻¹W is conserved by both the softmax and the L2 flow and BΣ* = 0), so the exact
rank counts are computed too ("theory"), and the counts of the paper's projected-Euler loop
(:mod:`paper_euler`) on the same pairs.
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
