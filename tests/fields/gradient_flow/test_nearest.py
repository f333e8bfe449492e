"""The nearest gradient field of real-form heads (MATH.md §12): oracles, scores, errors.

Tolerances. Every oracle is float64; its weights are built so that the structure holds
exactly in real arithmetic, and the residuals and gaps are ratios of O(d²k) rounded sums
(≈ 1e-16 each): ROUND = 1e-12 leaves three orders of magnitude. "Far" is > 0.1: a random
head's residuals and gaps are O(1) (measured 0.3–0.9 at these seeds).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tpde.fields import (
    GroupedQueryAttention,
    Hardmax,
    Linear,
    Masked,
    MultiHead,
    NotAGradientFlow,
    RoPE,
    Sigmoid,
    Sinkhorn,
    Softmax,
    StructuredAttention,
    attention_heads,
    directionality_score,
    dynamic_gap,
    head_velocities,
    nearest_gradient_field,
    nearest_mobility,
    row_space,
    symmetry_score,
)
from tpde.fields.gradient_flow._rope import _pair_dot, _pair_form, _rope_residual
from tpde.measures import Empirical, Gaussian

F64 = torch.float64
ROUND = 1e-12
FAR = 0.1


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=F64)


def _psd(g, d, rank=None, sign=1):
    G = _randn(g, d, rank or d)
    return sign * (G @ G.mT / d)


def _exact_head(g, d=6, k=3, sign=1, biases=True, size=1.0):
    """A rank-k softmax head built as a gradient flow: W_K = S W_Q (S symmetric), so A is
    symmetric of rank k; V = M A with M semidefinite; b_v with W_O b_v = M a (no drift)."""
    Wq = size * _randn(g, k, d)
    S = _randn(g, k, k)
    Wk = (S + S.mT) @ Wq
    scale = 1 / math.sqrt(k)
    A = scale * Wk.mT @ Wq
    M = _psd(g, d, sign=sign)
    bq = _randn(g, k) if biases else None
    a = scale * Wk.mT @ bq if biases else torch.zeros(d, dtype=F64)
    bk = _randn(g, k) if biases else None
    return Softmax(Wq, Wk, M @ A, query_bias=bq, key_bias=bk, value_bias=M @ a), M, A, a


def _cloud(g, n=24, d=6, positions=False):
    points = 0.5 * _randn(g, n, d)
    return Empirical(points, positions=torch.arange(n) if positions else None)


# ---------------------------------------------------------------------- scores
def _saponati_symmetry(A):
    """utils/scores.py of matteosaponati/attention-geometry, transcribed."""
    SYM = 0.5 * (A + A.T)
    score = (SYM**2).sum() / (A**2).sum()
    return score


def _saponati_directionality(A, num_std: int = 2):
    """utils/scores.py of matteosaponati/attention-geometry, transcribed."""
    row_norms = torch.norm(A, dim=1)
    column_norms = torch.norm(A, dim=0)
    row_threshold = row_norms.mean().item() + num_std * row_norms.std().item()
    col_threshold = column_norms.mean().item() + num_std * column_norms.std().item()
    row_excess = torch.sum(row_norms[row_norms > row_threshold] - row_threshold)
    col_excess = torch.sum(column_norms[column_norms > col_threshold] - col_threshold)
    denom_excess = col_excess + row_excess
    if denom_excess == 0:
        score = 0.0
    else:
        score = (col_excess - row_excess) / denom_excess
    return score


@pytest.mark.parametrize("seed", range(4))
def test_scores_equal_saponati_transcription(seed):
    g = torch.Generator().manual_seed(seed)
    Wq, Wk = _randn(g, 4, 12), _randn(g, 4, 12)
    Wk[:, seed] *= 8.0  # one dominant column (a key direction): directionality ≠ 0
    W_qk = Wq.mT @ Wk
    assert float(symmetry_score(W_qk)) == pytest.approx(
        float(_saponati_symmetry(W_qk.numpy())), rel=1e-14
    )
    theirs = float(_saponati_directionality(W_qk))
    assert float(directionality_score(W_qk)) == pytest.approx(theirs, rel=1e-12, abs=1e-15)
    assert abs(theirs) > 0.05  # the dominant column is seen, the test is not of 0 = 0


def test_layer_scores_are_saponati_of_the_summed_query_key_product():
    g = torch.Generator().manual_seed(19)
    field = GroupedQueryAttention(
        _randn(g, 8, 8), _randn(g, 4, 8), _randn(g, 4, 8), _randn(g, 8, 8), 4, 2, causal=False
    )
    _, report = nearest_gradient_field(field)
    Wq, Wk = field.params.at(0.0, torch.empty((), dtype=F64))[:2]
    W_qk = sum(Wq[2 * h : 2 * h + 2].mT @ Wk[2 * (h // 2) : 2 * (h // 2) + 2] for h in range(4))
    assert report.symmetry == pytest.approx(float(_saponati_symmetry(W_qk)), rel=1e-14)
    assert report.directionality == pytest.approx(
        float(_saponati_directionality(W_qk)), rel=1e-12, abs=1e-15
    )


def test_symmetry_score_bounds():
    g = torch.Generator().manual_seed(1)
    B = _randn(g, 5, 5)
    assert float(symmetry_score(B + B.mT)) == pytest.approx(1.0, abs=1e-15)
    assert float(symmetry_score(B - B.mT)) == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(ValueError, match="square"):
        symmetry_score(np.ones((2, 3)))


# ---------------------------------------------------------------------- closed forms
def test_nearest_mobility_exact_on_rank_deficient_interaction():
    """V = M A_s with M ⪰ 0 coupling range and kernel: M_s A_s = V to rounding, M_s ⪰ 0."""
    g = torch.Generator().manual_seed(2)
    d, k = 7, 3
    W = _randn(g, k, d)
    A = W.mT @ torch.diag(torch.tensor([1.0, -2.0, 0.5], dtype=F64)) @ W
    M = _psd(g, d)
    near = nearest_mobility(A, M @ A)
    V = M @ A
    assert float((near.M_definite @ near.A_s - V).norm() / V.norm()) <= ROUND
    assert near.sign == 1 and near.inertia == (k, 0, 0)
    assert float(torch.linalg.eigvalsh(near.M_definite)[0]) >= -ROUND * float(M.norm())


def test_nearest_mobility_is_the_least_squares_minimiser():
    """Stationarity of ½‖V − MA_s‖² over symmetric M: sym((V − M*A_s)A_s) = 0."""
    g = torch.Generator().manual_seed(3)
    A, V = _randn(g, 6, 6), _randn(g, 6, 6)
    near = nearest_mobility(A, V)
    R = (V - near.M @ near.A_s) @ near.A_s
    assert float((R + R.mT).norm()) <= ROUND * float(V.norm() * A.norm() ** 2)
    assert float((near.M - near.M.mT).norm()) <= ROUND * float(near.M.norm())


@pytest.mark.parametrize("seed", range(3))
def test_nearest_mobility_in_the_head_rows_equals_the_full_computation(seed):
    """rows=[W_Q; W_K] (O(d²k)) against the d × d eigendecomposition (O(d³))."""
    g = torch.Generator().manual_seed(30 + seed)
    Wq, Wk, V = _randn(g, 3, 9), _randn(g, 3, 9), _randn(g, 9, 9)
    A = Wk.mT @ Wq
    full, fast = nearest_mobility(A, V), nearest_mobility(A, V, rows=torch.cat([Wq, Wk]))
    for name in ("M", "M_definite"):
        a, b = getattr(full, name), getattr(fast, name)
        assert float((a - b).norm() / a.norm()) <= 1e-10, name
    assert full.sign == fast.sign and full.inertia == fast.inertia


def test_row_space_of_dependent_rows():
    g = torch.Generator().manual_seed(22)
    W = _randn(g, 2, 5)
    B = row_space(torch.cat([W, W.sum(0, keepdim=True), 3 * W]))
    assert B.shape == (5, 2)
    assert float((B.mT @ B - torch.eye(2, dtype=F64)).norm()) <= ROUND
    assert float((W.mT - B @ (B.mT @ W.mT)).norm()) <= ROUND * float(W.norm())


def test_nearest_mobility_boundary():
    """numpy in, clear errors for shapes that do not fit."""
    A = np.diag([1.0, 2.0, 0.0])
    near = nearest_mobility(A, 3 * A)
    assert float((near.M_definite @ near.A_s - 3 * torch.as_tensor(A)).norm()) <= ROUND
    with pytest.raises(ValueError, match="A must be a square"):
        nearest_mobility(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="of one d"):
        nearest_mobility(np.eye(2), np.eye(3))
    with pytest.raises(ValueError, match=r"rows must have shape \(r, 2\)"):
        nearest_mobility(np.eye(2), np.eye(2), rows=np.ones((2, 3)))


def test_nearest_mobility_of_a_zero_interaction_is_zero():
    V = torch.eye(4, dtype=F64)
    near = nearest_mobility(torch.zeros(4, 4, dtype=F64), V, rows=torch.zeros(2, 4, dtype=F64))
    assert float(near.M_definite.abs().max()) == 0.0 and near.inertia == (0, 0, 0)


# ---------------------------------------------------------------------- one head
@pytest.mark.parametrize("sign", [1, -1])
def test_exact_rank_k_head_with_biases_is_at_rounding(sign):
    g = torch.Generator().manual_seed(4)
    head, *_ = _exact_head(g, sign=sign)
    near, report = nearest_gradient_field(head)
    h = report.heads[0]
    assert report.exact and report.sum_structure == "one head", report.breaks
    assert max(h.symmetry_residual, h.value_residual, h.definite_residual) <= ROUND
    assert h.sign == sign and h.inertia == ((3, 0, 0) if sign == 1 else (0, 3, 0))
    gap = dynamic_gap(head, _cloud(g))
    assert float(gap.relative_gap) <= ROUND and float(gap.head_gaps[0]) <= ROUND
    assert isinstance(near, StructuredAttention)


def test_agrees_with_gradient_structure_where_it_exists():
    """Full rank, symmetric A, bias-free: the projection's M_s is gradient_structure's raw
    mobility M = V A⁻¹, and both gaps vanish (tpde.fields.gradient_flow_gap is the exact
    case of dynamic_gap)."""
    from tpde.fields import gradient_flow_gap

    g = torch.Generator().manual_seed(26)
    B = _randn(g, 5, 5)
    A, M = 0.3 * (B + B.mT), -_psd(g, 5)
    field = Softmax.from_interaction(A, M @ A)
    structure = field.gradient_structure()
    near, report = nearest_gradient_field(field)
    assert report.exact and report.heads[0].sign == structure.sign == -1
    assert float((near.heads[0].M - structure.M).norm() / structure.M.norm()) <= ROUND
    mu = _cloud(g, d=5)
    assert float(dynamic_gap(field, mu).relative_gap) <= ROUND
    assert float(gradient_flow_gap(field, mu).relative_gap) <= 1e-10  # its own autograd path


def test_velocity_is_mobility_times_grad_log_kernel_plus_drift():
    """Γ = M∇log K_μ + (u − Ma), log K_μ(x) = aᵀx + log Σ_j w_j e^{x_jᵀAx + aᵀx_j}, by
    autograd against the Softmax field's own velocity (drift u − Ma ≠ 0 on purpose)."""
    g = torch.Generator().manual_seed(5)
    Wq = _randn(g, 3, 6)
    Wk = torch.diag(torch.tensor([1.0, -0.5, 2.0], dtype=F64)) @ Wq
    A = Wk.mT @ Wq / math.sqrt(3)
    M, bq, u = _psd(g, 6), _randn(g, 3), _randn(g, 6)
    a = Wk.mT @ bq / math.sqrt(3)
    field = Softmax(Wq, Wk, M @ A, query_bias=bq, key_bias=_randn(g, 3), value_bias=u)
    mu = _cloud(g)
    x = mu.points.clone().requires_grad_(True)
    keys = mu.points
    log_k = x @ a + torch.logsumexp(x @ A.mT @ keys.mT + keys @ a + mu.weights.log(), dim=-1)
    (grad,) = torch.autograd.grad(log_k.sum(), x)
    expected = grad @ M.mT + (u - M @ a)
    velocity = field.velocity(mu)
    assert float((velocity - expected).norm() / velocity.norm()) <= ROUND
    _, report = nearest_gradient_field(field)
    assert any("drift" in b for b in report.breaks)
    assert float(dynamic_gap(field, mu).relative_gap) <= ROUND  # the drift is kept


