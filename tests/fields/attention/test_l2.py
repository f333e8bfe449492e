"""L2 attention: the kernel, the Gaussian closure, MATH.md §4.6, the mean-field limit."""

import math

import pytest
import torch

from tests.conftest import random_spd
from tpde.fields import L2, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def particles_vs_gaussian(field, g0: Gaussian, t1: float, seed: int):
    """Relative errors (mean, cov) of 20,000 float32 particles against the moment ODE at t1.

    The particles use the field's "auto" engine (SDPA for the softmax-like variants) and
    RK4 with dt = t1/2; the Gaussian ODE RK4 with dt = t1/100, in float64.
    """
    ode = integrate(field, g0, t1, dt=t1 / 100, method="rk4")
    assert ode.status == "completed"  # a blown-up Gaussian has no particle counterpart
    exact = ode.final
    generator = torch.Generator().manual_seed(seed)
    cloud = Empirical.from_gaussian(g0, 20_000, generator=generator).to(dtype=torch.float32)
    traj = integrate(field, cloud, t1, dt=t1 / 2, method="rk4")
    assert traj.status == "completed"
    mean, cov = traj.final.mean().double(), traj.final.cov().double()
    mean_error = (mean - exact.mean()).norm() / (1 + exact.mean().norm())
    cov_error = (cov - exact.cov()).norm() / exact.cov().norm()
    return float(mean_error), float(cov_error)


def _kernel_sum(x, w, V, kernel):
    """V Σ_j w_j k(x_i, x_j) x_j / Σ_j w_j k(x_i, x_j), written out with loops."""
    n = len(x)
    rows = []
    for i in range(n):
        weights = [w[j] * kernel(x[i], x[j]) for j in range(n)]
        rows.append(V @ sum(c * x[j] for j, c in enumerate(weights)) / sum(weights))
    return torch.stack(rows)


def _draw(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=F64)


def test_particle_velocity_is_the_gaussian_kernel_average(generator):
    Q, K, V = _draw(generator, 2, 3), _draw(generator, 2, 3), _draw(generator, 3, 3)
    x = _draw(generator, 7, 3)
    w = torch.rand(7, generator=generator, dtype=F64) + 0.1
    w = w / w.sum()
    scale = 0.7
    expected = _kernel_sum(x, w, V, lambda a, b: torch.exp(-scale * ((Q @ a - K @ b) ** 2).sum()))
    got = L2(Q, K, V, scale=scale).velocity(Empirical(x, w))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert L2(Q, K, V).params.scale == pytest.approx(1 / math.sqrt(2))  # default 1/√k


def test_code_form_is_the_authors_kernel(generator):
    # form="code": k(x, y) ∝ exp(2·scale·⟨Qx, Ky⟩ − |Ky|²) in y (|Ky|² unscaled).
    Q, K, V = _draw(generator, 2, 3), _draw(generator, 2, 3), _draw(generator, 3, 3)
    x = _draw(generator, 6, 3)
    w = torch.full((6,), 1 / 6, dtype=F64)
    scale = 1 / math.sqrt(3)
    expected = _kernel_sum(
        x, w, V, lambda a, b: torch.exp(2 * scale * (Q @ a) @ (K @ b) - (K @ b) @ (K @ b))
    )
    got = L2(Q, K, V, scale=scale, form="code").velocity(Empirical(x))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_code_form_reproduces_the_authors_covariance_rhs(generator):
    # rhs_L2 of vcastin/2025-transformers-PDEs (utils.py), transcribed:
    #   A = KᵀQ/√d, inv = (I + 2KᵀKS)⁻¹, rhs = 2 V S inv A S, Σ̇ = rhs + rhsᵀ.
    d = 3
    Q, K, V = _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d)
    S = random_spd(d, generator)
    A = K.T @ Q / math.sqrt(d)
    rhs = 2 * V @ S @ torch.linalg.inv(torch.eye(d, dtype=F64) + 2 * K.T @ K @ S) @ A @ S
    field = L2(Q, K, V, scale=1 / math.sqrt(d), form="code")
    _, dcov = field.gaussian_rhs(0.0, torch.zeros(d, dtype=F64), S)
    torch.testing.assert_close(dcov, rhs + rhs.T, rtol=1e-12, atol=1e-12)


