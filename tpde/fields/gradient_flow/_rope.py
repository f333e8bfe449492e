r"""A rotary head's pair kernel against the gradient structure, from 2k × 2k Grams (MATH.md §12).

:func:`_rope_norms` gives :class:`~tpde.fields.gradient_flow.HeadStructure`'s
``rope_residual``: at the offsets m = ±1, ±2, ±4, …, ±``ROPE_OFFSETS`` the asymmetry of the
pair kernel A(m) and a bound on how far V is from M_s times its gradient map, each a sum of
k × k inner products with the rotations R(m) (two nonzeros per row: O(k²) per offset).
"""

from __future__ import annotations

import functools
import math

import torch

from tpde.fields.gradient_flow.heads import AttentionHead

#: Offsets m = ±1, ±2, ±4, …, ±ROPE_OFFSETS at which a rotary head's pair kernel is checked.
ROPE_OFFSETS = 64


def _rope_residual(head: AttentionHead, M: torch.Tensor, V_norm: float, base_norm: float):
    """:func:`_rope_norms` for a dense mobility M (d, d): C = GGᵀ, S = (MGᵀ)ᵀ(MGᵀ)."""
    G = torch.cat([head.Wq, head.Wk])
    P = M @ G.mT
    return _rope_norms(head, G @ G.mT, P.mT @ P, V_norm, base_norm)


def _rope_norms(head: AttentionHead, C: torch.Tensor, S: torch.Tensor, V_norm, base_norm):
    """max over the offsets ±1, ±2, ±4, …, ±ROPE_OFFSETS of the pair kernel's asymmetry
    ‖A(m)ᵀ − A(−m)‖/‖A(m)‖ and of ‖V − M B(m)‖/‖V‖ (HeadStructure notes).

    In the 2k rows G = [W_Q; W_K]: A(m)ᵀ − A(−m) = Gᵀ J G, J = c[[0, T], [−T, 0]], and
    B(m) − B(0) = Gᵀ D G, D = (c/2)[[0, ΔT], [ΔT, 0]], T = R(m)ᵀ = R(−m), ΔT = T − I, so with
    C = GGᵀ and S = (MGᵀ)ᵀ(MGᵀ) (2k × 2k; the caller forms them, from the factors of M:
    O(d·k·r)) every norm is a sum of k × k inner products ⟨X, Y⟩ = tr(XᵀY):

        ‖Gᵀ J G‖² = ⟨CJ, JC⟩ = c²(⟨C_qq T, T C_kk⟩ + ⟨C_kk T, T C_qq⟩ − ⟨C_qk T, T C_kq⟩
                                − ⟨C_kq T, T C_qk⟩),
        ‖A(m)‖² = c²⟨C_kk R, R C_qq⟩,
        ‖M Gᵀ D G‖² = ⟨SD, DC⟩ = (c/2)²(⟨S_qk ΔT, ΔT C_kq⟩ + ⟨S_qq ΔT, ΔT C_kk⟩
                                       + ⟨S_kk ΔT, ΔT C_qq⟩ + ⟨S_kq ΔT, ΔT C_qk⟩),

    and a rotation R(m) has at most two nonzeros per row and column (pairs of coordinates
    turn), so each product with T or R costs O(k²): O(k²) per offset, every offset at once.
    ``base_norm`` is ‖V − M B(0)‖ = ‖V − M A_s‖.
    """
    c = head.scale
    R, T = _offset_rotations(head.rope, head.Wq.shape[0])  # RoPE: a frozen dataclass
    asym2, norm2, shift2 = _offset_norms(C, S, None if R is None else R.to(C), T)
    shift = 0.5 * abs(c) * shift2.clamp_min(0).sqrt()
    norm = norm2.clamp_min(0).sqrt()
    asym = asym2.clamp_min(0).sqrt() / torch.where(norm > 0, norm, torch.ones_like(norm))
    return max(float(asym.max()), float(((base_norm + shift) / V_norm).max()))


@functools.lru_cache(maxsize=8)
def _offset_rotations(rope, k: int):
    """(R, T): R(m) (n, k, k) at the n offsets ±1, ±2, ±4, …, ±ROPE_OFFSETS and the
    :func:`_pair_form` of R(m)ᵀ, float64: one computation for every head of one encoding
    and width (cached; read only). R is None where the pair form holds (it is all that is
    read then: 7.3 MiB fewer kept at k = 256)."""
    offsets = [2**i for i in range(int(math.log2(ROPE_OFFSETS)) + 1)]
    R = torch.stack([_rope_matrix(rope, k, m) for m in [*offsets, *(-o for o in offsets)]])
    T = _pair_form(R.mT)
    return (None if isinstance(T, tuple) else R), T


