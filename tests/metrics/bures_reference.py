"""A high-precision oracle of the Bures Monge matrix and its condition number.

Used by tests/metrics/test_bures_accuracy.py and benchmarks/bures_accuracy.py.

- :func:`reference_monge`: T = Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2} in mpmath at 40
  digits from the float64 input taken exactly (so it is the exact answer for that input:
  with eigenvalues ≥ 1e-8 · λ_max, 40 digits leave ≥ 20 after the 1e16 squaring).
- :func:`condition_number`: κ = ‖DT‖ ‖(Σ₀, Σ₁)‖_F / ‖T‖_F, the relative condition number of
  (Σ₀, Σ₁) ↦ T for symmetric perturbations (Higham, *Functions of Matrices*, §3.1). The
  Fréchet derivative comes from T Σ₀ T = Σ₁: with A = Σ₀^{1/2}, C = ATA,
  δT = A⁻¹ L_C⁻¹(A δΣ₁ A − C A⁻¹ δΣ₀ A⁻¹ C) A⁻¹, L_C(Y) = YC + CY; its norm by power
  iteration on DTᵀDT (60 steps: the bound needs one digit). eps · κ is the error a
  backward-stable algorithm may make; an algorithm within a small factor of it "tracks the
  problem's own conditioning".
- :func:`ill_conditioned`: the test pairs: eigenvalues in [0.5, 1.5] with a quarter of them
  (at least one) at ~1e-8, in a random basis.
"""

from __future__ import annotations

import mpmath
import torch

F64 = torch.float64
DIGITS = 40
CASES = ("well", "one", "source", "both")  # which covariance is near-singular: Σ₁, Σ₀, both


def ill_conditioned(d: int, singular: bool, generator) -> torch.Tensor:
    """A covariance (d, d): eigenvalues U[0.5, 1.5], ⌈d/4⌉ of them ~1e-8 when ``singular``."""
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=F64))
    lam = torch.rand(d, generator=generator, dtype=F64) + 0.5
    if singular:
        k = max(1, d // 4)
        lam[:k] = 1e-8 * (1 + torch.rand(k, generator=generator, dtype=F64))
    S = Q @ torch.diag(lam) @ Q.T
    return 0.5 * (S + S.T)


def pair(d: int, case: str, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ₀, Σ₁) of a case in :data:`CASES`."""
    S0 = ill_conditioned(d, case in ("source", "both"), generator)
    S1 = ill_conditioned(d, case in ("one", "both"), generator)
    return S0, S1


def _mp(matrix: torch.Tensor):
    return mpmath.matrix(matrix.tolist())  # floats convert exactly


def _sqrt(matrix, inverse: bool = False):
    evals, evecs = mpmath.eigsy(matrix)
    roots = [mpmath.sqrt(e) if e > 0 else mpmath.mpf(0) for e in evals]
    roots = [1 / r if inverse else r for r in roots]
    return evecs * mpmath.diag(roots) * evecs.T


def _torch(matrix) -> torch.Tensor:
    return torch.tensor(
        [[float(matrix[i, j]) for j in range(matrix.cols)] for i in range(matrix.rows)], dtype=F64
    )


def _parts(S0: torch.Tensor, S1: torch.Tensor):
    """A = Σ₀^{1/2}, A⁻¹, C = (AΣ₁A)^{1/2}, T, all computed at 40 digits, rounded to float64."""
    with mpmath.workdps(DIGITS):
        A = _sqrt(_mp(S0))
        A_inv = _sqrt(_mp(S0), inverse=True)
        C = _sqrt(A * _mp(S1) * A)
        T = A_inv * C * A_inv
        return tuple(map(_torch, (A, A_inv, C, T)))


def reference_monge(S0: torch.Tensor, S1: torch.Tensor) -> torch.Tensor:
    """The Monge matrix at 40 digits, rounded to float64, (d, d)."""
    return _parts(S0, S1)[3]


def frechet(S0: torch.Tensor, S1: torch.Tensor):
    """(DT, DTᵀ, T): the Fréchet derivative of (Σ₀, Σ₁) ↦ T, its adjoint, and T."""
    A, A_inv, C, T = _parts(S0, S1)
    c, V = torch.linalg.eigh(C)
    denom = c[:, None] + c[None, :]

    def lyap_inv(R):
        return V @ ((V.T @ R @ V) / denom) @ V.T

    P = C @ A_inv  # C A⁻¹ (its transpose is A⁻¹ C)

    def forward(E0, E1):
        return A_inv @ lyap_inv(A @ E1 @ A - P @ E0 @ P.T) @ A_inv

    def adjoint(G):
        Z = lyap_inv(A_inv @ G @ A_inv)
        return -P.T @ Z @ P, A @ Z @ A

    return forward, adjoint, T


def condition_number(S0: torch.Tensor, S1: torch.Tensor, steps: int = 60) -> float:
    """Relative condition number κ of (Σ₀, Σ₁) ↦ T for symmetric perturbations (Frobenius)."""
    forward, adjoint, T = frechet(S0, S1)

    def sym(M):
        return 0.5 * (M + M.T)

    gen = torch.Generator().manual_seed(0)
    d = S0.shape[0]
    E0, E1 = (sym(torch.randn(d, d, generator=gen, dtype=F64)) for _ in range(2))
    for _ in range(steps):
        scale = torch.sqrt(E0.norm() ** 2 + E1.norm() ** 2)
        E0, E1 = E0 / scale, E1 / scale
        E0, E1 = map(sym, adjoint(forward(E0, E1)))
    norm = float(torch.sqrt(torch.sqrt(E0.norm() ** 2 + E1.norm() ** 2)))  # √λ_max(DTᵀDT)
    size = float(torch.sqrt(S0.norm() ** 2 + S1.norm() ** 2))
    return norm * size / float(T.norm())
