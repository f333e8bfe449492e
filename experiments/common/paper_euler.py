r"""The paper's projected-Euler loop for covariance ODEs, in plain numpy (MATH.md §6).

A faithful re-implementation of the solver of the authors' experiment code
(vcastin/2025-transformers-PDEs), kept small and separate so that experiments and
``benchmarks/paper.py`` can compare tpde's batched Gaussian ODE against it:

    repeat up to max_iter times:
        R = rhs(Σ);  r = ‖R‖_F
        Σ ← Π(Σ + h R)          Π: eigenvalues < 0 set to 1e-14 (projection onto PSD)
        if r < tol_low:  "converged" (the state returned is the one whose rhs was r)
        elif tr Σ > tol_high:  "diverged"

One run is one Python loop over 2×2 … 5×5 numpy matrices, exactly as the authors run it;
it is the baseline, not a tpde route. The right-hand sides are those of the code
(MATH.md §3): softmax and L2 ("code" form) with scale 1/√d, multi-head with H row blocks
and scale 1/√(d/H), Sinkhorn with ε = 1 and no scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RHS", "PaperRun", "projected_euler", "rhs_l2", "rhs_multihead", "rhs_sinkhorn"]


def _psd_sqrt(S: np.ndarray) -> np.ndarray:
    evals, evecs = np.linalg.eigh(S)
    return (evecs * np.sqrt(np.clip(evals, 0.0, None))) @ evecs.T


def rhs_softmax(S, Q, K, V, heads: int = 1) -> np.ndarray:
    """VΣAΣ + transpose, A = KᵀQ/√d."""
    A = K.T @ Q / np.sqrt(S.shape[0])
    R = V @ S @ A @ S
    return R + R.T


def rhs_l2(S, Q, K, V, heads: int = 1) -> np.ndarray:
    """2VΣ(I + 2KᵀKΣ)⁻¹AΣ + transpose, A = KᵀQ/√d (the code form of L2)."""
    d = S.shape[0]
    A = K.T @ Q / np.sqrt(d)
    R = 2 * V @ S @ np.linalg.inv(np.eye(d) + 2 * K.T @ K @ S) @ A @ S
    return R + R.T


def rhs_multihead(S, Q, K, V, heads: int = 1) -> np.ndarray:
    """Σ_h C_hΣA_hΣ + transpose with row blocks of size k = d/H: A_h = K_hᵀQ_h/√k, C_h = E_hᵀV_h.

    Q and K with fewer than d rows leave the missing heads empty (A_h = 0), as the code's
    slicing does.
    """
    d = S.shape[0]
    k = d // heads
    R = np.zeros_like(S)
    for h in range(heads):
        rows = slice(k * h, k * (h + 1))
        A = K[rows].T @ Q[rows] / np.sqrt(k)
        C = np.zeros_like(V)
        C[rows] = V[rows]
        R += C @ S @ A @ S
    return R + R.T


def rhs_sinkhorn(S, Q, K, V, heads: int = 1) -> np.ndarray:
    """V A^{-T} Σ⁺ C Σ + transpose, C = ½(Σ^{1/2}(I + 4Σ^{1/2}AᵀΣAΣ^{1/2})^{1/2}Σ^{+1/2} − I).

    The code form of MATH.md §3 (ε = 1, A = KᵀQ unscaled), pseudo-inverses as in the code.
    """
    d = S.shape[0]
    A = K.T @ Q
    root = _psd_sqrt(S)
    P = root @ A.T
    C = 0.5 * (root @ _psd_sqrt(4 * P @ S @ P.T + np.eye(d)) @ np.linalg.pinv(root) - np.eye(d))
    R = V @ np.linalg.pinv(A.T) @ np.linalg.pinv(S) @ C @ S
    return R + R.T


RHS = {
    "softmax": rhs_softmax,
    "l2": rhs_l2,
    "multihead": rhs_multihead,
    "sinkhorn": rhs_sinkhorn,
}


def project_psd(S: np.ndarray, floor: float = 1e-14) -> np.ndarray:
    """Eigenvalues below 0 set to ``floor`` (the code's projection onto PSD matrices)."""
    evals, evecs = np.linalg.eigh(S)
    evals[evals < 0] = floor
    return (evecs * evals) @ evecs.T


@dataclass(frozen=True)
class PaperRun:
    """One run of :func:`projected_euler`.

    path : (T, d, d) the iterates (only when ``keep_path``; else the last one);
    status : "converged", "blow_up" (tr Σ > tol_high) or "completed" (max_iter steps done,
    tpde's name for reaching the horizon max_iter · h without an event);
    iterations : steps taken;  final : the state the status refers to;  time : iterations · h.
    """

    path: np.ndarray
    status: str
    iterations: int
    final: np.ndarray
    time: float


def projected_euler(
    S0,
    Q,
    K,
    V,
    *,
    variant: str = "softmax",
    heads: int = 1,
    step: float = 0.01,
    tol_low: float = 1e-5,
    tol_high: float = 1e3,
    max_iter: int = 50_000,
    keep_path: bool = False,
) -> PaperRun:
    """Run the authors' projected-Euler loop on one covariance (see the module docstring)."""
    rhs = RHS[variant]
    S = np.array(S0, dtype=float)
    path = [S.copy()] if keep_path else []
    status = "completed"
    iterations = max_iter
    final = S
    for i in range(max_iter):
        R = rhs(S, Q, K, V, heads)
        norm = np.linalg.norm(R)
        new = project_psd(S + step * R)
        if norm < tol_low:
            status, iterations, final = "converged", i, S
            break
        S = new
        if keep_path:
            path.append(S.copy())
        if np.trace(S) > tol_high:
            status, iterations, final = "blow_up", i + 1, S
            break
    else:
        final = S
    out = np.array(path) if keep_path else final[None]
    return PaperRun(out, status, iterations, final, iterations * step)
