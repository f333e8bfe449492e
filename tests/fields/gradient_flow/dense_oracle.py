"""The dense d × d projection of a head, as tpde computed it before the factor form: the
test oracle of tests/fields/gradient_flow/test_factored.py (never imported by tpde).

Transcribed from tpde/fields/gradient_flow/{projection,nearest}.py as of the commit before
the factor form: A = c W_KᵀW_Q and V = W_O W_V formed as d × d matrices, A_s's eigenbasis in
the row space of [W_Q; W_K] (an SVD), M* = [U, Y]·core·[U, Y]ᵀ after a QR of [U, Y], the
two definite candidates from two eigendecompositions, the RoPE residual offset by offset,
the sum's sharing test on d × d matrices, Saponati's scores of the formed W_QᵀW_K.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde.fields import attention_heads
from tpde.fields.gradient_flow._rope import ROPE_OFFSETS, _rope_matrix
from tpde.metrics.mobility import DEGENERATE


def symmetry_score(M):
    return (0.5 * (M + M.mT)).square().sum() / M.square().sum()


def directionality_score(M, num_std: float = 2.0):
    rows, cols = M.norm(dim=1), M.norm(dim=0)
    theta_r = rows.mean() + num_std * rows.std()
    theta_c = cols.mean() + num_std * cols.std()
    R = (rows[rows > theta_r] - theta_r).sum()
    C = (cols[cols > theta_c] - theta_c).sum()
    total = C + R
    if float(total) == 0.0:
        return total.new_zeros(())
    return (C - R) / total


def row_space(rows):
    U, S, _ = torch.linalg.svd(rows.mT, full_matrices=False)
    if S.numel() == 0 or float(S[0]) == 0.0:
        return U[:, :0]
    return U[:, S > DEGENERATE * rows.shape[-1] * torch.finfo(rows.dtype).eps * float(S[0])]


def _clip(S):
    evals, vecs = torch.linalg.eigh(S)
    return (vecs * evals.clamp_min(0)) @ vecs.mT


def _inertia(S, dtype):
    if S.numel() == 0:
        return (0, 0, 0)
    evals = torch.linalg.eigvalsh(S)
    floor = DEGENERATE * S.shape[-1] * torch.finfo(dtype).eps * float(evals.abs().max())
    pos, neg = int((evals > floor).sum()), int((evals < -floor).sum())
    return (pos, neg, S.shape[-1] - pos - neg)


@dataclass
class Nearest:
    A_s: torch.Tensor
    M: torch.Tensor
    M_definite: torch.Tensor
    sign: int
    range_basis: torch.Tensor
    eigenvalues: torch.Tensor
    mobility_basis: torch.Tensor
    inertia: tuple


def nearest_mobility(A, V, rows=None) -> Nearest:
    """The dense closed form (projection.nearest_mobility before the factor form)."""
    dtype = A.dtype
    d = A.shape[-1]
    A_s = 0.5 * (A + A.mT)
    basis = torch.eye(d, dtype=A.dtype) if rows is None else row_space(rows)
    lam, W = torch.linalg.eigh(basis.mT @ A_s @ basis)
    top = float(lam.abs().max()) if lam.numel() else 0.0
    floor = DEGENERATE * d * torch.finfo(dtype).eps * max(top, 1e-300)
    on = lam.abs() > floor
    lam, U = lam[on], basis @ W[:, on]
    VU = V @ U
    Vt = U.mT @ VU
    li, lj = lam[:, None], lam[None, :]
    Mt = (lj * Vt + li * Vt.mT) / (li.square() + lj.square())
    Mt = 0.5 * (Mt + Mt.mT)
    Y = (VU - U @ Vt) / lam
    r = len(lam)
    eye = torch.eye(r, dtype=A.dtype)
    core = torch.cat([torch.cat([Mt, eye], 1),
                      torch.cat([eye, torch.linalg.pinv(Mt, hermitian=True)], 1)])  # fmt: skip
    F = torch.cat([U, Y], 1)
    Qf, Rf = torch.linalg.qr(F)
    small = Rf @ core @ Rf.mT
    small = 0.5 * (small + small.mT)
    M = Qf @ small @ Qf.mT
    inertia = _inertia(Mt, dtype)
    best = None
    for sign in (1, -1):
        definite = sign * (Qf @ _clip(sign * small) @ Qf.mT)
        residual = float((V - (definite @ U) * lam @ U.mT).norm())
        if best is None or residual < best[0]:
            best = (residual, sign, definite)
    return Nearest(A_s, M, best[2], best[1], U, lam, row_space(F.mT), inertia)


def _left_product(R):
    if int((R != 0).sum(-1).max()) > 2:
        return lambda X: R @ X
    idx = R.abs().topk(min(2, R.shape[-1]), dim=-1).indices
    vals = R.gather(-1, idx)
    return lambda X: (vals[..., None] * X[idx]).sum(-2)


def _dot(X, Y) -> float:
    return float((X * Y).sum())


def _offset_norms(C, S, R):
    k = R.shape[-1]
    Cqq, Cqk, Ckq, Ckk = C[:k, :k], C[:k, k:], C[k:, :k], C[k:, k:]
    Sqq, Sqk, Skq, Skk = S[:k, :k], S[:k, k:], S[k:, :k], S[k:, k:]
    T_left, R_left = _left_product(R.mT), _left_product(R)

    def XT(X):
        return R_left(X.mT).mT

    def XdT(X):
        return XT(X) - X

    def dTX(X):
        return T_left(X) - X

    asym2 = (_dot(XT(Cqq), T_left(Ckk)) + _dot(XT(Ckk), T_left(Cqq))
             - _dot(XT(Cqk), T_left(Ckq)) - _dot(XT(Ckq), T_left(Cqk)))  # fmt: skip
    norm2 = _dot(T_left(Ckk.mT).mT, R_left(Cqq))
    shift2 = (_dot(XdT(Sqk), dTX(Ckq)) + _dot(XdT(Sqq), dTX(Ckk))
              + _dot(XdT(Skk), dTX(Cqq)) + _dot(XdT(Skq), dTX(Cqk)))  # fmt: skip
    return asym2, norm2, shift2


def rope_residual(head, M, V_norm, base_norm):
    k = head.Wq.shape[0]
    c = head.scale
    G = torch.cat([head.Wq, head.Wk])
    C = G @ G.mT
    P = M @ G.mT
    S = P.mT @ P
    worst = 0.0
    offsets = [2**i for i in range(int(math.log2(ROPE_OFFSETS)) + 1)]
    for m in [*offsets, *(-o for o in offsets)]:
        R = _rope_matrix(head.rope, k, m).to(G)
        asym2, norm2, shift2 = _offset_norms(C, S, R)
        shift = 0.5 * abs(c) * math.sqrt(max(shift2, 0.0))
        asym = math.sqrt(max(asym2, 0.0)) / (math.sqrt(max(norm2, 0.0)) or 1.0)
        worst = max(worst, asym, (base_norm + shift) / V_norm)
    return worst


@dataclass
class HeadOracle:
    """One head's dense projection: the report's numbers and the structured pieces."""

    symmetry_residual: float
    value_residual: float
    definite_residual: float
    inertia: tuple
    sign: int
    symmetry: float
    directionality: float
    drift: float
    rope_residual: float | None
    A_s: torch.Tensor
    M: torch.Tensor
    M_definite: torch.Tensor
    a: torch.Tensor
    w: torch.Tensor
    span: torch.Tensor


def project(head) -> HeadOracle:
    """The dense projection of one AttentionHead (nearest._project before the factor form)."""
    A, V = head.A, head.V
    near = nearest_mobility(A, V, rows=torch.cat([head.Wq, head.Wk]))
    A_norm, V_norm = float(A.norm()), float(V.norm()) or 1.0
    sym_res = float((A - near.A_s).norm()) / (A_norm or 1.0)
    U, lam = near.range_basis, near.eigenvalues

    def times_A_s(M):
        return ((M @ U) * lam) @ U.mT

    val_res = float((V - times_A_s(near.M)).norm()) / V_norm
    def_res = float((V - times_A_s(near.M_definite)).norm()) / V_norm
    w = head.u - near.M_definite @ head.a
    W_qk = head.Wq.mT @ head.Wk
    rope_res = None
    if head.rope is not None:
        rope_res = rope_residual(head, near.M_definite, V_norm, def_res * V_norm)
    span = row_space(torch.cat([head.Wq, head.Wk, near.mobility_basis.mT]))
    return HeadOracle(
        sym_res, val_res, def_res, near.inertia, near.sign, float(symmetry_score(W_qk)),
        float(directionality_score(W_qk)), float(w.norm()), rope_res, near.A_s, near.M,
        near.M_definite, head.a, w, span,
    )  # fmt: skip


def _shares(h, g, rtol):
    if (h.head.rope is None) != (g.head.rope is None) or h.sign != g.sign:
        return False
    if h.head.rope is not None:
        return (h.head.rope == g.head.rope and torch.equal(h.head.Wq, g.head.Wq)
                and torch.equal(h.head.Wk, g.head.Wk))  # fmt: skip
    scale = float(h.A_s.norm()) + float(h.a.norm()) or 1.0
    return float((h.A_s - g.A_s).norm()) + float((h.a - g.a).norm()) <= rtol * scale


def sum_structure(projected, rtol) -> str:
    if len(projected) == 1:
        return "one head"
    classes = []
    for h in projected:
        for members in classes:
            if _shares(h, members[0], rtol):
                members.append(h)
                break
        else:
            classes.append([h])
    if len(classes) == 1:
        return "shared interaction"
    bases = [row_space(torch.cat([h.span.mT for h in members])) for members in classes]
    for i in range(len(bases)):
        for j in range(i):
            if float((bases[i].mT @ bases[j]).norm()) > 1e3 * rtol:
                return "none"
    return "orthogonal classes"


@dataclass
class FieldOracle:
    heads: list
    sum_structure: str
    drift: torch.Tensor
    symmetry: float
    directionality: float


def field_oracle(field, rtol: float = 1e-10) -> FieldOracle:
    """The dense report of a field: per head, the sum's case, the drift, the layer scores."""
    heads = attention_heads(field)
    projected = []
    for head in heads.heads:
        p = project(head)
        p.head = head
        projected.append(p)
    drift = heads.bias + sum(p.w for p in projected)
    W_qk = sum(h.Wq.mT @ h.Wk for h in heads.heads)
    return FieldOracle(
        projected, sum_structure(projected, rtol), drift, float(symmetry_score(W_qk)),
        float(directionality_score(W_qk)),
    )  # fmt: skip
