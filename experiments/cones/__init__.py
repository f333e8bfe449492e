"""Experiment 1: the paper's 2-D covariance figures in the PSD cone (MATH.md §6).

For d = 2 a covariance [[a, c], [c, b]] is the point (a − b, 2c, a + b) of the cone
{z ≥ √(x² + y²)}; rank-one matrices lie on its surface. Each panel starts a grid of
trace-one covariances, flows them with the settings of the paper's figures (matrices from
numpy's legacy ``np.random.seed`` exactly as the authors' code draws them) on tpde's
batched Gaussian ODE (Dormand–Prince, events: ‖Σ̇‖_F < tol_low converged, tr Σ > tol_high
blow-up, horizon max_iter · h), and re-runs a subset of starts with the paper's
projected-Euler loop (:mod:`paper_euler`) for comparison.

Panels: ``zero`` (convergence to 0: softmax, L2, multi-head H = 2, Sinkhorn), ``line``
(to a line), ``plane`` (multi-head: full-rank limits), ``two_lines`` (rank one along the
isotropic lines of A), ``blowup`` (finite-time blow-up vs exponential divergence) and
``initial`` (dependence on the initial data).
"""

from __future__ import annotations

from .config import NAME, ORDER, QUICK, TITLE, Config
from .plot import plot
from .report import report
from .run import run

__all__ = ["NAME", "ORDER", "QUICK", "TITLE", "Config", "plot", "report", "run"]