def test_distance_form_is_the_code_form_with_rescaled_parameters(generator):
    # exp(−s|Qx − Ky|²) = code form with Q, K → √s·Q, √s·K and scale 1 (MATH.md §3).
    Q, K, V = _draw(generator, 2, 2), _draw(generator, 2, 2), _draw(generator, 2, 2)
    s = 0.3
    a = L2(Q, K, V, scale=s)
    b = L2(math.sqrt(s) * Q, math.sqrt(s) * K, V, scale=1.0, form="code")
    g = Gaussian(_draw(generator, 2), random_spd(2, generator))
    x = _draw(generator, 5, 2)
    torch.testing.assert_close(a.velocity(Empirical(x)), b.velocity(Empirical(x)))
    rhs_a, rhs_b = a.gaussian_rhs(0.0, g.mean(), g.cov()), b.gaussian_rhs(0.0, g.mean(), g.cov())
    for u, v in zip(rhs_a, rhs_b, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", ["distance", "code"])
def test_velocity_on_a_gaussian_is_the_closed_form_and_the_particle_limit(form, generator):
    # Γ[N(α, Σ)](x) = V M⁻¹(α + 2ΣAx), M = I + 2cΣKᵀK (tilt lemma twice, MATH.md §3).
    Q, K = _draw(generator, 2, 2), _draw(generator, 2, 2)
    V = torch.tensor([[1.0, 0.3], [0.0, 0.5]], dtype=F64)
    scale = 0.6
    c = scale if form == "distance" else 1.0
    g = Gaussian(
        torch.tensor([0.2, -0.1], dtype=F64), torch.tensor([[0.5, 0.1], [0.1, 0.3]], dtype=F64)
    )
    x = torch.tensor([[0.3, 0.4], [-0.5, 0.1]], dtype=F64)
    field = L2(Q, K, V, scale=scale, form=form)
    M = torch.eye(2, dtype=F64) + 2 * c * g.cov() @ K.T @ K
    A = scale * K.T @ Q
    expected = (torch.linalg.solve(M, g.mean()[:, None] + 2 * g.cov() @ A @ x.T)).T @ V.T
    torch.testing.assert_close(field.velocity(g, x), expected, rtol=1e-12, atol=1e-12)
    cloud = Empirical.from_gaussian(g, 200_000, generator=generator)
    # Monte Carlo error of a self-normalised average at n = 2e5: ~3e-3; allow 1e-2.
    assert float((field.velocity(cloud, x) - expected).abs().max()) < 1e-2


def test_batched_parameters_broadcast_against_batched_gaussians(generator):
    # Q (3, 1, k, d) against a batch of 2 Gaussians: a (3, 2) sweep, each element equal to
    # the unbatched closure.
    Q, K, V = _draw(generator, 3, 1, 2, 2), _draw(generator, 2, 2), _draw(generator, 2, 2)
    means = _draw(generator, 2, 2)
    covs = torch.stack([random_spd(2, generator) for _ in range(2)])
    dmean, dcov = L2(Q, K, V, scale=0.5).gaussian_rhs(0.0, means, covs)
    assert dmean.shape == (3, 2, 2) and dcov.shape == (3, 2, 2, 2)
    for i in range(3):
        for j in range(2):
            one = L2(Q[i, 0], K, V, scale=0.5).gaussian_rhs(0.0, means[j], covs[j])
            torch.testing.assert_close(dmean[i, j], one[0], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(dcov[i, j], one[1], rtol=1e-12, atol=1e-12)


def test_one_d_implicit_closed_form():
    # MATH.md §4.6, kernel exp(−(qx − ky)²): ṡ = 4vkq s²/(1 + 2k²s), implicit solution
    # 1/s0 − 1/s + 2k² log(s/s0) = 4vkq t; example s(3) = 5.8380902 (7 digits given).
    v, k, q, s0 = 1.0, 0.8, 0.6, 0.4
    field = L2(*(torch.tensor([[c]], dtype=F64) for c in (q, k, v)), scale=1.0)
    g0 = Gaussian(torch.tensor([0.3], dtype=F64), torch.tensor([[s0]], dtype=F64))
    times = [0.5, 1.0, 2.0, 3.0]
    traj = integrate(field, g0, 3.0, method="dopri5", rtol=1e-12, atol=1e-14, save=times)
    for t, g in zip(times, traj.measures[1:], strict=True):
        s = float(g.cov()[0, 0])
        residual = 1 / s0 - 1 / s + 2 * k**2 * math.log(s / s0) - 4 * v * k * q * t
        assert abs(residual) < 1e-9  # dopri5 at rtol 1e-12
    assert float(traj.final.cov()[0, 0]) == pytest.approx(5.8380902, rel=1e-8)


def test_no_finite_time_blow_up_where_softmax_blows_up(generator):
    # Same Q = K (invertible), V = I and Σ0, so A = scale·KᵀK ≻ 0: softmax blows up at
    # t* = 1/λmax(Σ0^{1/2}(A + Aᵀ)Σ0^{1/2}) (MATH.md §4.2); L2 grows at most exponentially
    # (§4.6), so it is finite at 2t*.
    d = 2
    Q = torch.tensor([[1.2, 0.3], [-0.2, 0.9]], dtype=F64)
    V = torch.eye(d, dtype=F64)
    g0 = Gaussian(torch.tensor([0.5, -0.2], dtype=F64), random_spd(d, generator, floor=0.3))
    softmax, l2 = Softmax(Q, Q, V), L2(Q, Q, V)
    A = softmax.params.scale * Q.T @ Q
    root = torch.linalg.cholesky(g0.cov())
    t_star = 1 / float(torch.linalg.eigvalsh(root.T @ (A + A.T) @ root)[-1])
    blown = integrate(softmax, g0, 2 * t_star, method="dopri5")
    assert blown.status == "blow_up"
    assert float(blown.event_time) == pytest.approx(t_star, rel=1e-2)
    finite = integrate(l2, g0, 2 * t_star, method="dopri5", rtol=1e-10, atol=1e-12)
    assert finite.status == "completed"
    assert float(finite.times[-1]) == pytest.approx(2 * t_star)
    top = float(torch.linalg.eigvalsh(finite.final.cov())[-1])
    assert math.isfinite(top) and top < 1e3
    # At most exponential: Σ̇ = BΣ + ΣBᵀ with B = 2(Σ⁻¹ + 2cKᵀK)⁻¹A (V = I), so
    # ‖B‖ ≤ ‖A‖/(c·σmin(K)²) and λmax(t) ≤ λmax(0)·exp(2‖B‖t), c = scale.
    c_min = float(torch.linalg.svdvals(Q)[-1]) ** 2 * l2.params.scale
    rate = 2 * float(torch.linalg.matrix_norm(A, ord=2)) / c_min
    assert top <= float(torch.linalg.eigvalsh(g0.cov())[-1]) * math.exp(rate * 2 * t_star)


@pytest.mark.parametrize("d", [2, 5])
def test_mean_field_particles_match_gaussian_ode(d):
    # 20,000 particles (float32, SDPA) against the float64 moment ODE at t1 = 1: the t = 0
    # moment estimates carry a relative error ≈ 0.01 (1/√n); we allow 0.05, about five
    # standard errors (as for softmax, tests/flows/test_particle_flows.py). Q ≈ −K makes
    # A ≼ 0-ish (contracting covariance): in expanding cases the tilted measure drifts into
    # the tails of the sample and the particle average converges much more slowly in n.
    gen = torch.Generator().manual_seed(30 + d)
    K = _draw(gen, d, d) / math.sqrt(d)
    Q = -K + 0.3 * _draw(gen, d, d) / math.sqrt(d)
    V = torch.eye(d, dtype=F64) + 0.3 * _draw(gen, d, d) / math.sqrt(d)
    g0 = Gaussian(0.5 * _draw(gen, d), random_spd(d, gen, floor=0.3))
    mean_error, cov_error = particles_vs_gaussian(L2(Q, K, V), g0, 1.0, seed=d)
    assert mean_error < 0.05 and cov_error < 0.05


def test_time_dependent_parameters():
    Q = lambda t: torch.tensor([[1.0 + t, 0.0], [0.0, 1.0]], dtype=F64)  # noqa: E731
    K, V = torch.eye(2, dtype=F64), torch.eye(2, dtype=F64)
    field = L2(Q, K, V)
    mu = Empirical(torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=F64))
    torch.testing.assert_close(field.velocity(mu, t=0.7), L2(Q(0.7), K, V).velocity(mu))
    assert not torch.allclose(field.velocity(mu, t=0.0), field.velocity(mu, t=0.7))


def test_unknown_form_is_refused():
    with pytest.raises(ValueError, match="unknown form 'paper'; choose one of 'distance'"):
        L2(torch.eye(2), torch.eye(2), torch.eye(2), form="paper")
