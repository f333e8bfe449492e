"""Bures–Wasserstein geometry: distance against POT, Monge map, geodesics, exp/log, gradients."""

import math

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import random_spd
from tpde._linalg import sqrtm_psd
from tpde.measures import Empirical, Gaussian
from tpde.metrics import (
    BuresTangent,
    bures_exp,
    bures_geodesic,
    bures_inner,
    bures_log,
    bures_monge_map,
    bures_wasserstein,
    w2,
)
from tpde.metrics.bures import _geodesic_by_map, _geodesic_by_polar

F64 = torch.float64


def random_gaussian(d, generator, batch=(), floor=0.1):
    mean = torch.randn(*batch, d, generator=generator, dtype=F64)
    return Gaussian(mean, random_spd(d, generator, batch=batch, floor=floor))


def rank_deficient(d, rank, generator):
    factor = torch.randn(d, rank, generator=generator, dtype=F64)
    return factor @ factor.T


@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_distance_equals_pot(d, generator):
    # Same closed form by a different route (POT: two sqrtm; tpde: Cholesky + eigvalsh):
    # float64 rounding of traces of size ~d, so 1e-10 absolute as the issue asks.
    for _ in range(3):
        g0, g1 = random_gaussian(d, generator), random_gaussian(d, generator)
        ours = bures_wasserstein(g0, g1)
        pot = ot.gaussian.bures_wasserstein_distance(
            g0.mean().numpy(), g1.mean().numpy(), g0.cov().numpy(), g1.cov().numpy()
        )
        assert ours.shape == ()
        assert abs(float(ours) - float(pot)) < 1e-10


def test_one_dimensional_closed_form():
    # W2²(N(m0, s0²), N(m1, s1²)) = (m0 − m1)² + (s0 − s1)².
    g0 = Gaussian(torch.tensor([0.3], dtype=F64), torch.tensor([[4.0]], dtype=F64))
    g1 = Gaussian(torch.tensor([-1.2], dtype=F64), torch.tensor([[0.25]], dtype=F64))
    expected = math.sqrt(1.5**2 + 1.5**2)
    assert float(bures_wasserstein(g0, g1)) == pytest.approx(expected, abs=1e-14)


def test_degenerate_covariances_exact_values():
    # Commuting diagonal covariances: W2² = Σ (√a_i − √b_i)²; zeros included (Cholesky
    # fails on Σ0 and the symmetric-root route takes over).
    a = torch.tensor([1.0, 0.0, 4.0], dtype=F64)
    b = torch.tensor([0.0, 9.0, 1.0], dtype=F64)
    g0 = Gaussian(torch.zeros(3, dtype=F64), torch.diag(a))
    g1 = Gaussian(torch.zeros(3, dtype=F64), torch.diag(b))
    expected = float(((a.sqrt() - b.sqrt()) ** 2).sum().sqrt())
    assert float(bures_wasserstein(g0, g1)) == pytest.approx(expected, abs=1e-12)
    assert float(bures_wasserstein(g1, g0)) == pytest.approx(expected, abs=1e-12)


def test_batched_and_broadcast_equal_the_loop(generator):
    g0 = random_gaussian(3, generator, batch=(4, 2))
    g1 = random_gaussian(3, generator)  # broadcasts against (4, 2)
    batched = bures_wasserstein(g0, g1)
    assert batched.shape == (4, 2)
    for i in range(4):
        for j in range(2):
            single = bures_wasserstein(g0[i, j], g1)
            assert float(batched[i, j]) == pytest.approx(float(single), abs=1e-13)
    assert torch.equal(w2(g0, g1), batched)  # w2 dispatches to the same closed form


def test_float32_stays_float32(generator):
    g0, g1 = random_gaussian(5, generator), random_gaussian(5, generator)
    ours = bures_wasserstein(g0.to(dtype=torch.float32), g1.to(dtype=torch.float32))
    assert ours.dtype == torch.float32
    # float32 rounding of traces ~5 with cancellation: 1e-4 relative.
    assert float(ours) == pytest.approx(float(bures_wasserstein(g0, g1)), rel=1e-4)