@pytest.mark.parametrize("sign", [1, -1])
def test_energy_dissipation_sign(sign):
    """d𝓔/dt = Σ_i ∂𝓔/∂x_i · Γ_i = ‖Γ‖²_g ≥ 0 for 𝓔 = sE, the field's own Γ (w = 0)."""
    g = torch.Generator().manual_seed(6)
    head, *_ = _exact_head(g, sign=sign)
    near, _ = nearest_gradient_field(head)
    mu = _cloud(g)
    x = mu.points.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(near.energy(mu.with_points(x)), x)
    velocity = head.velocity(mu)
    rate = (grad * velocity).sum()
    predicted = near.metric_norm2(mu, velocity)
    assert float(rate) > 0
    assert float((rate - predicted).abs() / predicted) <= 1e-10  # pinv of M: cond(M)·eps


def test_dissipation_identity_with_a_drift():
    """MATH.md §12: d𝓔/dt = ‖Γ − w‖²_g + s wᵀ∫∇K_μ dμ (𝓔 = sE) along the head's own Γ, for
    a drift w = u − Ma ≠ 0; ∇K_μ by autograd in the query with the keys fixed (pinv of M:
    1e-10)."""
    g = torch.Generator().manual_seed(23)
    Wq = 0.5 * _randn(g, 3, 6)
    Wk = torch.diag(torch.tensor([1.0, -0.5, 2.0], dtype=F64)) @ Wq
    A, M, bq, u = Wk.mT @ Wq / math.sqrt(3), -_psd(g, 6), _randn(g, 3), _randn(g, 6)
    field = Softmax(Wq, Wk, M @ A, query_bias=bq, value_bias=u)
    near, _ = nearest_gradient_field(field)
    head, mu = near.heads[0], _cloud(g)
    w = u - head.M @ head.a
    velocity = field.velocity(mu)
    x = mu.points.clone().requires_grad_(True)
    (grad_k,) = torch.autograd.grad(near.log_partition(head, mu, x).exp().sum(), x)
    drift_term = head.sign * (w * (mu.weights[:, None] * grad_k).sum(0)).sum()
    predicted = near.metric_norm2(mu, velocity - w) + drift_term
    rate = near.energy_rate(mu, velocity)
    assert head.sign == -1 and abs(float(drift_term)) > 1e-3 * abs(float(rate))
    assert float((rate - predicted).abs() / rate.abs()) <= 1e-10


