"""The default method "auto" (tpde.flows.auto): dopri5 with Hairer's stiffness test,
switching to rodas4 on stiff Gaussian runs (issue 20: a safe default for stiff flows)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.flows.methods import resolve_method
from tpde.flows.methods.auto import CALM_STEPS, STABILITY_BOUND, STIFF_STEPS, Auto
from tpde.flows.methods.splitting import Splitting
from tpde.measures import Empirical, Gaussian

F64 = torch.float64
I2 = torch.eye(2, dtype=F64)


def gram_parameters(d: int, seed: int):
    """(Q, K, V) of a rank-histogram row with V = GᵀG (MATH.md §6)."""
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(d, d, generator=gen, dtype=F64)
    G = torch.randn(d, d, generator=gen, dtype=F64)
    return Q / d**0.5, -Q, G.mT @ G


def gram_row(d: int, seed: int):
    """That row's field and start: stiff once Σ has contracted."""
    field = Softmax(*gram_parameters(d, seed), scale=1.0)
    return field, Gaussian(torch.zeros(d, dtype=F64), torch.eye(d, dtype=F64))


def scalar_system():
    """The least "auto" needs from a system: the trailing dims of each state part."""
    return SimpleNamespace(part_dims=(1,))


def test_the_estimate_is_h_lambda_exactly_on_a_linear_flow():
    # y' = λy: k₇ − k₆ = λ(y₁ − ŷ₆), so the estimate is h|λ| to rounding. y₁ − ŷ₆ is
    # O((hλ)⁵) and cancels digits at small hλ: tested where it matters, hλ ∈ [1, 100]
    # (float64, rtol 1e-10; measured 1e-14 there, 1.8e-9 at hλ = 0.005).
    lam = torch.tensor([[-100.0], [-400.0], [-1e4], [300.0]], dtype=F64)
    auto = Auto().bind(scalar_system())
    y = (torch.ones(4, 1, dtype=F64),)
    auto.step(lambda t, s: (lam * s[0],), 0.0, y, 0.01)
    np.testing.assert_allclose(auto._h_lambda, 0.01 * lam.abs().squeeze(-1).numpy(), rtol=1e-10)


def test_zero_velocity_is_not_stiff():
    auto = Auto().bind(scalar_system())
    auto.step(lambda t, s: (torch.zeros_like(s[0]),), 0.0, (torch.ones(1, 1, dtype=F64),), 0.1)
    assert auto._h_lambda.tolist() == [0.0]


def test_the_count_follows_dopri5_f():
    # 15 stability-bound accepted steps in a row make an element stiff; 6 calm ones reset.
    auto = Auto().bind(scalar_system())
    yes, no = np.array([True, True]), np.array([True, False])

    def accept(h_lambda, accepted=yes):
        auto._h_lambda = np.asarray(h_lambda, dtype=float)
        auto.observe(accepted, np.zeros(2))

    for _ in range(STIFF_STEPS - 1):
        accept([STABILITY_BOUND * 2, STABILITY_BOUND * 2])
    for _ in range(CALM_STEPS):  # element 0 calms down; element 1's steps are rejected
        accept([1.0, STABILITY_BOUND * 2], accepted=no)
    assert not auto.stiff_elements.any()
    with pytest.warns(RuntimeWarning, match="turned stiff at t = 0"):  # no Jacobian here
        accept([STABILITY_BOUND * 2, STABILITY_BOUND * 2])
    assert auto.stiff_elements.tolist() == [False, True]


def test_auto_is_dopri5_on_a_smooth_flow():
    field = Softmax.from_interaction(torch.tensor([[-0.5, 0.3], [-0.2, -0.4]], dtype=F64), I2)
    g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), I2)
    auto, dopri5 = (integrate(field, g0, 1.0, method=m) for m in (None, "dopri5"))
    assert auto.stats["method"] == "auto" and auto.stats["switched_at"] is None
    assert auto.stats["n_steps"] == dopri5.stats["n_steps"]
    assert torch.equal(auto.final.cov(), dopri5.final.cov())  # the same steps, bitwise


def test_the_contracting_flow_from_1e7_is_right_with_the_default():
    # Σ̇ = −Σ·(something contracting) from Σ = 1e7·I: the default lands on Σ(1) = 0.5·I
    # (dopri5 and rodas4 agree; rk4 at the default step would leave the PSD cone).
    field = Softmax.from_interaction(I2, -I2)
    traj = integrate(field, Gaussian(torch.zeros(2, dtype=F64), 1e7 * I2), 1.0)
    assert traj.status == "completed"
    torch.testing.assert_close(traj.final.cov(), 0.5 * I2, rtol=1e-4, atol=0)
    assert traj.stats["n_steps"] < 200
    for g in traj.measures:
        assert torch.linalg.eigvalsh(g.cov()).min() > 0