def _rope_matrix(rope, k: int, m: int) -> torch.Tensor:
    """R(m) (k, k): rope.rotate maps a row x at position m to (R(m)x)ᵀ."""
    eye = torch.eye(k, dtype=torch.float64, device="cpu")
    positions = torch.full((k,), float(m), dtype=torch.float64, device="cpu")
    return rope.rotate(eye.unsqueeze(0), positions).squeeze(0).mT


def _offset_norms(C: torch.Tensor, S: torch.Tensor, R: torch.Tensor, T=None) -> tuple:
    """(‖GᵀJG‖²/c², ‖A(m)‖²/c², ‖MGᵀDG‖²/(c/2)²), each (n,), at n offsets, R = R(m)
    (n, k, k), from the 2k × 2k C and S (:func:`_rope_norms`' sums of k × k inner products,
    :func:`_pair_dot`); T: the :func:`_pair_form` of Rᵀ where already at hand (R may then
    be None)."""
    k = C.shape[-1] // 2
    Cqq, Cqk, Ckq, Ckk = C[:k, :k], C[:k, k:], C[k:, :k], C[k:, k:]
    Sqq, Sqk, Skq, Skk = S[:k, :k], S[:k, k:], S[k:, :k], S[k:, k:]
    T = _pair_form(R.mT) if T is None else T
    if isinstance(T, tuple):  # R = Tᵀ: β_R = β_T∘π;  ΔT = T − I: α − 1
        alpha, beta, pi = T
        Rm, dT = (alpha, beta[:, pi], pi), (alpha - 1.0, beta, pi)
    else:
        Rm, dT = R, T - torch.eye(k, dtype=R.dtype, device=R.device)
    asym2 = (_pair_dot(Cqq, Ckk, T) + _pair_dot(Ckk, Cqq, T)
             - _pair_dot(Cqk, Ckq, T) - _pair_dot(Ckq, Cqk, T))  # fmt: skip
    norm2 = _pair_dot(Ckk, Cqq, Rm)  # ⟨C_kk R, R C_qq⟩
    shift2 = (_pair_dot(Sqk, Ckq, dT) + _pair_dot(Sqq, Ckk, dT)
              + _pair_dot(Skk, Cqq, dT) + _pair_dot(Skq, Cqk, dT))  # fmt: skip
    return asym2, norm2, shift2


def _pair_form(T: torch.Tensor):
    """T (n, k, k) as diag(α) + diag(β)Π, Π one permutation, an involution, shared by all n
    (a rotation of coordinate pairs, scaled: RoPE at n offsets): (α, β, π), α and β (n, k)
    and π (k,) (β_i = 0 where π(i) = i); T itself where it has another pattern."""
    k = T.shape[-1]
    index = torch.arange(k, device=T.device)
    eye = index[:, None] == index[None, :]
    off = (T != 0).any(0) & ~eye
    counts = off.sum(-1)
    if k == 0 or int(counts.max()) > 1:
        return T
    partner = torch.where(counts > 0, off.to(torch.int8).argmax(-1), index)
    if not torch.equal(partner[partner], index):
        return T
    alpha = T.diagonal(dim1=-2, dim2=-1)
    beta = T[:, index, partner] * (partner != index)
    return alpha, beta, partner


def _pair_dot(X: torch.Tensor, Y: torch.Tensor, T) -> torch.Tensor:
    r"""⟨X T, T Y⟩ = tr(TᵀXᵀTY) (n,) for X, Y (k, k) and the n matrices T of a
    :func:`_pair_form`, in O(k² + n·k²) as matrix products.

    With T = diag(α) + diag(β)Π [derived]: (XT)_ij = α_j X_ij + β_π(j) X_iπ(j) and
    (TY)_ij = α_i Y_ij + β_i Y_π(i)j, so with X' = X[:, π], Y' = Y[π, :] and β' = β∘π,

        ⟨XT, TY⟩ = αᵀ(X∘Y)α + βᵀ(X∘Y')α + αᵀ(X'∘Y)β' + βᵀ(X'∘Y')β',

    four k × k Hadamard products once and n bilinear forms each.
    """
    if isinstance(T, torch.Tensor):  # another pattern: the dense products
        return ((X @ T) * (T @ Y)).sum((-2, -1))
    alpha, beta, pi = T
    Xp, Yp = X[:, pi], Y[pi, :]

    def form(u, Z, v):  # uᵀ Z v for every row of u, v
        return ((u @ Z) * v).sum(-1)

    beta_p = beta[:, pi]
    return (form(alpha, X * Y, alpha) + form(beta, X * Yp, alpha)
            + form(alpha, Xp * Y, beta_p) + form(beta, Xp * Yp, beta_p))  # fmt: skip