def test_structured_flow_ascends_its_energy_along_a_trajectory():
    """Integrated (RK4, h = 0.001, 20 steps), an exact head with w = 0 (M ≺ 0: it descends
    E) raises 𝓔 = sE at every step, and 𝓔(t) − 𝓔(0) equals ∫ energy_rate dt (Simpson on
    the saved steps; the rate decays at ≈ 30 per unit time, O((30h)⁴): measured 7e-9
    relative, 1e-7 allowed)."""
    from tpde.flows import integrate

    g = torch.Generator().manual_seed(21)
    head, *_ = _exact_head(g, sign=-1, size=0.15)  # scores O(1): E is O(1)
    near, _ = nearest_gradient_field(head)
    run = integrate(head, _cloud(g), 0.02, dt=0.001, method="rk4", save="steps")
    energy = torch.stack([near.energy(m) for m in run.measures])
    rate = torch.stack([near.energy_rate(m, head.velocity(m)) for m in run.measures])
    assert bool((energy.diff() > 0).all()) and bool((rate > 0).all())
    h = float(run.times[1] - run.times[0])
    simpson = h / 3 * (rate[0] + 4 * rate[1:-1:2].sum() + 2 * rate[2:-1:2].sum() + rate[-1])
    change = energy[-1] - energy[0]
    assert float((simpson - change).abs() / change.abs()) <= 1e-7


