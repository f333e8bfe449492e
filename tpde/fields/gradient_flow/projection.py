r"""Closed forms of the nearest gradient-flow head, and the weight-only scores (MATH.md §12).

Nearest structured interaction and mobility [derived]. With A_s = ½(A + Aᵀ) = UΛUᵀ and
Ṽ = UᵀVU, the least-squares mobility min_{M = Mᵀ} ‖V − M A_s‖_F decouples into the pairs
(i, j), (j, i) of entries that share M̃_ij:

    M̃_ij = (λ_j Ṽ_ij + λ_i Ṽ_ji) / (λ_i² + λ_j²),      M̃_ii = Ṽ_ii / λ_i,

for every pair with λ_i or λ_j on the range R of A_s. The block M̃_NN on its kernel N does not
enter M A_s; it is completed minimally, M̃_NN = M̃_NR M̃_RR⁺ M̃_RN, so that M* is semidefinite of
sign s whenever its compression M̃_RR is (M = [[P, B],[Bᵀ, C]] ⪰ 0 iff P ⪰ 0, B ∈ range P and
C ⪰ BᵀP⁺B). The definite mobility M_s is M* with the eigenvalues of sign −s set to zero, the
sign s the one that leaves the smaller residual ‖V − M_s A_s‖_F (the eigenvalue clip is the
nearest semidefinite matrix to M*, not the constrained least-squares minimiser: documented,
not claimed optimal). A head built as V = M A_s with sM ⪰ 0 gets M_s A_s = V to rounding.

A singular value or eigenvalue counts as zero below 1e3·d·eps·max, the policy of
:mod:`tpde.metrics.mobility`.

Weight-only scores (Saponati, Sager, Aceituno, Stadelmann, Grewe, arXiv:2502.10927, code
matteosaponati/attention-geometry, ``utils/scores.py``), of their matrix W_QK = W_Qᵀ W_K
(= Aᵀ/c in tpde's notation, rows indexed by the query side):

- symmetry s = ‖½(M + Mᵀ)‖²_F / ‖M‖²_F ∈ [0, 1] (½ for a random matrix, 1 symmetric);
- directionality: r_i, c_j the row and column norms of M, thresholds mean + 2·std (torch's
  unbiased std), excesses R = Σ_{r_i > θ_r}(r_i − θ_r), C = Σ_{c_j > θ_c}(c_j − θ_c), score
  (C − R)/(C + R), 0 when C + R = 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde.metrics.mobility import DEGENERATE

__all__ = [
    "NearestMobility",
    "directionality_score",
    "nearest_mobility",
    "symmetry_score",
]


def symmetry_score(M: torch.Tensor) -> torch.Tensor:
    """Saponati et al.'s symmetry score ‖½(M + Mᵀ)‖²_F / ‖M‖²_F of a square matrix (module notes).

    Parameters
    ----------
    M : (d, d) tensor, e.g. W_Qᵀ W_K.

    Returns
    -------
    0-d tensor in [0, 1]; transpose- and scale-invariant.
    """
    M = _square(M, "M")
    return (0.5 * (M + M.mT)).square().sum() / M.square().sum()


def directionality_score(M: torch.Tensor, num_std: float = 2.0) -> torch.Tensor:
    """Saponati et al.'s directionality score of W_QK = W_Qᵀ W_K (module notes).

    Parameters
    ----------
    M : (d, d) tensor, their W_QK (rows the query side: tpde's Aᵀ up to the scale).
    num_std : the threshold mean + num_std·std of the row and column norms (theirs: 2).

    Returns
    -------
    0-d tensor in [−1, 1]: (C − R)/(C + R), C and R the column and row excesses; positive
    when a few columns dominate.
    """
    M = _square(M, "M")
    rows, cols = M.norm(dim=1), M.norm(dim=0)
    theta_r = rows.mean() + num_std * rows.std()
    theta_c = cols.mean() + num_std * cols.std()
    R = (rows[rows > theta_r] - theta_r).sum()
    C = (cols[cols > theta_c] - theta_c).sum()
    total = C + R
    if float(total) == 0.0:
        return total.new_zeros(())
    return (C - R) / total


def _square(M, name: str) -> torch.Tensor:
    if not isinstance(M, torch.Tensor):
        M = torch.as_tensor(M, dtype=torch.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValueError(f"{name} must be a square (d, d) matrix; received {tuple(M.shape)}.")
    return M


@dataclass(frozen=True)
class NearestMobility:
    """Result of :func:`nearest_mobility` (module notes).

    Attributes
    ----------
    A_s : (d, d), ½(A + Aᵀ).
    M : (d, d), M*, the symmetric least-squares mobility (kernel block completed).
    M_definite : (d, d), M_s, semidefinite of sign ``sign``.
    sign : +1 or −1.
    range_basis : (d, r), orthonormal basis of range(A_s).
    inertia : (n₊, n₋, n₀) of M* compressed to range(A_s).
    """

    A_s: torch.Tensor
    M: torch.Tensor
    M_definite: torch.Tensor
    sign: int
    range_basis: torch.Tensor
    inertia: tuple[int, int, int]


def nearest_mobility(A: torch.Tensor, V: torch.Tensor, dtype=None) -> NearestMobility:
    """The nearest symmetric and definite mobilities with V ≈ M A_s (module notes).

    Parameters
    ----------
    A, V : (d, d) tensors (float64 recommended).
    dtype : the dtype whose epsilon sets the zero threshold (default A's).

    Returns
    -------
    :class:`NearestMobility`.
    """
    dtype = dtype or A.dtype
    A_s = 0.5 * (A + A.mT)
    lam, U = torch.linalg.eigh(A_s)
    d = A.shape[-1]
    floor = DEGENERATE * d * torch.finfo(dtype).eps * float(lam.abs().max().clamp_min(1e-300))
    on = lam.abs() > floor
    Vt = U.mT @ V @ U
    li, lj = lam[:, None], lam[None, :]
    den = li.square() + lj.square()
    pair = on[:, None] | on[None, :]
    Mt = torch.where(pair, (lj * Vt + li * Vt.mT) / torch.where(pair, den, 1.0), 0.0)
    Mt = 0.5 * (Mt + Mt.mT)
    R, N = on.nonzero()[:, 0], (~on).nonzero()[:, 0]
    if len(R) and len(N):  # minimal completion of the kernel block
        P, B = Mt[R][:, R], Mt[R][:, N]
        Mt[N[:, None], N[None, :]] = B.mT @ torch.linalg.pinv(P, hermitian=True) @ B
    M = U @ Mt @ U.mT
    M = 0.5 * (M + M.mT)
    inertia = _inertia(Mt[R][:, R] if len(R) else Mt[:0, :0], dtype)
    best = None
    for sign in (1, -1):
        definite = sign * _clip(sign * M)
        residual = float((V - definite @ A_s).norm())
        if best is None or residual < best[0]:
            best = (residual, sign, definite)
    return NearestMobility(A_s, M, best[2], best[1], U[:, on], inertia)


def _clip(S: torch.Tensor) -> torch.Tensor:
    """The nearest positive semidefinite matrix to a symmetric S (Frobenius)."""
    evals, vecs = torch.linalg.eigh(S)
    return (vecs * evals.clamp_min(0)) @ vecs.mT


def _inertia(S: torch.Tensor, dtype) -> tuple[int, int, int]:
    """(n₊, n₋, n₀) of a symmetric S, zero below 1e3·d·eps·max|λ|."""
    if S.numel() == 0:
        return (0, 0, 0)
    evals = torch.linalg.eigvalsh(S)
    floor = DEGENERATE * S.shape[-1] * torch.finfo(dtype).eps * float(evals.abs().max())
    pos, neg = int((evals > floor).sum()), int((evals < -floor).sum())
    return (pos, neg, S.shape[-1] - pos - neg)
