"""The paper's settings in tpde: fields match the authors' right-hand sides, grids, the loop."""

import numpy as np
import pytest
import torch

from tpde.experiments.common.paper import flow, init_grid, paper_field, to_cone
from tpde.experiments.common.paper_euler import RHS, project_psd, projected_euler

F64 = torch.float64


def _random_case(rng, d, rows):
    Q, K = rng.randn(rows, d), rng.randn(rows, d)
    G = rng.randn(d, d)
    S = G @ G.T + 0.1 * np.eye(d)
    return Q, K, rng.randn(d, d), S


@pytest.mark.parametrize(
    ("variant", "heads", "rows"),
    [("softmax", 1, 1), ("softmax", 1, 3), ("l2", 1, 2), ("multihead", 2, 4),
     ("multihead", 2, 1), ("sinkhorn", 1, 4)],
)  # fmt: skip
def test_tpde_field_reproduces_the_authors_rhs(variant, heads, rows):
    # Independent routes: tpde's Gaussian closure (torch) vs the numpy transcription of the
    # code's rhs_* (MATH.md §3, [code]). float64; the only difference is rounding (and, for
    # Sinkhorn, two algebraically equal forms with square roots): rtol 1e-9.
    rng = np.random.RandomState(7)
    d = 4
    for _ in range(3):
        Q, K, V, S = _random_case(rng, d, rows)
        if variant == "sinkhorn":  # the code's form inverts Aᵀ: needs A = KᵀQ invertible
            Q, K = rng.randn(d, d), rng.randn(d, d)
        field = paper_field(variant, Q, K, V, heads=heads)
        _, dcov = field.gaussian_rhs(0.0, torch.zeros(d, dtype=F64), torch.tensor(S))
        expected = RHS[variant](S, Q, K, V, heads)
        np.testing.assert_allclose(dcov.numpy(), expected, rtol=1e-9, atol=1e-12)


def test_init_grid_sizes_and_trace_one():
    # MATH.md §6: 10×10 on ±0.5 → 100, 20×20 → 276, 30×30 → 648, 40×40 → 1184 on ±1.
    for (n, limit), count in {
        (10, 0.5): 100,
        (20, 1.0): 276,
        (30, 1.0): 648,
        (40, 1.0): 1184,
    }.items():
        S = init_grid(n, limit)
        assert S.shape == (count, 2, 2)
        np.testing.assert_allclose(np.trace(S, axis1=1, axis2=2), 1.0)
        assert (np.linalg.eigvalsh(S)[:, 0] > 0).all()
    cone = to_cone(np.array([[[2.0, 0.5], [0.5, 1.0]]]))
    np.testing.assert_allclose(cone, [[1.0, 1.0, 3.0]])


def test_projected_euler_statuses_and_projection():
    # V = I, A ≻ 0: Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹ blows up at t* (MATH.md §4 item 2); the loop
    # stops when tr Σ > tol_high, within a few steps of t* (Euler lags: h = 1e-3, error O(h)).
    Q = np.eye(2) * np.sqrt(2)  # A = KᵀQ/√2 = I with K = I·... below
    K = np.eye(2)
    S0 = np.eye(2)
    run = projected_euler(S0, Q, K, np.eye(2), step=1e-3, tol_high=1e3, max_iter=10_000)
    assert run.status == "blow_up"
    assert abs(run.time - 0.5) < 0.02  # t* = 1/λ_max(2I) = 0.5
    # K = −Q: convergence (the norm of the rhs falls below tol_low).
    run = projected_euler(S0, Q, -Q, np.eye(2), step=0.05, tol_low=1e-4, max_iter=100_000)
    assert run.status == "converged"
    assert np.linalg.norm(RHS["softmax"](run.final, Q, -Q, np.eye(2))) < 1e-4
    run = projected_euler(S0, Q, -Q, np.eye(2), step=0.05, tol_low=1e-12, max_iter=10)
    assert run.status == "completed" and run.iterations == 10
    projected = project_psd(np.diag([2.0, -1.0]))
    np.testing.assert_allclose(np.linalg.eigvalsh(projected), [1e-14, 2.0], atol=1e-15)


def test_batched_flow_uses_the_papers_stopping_rules():
    # Same setting as above, batched: blow-up on tr Σ > 1e3 at the closed-form crossing
    # time (dopri5, rtol 1e-8: the event lands at the end of the crossing step, < 1e-3 late);
    # the K = −Q copy converges with ‖Σ̇‖_F < tol_low.
    Q = np.eye(2) * np.sqrt(2)
    Qs = np.stack([Q, Q])
    Ks = np.stack([np.eye(2), -Q])
    field = paper_field("softmax", Qs, Ks, np.eye(2))
    S0 = np.stack([np.eye(2), np.eye(2)])
    res = flow(field, S0, horizon=500.0, tol_low=1e-4, tol_high=1e3, first_step=0.01, rtol=1e-8)
    assert list(res.status) == ["blow_up", "converged"]
    # tr Σ(t) = 2/(1 − 2t) = 1e3  ->  t = (1 − 2e-3)/2
    assert 0 <= res.event_time[0] - (1 - 2e-3) / 2 < 1e-3


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown variant 'relu'; choose among softmax"):
        paper_field("relu", np.eye(2), np.eye(2), np.eye(2))


def test_internal_lookups_refuse_unknown_names():
    from tpde.experiments.atlas import A, V
    from tpde.experiments.common.panels import panel_setup
    from tpde.experiments.common.variants import make_field

    with pytest.raises(ValueError, match="unknown panel 'moon'"):
        panel_setup("moon")
    with pytest.raises(ValueError, match="unknown variant 'relu'"):
        make_field("relu", A, V)