def test_trainable_parameters_are_read_detached():
    g = torch.Generator().manual_seed(24)
    Wq = torch.nn.Parameter(_randn(g, 3, 6))
    head = Softmax(Wq, Wq, torch.nn.Parameter(_randn(g, 6, 6)))
    near, report = nearest_gradient_field(head)
    assert not near.heads[0].M.requires_grad and report.heads[0].symmetry_residual <= ROUND


def test_summary_names_the_breaks_once():
    g = torch.Generator().manual_seed(28)
    field = GroupedQueryAttention(
        _randn(g, 8, 8), _randn(g, 4, 8), _randn(g, 4, 8), _randn(g, 8, 8), 4, 2,
        position=RoPE(), causal=True,
    )  # fmt: skip
    text = nearest_gradient_field(field)[1].summary()
    assert text.startswith("4 head(s); sum of heads: none")
    assert text.count("causal mask") == 1 and "RoPE" in text
    exact = nearest_gradient_field(_exact_head(g)[0])[1].summary()
    assert exact.endswith("breaks: none (a gradient flow)")


def test_random_head_is_far():
    g = torch.Generator().manual_seed(7)
    head = Softmax(_randn(g, 3, 6), _randn(g, 3, 6), _randn(g, 6, 6))
    _, report = nearest_gradient_field(head)
    h = report.heads[0]
    assert h.symmetry_residual > FAR and h.definite_residual > FAR and not report.exact
    assert float(dynamic_gap(head, _cloud(g)).relative_gap) > FAR
    with pytest.raises(NotAGradientFlow, match=r"nearest_gradient_field\(field\)"):
        head.gradient_structure()  # the yes/no question points to its quantitative form
    biased, *_ = _exact_head(g)
    with pytest.raises(NotAGradientFlow, match=r"with biases.*nearest_gradient_field"):
        biased.gradient_structure()


