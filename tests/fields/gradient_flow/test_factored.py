"""The factor-form projection (MATH.md §12, "factor form") against the dense d × d oracle.

Oracle: tests/fields/gradient_flow/dense_oracle.py, tpde's projection as it was before the
factor form (A, V, A_s, M*, M_s formed as d × d matrices). The factor form computes the same
numbers in an orthonormal basis of the head's span (or, where that span fills R^d, in the
eigenbasis of the d × d A_s): exact in real arithmetic, so the two differ by rounded sums
of O(d·k) terms. REL = 1e-12 (the issue's bound) holds for every score, the layer scores,
the projected interaction (the same W_Q, W_K), value map M_s A_s and key weight a: measured
≤ 4e-13 over 40 seeds of each shape below. The mobility M_s itself and the drift
w = u − M_s a carry M*'s kernel block C M̃⁺ Cᵀ, which amplifies rounding by cond(M̃): the
dense oracle itself moves by 1.2e-12 when its weights move by one ulp at the worst of those
seeds (factor against dense: 4.7e-12 there), so they are compared to MOBILITY = 1e-10.
Counts (inertia, sign) and the sum's case are compared exactly.
Quantities at rounding level (the exact head's residuals) are compared to ROUND absolutely:
a relative difference of two rounding errors means nothing.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.fields.gradient_flow import dense_oracle
from tpde._engines.tiled import run_threads
from tpde.fields import (
    GroupedQueryAttention,
    MultiHead,
    RoPE,
    Softmax,
    attention_heads,
    nearest_gradient_field,
    product_scores,
)
from tpde.fields.gradient_flow import _factored, nearest
from tpde.fields.gradient_flow._factored import head_basis

F64 = torch.float64
REL = 1e-12
MOBILITY = 1e-10
ROUND = 1e-12
SCORES = ("symmetry_residual", "value_residual", "definite_residual", "symmetry",
          "directionality", "drift", "rope_residual")  # fmt: skip


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=F64)


def _low_rank(g, rows, cols, rank):
    return _randn(g, rows, rank) @ _randn(g, rank, cols) / math.sqrt(rank)


def _rel(x, y) -> float:
    if isinstance(x, torch.Tensor):
        return float((x - y).norm()) / max(float(y.norm()), 1e-300)
    return abs(x - y) / max(abs(y), 1e-300)


def _gqa(g, d, k, H, Hkv, *, rank_q=None, rank_v=None, rank_o=None, rope=None):
    """A grouped-query field with every bias (b_q, b_k, b_v, b_O), optionally rank-deficient."""
    Wq = _low_rank(g, H * k, d, rank_q) if rank_q else _randn(g, H * k, d)
    Wk = _randn(g, Hkv * k, d)
    Wv = _low_rank(g, Hkv * k, d, rank_v) if rank_v else _randn(g, Hkv * k, d)
    Wo = _low_rank(g, d, H * k, rank_o) if rank_o else _randn(g, d, H * k)
    biases = {"bq": _randn(g, H * k), "bk": _randn(g, Hkv * k), "bv": _randn(g, Hkv * k),
              "bo": _randn(g, d)}  # fmt: skip
    return GroupedQueryAttention(Wq / math.sqrt(d), Wk / math.sqrt(d), Wv / math.sqrt(d),
                                 Wo / math.sqrt(d), H, Hkv, position=rope, causal=False,
                                 **biases)  # fmt: skip


def _compare(field, factor_form: bool, rel: float = REL) -> None:
    """Every score, count and projected matrix of the factor form against the dense oracle."""
    heads = attention_heads(field).heads
    assert all((head_basis(h) is not None) == factor_form for h in heads)
    near, report = nearest_gradient_field(field)
    oracle = dense_oracle.field_oracle(field)
    assert report.sum_structure == oracle.sum_structure
    assert _rel(report.symmetry, oracle.symmetry) <= rel
    assert _rel(report.directionality, oracle.directionality) <= rel
    assert _rel(near.drift, oracle.drift) <= MOBILITY
    for mine, theirs, s_head in zip(report.heads, oracle.heads, near.heads, strict=True):
        assert (mine.inertia, mine.sign) == (theirs.inertia, theirs.sign)
        for name in SCORES:
            x, y = getattr(mine, name), getattr(theirs, name)
            assert (x is None) == (y is None), name
            if x is not None:
                assert _rel(x, y) <= rel, (name, x, y)
        assert _rel(s_head.M, theirs.M_definite) <= MOBILITY
        assert _rel(s_head.M @ theirs.A_s, theirs.M_definite @ theirs.A_s) <= rel
        assert _rel(s_head.a, theirs.a) <= rel
        span = s_head.span  # the same subspace: each basis reproduces the other
        assert float((theirs.span - span @ (span.mT @ theirs.span)).norm()) <= 1e-10


@pytest.mark.parametrize("seed", range(2))
def test_gqa_with_every_bias_in_factor_form(seed):
    """d_h < d/4 (the span: r = 4d_h < d), GQA 4/2 sharing key and value heads; the
    layer's W_QK in factor form too (H·d_h + H_kv·d_h < d)."""
    g = torch.Generator().manual_seed(100 + seed)
    _compare(_gqa(g, 40, 4, 4, 2), factor_form=True)


