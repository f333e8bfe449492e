"""Twisted W2 (MATH.md §5): reductions to W2 / Bures, the frozen reference, the mobility checks."""

import math

import numpy as np
import ot
import pytest
import torch
from scipy.integrate import quad

from tests.conftest import random_spd
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein, twisted_w2, w2
from tpde.metrics.twisted import log_partition

F64 = torch.float64


def cloud(n, d, generator, shift=0.0):
    w = torch.rand(n, generator=generator, dtype=F64) + 0.1
    return Empirical(torch.randn(n, d, generator=generator, dtype=F64) + shift, w / w.sum())


def inv_sqrt(M):
    evals, evecs = torch.linalg.eigh(M)
    return (evecs * evals.rsqrt()) @ evecs.T


def test_identity_twist_is_w2(generator):
    mu, nu = cloud(20, 3, generator), cloud(15, 3, generator, 1.0)
    eye = torch.eye(3, dtype=F64)
    assert float(twisted_w2(mu, nu, M=eye)) == pytest.approx(float(w2(mu, nu)), rel=1e-12)
    g0 = Gaussian(torch.randn(2, 3, generator=generator, dtype=F64), random_spd(3, generator))
    g1 = Gaussian(torch.zeros(3, dtype=F64), random_spd(3, generator))
    torch.testing.assert_close(twisted_w2(g0, g1, M=eye), bures_wasserstein(g0, g1))
    # V = A (M = V A⁻¹ = I) is the identity twist too.
    A = random_spd(3, generator)
    assert float(twisted_w2(mu, nu, A=A, V=A)) == pytest.approx(float(w2(mu, nu)), rel=1e-10)


def test_change_of_variables_on_particles_and_gaussians(generator):
    M = random_spd(3, generator)
    W = inv_sqrt(M)
    mu, nu = cloud(12, 3, generator), cloud(10, 3, generator, 0.5)
    moved_mu, moved_nu = Empirical(mu.points @ W, mu.weights), Empirical(nu.points @ W, nu.weights)
    expected = float(w2(moved_mu, moved_nu))
    assert float(twisted_w2(mu, nu, M=M)) == pytest.approx(expected, rel=1e-10)
    # Independent cost: Σ P_ij (x_i − y_j)ᵀM⁻¹(x_i − y_j) by POT.
    diff = mu.points[:, None] - nu.points[None]
    cost = torch.einsum("ijk,kl,ijl->ij", diff, torch.linalg.inv(M), diff)
    pot = ot.emd2(mu.weights.numpy(), nu.weights.numpy(), cost.numpy())
    assert expected**2 == pytest.approx(pot, rel=1e-10)
    # Scalar mobility m I: distances shrink by √m.
    assert float(twisted_w2(mu, nu, M=4 * torch.eye(3, dtype=F64))) == pytest.approx(
        float(w2(mu, nu)) / 2, rel=1e-12
    )
    g0 = Gaussian(torch.randn(3, generator=generator, dtype=F64), random_spd(3, generator))
    g1 = Gaussian(torch.randn(3, generator=generator, dtype=F64), random_spd(3, generator))
    h0 = Gaussian(W @ g0.mean(), W @ g0.cov() @ W)
    h1 = Gaussian(W @ g1.mean(), W @ g1.cov() @ W)
    assert float(twisted_w2(g0, g1, M=M)) == pytest.approx(
        float(bures_wasserstein(h0, h1)), rel=1e-10
    )


def test_attention_parameters_and_the_sign(generator):
    # A symmetric invertible, M symmetric definite, V = M A: twisted_w2(A, V) = twisted_w2(M).
    d = 3
    A = torch.randn(d, d, generator=generator, dtype=F64)
    A = A + A.T
    M = random_spd(d, generator)
    mu, nu = cloud(9, d, generator), cloud(8, d, generator, 1.0)
    by_m = float(twisted_w2(mu, nu, M=M))
    assert float(twisted_w2(mu, nu, A=A, V=M @ A)) == pytest.approx(by_m, rel=1e-9)
    # M ≺ 0 (e.g. V = I, A = −I): s = −1 and the metric uses −M.
    assert float(twisted_w2(mu, nu, M=-M)) == pytest.approx(by_m, rel=1e-12)
    eye = torch.eye(d, dtype=F64)
    assert float(twisted_w2(mu, nu, A=-eye, V=eye)) == pytest.approx(float(w2(mu, nu)))


