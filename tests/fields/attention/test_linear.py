"""Linear attention: the bilinear kernel, its factorisation, the closure, blow-up."""

import math

import pytest
import torch

from tests.conftest import random_spd
from tests.fields.attention.test_l2 import particles_vs_gaussian
from tpde.fields import Linear
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _draw(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=F64)


def test_particle_velocity_is_the_defining_sum_on_every_route(generator):
    # ẋ_i = Σ_j w_j (x_jᵀAx_i) V x_j, written out with loops; "auto" is the factorised
    # V M₂ A x, "dense"/"chunked"/"tiled" the pairwise sum.
    Q, K, V = _draw(generator, 2, 3), _draw(generator, 2, 3), _draw(generator, 3, 3)
    x = _draw(generator, 7, 3)
    w = torch.rand(7, generator=generator, dtype=F64) + 0.1
    w = w / w.sum()
    field = Linear(Q, K, V, scale=0.4)
    A = 0.4 * K.T @ Q
    expected = torch.stack(
        [V @ sum(w[j] * (x[j] @ A @ x[i]) * x[j] for j in range(7)) for i in range(7)]
    )
    for engine in ("auto", "dense", "chunked", "tiled"):
        got = field.velocity(Empirical(x, w), engine=engine)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_closure_is_the_second_moment_formula(generator):
    # Γ[N(α, Σ)](x) = V(Σ + ααᵀ)Ax; α̇ = V(Σ+ααᵀ)Aα, Σ̇ = V(Σ+ααᵀ)AΣ + ΣAᵀ(Σ+ααᵀ)Vᵀ.
    d = 3
    Q, K, V = _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d)
    field = Linear(Q, K, V)
    A = K.T @ Q / math.sqrt(d)
    mean, cov = _draw(generator, d), random_spd(d, generator)
    M2 = cov + torch.outer(mean, mean)
    dmean, dcov = field.gaussian_rhs(0.0, mean, cov)
    torch.testing.assert_close(dmean, V @ M2 @ A @ mean, rtol=1e-12, atol=1e-12)
    expected = V @ M2 @ A @ cov + cov @ A.T @ M2 @ V.T
    torch.testing.assert_close(dcov, expected, rtol=1e-12, atol=1e-12)
    g = Gaussian(mean, cov)
    x = _draw(generator, 4, d)
    torch.testing.assert_close(field.velocity(g, x), x @ (V @ M2 @ A).T)
    cloud = Empirical.from_gaussian(g, 200_000, generator=generator)
    # The particle field is V M̂₂ A x with the sample second moment: relative error
    # ~ 1/√n ≈ 2e-3 times |x|·‖V‖‖A‖ (≈ 5 here); allow 0.05 absolute.
    assert float((field.velocity(cloud, x) - field.velocity(g, x)).abs().max()) < 0.05


def test_one_d_blow_up_closed_form():
    # d = 1, centred: ṡ = 2va s² (the mean stays 0), so s(t) = s0/(1 − 2vas0t) and the
    # flow blows up at t* = 1/(2vas0), like softmax from a centred start.
    v, a, s0 = 0.8, 0.5, 0.6
    field = Linear(
        torch.tensor([[a]], dtype=F64),
        torch.ones(1, 1, dtype=F64),
        v * torch.ones(1, 1, dtype=F64),
        1.0,
    )
    g0 = Gaussian(torch.zeros(1, dtype=F64), torch.tensor([[s0]], dtype=F64))
    t_star = 1 / (2 * v * a * s0)
    traj = integrate(field, g0, 0.9 * t_star, method="dopri5", rtol=1e-12, atol=1e-14)
    assert float(traj.final.cov()[0, 0]) == pytest.approx(s0 / (1 - 0.9), rel=1e-8)
    blown = integrate(field, g0, 2 * t_star, method="dopri5")
    assert blown.status == "blow_up"
    assert float(blown.event_time) == pytest.approx(t_star, rel=1e-2)


def test_one_d_mean_couples_to_the_variance():
    # d = 1: α̇ = va(s + α²)α, ṡ = 2va(s + α²)s, so s/α² is constant (= s0/α0²).
    v, a = -0.7, 0.9
    field = Linear(
        torch.tensor([[a]], dtype=F64),
        torch.ones(1, 1, dtype=F64),
        v * torch.ones(1, 1, dtype=F64),
        1.0,
    )
    g0 = Gaussian(torch.tensor([0.8], dtype=F64), torch.tensor([[0.5]], dtype=F64))
    final = integrate(field, g0, 2.0, method="dopri5", rtol=1e-12, atol=1e-14).final
    ratio = float(final.cov()[0, 0] / final.mean()[0] ** 2)
    assert ratio == pytest.approx(0.5 / 0.64, rel=1e-9)
    assert float(final.cov()[0, 0]) < 0.5  # va < 0: contraction


@pytest.mark.parametrize("d", [2, 5])
def test_mean_field_particles_match_gaussian_ode(d):
    # 20,000 float32 particles ("auto": the factorised V M₂ A x) against the float64
    # moment ODE at t1 = 1, contracting parameters (A ≺ 0-ish, V ≈ I). Tolerance 0.05
    # relative, about five standard errors of the t = 0 moment estimates (~0.01).
    gen = torch.Generator().manual_seed(40 + d)
    B = _draw(gen, d, d)
    P = B @ B.T / torch.linalg.eigvalsh(B @ B.T)[-1]
    A = -0.6 * P + 0.2 * _draw(gen, d, d) / math.sqrt(d)
    V = torch.eye(d, dtype=F64) + 0.3 * _draw(gen, d, d) / math.sqrt(d)
    field = Linear(A, torch.eye(d, dtype=F64), V, scale=1.0)
    g0 = Gaussian(0.5 * _draw(gen, d), random_spd(d, gen, floor=0.3))
    mean_error, cov_error = particles_vs_gaussian(field, g0, 1.0, seed=d)
    assert mean_error < 0.05 and cov_error < 0.05


def test_time_dependent_parameters():
    V = lambda t: (1 + t) * torch.eye(2, dtype=F64)  # noqa: E731
    field = Linear(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), V)
    mu = Empirical(torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64))
    torch.testing.assert_close(field.velocity(mu, t=1.0), 2 * field.velocity(mu, t=0.0))


def test_sdpa_cannot_express_linear_attention():
    field = Linear(torch.eye(2), torch.eye(2), torch.eye(2))
    with pytest.raises(ValueError, match="engine 'sdpa' only computes softmax-normalised"):
        field.velocity(Empirical(torch.zeros(3, 2)), engine="sdpa")