def test_rank_deficient_weights_in_factor_form():
    """W_Q of rank 2 per head block, W_V of rank 1, W_O of rank 3 (d_h = 4): A_s of rank
    < 2d_h, M̃ and Y rank-deficient; Householder's Q still holds the span."""
    g = torch.Generator().manual_seed(110)
    _compare(_gqa(g, 40, 4, 2, 1, rank_q=2, rank_v=1, rank_o=3), factor_form=True)


@pytest.mark.parametrize("rope", [RoPE(), RoPE(dims=4, style="interleaved")])
def test_rope_heads_in_factor_form(rope):
    """The RoPE residual from the factors (C = ĜĜᵀ, S = ĜM̃²Ĝᵀ): full and partial rotary."""
    g = torch.Generator().manual_seed(120)
    _compare(_gqa(g, 48, 6, 3, 1, rope=rope), factor_form=True)


def test_span_filling_the_space_falls_back_to_the_dense_form():
    """r = 4d_h ≥ d: the same code on d × d matrices (Q the identity)."""
    g = torch.Generator().manual_seed(130)
    _compare(_gqa(g, 12, 4, 3, 3), factor_form=False)


def test_heads_wider_than_the_space_together():
    """H·d_h > d: per head the factor form (4d_h < d), the layer's W_QK dense."""
    g = torch.Generator().manual_seed(140)
    field = _gqa(g, 24, 4, 8, 2)
    assert 8 * 4 > 24
    _compare(field, factor_form=True)


def test_multihead_of_dense_values():
    """MultiHead of Softmax heads with an output map and bias: V dense (d × d), no factors."""
    g = torch.Generator().manual_seed(150)
    d, k = 10, 3
    heads = [Softmax(_randn(g, k, d), _randn(g, k, d), _randn(g, d, d),
                     query_bias=_randn(g, k), key_bias=_randn(g, k), value_bias=_randn(g, d))
             for _ in range(3)]  # fmt: skip
    _compare(MultiHead(heads, W=_randn(g, 3, d, d) / d, bias=_randn(g, d)), factor_form=False)


def test_query_heads_sharing_one_kernel():
    """Two query heads with one W_Q on one key head: one A_s and a, the sum a shared
    interaction (the norms agree, so the span comparison decides)."""
    g = torch.Generator().manual_seed(160)
    d, k = 40, 4
    Wq = _randn(g, k, d)
    Wk, Wv, Wo = _randn(g, k, d), _randn(g, k, d), _randn(g, d, 2 * k)
    bq = _randn(g, k)
    field = GroupedQueryAttention(torch.cat([Wq, Wq]), Wk, Wv, Wo, 2, 1, causal=False,
                                  bq=torch.cat([bq, bq]))  # fmt: skip
    _compare(field, factor_form=True)
    assert nearest_gradient_field(field)[1].sum_structure == "shared interaction"


def _orthogonal_heads(g, d=48, k=3, H=2):
    """H heads of width k, each reading and writing its own 13 of d coordinates."""
    Wq, Wk, Wv = (torch.zeros(H * k, d, dtype=F64) for _ in range(3))
    Wo = torch.zeros(d, H * k, dtype=F64)
    for h in range(H):
        rows, cols = slice(h * k, (h + 1) * k), slice(h * 24, h * 24 + 13)
        for W in (Wq, Wk, Wv):
            W[rows, cols] = _randn(g, k, 13)
        Wo[cols, rows] = _randn(g, 13, k)
    return GroupedQueryAttention(Wq, Wk, Wv, Wo, H, H, causal=False)


def test_heads_on_orthogonal_coordinates():
    """Each head reads and writes its own block of coordinates: orthogonal classes (the
    exact span test after the row-cosine test finds no overlap)."""
    field = _orthogonal_heads(torch.Generator().manual_seed(170))
    _compare(field, factor_form=True)
    assert nearest_gradient_field(field)[1].sum_structure == "orthogonal classes"