def test_a_stiff_gram_row_switches_to_rodas4_and_matches_it():
    field, g0 = gram_row(3, 0)
    auto = integrate(field, g0, 100.0, save=5)
    dopri5 = integrate(field, g0, 100.0, method="dopri5")
    reference = integrate(field, g0, 100.0, method="rodas4", rtol=1e-8, atol=1e-10)
    assert auto.status == "completed" and auto.stats["method"] == "auto (dopri5 → rodas4)"
    assert 0 < auto.stats["switched_at"] < 100
    assert auto.stats["n_steps"] * 4 < dopri5.stats["n_steps"]  # 115 vs 499 measured
    # Final covariance to the rodas4 reference (itself 1.2e-10 from rodas4 at rtol 1e-10):
    # 1e-7 absolute on entries of order 0.4, the default run's rtol 1e-6 (measured 1.1e-8).
    torch.testing.assert_close(auto.final.cov(), reference.final.cov(), rtol=0, atol=1e-7)
    for g in auto.measures:
        assert torch.linalg.eigvalsh(g.cov()).min() > 0


def test_a_batch_switches_together_and_each_element_stays_right():
    rows = [gram_row(3, 0), gram_row(3, 1)]
    Q, K, V = (torch.stack(p) for p in zip(*map(gram_parameters, (3, 3), (0, 1)), strict=True))
    batched = Softmax(Q, K, V, scale=1.0)
    g0 = Gaussian(torch.zeros(2, 3, dtype=F64), torch.eye(3, dtype=F64).expand(2, 3, 3))
    traj = integrate(batched, g0, 100.0)
    assert traj.stats["switched_at"] is not None
    assert traj.stats["stiff_detected"].tolist() == [True, False]
    for b, (field, start) in enumerate(rows):
        one = integrate(field, start, 100.0, method="rodas4", rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(traj.final.cov()[b], one.final.cov(), rtol=0, atol=1e-7)


def test_a_stiff_particle_flow_switches_to_rodas4_and_stays_right():
    # Uniform attention (A = 0) with V = −cI: ẋ_i = −c·m, m the mean, so ṁ = −cm and
    # x_i(t) = x_i(0) + m(0)(e^{−ct} − 1). dopri5's step is held at hc ≈ 3.3 once m is
    # below atol; a small cloud (n·d ≤ 256) has a Jacobian (autograd), so "auto" switches
    # to rodas4 (issue 28: particles had no stiff path).
    c = 400.0
    points = torch.randn(6, 2, generator=torch.Generator().manual_seed(0), dtype=F64) * 1e-3
    field = Softmax.from_interaction(torch.zeros(2, 2, dtype=F64), -c * I2)
    traj = integrate(field, Empirical(points), 1.0)
    assert traj.status == "completed" and traj.stats["method"] == "auto (dopri5 → rodas4)"
    assert 0 < traj.stats["switched_at"] < 1.0
    exact = points + points.mean(0) * math.expm1(-c)
    torch.testing.assert_close(traj.final.points, exact, rtol=0, atol=1e-9)


def test_a_stiff_large_particle_flow_switches_to_the_krylov_path_and_stays_right():
    # The same flow on n·d = 300 > 256 coordinates (issue 36: before, no stiff method, and
    # dopri5 went on at its stability-bound steps): the Jacobian is an operator and rodas4
    # solves its stages by GMRES (tpde.flows.systems.krylov).
    c = 400.0
    points = torch.randn(150, 2, generator=torch.Generator().manual_seed(0), dtype=F64) * 1e-3
    field = Softmax.from_interaction(torch.zeros(2, 2, dtype=F64), -c * I2)
    traj = integrate(field, Empirical(points), 1.0)
    assert traj.status == "completed" and traj.stats["method"] == "auto (dopri5 → rodas4)"
    assert 0 < traj.stats["switched_at"] < 1.0
    exact = points + points.mean(0) * math.expm1(-c)
    torch.testing.assert_close(traj.final.points, exact, rtol=0, atol=1e-9)


def test_each_run_gets_its_own_auto():
    assert resolve_method("auto") is not resolve_method("auto")
    assert resolve_method(None).name == "auto"


def test_auto_is_no_inner_method_of_a_splitting():
    with pytest.raises(ValueError, match="'auto' chooses its own steps"):
        Splitting("lie-trotter", inner="auto")