# ---------------------------------------------------------------------- sums
def _block_heads(g, d=6, blocks=((0, 1, 2), (3, 4, 5))):
    """Heads on orthogonal coordinate blocks, each exact with its own biases."""
    heads = []
    for idx in blocks:
        E = torch.eye(d, dtype=F64)[list(idx)]
        Wq = _randn(g, 2, len(idx)) @ E
        S = _randn(g, 2, 2)
        Wk = (S + S.mT) @ Wq
        A = Wk.mT @ Wq / math.sqrt(2)
        M = E.mT @ _psd(g, len(idx)) @ E
        bq = _randn(g, 2)
        a = Wk.mT @ bq / math.sqrt(2)
        heads.append(Softmax(Wq, Wk, M @ A, query_bias=bq, value_bias=M @ a))
    return heads


def test_multihead_orthogonal_and_shared_sums_are_exact():
    g = torch.Generator().manual_seed(8)
    mu = _cloud(g)
    orthogonal = MultiHead(_block_heads(g))
    _, report = nearest_gradient_field(orthogonal)
    assert report.exact and report.sum_structure == "orthogonal classes", report.breaks
    assert float(dynamic_gap(orthogonal, mu).relative_gap) <= ROUND
    head, _, A, _ = _exact_head(g, biases=False)
    M2 = _psd(g, 6)
    shared = MultiHead([head, Softmax(head.params.Q, head.params.K, M2 @ A)])
    _, report = nearest_gradient_field(shared)
    assert report.exact and report.sum_structure == "shared interaction"
    assert float(dynamic_gap(shared, mu).relative_gap) <= ROUND


def test_multihead_of_exact_overlapping_heads_is_not_one_flow():
    g = torch.Generator().manual_seed(9)
    heads = [_exact_head(g)[0], _exact_head(g)[0]]
    W = torch.stack([torch.eye(6, dtype=F64), 2 * torch.eye(6, dtype=F64)])  # 2M ⪰ 0 still
    field = MultiHead(heads, W=W, bias=_randn(g, 6))
    _, report = nearest_gradient_field(field)
    assert report.sum_structure == "none" and all(h.exact for h in report.heads)
    mu = _cloud(g)
    gap = dynamic_gap(field, mu)
    assert float(gap.head_gaps.max()) <= ROUND  # each head is still its own gradient flow
    total = sum(head_velocities(field, mu)) + field.bias
    assert float((total - gap.velocity).norm() / gap.velocity.norm()) <= ROUND


def test_multihead_output_matrices_map_the_value_side():
    """Head h adds W_hᵀΓ_h: its V and u are read as W_hᵀV_h and W_hᵀu_h, and the heads'
    own velocities sum to the field's."""
    g = torch.Generator().manual_seed(27)
    parts = [Softmax(_randn(g, 2, 6), _randn(g, 2, 6), _randn(g, 6, 6), value_bias=_randn(g, 6))
             for _ in range(2)]  # fmt: skip
    W = _randn(g, 2, 6, 6)
    field = MultiHead(parts, W=W, bias=_randn(g, 6))
    heads = attention_heads(field)
    for h, part in enumerate(parts):
        p = part.params.at(0.0, W)
        assert torch.allclose(heads.heads[h].V, W[h].mT @ p.V, rtol=1e-14, atol=0)
        assert torch.allclose(heads.heads[h].u, W[h].mT @ p.bv, rtol=1e-14, atol=0)
    mu = _cloud(g)
    total = sum(head_velocities(field, mu)) + field.bias
    velocity = field.velocity(mu)
    assert float((total - velocity).norm() / velocity.norm()) <= ROUND