def _exact_head(d=40, k=3):
    """W_K = S W_Q (S symmetric), W_V = W_Q and W_O W_V = M A_s with M = PᵀP/d ⪰ 0 of
    rank 2: a gradient-flow head by construction, r = 4k < d."""
    g = torch.Generator().manual_seed(180)
    Wq = _randn(g, k, d) / math.sqrt(d)
    S = _randn(g, k, k)
    Wk = (S + S.mT) @ Wq
    P = _randn(g, 2, d)
    M = P.mT @ P / d
    Wo = M @ Wk.mT / math.sqrt(k)  # W_O W_V = M W_Kᵀ W_Q / √k = M A_s
    return GroupedQueryAttention(Wq, Wk, Wq, Wo, 1, 1, causal=False)


def test_exact_head_in_factor_form_is_at_rounding():
    """W_K = S W_Q (S symmetric) and V = M A_s with M ⪰ 0 of rank 2, V factored through
    W_V = W_Q: r = 4k < d, every residual at rounding, sign +1 (the oracle's too)."""
    field = _exact_head()
    near, report = nearest_gradient_field(field)
    h = report.heads[0]
    assert max(h.symmetry_residual, h.value_residual, h.definite_residual) <= ROUND
    assert h.sign == 1 and report.exact
    oracle = dense_oracle.field_oracle(field).heads[0]
    assert oracle.sign == 1 and oracle.definite_residual <= ROUND
    assert _rel(near.heads[0].M, oracle.M_definite) <= 1e-10  # M's kernel block: a pinv


