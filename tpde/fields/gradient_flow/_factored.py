r"""The nearest structured head in factor form: r × r linear algebra, no d × d array (MATH.md §12).

Every d × d matrix of a head — A = c W_KᵀW_Q, V = W_O W_V, A_s = ½(A + Aᵀ), the nearest
mobilities M* and M_s, the residual V − M A_s — has its row and column ranges in

    S = span(W_Qᵀ, W_Kᵀ, W_O, W_Vᵀ),     dim S ≤ m = 2k + 2k_v

(k the query/key width, k_v the value width; M* = [U, Y]·core·[U, Y]ᵀ with U ⊂ range A_s and
Y = (I − UUᵀ)VUΛ⁻¹ ⊂ S). With Q (d × m) the orthonormal factor of a Householder QR of the
stacked factors [W_Qᵀ, W_Kᵀ, W_O, W_Vᵀ] — orthonormal whatever their ranks, with S ⊆ range Q
— each such X is Q X̂ Qᵀ, X̂ = QᵀXQ (m × m), and ‖X‖_F = ‖X̂‖_F exactly: nothing of any of
them lies in the orthogonal complement of range Q. The projection runs on the m × m
compressions, O(d·m² + m³) per head; where m ≥ d (or V is a dense d × d matrix) Q is the
identity and the same code runs on d × d matrices, then no more costly than the compression.

In the eigenbasis E = [U, N] of Â_s (U: the eigenvalues Λ above the zero floor, N: the
rest) and with Ṽ = EᵀV̂E, the closed forms of :mod:`~tpde.fields.gradient_flow.projection`
read [derived]: M̃_ij = (λ_jṼ_ij + λ_iṼ_ji)/(λ_i² + λ_j²) on U × U, Y = N C with
C = Ṽ_NU Λ⁻¹, so

    M* = E [[M̃, Cᵀ], [C, C M̃⁺ Cᵀ]] Eᵀ,     M* A_s = E [[M̃Λ, 0], [CΛ, 0]] Eᵀ,

‖V − M*A_s‖² = ‖Ṽ_·U − [M̃; C]Λ‖² + ‖Ṽ_·N‖², and one eigendecomposition of the bracket gives
both definite candidates (the clip of M* and of −M*): per head two symmetric
eigendecompositions (Â_s and the bracket) of size ≤ min(m, d), M̃'s eigenvalues (its
inertia) and a solve for C M̃⁺ Cᵀ (M̃'s eigendecomposition where it is singular).

Precision. :func:`project_head` runs in float64 by default. With ``dtype=torch.float32`` the
two r × r eigendecompositions (Â_s's, the bracket's) and the products around them (A, Ṽ,
the RoPE Grams) run in float32, LAPACK's float32 solvers being ≈ 2× faster; M̃, its
eigenvalues (the inertia, float64's floor), the solve and the residuals stay float64, and
the basis and mobility are returned in float64. Â_s's rank is decided at the floor
√r·eps₃₂·max|λ| (float32's rounding of an r-term sum; Gemma-3-270M's zero eigenvalues come
out ≤ 1.1e-7·max, its smallest nonzero ones ≥ 8e-5·max); where an eigenvalue lies within a
factor FLOOR_BAND = 10 of that floor, or where the two signs' definite residuals are within
SIGN_MARGIN = 1e-3 of each other, the head is projected again in float64. The scores then
differ from float64's by float32's rounding times the conditioning of what the projection
divides by (Λ⁻¹ in C, M̃⁻¹ in the kernel block, the clip's eigen-gaps): ≤ 6e-6 relative on
the constructed heads of tests/fields/gradient_flow/test_factored.py, up to ≈ 1e-3 on the
definite residual of real heads whose M̃ is conditioned to 10⁶
(benchmarks/streamed_scores.py). Eigenvalues of M̃ are not resolved in float32 below its
noise, measured at ≤ 1.1·√p·eps₃₂·max|μ| on exact heads whose M̃ is semidefinite of lower
rank (p = 3 … 256: there float64's floor read float32's noise as (136, 120, 0) for the
exact (16, 0, 240)), so a head whose M̃ has an eigenvalue |μ| ≤ INERTIA_BAND·√p·eps₃₂·max|μ|
(INERTIA_BAND = 2) is projected again in float64 too
(:func:`_unclear_inertia`): its inertia, sign and breaks are float64's. Â_s's eigenvalues
between float64's floor and float32's (≈ 1e-11 to 1e-6 of the largest) count as rank in
float64 and as zero in float32 when they lie below float32's band: float32 reads such a
head as of lower rank (none of the three shipped models has one: their gap is 8e-5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde import _lu as lu
from tpde.metrics.mobility import DEGENERATE

__all__: list[str] = []

#: float32 projections (module notes, "Precision") fall back to float64 where an eigenvalue
#: of A_s is within this factor of float32's floor √r·eps·max|λ| ...
FLOOR_BAND = 10.0
#: ... or where the two signs' definite residuals differ by at most this fraction ...
SIGN_MARGIN = 1e-3
#: ... or where an eigenvalue of M̃ is within this factor of float32's noise √p·eps·max|μ|
#: (:func:`_unclear_inertia`; the noise measured ≤ 1.1·√p·eps·max on exact heads).
INERTIA_BAND = 2.0


@dataclass(frozen=True, eq=False)
class Core:
    """The projection in an eigenbasis E = [U, N] of Â_s (module notes).

    Attributes
    ----------
    lam : (p,) the eigenvalues of A_s above the floor (E's first p columns).
    mobility : (r, r) M* in E's coordinates.
    vectors, values : (r, n), (n,) the eigenpairs of M* of sign s (the clip's):
        M_s = vectors · diag(values) · vectorsᵀ in E's coordinates (:attr:`definite`).
    coupling : (r − p, p) C = Ṽ_NU Λ⁻¹ (Y = N C).
    sign : s of M_s;  inertia : (n₊, n₋, n₀) of M̃ = M*'s compression to range(A_s).
    value_residual, definite_residual : ‖V − M* A_s‖_F and ‖V − M_s A_s‖_F (absolute).
    sign_margin : |r₊ − r₋|/max(r₊, r₋), the two signs' residuals: how clear the choice of s is.
    mobility_spread : min|μ|/max|μ| over M̃'s eigenvalues μ (1 where M̃ is empty): how clear
        its inertia is in float32.
    """

    lam: torch.Tensor
    mobility: torch.Tensor
    vectors: torch.Tensor
    values: torch.Tensor
    coupling: torch.Tensor
    sign: int
    inertia: tuple[int, int, int]
    value_residual: float
    definite_residual: float
    sign_margin: float = math.inf
    mobility_spread: float = 1.0

    @property
    def definite(self) -> torch.Tensor:
        """(r, r) M_s in E's coordinates."""
        return (self.vectors * self.values) @ self.vectors.mT


def span_coordinates(coupling: torch.Tensor) -> torch.Tensor:
    """(r, 2p): F = [U, Y] in E's coordinates, [[I, 0], [0, C]] (range F ⊇ range M*), from
    C (r − p, p)."""
    q, p = coupling.shape
    F = coupling.new_zeros(p + q, 2 * p)
    F[:p, :p] = torch.eye(p, dtype=F.dtype, device=F.device)
    F[p:, p:] = coupling
    return F


def eigenbasis(A_s: torch.Tensor, d: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(E, Λ): the eigenvectors of a symmetric A_s (r × r) with the eigenvalues above the
    floor 1e3·d·eps·max|λ| first (Λ, in ascending order), then the rest; d is the ambient
    dimension whose floor the dense computation uses."""
    lam, E = torch.linalg.eigh(A_s)
    top = float(lam.abs().max()) if lam.numel() else 0.0
    floor = DEGENERATE * d * torch.finfo(dtype).eps * max(top, 1e-300)
    on = lam.abs() > floor
    order = torch.cat([on.nonzero().flatten(), (~on).nonzero().flatten()])
    return E[:, order], lam[on]


def solve(Vt: torch.Tensor, lam: torch.Tensor, dtype, work=None) -> Core:
    """The nearest symmetric and definite mobilities from Ṽ = EᵀV̂E (r × r) and Λ (p,).

    Parameters
    ----------
    Vt : (r, r) the value map in the eigenbasis E = [U, N] of :func:`eigenbasis`.
    lam : (p,) the eigenvalues of E's first p columns.
    dtype : the dtype whose epsilon sets the inertia's zero floor.
    work : the dtype of the bracket's eigendecomposition (default Vt's; float32: module
        notes, "Precision"), its eigenpairs then returned in Vt's dtype.

    Returns
    -------
    :class:`Core` (module notes).
    """
    p = lam.numel()
    li, lj = lam[:, None], lam[None, :]
    Vuu = Vt[:p, :p]
    Mt = (lj * Vuu + li * Vuu.mT) / (li.square() + lj.square())
    Mt = 0.5 * (Mt + Mt.mT)
    C = Vt[p:, :p] / lam
    evals = torch.linalg.eigvalsh(Mt)
    inertia = _inertia(evals, dtype)
    small = _bracket(Mt, C, _pinv_form(Mt, evals, C))
    del Mt
    ev, Z = torch.linalg.eigh(small if work in (None, small.dtype) else small.to(work))
    ev, Z = ev.to(small), Z.to(small)
    columns = small[:, :p]  # M* A_s = E [M̃; C] Λ U-columns
    up = ev > 0
    scaled, rows = Z[:, up], Z[:p, up]
    positive = scaled.mul_(ev[up]) @ rows.mT  # the clip of M*, its U-columns
    del scaled, rows
    tail = float(Vt[:, p:].square().sum())

    def residual(cols: torch.Tensor) -> float:
        """‖Ṽ_·U − cols·Λ‖² + tail, cols·Λ − Ṽ_·U formed in place (a fresh ``cols``)."""
        return math.sqrt(float(cols.mul_(lam).sub_(Vt[:, :p]).square_().sum()) + tail)

    value = residual(columns.clone())
    minus = residual(columns - positive)
    plus = residual(positive)
    sign = 1 if plus <= minus else -1  # ties: +1, the dense loop's first
    keep = up if sign == 1 else ev < 0
    margin = abs(plus - minus) / max(plus, minus, 1e-300)
    sizes = evals.abs()
    spread = float(sizes.min() / sizes.max().clamp_min(1e-300)) if evals.numel() else 1.0
    return Core(lam, small, Z[:, keep], ev[keep], C, sign, inertia, value, min(plus, minus),
                margin, spread)  # fmt: skip


def _bracket(Mt: torch.Tensor, C: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """[[M̃, Cᵀ], [C, ½(K + Kᵀ)]] (r × r) for K = C M̃⁺ Cᵀ, written into one array: M̃ is
    exactly symmetric, so this equals ½(X + Xᵀ) of the unsymmetrised bracket X to the bit."""
    p = Mt.shape[-1]
    r = p + C.shape[0]
    small = Mt.new_empty(r, r)
    small[:p, :p] = Mt
    small[:p, p:] = C.mT
    small[p:, :p] = C
    small[p:, p:] = block.add_(block.mT.clone()).mul_(0.5)
    return small


def _pinv_form(Mt: torch.Tensor, evals: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """C M̃⁺ Cᵀ with torch.linalg.pinv(hermitian=True)'s M̃⁺ (eigenvalues |λ| ≤ n·eps·max|λ|
    dropped; ``evals`` M̃'s): a solve where none is (M̃⁺ = M̃⁻¹), else from the
    eigendecomposition."""
    if Mt.numel() == 0:
        return C.new_zeros(C.shape[0], C.shape[0])
    cut = Mt.shape[-1] * torch.finfo(Mt.dtype).eps * float(evals.abs().max())
    if float(evals.abs().min()) > cut:
        return C @ lu.solve(Mt, C.mT)
    evals, W = torch.linalg.eigh(Mt)
    keep = evals.abs() > cut
    inverse = torch.where(keep, 1.0 / torch.where(keep, evals, torch.ones_like(evals)), 0.0)
    CW = C @ W
    return (CW * inverse) @ CW.mT


def _inertia(evals: torch.Tensor, dtype) -> tuple[int, int, int]:
    """(n₊, n₋, n₀) of the eigenvalues, zero below 1e3·n·eps·max|λ|."""
    if evals.numel() == 0:
        return (0, 0, 0)
    floor = DEGENERATE * evals.shape[-1] * torch.finfo(dtype).eps * float(evals.abs().max())
    pos, neg = int((evals > floor).sum()), int((evals < -floor).sum())
    return (pos, neg, evals.shape[-1] - pos - neg)


@dataclass(frozen=True, eq=False)
class HeadProjection:
    """One head's projection in factor form (module notes).

    Attributes
    ----------
    basis : (d, r) B = Q E, orthonormal: every d × d matrix of the head is B X Bᵀ.
    core : :class:`Core` in B's coordinates.
    compressed_rows : (2k, r) [W_Q; W_K] Q;  eigenbasis : (r, r) E.
    span : (d, m) Q, or None where Q is the identity (:func:`head_basis`).
    work : the working precision the projection ran in (:func:`project_head`).
    A_norm, symmetry_residual, V_norm, A_s_norm : ‖A‖, ‖A − A_s‖, ‖V‖, ‖A_s‖ (Frobenius).
    """

    basis: torch.Tensor
    core: Core
    compressed_rows: torch.Tensor
    eigenbasis: torch.Tensor
    A_norm: float
    symmetry_residual: float
    V_norm: float
    A_s_norm: float
    span: torch.Tensor | None = None
    work: torch.dtype = torch.float64

    def rope_grams(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(C, S) = (GGᵀ, (M_sGᵀ)ᵀ(M_sGᵀ)), G = [W_Q; W_K] (2k × 2k each, float64; S's
        products in :attr:`work`, C's in float64: the RoPE offset norms are differences of
        C's inner products, which a float32 C would leave at √eps₃₂): G's rows lie in range
        B, B orthonormal, so with Ĝ = GQ and M_s = B Z D Zᵀ Bᵀ, C = ĜĜᵀ and S = P D² Pᵀ,
        P = Ĝ(EZ) (2k × n)."""
        rows = self.compressed_rows.double()
        G = rows.to(self.work)
        P = G @ (self.eigenbasis.to(self.work) @ self.core.vectors.to(self.work))
        S = (P * self.core.values.to(self.work).square()) @ P.mT
        return rows @ rows.mT, S.double()  # C in float64: the RoPE norms difference its entries

    def mobility_times(self, x: torch.Tensor) -> torch.Tensor:
        """M_s x for x (d,) or (d, n): B Z D Zᵀ Bᵀ x (Z, D the sign-s eigenpairs)."""
        Z = self.core.vectors
        inner = Z.mT @ (self.basis.mT @ x)
        return self.basis @ (Z @ (self.core.values.reshape(-1, *[1] * (x.ndim - 1)) * inner))


def head_basis(head) -> torch.Tensor | None:
    """Q (d, m): the orthonormal QR factor of [W_Qᵀ, W_Kᵀ, W_O, W_Vᵀ]; None (the identity)
    where m ≥ d or V is one dense d × d matrix (module notes)."""
    if head.Wv is None:
        return None
    parts = [head.Wq.mT, head.Wk.mT, head.Wo, head.Wv.mT]
    if sum(p.shape[-1] for p in parts) >= head.dim:
        return None
    return torch.linalg.qr(torch.cat(parts, 1)).Q


def project_head(head, dtype=torch.float64) -> HeadProjection:
    """The nearest structured head of an :class:`~tpde.fields.gradient_flow.AttentionHead`
    in factor form: O(d·m² + m³), no d × d array where m < d (module notes).

    ``dtype`` float32 runs A_s's and the bracket's eigendecompositions and the products in
    float32, the rest in float64, and falls back to float64 where a rank or sign decision
    is within float32's reach (module notes, "Precision")."""
    if dtype == torch.float32:
        fast = _project(head, torch.float32)
        if fast is not None:
            return fast
    return _project(head, torch.float64)


def _project(head, work) -> HeadProjection | None:
    """:func:`project_head` in the working precision ``work``; None where float32's
    decisions are not clear (an eigenvalue of A_s near its floor, or the two signs' residuals
    within SIGN_MARGIN)."""
    Q = head_basis(head)
    k = head.Wq.shape[0]
    G = torch.cat([head.Wq, head.Wk])
    Gh = G if Q is None else G @ Q
    Gw = Gh.to(work)
    A = head.scale * Gw[k:].mT @ Gw[:k]
    A_s = 0.5 * (A + A.mT)
    A_norm, sym_norm, A_s_norm = float(A.norm()), float((A - A_s).norm()), float(A_s.norm())
    del A, Gw  # the work arrays go as soon as they are read: one r × r matrix fewer at a time
    if work == torch.float64:
        E, lam = eigenbasis(A_s, head.dim, work)
    else:
        E, lam = _eigenbasis32(A_s)
        if E is None:
            return None
    del A_s
    if head.Wv is None:  # V dense (d × d), Q the identity
        Vt = E.mT @ head.Wo.to(work) @ E
    else:
        left = head.Wo if Q is None else Q.mT @ head.Wo
        right = head.Wv if Q is None else head.Wv @ Q
        Vt = (E.mT @ left.to(work)) @ (right.to(work) @ E)
    E, Vt, lam = E.double(), Vt.double(), lam.double()
    core = solve(Vt, lam, torch.float64, work)
    if work != torch.float64 and (core.sign_margin <= SIGN_MARGIN or _unclear_inertia(core)):
        return None
    basis = E if Q is None else Q @ E
    V_norm = float(Vt.norm())
    return HeadProjection(basis, core, Gh, E, A_norm, sym_norm, V_norm, A_s_norm, Q, work)


def _unclear_inertia(core: Core) -> bool:
    """Whether M̃ has an eigenvalue float32 cannot place: |μ| ≤ INERTIA_BAND·√p·eps₃₂·max|μ|
    (M̃ is formed from float32's E, Ṽ and Λ: on exact heads of lower-rank M̃, p = 3 … 256,
    its zero eigenvalues came out at ≤ 1.1·√p·eps₃₂·max, either sign; below that band an
    eigenvalue's sign, or whether it is zero, is rounding: decided in float64)."""
    p = core.lam.numel()
    floor = INERTIA_BAND * math.sqrt(max(p, 1)) * torch.finfo(torch.float32).eps
    return core.mobility_spread <= floor


def _eigenbasis32(A_s: torch.Tensor):
    """:func:`eigenbasis` of a float32 A_s (r × r) with the floor √r·eps·max|λ| (module
    notes, "Precision"); (None, None) where an eigenvalue lies within a factor FLOOR_BAND
    of it (the rank not clear in float32)."""
    lam, E = torch.linalg.eigh(A_s)
    size = lam.abs()
    top = float(size.max()) if lam.numel() else 0.0
    floor = math.sqrt(lam.numel()) * torch.finfo(lam.dtype).eps * max(top, 1e-300)
    if bool(((size > floor / FLOOR_BAND) & (size < floor * FLOOR_BAND)).any()):
        return None, None
    on = size > floor
    order = torch.cat([on.nonzero().flatten(), (~on).nonzero().flatten()])
    return E[:, order], lam[on]