def _gqa(g, d=8, dh=2, heads=4, kv_heads=2, shared=False, **options):
    """GQA whose groups live on orthogonal coordinate blocks and whose heads are exact:
    W_Q^h = S_h W_K^g (S_h symmetric), W_V^g = W_K^g, W_O^h = c N_h W_K^gᵀ S_h (N_h ⪰ 0 on
    the group's block). ``shared``: one S per group (its heads share A, not M)."""
    c = 1 / math.sqrt(dh)
    block = d // kv_heads
    Wk, Wv, Wq, Wo = [], [], [], []
    for grp in range(kv_heads):
        E = torch.eye(d, dtype=F64)[grp * block : (grp + 1) * block]
        K = _randn(g, dh, block) @ E
        Wk.append(K)
        Wv.append(K)
        S = _randn(g, dh, dh)
        for _ in range(heads // kv_heads):
            N = E.mT @ _psd(g, block) @ E
            if not shared:
                S = _randn(g, dh, dh)
            S = 0.5 * (S + S.mT)
            Wq.append(S @ K)
            Wo.append(c * N @ K.mT @ S)
    return GroupedQueryAttention(
        torch.cat(Wq), torch.cat(Wk), torch.cat(Wv), torch.cat(Wo, dim=1), heads, kv_heads,
        **options,
    )  # fmt: skip


def test_gqa_head_velocities_sum_to_the_field():
    g = torch.Generator().manual_seed(10)
    field = _gqa(g, causal=True, position=RoPE(), bo=_randn(g, 8))
    mu = _cloud(g, d=8, positions=True)
    total = sum(head_velocities(field, mu)) + field.params.at(0.0, mu.points)[-1]
    velocity = field.velocity(mu)
    assert float((total - velocity).norm() / velocity.norm()) <= ROUND


def test_gqa_sharing_groups_are_at_rounding():
    """Groups on orthogonal blocks, the heads of a group sharing A (not M): one flow."""
    g = torch.Generator().manual_seed(11)
    mu = _cloud(g, d=8)
    field = _gqa(g, shared=True, causal=False)
    _, report = nearest_gradient_field(field)
    assert report.exact and report.sum_structure == "orthogonal classes", report.breaks
    assert float(dynamic_gap(field, mu).relative_gap) <= ROUND
    # heads of a group with their own A: each exact, their sum not one flow
    field = _gqa(g, causal=False)
    _, report = nearest_gradient_field(field)
    assert report.sum_structure == "none" and all(h.exact for h in report.heads)
    assert float(dynamic_gap(field, mu).head_gaps.max()) <= ROUND


def test_gqa_causal_and_random_rope_are_measured_not_raised():
    g = torch.Generator().manual_seed(12)
    field = _gqa(g, causal=True)
    mu = _cloud(g, d=8, positions=True)
    _, report = nearest_gradient_field(field)
    assert any("causal" in b for b in report.breaks)
    gap = dynamic_gap(field, mu)
    assert 0 < float(gap.relative_gap) < math.inf
    rand = GroupedQueryAttention(
        _randn(g, 8, 8), _randn(g, 4, 8), _randn(g, 4, 8), _randn(g, 8, 8), 4, 2,
        position=RoPE(), causal=False,
    )  # fmt: skip
    _, report = nearest_gradient_field(rand)
    assert all(h.rope_residual > FAR for h in report.heads)
    assert any("RoPE" in b for b in report.breaks)
    assert float(dynamic_gap(rand, mu).relative_gap) > FAR


def _rope_by_hand(k: int, m: int, base: float = 10000.0, dims=None, style="half"):
    """R(m) of RoPE: pair i of the first r = dims (default k) coordinates, (i, i + r/2)
    ("half") or (2i, 2i + 1) ("interleaved"), rotated by m·base^(−2i/r); the rest fixed."""
    r = dims or k
    R = torch.eye(k, dtype=F64)
    for i in range(r // 2):
        phi = m * base ** (-2 * i / r)
        c, s = math.cos(phi), math.sin(phi)
        a, b = (i, i + r // 2) if style == "half" else (2 * i, 2 * i + 1)
        R[a, a], R[a, b], R[b, a], R[b, b] = c, -s, s, c
    return R


@pytest.mark.parametrize(
    ("d", "k", "dims", "style"),
    [
        (6, 4, None, "half"),
        (10, 8, None, "interleaved"),
        (10, 8, 4, "half"),
        (10, 8, 6, "interleaved"),
    ],
)
def test_rope_residual_equals_the_dense_definition(d, k, dims, style):
    """The k × k inner-product formulas (rotations applied as two-term row gathers) against
    d × d matrices built from RoPE's own equations: full and partial rotary, both layouts.
    Both sides are O(d²k) float64 sums of O(1) terms, so they agree to ~1e-15 relatively;
    rel=1e-10 leaves margin."""
    g = torch.Generator().manual_seed(20 + k + (dims or 0))
    Wq, Wk, Wv, Wo = _randn(g, k, d), _randn(g, k, d), _randn(g, k, d), _randn(g, d, k)
    rope = RoPE(dims=dims, style=style)
    field = GroupedQueryAttention(Wq, Wk, Wv, Wo, 1, 1, position=rope, causal=False)
    near, report = nearest_gradient_field(field)
    c, V, M = 1 / math.sqrt(k), Wo @ Wv, near.heads[0].M

    def A(m):
        return c * Wk.mT @ _rope_by_hand(k, m, dims=dims, style=style) @ Wq

    base = float((V - M @ (0.5 * (A(0) + A(0).mT))).norm())
    asyms, shifts = [], []
    for m in (1, 2, 4, 8, 16, 32, 64, -1, -2, -4, -8, -16, -32, -64):
        asyms.append(float((A(m).mT - A(-m)).norm() / A(m).norm()))
        shift = float((M @ (0.5 * (A(m).mT + A(-m)) - 0.5 * (A(0) + A(0).mT))).norm())
        shifts.append((base + shift) / float(V.norm()))
    assert report.heads[0].rope_residual == pytest.approx(max(asyms + shifts), rel=1e-10)
    # the asymmetry term alone (the value term made negligible by a huge ‖V‖)
    head = attention_heads(field).heads[0]
    alone = _rope_residual(head, M, 1e30, 0.0)
    assert alone == pytest.approx(max(asyms), rel=1e-10)


def test_pair_dot_of_pair_rotations_and_the_dense_fallback():
    """⟨X T, T Y⟩ for T = diag(α) + diag(β)Π (a rotation of coordinate pairs, at several
    offsets at once; one nonzero in the fixed rows of partial rotary; ΔT = T − I) against
    the dense products, and the dense products for a matrix with fuller rows. O(k²) sums
    of O(1) terms: 1e-13 absolute."""
    g = torch.Generator().manual_seed(21)
    X, Y = _randn(g, 8, 8), _randn(g, 8, 8)
    eye = torch.eye(8, dtype=F64)
    for offsets, kw in (((3, -5, 7), {"style": "interleaved"}), ((-5, 2), {"dims": 4})):
        T = torch.stack([_rope_by_hand(8, m, **kw) for m in offsets])
        for Tm in (T, T - eye):
            form = _pair_form(Tm)
            assert isinstance(form, tuple)
            dense = ((X @ Tm) * (Tm @ Y)).sum((-2, -1))
            assert torch.allclose(_pair_dot(X, Y, form), dense, rtol=0, atol=1e-13)
    full = _randn(g, 2, 8, 8)
    assert isinstance(_pair_form(full), torch.Tensor)
    dense = ((X @ full) * (full @ Y)).sum((-2, -1))
    assert torch.allclose(_pair_dot(X, Y, _pair_form(full)), dense, rtol=0, atol=1e-13)


def test_rope_head_where_it_holds_is_at_rounding():
    """W_K = W_Q (the pair kernel is symmetric at every offset) and a mobility that kills
    the rotated directions (partial rotary: only the first r = 2 of d_h = 4 rotate)."""
    g = torch.Generator().manual_seed(13)
    d, dh, r = 6, 4, 2
    W = torch.zeros(dh, d, dtype=F64)
    W[:r, :2] = _randn(g, r, 2)  # rotated rows read coordinates 0, 1
    W[r:, 2:] = _randn(g, dh - r, d - 2)  # the others read 2 … 5
    M = torch.zeros(d, d, dtype=F64)
    M[2:, 2:] = _psd(g, d - 2)
    c = 1 / math.sqrt(dh)
    field = GroupedQueryAttention(W, W, W, c * M @ W.mT, 1, 1, position=RoPE(dims=r),
                                  causal=False)  # fmt: skip
    _, report = nearest_gradient_field(field)
    assert report.exact, report.breaks
    assert report.heads[0].rope_residual <= ROUND
    mu = Empirical(0.5 * _randn(g, 16, d), positions=torch.arange(16))
    assert float(dynamic_gap(field, mu).relative_gap) <= ROUND


def test_masked_softmax_reports_the_mask():
    g = torch.Generator().manual_seed(14)
    head, *_ = _exact_head(g)
    _, report = nearest_gradient_field(Masked(head))
    assert report.heads[0].symmetry_residual <= ROUND
    assert report.breaks == ("head 0: causal mask: a one-sided kernel has no interaction energy",)
    mu = Empirical(_cloud(g).points, positions=torch.arange(24) / 23)
    assert float(dynamic_gap(Masked(head), mu).relative_gap) > 1e-3
    _, report = nearest_gradient_field(Masked(head, sink_mass=0.1))
    assert any("attention sink" in b for b in report.breaks)


def test_sinkhorn_head_nearest_is_sinkhorn():
    """A = scale·KᵀQ symmetric, V = MA: the nearest field is the same Sinkhorn field up to
    rounding of A_s and M_sA_s; both stop their iterations at tol 1e-6 on the same
    scalings, so the velocities agree far below the tolerance (measured ~1e-15)."""
    g = torch.Generator().manual_seed(15)
    Q = _randn(g, 4, 4)
    M = _psd(g, 4)
    field = Sinkhorn(Q, Q, M @ (Q.mT @ Q) / 2, tol=1e-12)
    near, report = nearest_gradient_field(field)
    assert isinstance(near, Sinkhorn) and report.exact
    assert float(dynamic_gap(field, _cloud(g, d=4)).relative_gap) <= 1e-9


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("cls", "lacks"),
    [(Sigmoid, "a normalisation"), (Linear, "an exponential kernel"),
     (Hardmax, "a smooth partition function")],
)  # fmt: skip
def test_non_softmax_heads_name_what_they_lack(cls, lacks):
    g = torch.Generator().manual_seed(16)
    field = cls(_randn(g, 2, 4), _randn(g, 2, 4), _randn(g, 4, 4))
    with pytest.raises(NotAGradientFlow, match=f"lacks {lacks}"):
        nearest_gradient_field(field)
    with pytest.raises(NotAGradientFlow, match="lacks"):
        nearest_gradient_field(MultiHead([field]))


def test_bad_inputs_raise():
    g = torch.Generator().manual_seed(17)
    head, *_ = _exact_head(g)
    with pytest.raises(TypeError, match="tpde attention field"):
        nearest_gradient_field("softmax")
    with pytest.raises(NotAGradientFlow, match="batched parameters"):
        nearest_gradient_field(Softmax(_randn(g, 2, 2, 4), _randn(g, 2, 2, 4), _randn(g, 2, 4, 4)))
    with pytest.raises(NotAGradientFlow, match="not a single head"):
        nearest_gradient_field(MultiHead([MultiHead([head, head])]))
    sink = Sinkhorn(_randn(g, 2, 6), _randn(g, 2, 6), _randn(g, 6, 6))
    with pytest.raises(NotAGradientFlow, match="sums of Sinkhorn heads"):
        nearest_gradient_field(MultiHead([sink, sink]))
    with pytest.raises(NotAGradientFlow, match="not read as softmax or Sinkhorn heads"):
        nearest_gradient_field(head + head)
    with pytest.raises(TypeError, match="pass an Empirical"):
        dynamic_gap(head, Gaussian(torch.zeros(6, dtype=F64), torch.eye(6, dtype=F64)))
    with pytest.raises(TypeError, match="head_velocities takes a tpde field"):
        head_velocities("softmax", _cloud(g))
    with pytest.raises(TypeError, match="t must be"):
        nearest_gradient_field(head, t="0")
    with pytest.raises(ValueError, match="rtol must be finite and > 0"):
        nearest_gradient_field(head, rtol=0.0)
    _, report = nearest_gradient_field(head)
    with pytest.raises(ValueError, match="scores takes one of"):
        report.scores("breaks")
    assert report.scores("symmetry").shape == (1,)


def test_energy_overflow_is_an_error():
    g = torch.Generator().manual_seed(25)
    head, *_ = _exact_head(g)
    near, _ = nearest_gradient_field(head)
    mu = _cloud(g)
    with pytest.raises(OverflowError, match=r"overflowed in torch\.float32"):
        near.energy(Empirical(30 * mu.points.float()))


def test_rope_structured_head_needs_positions():
    g = torch.Generator().manual_seed(18)
    field = _gqa(g, causal=False, position=RoPE())
    near, _ = nearest_gradient_field(field)
    with pytest.raises(ValueError, match="needs token positions"):
        near.energy(_cloud(g, d=8))
    with pytest.raises(TypeError, match="computed on particles"):
        near.energy(Gaussian(torch.zeros(8, dtype=F64), torch.eye(8, dtype=F64)))
