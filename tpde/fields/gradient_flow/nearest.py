r"""The quantitative form of "is this attention a gradient flow?" (MATH.md §12).

:func:`nearest_gradient_field` projects every head of a softmax attention field onto the
gradient structure in closed form (:mod:`~tpde.fields.gradient_flow.projection`: A_s = sym A,
the nearest symmetric and definite mobility, the biases mapped to a key weight a and a drift
w = u − M a) and returns the structured field (:class:`StructuredAttention`) with a
:class:`StructureReport`: per head the relative residuals, the mobility's inertia, Saponati et
al.'s scores, and what breaks the structure. :func:`dynamic_gap` measures, on a token cloud,
the relative L2(μ) gap between the field's velocity and its nearest gradient field's, per head
and for the sum: :func:`tpde.fields.gradient_flow_gap` generalised to fields that are not
exactly gradient flows.

A structure *holds* for a head when its relative residual is ≤ ``rtol`` (default 1e-10: the
weights are read in float64 — float32 or bfloat16 checkpoints are exact float64 numbers —
and d × d products round at ~d·1e-16). What the sum of heads is [derived, MATH.md §12]: one
head; heads sharing (A_s, a, RoPE): one flow with mobility Σ_h M_h; heads on mutually
orthogonal subspaces (range A_s^h + range M_h + span a_h): one flow of Σ_h s_h E_h in the
block metric ⊕_h K^h_μ(s_hM_h)⁺, and classes of shared heads on orthogonal subspaces (GQA
groups) likewise; otherwise each head is a gradient flow of its own energy
and the sum is not one in general (measured by :func:`dynamic_gap`).

With several torch threads on the CPU, the heads are projected one per thread where the
projections are at least ``PARALLEL_WIDTH`` wide, else in turn, and the rest on one torch
thread: each operation on one thread (the numbers do not depend on the thread count), and no
OpenMP thread left spinning (SmolLM2's projections on two threads inside each operation:
52 CPU s against 9.2 on one, busy machine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from tpde._engines.tiled import calling_thread_alone, run_threads
from tpde._validation import check_positive
from tpde.fields.base import Field
from tpde.fields.gradient_flow._factored import project_head
from tpde.fields.gradient_flow._rope import _rope_norms
from tpde.fields.gradient_flow.heads import AttentionHead, attention_heads
from tpde.fields.gradient_flow.projection import product_scores, row_space
from tpde.fields.gradient_flow.structured import StructuredAttention, StructuredHead
from tpde.fields.params import evaluate_parameter, linear
from tpde.measures import Empirical
from tpde.metrics.mobility import NotAGradientFlow

__all__ = [
    "DynamicGap",
    "HeadStructure",
    "StructureReport",
    "dynamic_gap",
    "head_velocities",
    "nearest_gradient_field",
]

#: Projections at least this wide (r = min(2d_h + 2d_v, d)) run one head per torch thread:
#: Gemma-3-270M (r = 640) 16.3 CPU s on two against 17.1 on one; SmolLM2 (r = 256) 11.8
#: against 9.2 (small operations contending for the GIL; benchmarks/streamed_scores.py).
PARALLEL_WIDTH = 512
#: The default rtol per working precision (:func:`nearest_gradient_field`).
RTOL = {torch.float64: 1e-10, torch.float32: 1e-4}


@dataclass(frozen=True)
class HeadStructure:
    """One head's distance to the gradient structure, from its weights (module notes).

    Attributes
    ----------
    symmetry_residual : ‖A − A_s‖_F/‖A‖_F, A = c W_Kᵀ W_Q (no position).
    value_residual : ‖V − M* A_s‖_F/‖V‖_F, M* the nearest symmetric mobility.
    definite_residual : ‖V − M_s A_s‖_F/‖V‖_F, M_s the nearest definite one (sign ``sign``).
    inertia : (n₊, n₋, n₀) of M* on range(A_s).
    sign : s of M_s (+1: the head ascends its energy).
    symmetry, directionality : Saponati et al.'s scores of W_Qᵀ W_K.
    drift : ‖u − M_s a‖ (absolute, in the tokens' units per unit time).
    rope_residual : for a RoPE head, max over offsets m (±2^i up to ``ROPE_OFFSETS``) of
        ‖A(m)ᵀ − A(−m)‖_F/‖A(m)‖_F and of an upper bound of ‖V − M_s B(m)‖_F/‖V‖_F,
        ‖V − M_s B(0)‖ + ‖M_s(B(m) − B(0))‖ (B(m) = ½(A(m)ᵀ + A(−m)), the pair kernel's
        gradient map); None without RoPE.
    breaks : tuple of str, what keeps this head from being exactly a gradient flow.
    """

    symmetry_residual: float
    value_residual: float
    definite_residual: float
    inertia: tuple[int, int, int]
    sign: int
    symmetry: float
    directionality: float
    drift: float
    rope_residual: float | None
    breaks: tuple[str, ...]

    @property
    def exact(self) -> bool:
        """Whether the head is a gradient flow (nothing breaks)."""
        return not self.breaks


@dataclass(frozen=True)
class StructureReport:
    """Result of :func:`nearest_gradient_field`: per-head structure and what the sum is.

    Attributes
    ----------
    heads : tuple of :class:`HeadStructure`, in the field's head order.
    sum_structure : "one head", "shared interaction", "orthogonal classes" or "none"
        (module notes: when the sum of exact heads is one gradient flow).
    breaks : every break, "head h: …" for the heads', then the sum's.
    symmetry, directionality : Saponati et al.'s layer-level scores, of
        Σ_h W_Q^hᵀ W_K^{g(h)} (their W_QK of the whole layer; GQA with the key head each query
        head reads, as ``repeat_kv``).
    """

    heads: tuple[HeadStructure, ...]
    sum_structure: str
    breaks: tuple[str, ...]
    symmetry: float
    directionality: float

    @property
    def exact(self) -> bool:
        """Whether the field is one gradient flow (every head exact and the sum one flow)."""
        return not self.breaks

    def summary(self) -> str:
        """A few lines: heads, the sum's case, median scores over heads, the breaks' kinds."""
        lines = [
            f"{len(self.heads)} head(s); sum of heads: {self.sum_structure}; layer symmetry "
            f"{self.symmetry:.3f}, directionality {self.directionality:+.3f}"
        ]
        for name in ("symmetry", "symmetry_residual", "value_residual", "definite_residual"):
            values = self.scores(name)
            lines.append(
                f"  {name}: median {float(values.median()):.3g} "
                f"[{float(values.min()):.3g}, {float(values.max()):.3g}]"
            )
        kinds = dict.fromkeys(re.sub(r"^head \d+: ", "", b).split(" (")[0] for b in self.breaks)
        lines.append("  breaks: " + ("; ".join(kinds) if kinds else "none (a gradient flow)"))
        return "\n".join(lines)

    def scores(self, name: str) -> torch.Tensor:
        """One attribute of every head as a float64 tensor (H,), e.g. ``"symmetry"``."""
        if name not in HeadStructure.__dataclass_fields__ or name in ("inertia", "breaks"):
            numeric = [
                n for n in HeadStructure.__dataclass_fields__ if n not in ("inertia", "breaks")
            ]
            raise ValueError(f"scores takes one of {', '.join(numeric)}; received {name!r}.")
        values = [getattr(h, name) for h in self.heads]
        values = [float("nan") if v is None else v for v in values]
        return torch.tensor(values, dtype=torch.float64, device="cpu")


def working_rtol(dtype, rtol) -> float:
    """``rtol`` checked positive (default ``RTOL[dtype]``) after ``dtype`` is checked a
    working precision of the projections (TypeError naming what was received)."""
    if dtype not in RTOL:
        raise TypeError(
            f"dtype must be torch.float64 or torch.float32 (the projections' working "
            f"precision); received {dtype!r}."
        )
    return check_positive(RTOL[dtype] if rtol is None else rtol, "rtol")


def nearest_gradient_field(
    field, *, t: float = 0.0, rtol=None, dtype=torch.float64, structured: bool = True
):
    """The nearest gradient-flow field of an attention field, and the report (module notes).

    Parameters
    ----------
    field : Softmax, Sinkhorn, Masked(Softmax), MultiHead of softmax heads, or
        GroupedQueryAttention (a loaded model's attention sublayer).
    t : depth-time of time-dependent parameters.
    rtol : relative residual below which a structure holds (module notes; default
        ``RTOL[dtype]``: 1e-10 in float64, 1e-4 in float32).
    dtype : torch.float64 (default) or torch.float32, the working precision of the
        projections' eigendecompositions and products (float32: ≈ 1.4× faster per head it keeps,
        a head whose rank, sign or mobility inertia it cannot place projected in float64;
        scores within ≈ 1e-5 of float64's on constructed heads and 1.5e-3 on the shipped
        models;
        :mod:`~tpde.fields.gradient_flow._factored`, "Precision").
    structured : False to return (None, report): the nearest field is not built and each
        head's basis and mobility are dropped as soon as its report is made (the memory of
        the report alone, :func:`tpde.pretrained.weight_scores`; a head's span is projected
        again where the sum's orthogonality test needs it).

    Returns
    -------
    (structured, report): a :class:`StructuredAttention` (a :class:`~tpde.fields.Sinkhorn`
    for a Sinkhorn head) and a :class:`StructureReport`.

    Raises
    ------
    NotAGradientFlow
        A head that is not softmax or Sinkhorn (naming the structure it lacks).
    """
    rtol = working_rtol(dtype, rtol)
    heads = attention_heads(field, t)
    workers = _workers(heads.heads)  # with the caller's thread count
    if torch.get_num_threads() == 1 or heads.heads[0].Wq.device.type != "cpu":
        return _nearest(heads, rtol, 1, dtype, structured)
    with calling_thread_alone():  # no OpenMP thread spinning on the cores (module notes)
        return _nearest(heads, rtol, workers, dtype, structured)


def _nearest(heads, rtol: float, workers: int, dtype=torch.float64, keep: bool = True):
    """:func:`nearest_gradient_field` of the heads, projected on ``workers`` threads; the
    field None where ``keep`` is False (a Sinkhorn head's is built either way)."""
    keep = keep or any(head.kind == "sinkhorn" for head in heads.heads)
    structured, reports, drift, norms = [], [], heads.bias.clone(), []
    for s_head, report, w, norm_pair in _project_all(heads.heads, rtol, workers, dtype, keep):
        structured.append(s_head)
        reports.append(report)
        norms.append(norm_pair)
        drift = drift + w
    kinds = {head.kind for head in heads.heads}
    if "sinkhorn" in kinds:
        if len(heads) != 1:
            raise NotAGradientFlow(
                "sums of Sinkhorn heads are not read: the nearest field of a sum of Sinkhorn "
                "heads (one plan per head) is not built; pass one Sinkhorn head."
            )
        near = _sinkhorn(heads.heads[0], structured[0])
    else:
        near = StructuredAttention(structured, drift) if keep else None
    case = _sum_structure(structured, [n[0] for n in norms], rtol)
    breaks = [f"head {h}: {b}" for h, r in enumerate(reports) for b in r.breaks]
    if case == "none":
        breaks.append("sum of heads: not one gradient flow (no shared interaction, ranges "
                      "not orthogonal)")  # fmt: skip
    scale = max(n[1] for n in norms) + float(heads.bias.norm())
    if len(heads) > 1 and float(drift.norm()) > rtol * scale:
        breaks.append("sum of heads: a constant drift w = Σ_h(u_h − M_h a_h) + b_O ≠ 0")
    report = StructureReport(
        tuple(reports), case, tuple(breaks), *_layer_scores(heads.heads)
    )  # fmt: skip
    return near, report


def _layer_scores(heads) -> tuple[float, float]:
    """Saponati et al.'s scores of W = Σ_h W_Q^hᵀ W_K^{g(h)} = Σ_g (Σ_{h∈g} W_Q^h)ᵀ W_K^g, g
    over the distinct key heads (GQA: one product per key head), from the stacked factors
    (:func:`~tpde.fields.gradient_flow.projection.product_scores`: in their span where that
    pays, else W formed)."""
    groups: dict = {}
    for h in heads:
        key = (h.Wk.data_ptr(), tuple(h.Wk.shape), tuple(h.Wk.stride()))
        Wk, Wq = groups.get(key, (h.Wk, 0.0))
        groups[key] = (Wk, Wq + h.Wq)
    keys, queries = zip(*groups.values(), strict=True)
    return product_scores(torch.cat(queries), torch.cat(keys))


def _workers(heads) -> int:
    """Threads for the projections: torch's thread count for several CPU heads ≥ PARALLEL_WIDTH."""
    h = heads[0]
    width = h.dim if h.Wv is None else min(h.dim, 2 * len(h.Wq) + h.Wo.shape[1] + len(h.Wv))
    if len(heads) < 2 or width < PARALLEL_WIDTH or h.Wq.device.type != "cpu":
        return 1
    return max(1, min(torch.get_num_threads(), len(heads)))


def _project_all(heads, rtol: float, workers: int, dtype=torch.float64, keep=True) -> list:
    """:func:`_project` of every head, on ``workers`` threads
    (:func:`~tpde._engines.tiled.run_threads`: Python threads, each running torch
    single-threaded, pulling heads in turn): each head's numbers are those of a
    single-threaded run, whatever the thread count."""
    if workers == 1:
        return [_project(head, rtol, dtype, keep) for head in heads]
    out = [None] * len(heads)

    def work(jobs):
        for i in jobs:
            out[i] = _project(heads[i], rtol, dtype, keep)

    run_threads(work, len(heads), workers)
    return out


def _project(head: AttentionHead, rtol: float, dtype=torch.float64, keep: bool = True):
    """(StructuredHead, HeadStructure, drift w_h, (‖A_s‖, ‖V‖)) of one head, in factor
    form (:mod:`~tpde.fields.gradient_flow._factored`); the projection's work arrays are
    dropped on return (the structured head keeps B and Z)."""
    proj = project_head(head, dtype)
    core = proj.core
    A_norm, V_norm = proj.A_norm, proj.V_norm or 1.0
    sym_res = proj.symmetry_residual / (A_norm or 1.0)
    val_res = core.value_residual / V_norm
    def_res = core.definite_residual / V_norm
    w = head.u - proj.mobility_times(head.a)
    breaks = []
    if sym_res > rtol:
        breaks.append(f"interaction not symmetric (‖A − A_s‖/‖A‖ = {sym_res:.3g})")
    if val_res > rtol:
        breaks.append(f"no symmetric mobility (‖V − M*A_s‖/‖V‖ = {val_res:.3g})")
    if core.inertia[0] and core.inertia[1]:
        breaks.append(f"mobility indefinite on range(A) (inertia {core.inertia})")
    drift = float(w.norm())
    if head.kind == "softmax" and drift > rtol * (V_norm + float(head.u.norm())):
        breaks.append(f"constant drift w = u − M a ≠ 0 (‖w‖ = {drift:.3g})")
    rope_res = None
    if head.rope is not None:
        C, S = proj.rope_grams()  # C = GGᵀ, S = (M_s Gᵀ)ᵀ(M_s Gᵀ), G = [W_Q; W_K]
        rope_res = _rope_norms(head, C, S, V_norm, def_res * V_norm)
        if rope_res > rtol:
            breaks.append(f"RoPE: the pair kernel is not a gradient map (residual {rope_res:.3g})")
        if head.bq is not None or head.bk is not None:
            breaks.append("query/key biases under RoPE: position-dependent key weights")
    if head.causal:
        breaks.append("causal mask: a one-sided kernel has no interaction energy")
    breaks.extend(f"{extra}: the score is not of the form yᵀAx + aᵀy" for extra in head.extras)
    report = HeadStructure(
        sym_res, val_res, def_res, core.inertia, core.sign, *_head_scores(head, proj),
        drift, rope_res, tuple(breaks),
    )  # fmt: skip
    if not keep:
        return _Lean(head, core.sign, rtol, dtype), report, w, (proj.A_s_norm, proj.V_norm)
    structured = StructuredHead(
        head.Wq, head.Wk, head.scale, head.a, proj.basis, core.vectors, core.values, core.sign,
        head.rope, core.coupling,
    )  # fmt: skip
    return structured, report, w, (proj.A_s_norm, proj.V_norm)


@dataclass(frozen=True, eq=False)
class _Lean:
    """What the sum's tests read of a structured head (W_Q, W_K, c, a, RoPE, sign), without
    its basis and mobility (``structured=False``): the span is projected again on demand."""

    head: AttentionHead
    sign: int
    rtol: float
    dtype: torch.dtype

    def __getattr__(self, name):  # Wq, Wk, scale, a, rope: the head's own
        if name == "head":  # not yet set (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.head, name)

    @property
    def span(self) -> torch.Tensor:
        return _project(self.head, self.rtol, self.dtype)[0].span


def _head_scores(head: AttentionHead, proj) -> tuple[float, float]:
    """Saponati et al.'s scores of W_QᵀW_K, in the projection's span Q where it is a proper
    subspace (m < d; it holds the rows of W_Q and W_K), else as product_scores decides."""
    if proj.span is not None:
        return product_scores(head.Wq, head.Wk, basis=proj.span)
    return product_scores(head.Wq, head.Wk)


def _sinkhorn(head: AttentionHead, structured: StructuredHead):
    from tpde.fields.attention import Sinkhorn

    A_s = 0.5 * (head.A + head.A.mT)
    eye = torch.eye(A_s.shape[-1], dtype=A_s.dtype, device=A_s.device)
    src = head.source  # the nearest field solves its plan as the head does
    return Sinkhorn(
        A_s, eye, structured.M @ A_s, scale=1.0, eps=src.eps, iters=src.iters, tol=src.tol
    )


def _sym_gap(h: StructuredHead, g: StructuredHead) -> float:
    """‖A_s^h − A_s^g‖_F, A_s = ½c(W_KᵀW_Q + W_QᵀW_K): in the span of the four weights'
    rows (QR of their stack, 4k × 4k) where 4k < d, else from the d × d matrices."""
    G = torch.cat([h.Wq, h.Wk, g.Wq, g.Wk])
    if G.shape[0] < G.shape[-1]:
        G = G @ torch.linalg.qr(G.mT).Q
    k, kg = h.Wq.shape[0], g.Wq.shape[0]
    Aq = h.scale * G[k : 2 * k].mT @ G[:k] - g.scale * G[2 * k + kg :].mT @ G[2 * k : 2 * k + kg]
    return float((0.5 * (Aq + Aq.mT)).norm())


def _shares(h: StructuredHead, g: StructuredHead, norms: tuple, rtol: float) -> bool:
    """Whether two heads have one pair kernel: the same (A_s, a) and RoPE (same W_Q, W_K).
    ``norms``: (‖A_s^h‖, ‖A_s^g‖); |‖A_s^h‖ − ‖A_s^g‖| ≤ ‖A_s^h − A_s^g‖ decides most pairs."""
    if (h.rope is None) != (g.rope is None) or h.sign != g.sign:
        return False
    if h.rope is not None:
        return h.rope == g.rope and torch.equal(h.Wq, g.Wq) and torch.equal(h.Wk, g.Wk)
    scale = norms[0] + float(h.a.norm()) or 1.0
    a_gap = float((h.a - g.a).norm())
    if abs(norms[0] - norms[1]) + a_gap > rtol * scale:
        return False
    return _sym_gap(h, g) + a_gap <= rtol * scale


def _sum_structure(heads, norms, rtol: float) -> str:
    """Which exact case the sum of the structured heads is (module notes): heads that share
    a kernel merge (mobility Σ M_h of one sign); merged classes on mutually orthogonal
    subspaces are one flow in the block metric. ``norms``: ‖A_s^h‖ of every head."""
    if len(heads) == 1:
        return "one head"
    classes: list[list[int]] = []
    for i, h in enumerate(heads):
        for members in classes:
            j = members[0]
            if _shares(h, heads[j], (norms[i], norms[j]), rtol):
                members.append(i)
                break
        else:
            classes.append([i])
    if len(classes) == 1:
        return "shared interaction"
    # |⟨x, y⟩| ≤ ‖B_iᵀB_j‖ for unit rows x, y of two classes' W_Q, W_K (in their spans B)
    rows = []
    for members in classes:
        G = torch.cat([heads[members[0]].Wq, heads[members[0]].Wk])
        norm = G.norm(dim=-1, keepdim=True)
        rows.append(G / torch.where(norm > 0, norm, torch.ones_like(norm)))
    for i in range(len(rows)):
        for j in range(i):
            if float((rows[i] @ rows[j].mT).abs().max()) > 1e3 * rtol:
                return "none"
    bases = []  # each head's span holds its kernel at every RoPE offset, its M and a
    for members in classes:
        bases.append(row_space(torch.cat([heads[h].span.mT for h in members])))
    for i in range(len(bases)):
        for j in range(i):
            if float((bases[i].mT @ bases[j]).norm()) > 1e3 * rtol:
                return "none"
    return "orthogonal classes"


# ---------------------------------------------------------------------- dynamics
@dataclass(frozen=True)
class DynamicGap:
    """Result of :func:`dynamic_gap`.

    Attributes
    ----------
    relative_gap : 0-d tensor, (Σ_i w_i|Γ_i − Γ^s_i|² / Σ_i w_i|Γ_i|²)^{1/2}.
    head_gaps : (H,) tensor, the same per head, Γ_h against M_h∇log K^h_μ + u_h − M_h a_h.
    velocity : (n, d) Γ[μ] of the field;  nearest : (n, d) Γ^s[μ] of its nearest gradient field.
    report : the :class:`StructureReport` of the projection.
    """

    relative_gap: torch.Tensor
    head_gaps: torch.Tensor
    velocity: torch.Tensor
    nearest: torch.Tensor
    report: StructureReport


def dynamic_gap(
    field, mu, *, t: float = 0.0, rtol: float = 1e-10, engine: str = "auto", nearest=None
):
    r"""Relative L2(μ) gap between a field's velocity and its nearest gradient field's.

    ‖Γ[μ] − Γ_s[μ]‖_{L²(μ)} / ‖Γ[μ]‖_{L²(μ)} at μ's tokens, Γ_s from
    :func:`nearest_gradient_field` (module notes); per head with each head's own drift.
    Causal masks, RoPE, QK-norms and soft-caps stay in Γ (the field's own velocity) and are
    absent from Γ_s where they break the structure: the gap measures them.

    Parameters
    ----------
    field : as :func:`nearest_gradient_field`.
    mu : Empirical, the tokens (with positions where the field needs them).
    nearest : (field, report), optional
        ``nearest_gradient_field(field, t=t, rtol=rtol)`` already computed (its eigen- and
        singular-value decompositions dominate the cost), reused as given.

    Returns
    -------
    :class:`DynamicGap`.
    """
    if not isinstance(mu, Empirical):
        raise TypeError(
            f"dynamic_gap compares velocities at tokens: pass an Empirical; received "
            f"{type(mu).__name__}."
        )
    near, report = nearest or nearest_gradient_field(field, t=t, rtol=rtol)
    field.check_measure(mu)
    x = mu.points
    heads = attention_heads(field, t)
    own = head_velocities(field, mu, t=t, engine=engine)
    if not isinstance(near, StructuredAttention):  # a Sinkhorn head
        nearest = near.velocity(mu, engine=engine)
        targets = [nearest]
    else:
        positions = mu.positions if near.needs_positions else None
        parts = near.head_velocities(mu, x, positions, engine=engine)
        pairs = zip(parts, heads.heads, near.heads, strict=True)
        targets = [p + (h.u - s.apply_mobility(h.a[None])[0]).to(p) for p, h, s in pairs]
        nearest = sum(targets) + heads.bias.to(x)
    velocity = field.velocity(mu, t=t, engine=engine)
    gap = _l2_gap(mu, velocity, nearest)
    head_gaps = torch.stack([_l2_gap(mu, v, s) for v, s in zip(own, targets, strict=True)])
    return DynamicGap(gap, head_gaps, velocity, nearest, report)


def _l2_gap(mu: Empirical, v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    num = (mu.weights * (v - s).square().sum(-1)).sum()
    den = (mu.weights * v.square().sum(-1)).sum()
    return (num / den.clamp_min(torch.finfo(den.dtype).tiny)).sqrt()


def head_velocities(field, mu: Empirical, *, t: float = 0.0, engine: str = "auto"):
    """Each head's own velocity Γ_h[μ] at μ's tokens (no output bias): a list of (n, d).

    Σ_h Γ_h + b_O = field.velocity(mu). A grouped-query field's heads come from its
    attention probabilities (:meth:`GroupedQueryAttention.probabilities`): RoPE, masks,
    QK-norms and soft-caps included.
    """
    from tpde.fields.attention import GroupedQueryAttention, MultiHead

    if isinstance(field, MultiHead):
        W = evaluate_parameter(field.W, "W", t)  # (H, d, d): head h adds W_hᵀ Γ_h
        out = []
        for h, head in enumerate(field.heads):
            v = head.velocity(mu, t=t, engine=engine)
            out.append(v if W is None else v @ W[h].to(v))
        return out
    if isinstance(field, GroupedQueryAttention):
        P = field.probabilities(mu, t=t)  # (H, n, N)
        _, _, Wv, Wo, _, _, bv, _ = field.params.at(t, mu.points)
        values = linear(mu.points, Wv, bv).unflatten(-1, (-1, field.head_dim)).transpose(-3, -2)
        group, dh = field.heads // field.kv_heads, field.head_dim
        return [
            P[h] @ values[h // group] @ Wo[:, h * dh : (h + 1) * dh].mT
            for h in range(field.heads)
        ]  # fmt: skip
    if isinstance(field, Field):
        return [field.velocity(mu, t=t, engine=engine)]
    raise TypeError(f"head_velocities takes a tpde field; received {type(field).__name__}.")
