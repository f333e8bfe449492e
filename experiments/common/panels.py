"""The paper's 2-D panels (Castin et al., Figs. 2–4): their matrices, drawn with numpy's
legacy generator exactly as the authors' script draws them, and the closed-form blow-up of
the V = I softmax flow (MATH.md §4 item 2). Shared by the cones study and
``benchmarks/blowup.py``."""

from __future__ import annotations

import numpy as np

__all__ = ["legacy", "panel_setup", "softmax_blowup"]


def legacy(seed: int) -> np.random.RandomState:
    """numpy's legacy generator: the stream of ``np.random.seed(seed)`` + ``np.random.*``."""
    return np.random.RandomState(seed)


def _redraw(seed: int, accept) -> tuple[np.ndarray, np.ndarray]:
    rng = legacy(seed)
    for _ in range(1000):
        Q, K = rng.randn(2, 2), rng.randn(2, 2)
        if accept(np.linalg.eigvalsh(K.T @ Q + Q.T @ K)):
            break
    return Q, K


def panel_setup(panel: str, config=None) -> dict:
    """Q, K, V and, per variant, (step h, tol_low, tol_high, max_iter, heads); the grid.

    ``panel``: "zero", "line", "plane", "two_lines", "blowup" or "initial" (the paper's
    Fig. 2–4 panels). ``config``: an object with the grid sizes ``two_lines_grid``,
    ``blowup_grid`` and ``initial_grid`` (the cones study's Config; None: the defaults).
    """
    if panel == "zero":
        rng = legacy(35)
        Q = rng.rand(2, 2)
        G = rng.randn(2, 2)
        QKV = (Q, -Q, G @ G.T)
        runs = {
            "softmax": (0.3, 1e-5, 1e3, 50_000, 1),
            "l2": (0.3, 1e-5, 1e3, 50_000, 1),
            "multihead": (0.3, 1e-5, 1e3, 50_000, 2),
            "sinkhorn": (0.5, 1e-5, 1e3, 50_000, 1),
        }
        grid = (10, 0.5)
    elif panel in ("line", "plane"):
        q = legacy(36).randn(1, 2)
        q = q / np.linalg.norm(q)
        QKV = (q, -q, np.eye(2))
        if panel == "line":
            runs = {"softmax": (0.5, 1e-4, 1e3, 50_000, 1), "l2": (0.5, 1e-4, 1e3, 50_000, 1)}
        else:
            runs = {"multihead": (0.5, 1e-4, 1e3, 50_000, 2)}
        grid = (10, 0.5)
    elif panel == "two_lines":
        Q, K = _redraw(36, lambda e: e[0] * e[1] < 0)
        QKV = (Q, K, legacy(32).randn(2, 2))
        runs = {"softmax": (0.01, 1e-7, 1e3, 50_000, 1), "l2": (0.01, 1e-7, 1e3, 50_000, 1)}
        grid = (config.two_lines_grid if config else 20, 1.0)
    elif panel == "blowup":
        Q, K = _redraw(33, lambda e: e[0] > 0)
        QKV = (Q, K, np.eye(2))
        runs = {
            "softmax": (0.01, 1e-4, 1e3, 100_000, 1),
            "multihead": (0.002, 1e-4, 1e3, 100_000, 2),
            "l2": (0.001, 1e-5, 1e4, 50_000, 1),
            "sinkhorn": (0.01, 1e-5, 1e4, 50_000, 1),
        }
        grid = (config.blowup_grid if config else 40, 1.0)
    elif panel == "initial":
        Q, K = _redraw(36, lambda e: e[0] * e[1] < 0)
        rng = legacy(35)
        rng.randn(8, 7)  # discarded, as in the authors' script
        QKV = (Q, K, rng.randn(2, 2))
        # The authors' script runs its "multi-head" panel with H = 1 (identical to softmax);
        # the panel shows H = 2, the multi-head field the caption names.
        runs = {
            "softmax": (0.003, 1e-4, 1e3, 50_000, 1),
            "l2": (0.002, 1e-4, 1e3, 50_000, 1),
            "multihead": (0.002, 1e-4, 1e3, 50_000, 2),
        }
        grid = (config.initial_grid if config else 30, 1.0)
    else:
        raise ValueError(f"unknown panel {panel!r}")
    return {"QKV": QKV, "runs": runs, "grid": grid}


def softmax_blowup(S0: np.ndarray, A: np.ndarray, threshold: float):
    """V = I softmax closed form (MATH.md §4 item 2): Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹.

    Returns t* (blow-up time), the time where tr Σ(t) = threshold (bisection) and the
    angle of the blow-up direction (kernel of Σ₀⁻¹ − t*(A + Aᵀ)).
    """
    sym = A + A.T
    inv0 = np.linalg.inv(S0)
    evals, vecs = np.linalg.eigh(S0)
    root = (vecs * np.sqrt(evals)[..., None, :]) @ np.swapaxes(vecs, -1, -2)
    t_star = 1 / np.linalg.eigvalsh(root @ sym @ root)[..., -1]
    lo, hi = np.zeros_like(t_star), t_star.copy()
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        trace = np.trace(np.linalg.inv(inv0 - mid[:, None, None] * sym), axis1=-2, axis2=-1)
        big = trace > threshold
        hi, lo = np.where(big, mid, hi), np.where(big, lo, mid)
    _, kvecs = np.linalg.eigh(inv0 - t_star[:, None, None] * sym)
    kernel = kvecs[..., :, 0]
    return t_star, hi, np.mod(np.arctan2(kernel[..., 1], kernel[..., 0]), np.pi)