def test_monge_map_equals_pot_and_pushes_g0_to_g1(generator):
    g0, g1 = random_gaussian(4, generator), random_gaussian(4, generator)
    T = bures_monge_map(g0, g1)
    A, b = ot.gaussian.bures_wasserstein_mapping(
        g0.mean().numpy(), g1.mean().numpy(), g0.cov().numpy(), g1.cov().numpy()
    )
    np.testing.assert_allclose(T.matrix.numpy(), A, atol=1e-12)  # float64 rounding
    pushed = T.push(g0)
    torch.testing.assert_close(pushed.cov(), g1.cov(), atol=1e-12, rtol=0)
    torch.testing.assert_close(pushed.mean(), g1.mean(), atol=1e-12, rtol=0)
    # On points: x ↦ m1 + T(x − m0), POT's x ↦ x A + b (A symmetric).
    x = torch.randn(7, 4, generator=generator, dtype=F64)
    np.testing.assert_allclose(T(x).numpy(), x.numpy() @ A + b, atol=1e-12)


@pytest.mark.parametrize("t", [0.0, 0.25, 0.7, 1.0])
def test_geodesic_endpoints_and_constant_speed(t, generator):
    g0, g1 = random_gaussian(5, generator), random_gaussian(5, generator)
    total = bures_wasserstein(g0, g1)
    gt = bures_geodesic(g0, g1, t)
    # Compare squared distances: d² has absolute rounding ~1e-14, √ of it would not.
    d0 = bures_wasserstein(g0, gt) ** 2
    d1 = bures_wasserstein(gt, g1) ** 2
    assert float(d0) == pytest.approx(t**2 * float(total) ** 2, abs=1e-11)
    assert float(d1) == pytest.approx((1 - t) ** 2 * float(total) ** 2, abs=1e-11)
    if t in (0.0, 1.0):
        end = g0 if t == 0.0 else g1
        torch.testing.assert_close(gt.cov(), end.cov(), atol=1e-12, rtol=0)
        torch.testing.assert_close(gt.mean(), end.mean(), atol=1e-14, rtol=0)


def test_geodesic_batched_times(generator):
    g0, g1 = random_gaussian(3, generator), random_gaussian(3, generator)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    path = bures_geodesic(g0, g1, t)
    assert path.batch_shape == (3,)
    torch.testing.assert_close(path[1].cov(), bures_geodesic(g0, g1, 0.5).cov())


def test_geodesic_from_degenerate_endpoints(generator):
    # Σ0 of rank 2 in d = 4: computed backwards from the nondegenerate g1.
    g0 = Gaussian(torch.zeros(4, dtype=F64), rank_deficient(4, 2, generator))
    g1 = random_gaussian(4, generator)
    total = float(bures_wasserstein(g0, g1))
    for t in (0.0, 0.4, 1.0):
        gt = bures_geodesic(g0, g1, t)
        # Rank-deficient Σ0: sqrt of eigenvalues ~1e-16 costs ~1e-8 in W2², hence 1e-7.
        assert float(bures_wasserstein(g0, gt)) ** 2 == pytest.approx(t**2 * total**2, abs=1e-7)
    # Both degenerate (rank 1 and rank 2): the polar-decomposition route.
    h0 = Gaussian(torch.zeros(3, dtype=F64), rank_deficient(3, 1, generator))
    h1 = Gaussian(torch.ones(3, dtype=F64), rank_deficient(3, 2, generator))
    total = float(bures_wasserstein(h0, h1))
    for t in (0.0, 0.3, 1.0):
        ht = bures_geodesic(h0, h1, t)
        assert float(bures_wasserstein(h0, ht)) ** 2 == pytest.approx(t**2 * total**2, abs=1e-7)
        assert float(bures_wasserstein(ht, h1)) ** 2 == pytest.approx(
            (1 - t) ** 2 * total**2, abs=1e-7
        )


def test_polar_route_equals_map_route(generator):
    # Two independent constructions of the same geodesic (Monge map vs optimal coupling by
    # polar decomposition) on nondegenerate covariances.
    S0, S1 = random_spd(4, generator), random_spd(4, generator)
    t = torch.tensor([0.35], dtype=F64)
    by_map = _geodesic_by_map(S0[None], S1[None], t)
    by_polar = _geodesic_by_polar(S0[None], S1[None], t)
    torch.testing.assert_close(by_map, by_polar, atol=1e-12, rtol=0)