def test_reference_weight_equals_explicit_cost(generator):
    d = 2
    A = 0.3 * random_spd(d, generator)
    M = random_spd(d, generator)
    mu, nu, rho = cloud(14, d, generator), cloud(11, d, generator, 0.7), cloud(9, d, generator)
    x, y = mu.points.numpy(), nu.points.numpy()
    # Z_ρ(x) = Σ_k w_k exp(y_kᵀ A x), written as a loop.
    Z = np.array(
        [sum(wk * math.exp(yk @ A.numpy() @ xi) for wk, yk in zip(rho.weights.numpy(),
                                                                 rho.points.numpy(), strict=True))
         for xi in x]
    )  # fmt: skip
    Minv = np.linalg.inv(M.numpy())
    cost = np.array([[Z[i] * (x[i] - y[j]) @ Minv @ (x[i] - y[j]) for j in range(11)]
                     for i in range(14)])  # fmt: skip
    expected = ot.emd2(mu.weights.numpy(), nu.weights.numpy(), cost)
    ours = twisted_w2(mu, nu, M=M, A=A, reference=rho)
    assert float(ours) ** 2 == pytest.approx(expected, rel=1e-10)
    # Identity coupling (a particle flow's own): Σ w_i Z(x_i) |y_i − x_i|²_{M⁻¹} ≥ optimum.
    moved = Empirical(mu.points + 0.1, mu.weights)
    ident = twisted_w2(mu, moved, M=M, A=A, reference=rho, coupling="identity")
    step = np.full(d, 0.1)
    assert float(ident) ** 2 == pytest.approx(float((mu.weights.numpy() * Z).sum()) *
                                              step @ Minv @ step, rel=1e-10)  # fmt: skip
    assert float(ident) >= float(twisted_w2(mu, moved, M=M, A=A, reference=rho)) - 1e-12
    # A = 0 makes Z ≡ 1: the reference then changes nothing.
    zero = torch.zeros(d, d, dtype=F64)
    assert float(twisted_w2(mu, nu, M=M, A=zero, reference=rho)) == pytest.approx(
        float(twisted_w2(mu, nu, M=M)), rel=1e-12
    )


def test_gaussian_reference_partition_function(generator):
    # log Z for ρ = N(α, σ²) in d = 1 against numerical quadrature of ∫ e^{yax} dρ(y).
    a, alpha, s2 = 0.8, 0.4, 0.6
    rho = Gaussian(torch.tensor([alpha], dtype=F64), torch.tensor([[s2]], dtype=F64))
    xs = torch.tensor([[-1.5], [0.0], [2.0]], dtype=F64)
    ours = log_partition(rho, torch.tensor([[a]], dtype=F64), xs)
    for x, value in zip(xs[:, 0].tolist(), ours.tolist(), strict=True):
        density = lambda y, x=x: math.exp(a * x * y - (y - alpha) ** 2 / (2 * s2))  # noqa: E731
        integral = quad(density, -30, 30, epsabs=0, epsrel=1e-13)[0] / math.sqrt(2 * math.pi * s2)
        assert value == pytest.approx(math.log(integral), abs=1e-10)


def test_gradients_flow(generator):
    points = torch.randn(6, 2, generator=generator, dtype=F64, requires_grad=True)
    nu = cloud(6, 2, generator, 0.5)
    value = twisted_w2(Empirical(points), nu, M=random_spd(2, generator), A=torch.eye(2,
                       dtype=F64) * 0.1, reference=nu)  # fmt: skip
    (grad,) = torch.autograd.grad(value, points)
    assert torch.isfinite(grad).all() and float(grad.abs().sum()) > 0


# ----------------------------------------------------------------------------- bad input


def test_mobility_checks(generator):
    mu, nu = cloud(5, 2, generator), cloud(5, 2, generator)
    with pytest.raises(ValueError, match="M must be symmetric"):
        twisted_w2(mu, nu, M=torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=F64))
    with pytest.raises(ValueError, match="must be definite"):
        twisted_w2(mu, nu, M=torch.diag(torch.tensor([1.0, -1.0], dtype=F64)))
    A = torch.tensor([[1.0, 0.2], [0.2, -0.5]], dtype=F64)
    with pytest.raises(ValueError, match=r"V A⁻¹ must be symmetric"):
        twisted_w2(mu, nu, A=A, V=torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64))
    with pytest.raises(ValueError, match="A must be symmetric"):
        twisted_w2(mu, nu, A=torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64), V=torch.eye(2))
    with pytest.raises(ValueError, match="needs the mobility"):
        twisted_w2(mu, nu)
    with pytest.raises(ValueError, match="not both M and V"):
        twisted_w2(mu, nu, M=torch.eye(2), V=torch.eye(2))
    with pytest.raises(ValueError, match=r"M must have shape \(2, 2\)"):
        twisted_w2(mu, nu, M=torch.eye(3))


def test_reference_and_coupling_checks(generator):
    mu, nu = cloud(5, 2, generator), cloud(4, 2, generator)
    eye = torch.eye(2, dtype=F64)
    with pytest.raises(ValueError, match="needs the interaction matrix A"):
        twisted_w2(mu, nu, M=eye, reference=mu)
    with pytest.raises(ValueError, match="equal sizes and equal weights"):
        twisted_w2(mu, nu, M=eye, coupling="identity")
    with pytest.raises(ValueError, match="unknown coupling"):
        twisted_w2(mu, nu, M=eye, coupling="greedy")
    g = Gaussian(torch.zeros(2, dtype=F64), eye)
    with pytest.raises(ValueError, match="no closed form"):
        twisted_w2(g, g, M=eye, A=eye, reference=g)
    with pytest.raises(TypeError, match="does not compare"):
        twisted_w2(g, mu, M=eye)
    with pytest.raises(TypeError, match="reference must be"):
        twisted_w2(mu, nu, M=eye, A=eye, reference=Gaussian(torch.zeros(3, 2), eye))
    with pytest.raises(ValueError, match="reference lives in dimension 3"):
        twisted_w2(mu, nu, M=eye, A=eye, reference=Empirical(torch.zeros(2, 3)))
    with pytest.raises(ValueError, match="coupling='identity' is for particles"):
        twisted_w2(g, g, M=eye, coupling="identity")
    huge = Empirical(torch.full((3, 2), 40.0, dtype=F64))
    with pytest.raises(ValueError, match="overflows"):
        twisted_w2(huge, huge, M=eye, A=eye, reference=huge)