@pytest.mark.parametrize(("n", "n_k", "d"), [(6, 6, 40), (12, 4, 40), (12, 12, 20)])
def test_product_scores_from_the_factors(n, n_k, d):
    """Saponati's scores of W_QᵀW_K from the factors (and from W where m² ≥ d·n) against
    the formed W; key rows spanning W_K's (repeat_kv's distinct key heads), or a given
    orthonormal basis holding both (wider than they need)."""
    g = torch.Generator().manual_seed(190 + n)
    Wq, keys = _randn(g, n, d), _randn(g, n_k, d)
    Wk = keys.repeat(n // n_k, 1)
    W = Wq.mT @ Wk
    basis = torch.linalg.qr(torch.cat([Wq.mT, keys.mT, _randn(g, d, 3)], 1)).Q
    for kwargs in ({"key_rows": keys}, {"basis": basis}):
        sym, direction = product_scores(Wq, Wk, **kwargs)
        assert _rel(sym, float(dense_oracle.symmetry_score(W))) <= REL
        assert _rel(direction, float(dense_oracle.directionality_score(W))) <= REL


def test_singular_compressed_mobility_takes_the_pseudo_inverse(monkeypatch):
    """A_s on two coordinate blocks, V on the first only: M̃ vanishes on the second block's
    eigenvectors (to rounding), so C M̃⁺ Cᵀ drops those eigenvalues as pinv does (the
    eigendecomposition branch, not the solve)."""
    g = torch.Generator().manual_seed(200)
    d, k = 40, 4
    Wq, Wk, Wv = (torch.zeros(k, d, dtype=F64) for _ in range(3))
    for W in (Wq, Wk):
        W[:2, :4], W[2:, 4:8] = _randn(g, 2, 4), _randn(g, 2, 4)
    Wv[:, :4] = _randn(g, k, 4)
    Wo = torch.zeros(d, k, dtype=F64)
    Wo[:4] = _randn(g, 4, k)
    field = GroupedQueryAttention(Wq, Wk, Wv, Wo, 1, 1, causal=False, bq=_randn(g, k))
    seen, pinv_form = [], _factored._pinv_form

    def spy(Mt, evals, C):
        seen.append(evals.abs())
        return pinv_form(Mt, evals, C)

    monkeypatch.setattr(_factored, "_pinv_form", spy)
    _compare(field, factor_form=True)
    (evals,) = seen
    assert float(evals.min()) <= len(evals) * torch.finfo(F64).eps * float(evals.max())


@pytest.mark.parametrize("seed", range(2))
def test_gemma_shaped_heads_fill_the_space(seed):
    """Gemma-3-270M's shape scaled down: 2d_h < d ≤ 4d_h (d = 40, d_h = 16), four query
    heads on one key/value head, RoPE: the span fills R^d, the d × d form against the oracle."""
    g = torch.Generator().manual_seed(210 + seed)
    _compare(_gqa(g, 40, 16, 4, 1, rope=RoPE()), factor_form=False)


def _same_numbers(threaded, serial) -> None:
    """Two reports of one field agree to rounding (rel 1e-13), counts and breaks exactly."""
    assert threaded.sum_structure == serial.sum_structure
    for name in ("symmetry", "directionality"):
        assert _rel(getattr(threaded, name), getattr(serial, name)) <= 1e-13
    for a, b in zip(threaded.heads, serial.heads, strict=True):
        assert (a.inertia, a.sign, a.breaks) == (b.inertia, b.sign, b.breaks)
        for name in SCORES:
            assert _rel(getattr(a, name), getattr(b, name)) <= 1e-13, name


def _on_one_then_two_threads(field, dtype=F64):
    """(report on one torch thread, report on two); torch's thread count restored."""
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        serial = nearest_gradient_field(field, dtype=dtype)[1]
        torch.set_num_threads(2)
        threaded = nearest_gradient_field(field, dtype=dtype)[1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)
    return serial, threaded


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_heads_on_threads_equal_one_thread(dtype, monkeypatch):
    """Projections of width ≥ PARALLEL_WIDTH go to torch's threads, one head per
    single-threaded worker, the layer's scores to the calling thread alone: the numbers of
    one thread, in either precision (every product on one thread either way; rel 1e-13
    leaves room for a BLAS that rounds differently in differently aligned buffers: equal to
    the last bit on Gemma-3-270M)."""
    g = torch.Generator().manual_seed(220)
    d = nearest.PARALLEL_WIDTH  # 4 d_h > d: the projection is d wide
    field = _gqa(g, d, d // 3, 4, 1, rope=RoPE())
    workers = []

    def spy(work, count, n):
        workers.append(n)
        return run_threads(work, count, n)

    monkeypatch.setattr(nearest, "run_threads", spy)
    serial, threaded = _on_one_then_two_threads(field, dtype)
    assert workers == [2]  # one thread: no workers; two: the four heads on two
    _same_numbers(threaded, serial)


def test_narrow_heads_on_several_threads_run_in_turn_on_one(monkeypatch):
    """Projections narrower than PARALLEL_WIDTH with two torch threads: no workers, every
    head on the calling thread with torch on one thread (calling_thread_alone)."""
    g = torch.Generator().manual_seed(230)
    field = _gqa(g, 64, 8, 4, 2, rope=RoPE())
    threads, project = [], nearest._project

    def spy(*args):
        threads.append(torch.get_num_threads())
        return project(*args)

    monkeypatch.setattr(nearest, "_project", spy)
    serial, threaded = _on_one_then_two_threads(field)
    assert threads == [1] * 8  # 4 heads on one thread, then 4 on two: torch on one each time
    _same_numbers(threaded, serial)


# ---------------------------------------------------------------------- float32 precision
#: float32's scores against float64's on the constructed heads (relative): rounding
#: eps32 ≈ 1.2e-7, summed over r ≤ 64 terms and amplified by the eigen-gaps the projection
#: divides by (Λ⁻¹ in C, the clip's gap at zero; conditioning ≤ ~10² on these random heads):
#: ≤ 64·1.2e-7·10² ≈ 1e-3. Measured over 10 seeds of each shape: ≤ 6e-6 on the residuals,
#: 5e-5 on rope_residual, 2e-4 on the drift (which carries M*'s kernel block CM̃⁺Cᵀ).
F32 = 1e-3
SHAPES = {
    "gqa": dict(d=40, k=4, H=4, Hkv=2),
    "rank": dict(d=40, k=4, H=2, Hkv=1, rank_q=2, rank_v=1, rank_o=3),
    "rope": dict(d=48, k=6, H=3, Hkv=1, rope=RoPE()),
    "dense": dict(d=12, k=4, H=3, Hkv=3),
    "gemma": dict(d=40, k=16, H=4, Hkv=1, rope=RoPE()),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_float32_scores_within_their_bound_of_float64(shape):
    """dtype=float32 (A_s's and the bracket's eigendecompositions and the products in
    float32; M̃, its inertia and the solve in float64) against float64: every score within
    F32, the counts (inertia, sign) equal on these well-separated spectra."""
    for seed in range(2):
        g = torch.Generator().manual_seed(300 + seed)
        field = _gqa(g, **SHAPES[shape])
        exact = nearest_gradient_field(field)[1]
        fast = nearest_gradient_field(field, dtype=torch.float32, rtol=1e-10)[1]
        assert _rel(fast.symmetry, exact.symmetry) <= F32
        for mine, theirs in zip(fast.heads, exact.heads, strict=True):
            assert (mine.inertia, mine.sign) == (theirs.inertia, theirs.sign)
            for name in SCORES:
                x, y = getattr(mine, name), getattr(theirs, name)
                assert (x is None) == (y is None), name
                if x is not None:
                    assert _rel(x, y) <= F32, (shape, name, x, y)


def test_float32_exact_head_holds_at_its_rtol():
    """The exact head of test_exact_head_in_factor_form_is_at_rounding in float32: its
    residuals at float32's rounding (≤ 1e-5 here), under RTOL[float32] = 1e-4 (the default
    rtol in float32), so the symmetric structures hold; its M̃, exactly semidefinite of lower
    rank, has a zero eigenvalue float32 cannot place (a spurious 3e-7·max of either sign), so
    the inertia and breaks are float64's (the fallback)."""
    field = _exact_head()
    h = nearest_gradient_field(field, dtype=torch.float32)[1].heads[0]
    assert max(h.symmetry_residual, h.value_residual, h.definite_residual) <= 1e-5
    assert nearest.RTOL[torch.float32] == 1e-4 and h.sign == 1
    assert not [b for b in h.breaks if "symmetric" in b]
    # M̃ is semidefinite of rank 2 < 3: its zero eigenvalue is below float32's band, so the
    # head is projected again in float64 and its inertia and breaks are float64's.
    exact = nearest_gradient_field(field)[1].heads[0]
    assert (h.inertia, h.breaks) == (exact.inertia, exact.breaks)
    assert exact.inertia[2] >= 1 and not [b for b in h.breaks if "indefinite" in b]


@pytest.mark.parametrize("knob", ["FLOOR_BAND", "SIGN_MARGIN"])
def test_float32_falls_back_to_float64_where_a_decision_is_unclear(knob, monkeypatch):
    """Every eigenvalue of A_s within FLOOR_BAND of the float32 floor, or every sign choice
    within SIGN_MARGIN: each head projected again in float64, its numbers float64's to the
    last bit."""
    g = torch.Generator().manual_seed(310)
    field = _gqa(g, 40, 4, 2, 1, rope=RoPE())
    exact = nearest_gradient_field(field)[1]
    calls = []
    project = _factored._project

    def spy(head, work):
        calls.append(work)
        return project(head, work)

    monkeypatch.setattr(_factored, "_project", spy)
    monkeypatch.setattr(_factored, knob, 1e300 if knob == "FLOOR_BAND" else 2.0)
    fallback = nearest_gradient_field(field, dtype=torch.float32, rtol=1e-10)[1]
    assert calls == [torch.float32, torch.float64] * 2
    for mine, theirs in zip(fallback.heads, exact.heads, strict=True):
        assert mine == theirs


def test_precision_must_be_float64_or_float32():
    g = torch.Generator().manual_seed(320)
    field = _gqa(g, 12, 2, 2, 1)
    for bad in (torch.float16, "float32", None):
        with pytest.raises(TypeError, match=r"dtype must be torch\.float64 or torch\.float32"):
            nearest_gradient_field(field, dtype=bad)


@pytest.mark.parametrize("case", ["orthogonal", "shared", "gqa"])
def test_report_without_the_structured_field_is_the_same(case, monkeypatch):
    """structured=False (weight_scores): no field, each head's basis dropped after its
    report; the report equal to the full run's to the bit, the orthogonal-classes test
    projecting a head's span again only where it is reached."""
    g = torch.Generator().manual_seed(330)
    d, k = 48, 3
    if case == "orthogonal":  # each head on its own coordinates
        field = _orthogonal_heads(g)
    elif case == "shared":
        Wq = _randn(g, k, d)
        field = GroupedQueryAttention(torch.cat([Wq, Wq]), _randn(g, k, d), _randn(g, k, d),
                                      _randn(g, d, 2 * k), 2, 1, causal=False)  # fmt: skip
    else:
        field = _gqa(g, 40, 4, 4, 2, rope=RoPE())
    full = nearest_gradient_field(field)[1]
    calls, project = [], nearest._project
    monkeypatch.setattr(nearest, "_project", lambda *a: calls.append(a) or project(*a))
    near, lean = nearest_gradient_field(field, structured=False)
    assert near is None and lean == full
    again = {"orthogonal": 2, "shared": 0, "gqa": 0}[case]  # the spans projected again
    assert len(calls) == len(full.heads) + again