def test_exp_log_and_inner_product(generator):
    g0, g1 = random_gaussian(4, generator), random_gaussian(4, generator)
    tangent = bures_log(g0, g1)
    back = bures_exp(g0, tangent)
    torch.testing.assert_close(back.cov(), g1.cov(), atol=1e-12, rtol=0)
    torch.testing.assert_close(back.mean(), g1.mean(), atol=1e-14, rtol=0)
    # |log|² at g0 is the squared distance: uᵀu + tr(SΣ0S).
    norm2 = bures_inner(g0, tangent, tangent)
    assert float(norm2) == pytest.approx(float(bures_wasserstein(g0, g1)) ** 2, rel=1e-12)
    # exp of a scaled tangent is the geodesic at that time.
    half = BuresTangent(0.5 * tangent.mean, 0.5 * tangent.sym)
    torch.testing.assert_close(
        bures_exp(g0, half).cov(), bures_geodesic(g0, g1, 0.5).cov(), atol=1e-12, rtol=0
    )


def test_gradcheck_distance_and_sqrtm(generator):
    factor = torch.randn(3, 3, generator=generator, dtype=F64, requires_grad=True)
    mean = torch.randn(3, generator=generator, dtype=F64, requires_grad=True)
    other = random_gaussian(3, generator)

    def distance(f, m):
        return bures_wasserstein(Gaussian(m, f @ f.T + 0.1 * torch.eye(3, dtype=F64)), other)

    assert torch.autograd.gradcheck(distance, (factor, mean))

    def root(f):
        return sqrtm_psd(f @ f.T + 0.2 * torch.eye(3, dtype=F64))

    assert torch.autograd.gradcheck(root, (factor,))


def test_second_derivatives(generator):
    # Hessian-vector products of the distance (Newton-type JKO solvers) and the second
    # derivative along a geodesic in t (geodesic-convexity probes).
    other = random_gaussian(3, generator)

    def distance(f, m):
        cov = f @ f.T + 0.1 * torch.eye(3, dtype=F64)
        return bures_wasserstein(Gaussian._trusted(m, cov), other)

    f = torch.randn(3, 3, generator=generator, dtype=F64, requires_grad=True)
    m = torch.randn(3, generator=generator, dtype=F64, requires_grad=True)
    assert torch.autograd.gradgradcheck(distance, (f, m))
    g0 = random_gaussian(3, generator)
    t = torch.tensor(0.3, dtype=F64, requires_grad=True)

    def energy(s):
        return (bures_geodesic(g0, other, s).cov() ** 2).sum()

    (first,) = torch.autograd.grad(energy(t), t, create_graph=True)
    (second,) = torch.autograd.grad(first, t)
    # Σ_t is quadratic in t, so |Σ_t|² is a quartic: the central difference with h = 1e-3
    # errs by h² f⁗/12 plus rounding 1e-16/h², both below 1e-5 relative here.
    h = 1e-3
    fd = (energy(0.3 + h) - 2 * energy(0.3) + energy(0.3 - h)) / h**2
    assert float(second) == pytest.approx(float(fd), rel=1e-5)


def test_gradients_finite_at_repeated_eigenvalues():
    # Σ0 = I, Σ1 = 4I: torch's eigh backward divides by λ_i − λ_j = 0 here. The derivative
    # of W2² = tr Σ0 + tr Σ1 − 2 tr(Σ0^{1/2}Σ1Σ0^{1/2})^{1/2} w.r.t. Σ1 at these points is
    # I − Σ0^{1/2}(Σ0^{1/2}Σ1Σ0^{1/2})^{-1/2}Σ0^{1/2} = I − I/2 = I/2.
    eye = torch.eye(3, dtype=F64)
    S1 = (4 * eye).requires_grad_(True)
    value = bures_wasserstein(Gaussian(torch.zeros(3, dtype=F64), eye), Gaussian._trusted(
        torch.zeros(3, dtype=F64), S1
    )) ** 2  # fmt: skip
    (grad,) = torch.autograd.grad(value, S1)
    torch.testing.assert_close(grad, 0.5 * eye, atol=1e-12, rtol=0)
    # The matrix square root itself at the identity: d√S[E] = E/2.
    S = eye.clone().requires_grad_(True)
    E = torch.randn(3, 3, dtype=F64)
    E = E + E.T
    (g,) = torch.autograd.grad((sqrtm_psd(S) * E).sum(), S)
    torch.testing.assert_close(g, E / 2, atol=1e-12, rtol=0)


