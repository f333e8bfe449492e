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
:mod:`tpde.metrics.mobility`. The closed forms run in factor form, on r × r compressions to
the span of a head's weights (:mod:`~tpde.fields.gradient_flow._factored`, MATH.md §12).

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

from tpde._validation import as_tensor
from tpde.fields.gradient_flow._factored import eigenbasis, solve, span_coordinates
from tpde.metrics.mobility import DEGENERATE

__all__ = [
    "NearestMobility",
    "directionality_score",
    "nearest_mobility",
    "product_scores",
    "row_space",
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
    return _directionality(M.norm(dim=1), M.norm(dim=0), num_std)


def _directionality(rows: torch.Tensor, cols: torch.Tensor, num_std: float = 2.0):
    """(C − R)/(C + R) of the row and column norms (:func:`directionality_score`)."""
    theta_r = rows.mean() + num_std * rows.std()
    theta_c = cols.mean() + num_std * cols.std()
    R = (rows[rows > theta_r] - theta_r).sum()
    C = (cols[cols > theta_c] - theta_c).sum()
    total = C + R
    if float(total) == 0.0:
        return total.new_zeros(())
    return (C - R) / total


def product_scores(
    Wq: torch.Tensor, Wk: torch.Tensor, key_rows=None, basis=None
) -> tuple[float, float]:
    r"""Saponati et al.'s (symmetry, directionality) of W = W_Qᵀ W_K, from the factors.

    Parameters
    ----------
    Wq, Wk : (n, d) tensors (a head's weights, or every query head's stacked over the
        key heads they read, as ``repeat_kv``).
    key_rows : (n_k, d) tensor, optional
        Rows whose span holds W_K's (the distinct key heads of a grouped layer; default W_K).
    basis : (d, m) tensor, optional
        An orthonormal basis already at hand whose range holds the rows of W_Q and W_K (a
        head's projection basis): used as Q, in place of the QR.

    Returns
    -------
    (float, float): :func:`symmetry_score` and :func:`directionality_score` of W.

    Notes
    -----
    Where m = n + n_k has m² < d·n (the QR then costs less than the d × d product), with
    Q (d × m) the orthonormal QR factor of [W_Qᵀ, key_rowsᵀ] (range W, range Wᵀ ⊆ range Q)
    [derived]: W = Q Ŵ Qᵀ, Ŵ = (W_Q Q)ᵀ(W_K Q), so ‖W‖_F = ‖Ŵ‖_F and
    ‖½(W + Wᵀ)‖_F = ‖½(Ŵ + Ŵᵀ)‖_F; row i of W is (W_Q)_{:,i}ᵀ(W_K Q)Qᵀ and column j is
    Q(W_Q Q)ᵀ(W_K)_{:,j}, so the row norms are those of W_Qᵀ(W_K Q) (d × m) and the column
    norms those of (W_Q Q)ᵀW_K (m × d): O(d·n·m), no d × d array. Otherwise W is formed.
    """
    key_rows = Wk if key_rows is None else key_rows
    if basis is None and not factor_pays(Wq.shape[0], key_rows.shape[0], Wq.shape[-1]):
        W = Wq.mT @ Wk
        return float(symmetry_score(W)), float(directionality_score(W))
    Q = torch.linalg.qr(torch.cat([Wq.mT, key_rows.mT], 1)).Q if basis is None else basis
    Wq_hat, Wk_hat = Wq @ Q, Wk @ Q
    symmetry = symmetry_score(Wq_hat.mT @ Wk_hat)
    rows, cols = (Wq.mT @ Wk_hat).norm(dim=1), (Wq_hat.mT @ Wk).norm(dim=0)
    return float(symmetry), float(_directionality(rows, cols))


def factor_pays(n: int, n_k: int, d: int) -> bool:
    """Whether :func:`product_scores` takes the factors (m = n + n_k with m² < d·n) rather
    than the formed d × d product."""
    return (n + n_k) ** 2 < d * n


def _square(M, name: str) -> torch.Tensor:
    M = as_tensor(M, name)
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
    range_basis : (d, r), orthonormal eigenvectors of A_s with nonzero eigenvalues.
    eigenvalues : (r,), those eigenvalues (A_s = range_basis · diag · range_basisᵀ).
    mobility_basis : (d, ≤ 2r), an orthonormal basis of range([U_R, Y]) ⊇ range(M*), range(M_s).
    inertia : (n₊, n₋, n₀) of M* compressed to range(A_s).
    """

    A_s: torch.Tensor
    M: torch.Tensor
    M_definite: torch.Tensor
    sign: int
    range_basis: torch.Tensor
    eigenvalues: torch.Tensor
    mobility_basis: torch.Tensor
    inertia: tuple[int, int, int]


def nearest_mobility(A: torch.Tensor, V: torch.Tensor, dtype=None, rows=None) -> NearestMobility:
    """The nearest symmetric and definite mobilities with V ≈ M A_s (module notes).

    Parameters
    ----------
    A, V : (d, d) tensors (float64 recommended).
    dtype : the dtype whose epsilon sets the zero threshold (default A's).
    rows : (r, d) tensor, optional
        Rows whose span holds the ranges of A and Aᵀ (a head's [W_Q; W_K]): the eigenvalues
        of A_s are then found in that r-dimensional span (the same matrices to rounding).

    Returns
    -------
    :class:`NearestMobility`.

    Notes
    -----
    With U_R the eigenvectors of nonzero eigenvalues Λ, the kernel side of M* in the
    original coordinates is Y = (I − U_RU_Rᵀ) V U_R Λ⁻¹ (M̃_ij = Ṽ_ij/λ_j for λ_i = 0), so
    M* = [U_R, Y] [[M̃_RR, I], [I, M̃_RR⁺]] [U_R, Y]ᵀ (the minimal completion). This takes
    dense (d, d) matrices and runs the d × d form of
    :func:`~tpde.fields.gradient_flow._factored.solve`; a head given by its weights is
    projected in factor form, on the compression to the span of its factors
    (:func:`tpde.fields.nearest_gradient_field`, MATH.md §12 "Factor form").
    """
    A, V = _square(A, "A"), _square(V, "V")
    if V.shape != A.shape:
        raise ValueError(
            f"A and V must be (d, d) matrices of one d; received A {tuple(A.shape)} and V "
            f"{tuple(V.shape)}."
        )
    V = V.to(A)
    dtype = dtype or A.dtype
    d = A.shape[-1]
    if rows is not None:
        rows = as_tensor(rows, "rows").to(A)
        if rows.ndim != 2 or rows.shape[-1] != d:
            raise ValueError(f"rows must have shape (r, {d}); received {tuple(rows.shape)}.")
    A_s = 0.5 * (A + A.mT)
    if rows is None:
        E, lam = eigenbasis(A_s, d, dtype)
    else:  # A_s vanishes off span(rows): its eigenbasis there, then the complement
        basis = row_space(rows)
        inner, lam = eigenbasis(basis.mT @ A_s @ basis, d, dtype)
        p = lam.numel()
        complement = torch.linalg.qr(basis @ inner[:, :p], mode="complete").Q[:, p:]
        E = torch.cat([basis @ inner[:, :p], complement], 1)
    core = solve(E.mT @ V @ E, lam, dtype)
    p = lam.numel()
    M = E @ core.mobility @ E.mT
    definite = E @ core.definite @ E.mT
    mobility_basis = row_space((E @ span_coordinates(core.coupling)).mT)
    return NearestMobility(A_s, M, definite, core.sign, E[:, :p], lam, mobility_basis, core.inertia)


def row_space(rows: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis (d, r) of the row space of ``rows`` (m, d): the left singular
    vectors of its transpose above 1e3·d·eps·σ_max."""
    U, S, _ = torch.linalg.svd(rows.mT, full_matrices=False)
    if S.numel() == 0 or float(S[0]) == 0.0:
        return U[:, :0]
    return U[:, S > DEGENERATE * rows.shape[-1] * torch.finfo(rows.dtype).eps * float(S[0])]