def test_squared_distance_differentiable_at_equality(generator):
    # A JKO step starts at ν = μ: d² must have a finite (zero) gradient there.
    mean = torch.randn(3, generator=generator, dtype=F64, requires_grad=True)
    cov = random_spd(3, generator)
    g = Gaussian(mean, cov)
    (grad,) = torch.autograd.grad(bures_wasserstein(g, Gaussian(mean.detach(), cov)) ** 2, mean)
    assert torch.isfinite(grad).all() and float(grad.abs().max()) < 1e-6


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 5))
def test_invariances_hypothesis(seed, d):
    gen = torch.Generator().manual_seed(seed)
    g0, g1, g2 = (random_gaussian(d, gen, floor=0.05) for _ in range(3))
    d01, d10 = bures_wasserstein(g0, g1), bures_wasserstein(g1, g0)
    d02, d12 = bures_wasserstein(g0, g2), bures_wasserstein(g1, g2)
    # Symmetry up to rounding of two different factorisations.
    assert float(d01) == pytest.approx(float(d10), abs=1e-9)
    assert float(d02) <= float(d01) + float(d12) + 1e-9  # triangle inequality
    # Translation: W2² = |Δm|² + W2²(centred measures).
    centred0 = Gaussian(torch.zeros(d, dtype=F64), g0.cov())
    centred1 = Gaussian(torch.zeros(d, dtype=F64), g1.cov())
    shift = float(((g0.mean() - g1.mean()) ** 2).sum())
    centred = float(bures_wasserstein(centred0, centred1)) ** 2
    assert float(d01) ** 2 == pytest.approx(shift + centred, abs=1e-10)


# ----------------------------------------------------------------------------- bad input


def test_rejects_non_gaussians_and_dimension_mismatch(generator):
    g2, g3 = random_gaussian(2, generator), random_gaussian(3, generator)
    with pytest.raises(ValueError, match="different dimensions"):
        bures_wasserstein(g2, g3)
    cloud = Empirical(torch.zeros(4, 2))
    with pytest.raises(TypeError, match=r"takes two tpde\.measures\.Gaussian"):
        bures_wasserstein(g2, cloud)
    with pytest.raises(ValueError, match="do not broadcast"):
        bures_wasserstein(random_gaussian(2, generator, batch=(3,)), random_gaussian(
            2, generator, batch=(4,)
        ))  # fmt: skip


def test_non_psd_asymmetric_and_nan_covariances_rejected():
    with pytest.raises(ValueError, match="positive semidefinite"):
        bures_wasserstein(Gaussian(torch.zeros(2), torch.diag(torch.tensor([1.0, -1.0]))),
                          Gaussian(torch.zeros(2), torch.eye(2)))  # fmt: skip
    with pytest.raises(ValueError, match="symmetric"):
        Gaussian(torch.zeros(2), torch.tensor([[1.0, 0.5], [0.0, 1.0]]))
    # Measures built by integrators skip the checks; a NaN there is caught at the metric.
    bad = Gaussian._trusted(torch.tensor([float("nan"), 0.0]), torch.eye(2))
    with pytest.raises(ValueError, match="non-finite"):
        bures_wasserstein(bad, Gaussian(torch.zeros(2), torch.eye(2)))


def test_monge_map_and_log_refuse_degenerate_source(generator):
    g0 = Gaussian(torch.zeros(3, dtype=F64), rank_deficient(3, 1, generator))
    g1 = random_gaussian(3, generator)
    with pytest.raises(ValueError, match="degenerate"):
        bures_monge_map(g0, g1)
    with pytest.raises(ValueError, match="degenerate"):
        bures_log(g0, g1)


def test_polar_geodesic_refuses_gradients(generator):
    cov = rank_deficient(3, 1, generator).requires_grad_(True)
    h0 = Gaussian._trusted(torch.zeros(3, dtype=F64), cov)
    h1 = Gaussian(torch.ones(3, dtype=F64), rank_deficient(3, 2, generator))
    with pytest.raises(ValueError, match="polar decomposition"):
        bures_geodesic(h0, h1, 0.5)


def test_tangent_checks(generator):
    g = random_gaussian(2, generator)
    with pytest.raises(TypeError, match="BuresTangent"):
        bures_exp(g, torch.zeros(2))
    asym = BuresTangent(torch.zeros(2), torch.tensor([[0.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="symmetric"):
        bures_exp(g, asym)
    wrong = BuresTangent(torch.zeros(3), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="must have mean"):
        bures_inner(g, wrong, wrong)
    with pytest.raises(TypeError, match=r"must be a tpde\.measures\.Gaussian"):
        bures_exp(Empirical(torch.zeros(3, 2)), BuresTangent(torch.zeros(2), torch.eye(2)))
