"""Sinkhorn attention: the scaling, its status, the Gaussian closure and its closed forms."""

import math

import pytest
import torch

from tests.conftest import random_spd
from tpde._linalg import sqrtm_psd
from tpde.fields import InnerSolves, Sinkhorn, SinkhornNotConverged, Softmax
from tpde.fields.attention.sinkhorn_solver import conditional_slope, sinkhorn_potential
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _field(A, V, **kwargs):
    return Sinkhorn(A, torch.eye(A.shape[-1], dtype=A.dtype), V, scale=1.0, **kwargs)


def _weighted_cloud(n, d, generator):
    points = torch.randn(n, d, generator=generator, dtype=F64)
    weights = torch.rand(n, generator=generator, dtype=F64) + 0.2
    return Empirical(points, weights / weights.sum())


def _plain_sinkhorn(x, w, A, eps, iters=5000):
    """Reference: the textbook scaling u, v of K_ij = exp(x_jᵀAx_i/ε), no logs, no engines."""
    K = torch.exp((x @ A.T @ x.T) / eps)
    u, v = torch.ones_like(w), torch.ones_like(w)
    for _ in range(iters):
        u = 1 / (K @ (v * w))
        v = 1 / (K.T @ (u * w))
    return (u * w)[:, None] * K * (v * w)[None, :]  # P_ij, both marginals w


def test_particle_velocity_is_the_doubly_stochastic_average(generator):
    # ẋ_i = V Σ_j P_ij x_j / w_i with P the plain-domain Sinkhorn plan (independent route).
    mu = _weighted_cloud(40, 2, generator)
    A = torch.tensor([[0.6, -0.3], [0.4, 0.2]], dtype=F64)
    V = torch.tensor([[1.0, 0.5], [-0.2, 0.8]], dtype=F64)
    P = _plain_sinkhorn(mu.points, mu.weights, A, eps=0.7)
    expected = (P @ mu.points / mu.weights[:, None]) @ V.T
    got = _field(A, V, eps=0.7, tol=1e-13).velocity(mu)
    # Both scalings converge to the same plan; rounding of 40-term sums: 1e-11.
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-11)


def test_coupling_marginals_match_to_the_tolerance(generator):
    mu = _weighted_cloud(60, 3, generator)
    A = 0.8 * torch.randn(3, 3, generator=generator, dtype=F64)
    log_w = mu.weights.log()
    G, info = sinkhorn_potential(mu.points, log_w, A, iters=500, tol=1e-7)
    scores = mu.points @ A.T @ mu.points.T  # S_ij = x_jᵀAx_i
    F = -torch.logsumexp(scores + G + log_w, dim=1)
    P = mu.weights[:, None] * mu.weights[None, :] * torch.exp(F[:, None] + G[None, :] + scores)
    column_error = (P.sum(0) - mu.weights).abs().sum()
    assert info.converged and info.iterations > 1
    torch.testing.assert_close(P.sum(1), mu.weights, rtol=1e-12, atol=1e-14)  # rows: exact
    assert float(column_error) < 1e-7  # columns: within tol (the L1 error)
    assert float(column_error) == pytest.approx(info.marginal_error, rel=1e-6)


def test_one_iteration_is_softmax(generator):
    # The sinkformers observation: one row normalisation is softmax (weighted keys too).
    mu = _weighted_cloud(50, 3, generator)
    Q, K = (torch.randn(2, 3, generator=generator, dtype=F64) for _ in "QK")
    V = torch.randn(3, 3, generator=generator, dtype=F64)
    softmax = Softmax(Q, K, V).velocity(mu)
    fixed, info = Sinkhorn(Q, K, V, iters=1, tol=None), InnerSolves()
    torch.testing.assert_close(fixed.velocity(mu, info=info), softmax, rtol=1e-13, atol=1e-13)
    assert info.last.converged is None and info.last.iterations == 1
    # With a tolerance, iters = 1 is still softmax, reported as not converged.
    checked, info = Sinkhorn(Q, K, V, iters=1, tol=1e-9), InnerSolves()
    with pytest.warns(SinkhornNotConverged, match="did not reach tol"):
        velocity = checked.velocity(mu, info=info)
    torch.testing.assert_close(velocity, softmax, rtol=1e-13, atol=1e-13)
    assert info.last.converged is False and info.last.marginal_error > 1e-9


def test_symmetric_interaction_gives_equal_potentials(generator):
    # A symmetric: the self-coupling problem is symmetric and F = G up to the gauge constant.
    mu = _weighted_cloud(50, 2, generator)
    B = torch.randn(2, 2, generator=generator, dtype=F64)
    A = 0.5 * (B + B.T)
    log_w = mu.weights.log()
    G, _ = sinkhorn_potential(mu.points, log_w, A, iters=2000, tol=1e-12)
    F = -torch.logsumexp(mu.points @ A.T @ mu.points.T + G + log_w, dim=1)
    gap = F - G
    assert float(gap.max() - gap.min()) < 1e-9  # ~ tol-level differences of the potentials


def test_non_convergence_is_reported_not_nan(generator):
    mu = Empirical(2 * torch.randn(200, 2, generator=generator, dtype=F64))
    field = _field(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), eps=0.05, iters=3)
    info = InnerSolves()
    with pytest.warns(SinkhornNotConverged, match="marginal error"):
        velocity = field.velocity(mu, info=info)
    with pytest.warns(SinkhornNotConverged, match="Raise iters"):
        assert torch.isfinite(field.self_cost(mu))
    assert torch.isfinite(velocity).all() and info.failure is info.last
    assert info.last.converged is False and info.last.iterations == 3
    assert not hasattr(field, "last_info")  # the status travels with the call, not the field
    traj = integrate(field, mu, 1.0, dt=0.1, method="rk4")
    assert traj.status == "not_converged" and float(traj.event_time) == 0.0
    assert traj.stats["inner_failure"].converged is False
    torch.testing.assert_close(traj.final.points, mu.points)  # the failed step is not taken


def test_converged_particle_flow_completes(generator):
    field = _field(-0.5 * torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), tol=1e-9)
    mu = Empirical(torch.randn(30, 2, generator=generator, dtype=F64))
    traj = integrate(field, mu, 0.5, dt=0.1, method="rk4")
    assert traj.status == "completed" and "inner_failure" not in traj.stats


def test_time_dependent_parameters(generator):
    mu = Empirical(torch.randn(20, 2, generator=generator, dtype=F64))
    field = Sinkhorn(
        lambda t: torch.tensor([[t, 0.0], [0.0, -t]], dtype=F64),
        torch.eye(2, dtype=F64),
        torch.eye(2, dtype=F64),
        scale=1.0,
    )
    at_zero = field.velocity(mu, t=0.0)
    # A(0) = 0: a uniform coupling, every token moves to the mean.
    torch.testing.assert_close(at_zero, mu.mean().expand(20, 2), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(field.velocity(mu, t=1.0), at_zero)


# ---------------------------------------------------------------------- Gaussian closure


def test_closure_matches_the_forms_of_math_md(generator):
    # Our slope SA (no Σ^{-1/2}) against MATH.md §3: G = 2ΣAR(I + D)⁻¹R⁻¹ with D on AᵀΣA,
    # Σ̇ = 2VΣAR(I + D)⁻¹R + transpose and the code form VA^{-T}Σ⁻¹CΣ + transpose,
    # C = ½(RDR⁻¹ − I); and S solves S + SAΣAᵀS = Σ. All rounding-level (1e-12).
    d = 3
    cov = random_spd(d, generator)
    A = torch.randn(d, d, generator=generator, dtype=F64)
    V = torch.randn(d, d, generator=generator, dtype=F64)
    eye = torch.eye(d, dtype=F64)
    R = sqrtm_psd(cov)
    D = sqrtm_psd(eye + 4 * R @ A.T @ cov @ A @ R)
    G = 2 * cov @ A @ R @ torch.linalg.inv(eye + D) @ torch.linalg.inv(R)
    slope = conditional_slope(cov, A)
    torch.testing.assert_close(slope, G, rtol=1e-12, atol=1e-12)
    S = slope @ torch.linalg.inv(A)
    torch.testing.assert_close(S + S @ A @ cov @ A.T @ S, cov, rtol=1e-12, atol=1e-12)
    mean = torch.randn(d, generator=generator, dtype=F64)
    dmean, dcov = _field(A, V).gaussian_rhs(0.0, mean, cov)
    X = 2 * V @ cov @ A @ R @ torch.linalg.inv(eye + D) @ R
    torch.testing.assert_close(dcov, X + X.T, rtol=1e-12, atol=1e-12)
    C = 0.5 * (R @ D @ torch.linalg.inv(R) - eye)
    Y = V @ torch.linalg.inv(A.T) @ torch.linalg.inv(cov) @ C @ cov
    torch.testing.assert_close(dcov, Y + Y.T, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(dmean, V @ mean, rtol=1e-13, atol=1e-13)  # α̇ = Vα


def test_eps_rescales_the_interaction(generator):
    cov = random_spd(2, generator)
    mean = torch.randn(2, generator=generator, dtype=F64)
    A = torch.randn(2, 2, generator=generator, dtype=F64)
    V = torch.randn(2, 2, generator=generator, dtype=F64)
    slow = _field(A, V, eps=2.5).gaussian_rhs(0.0, mean, cov)
    fast = _field(A / 2.5, V).gaussian_rhs(0.0, mean, cov)
    for a, b in zip(slow, fast, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def _G(w):
    return math.asinh(w) - (math.sqrt(1 + w * w) + 1) / w


@pytest.mark.parametrize(
    ("v", "a", "s0", "s2"),
    [(1.0, 0.7, 0.3, 1.1431259), (1.0, -0.7, 2.0, 0.3648057), (-0.5, 0.9, 1.5, 0.5156463)],
)
def test_one_dimensional_closed_form(v, a, s0, s2):
    # MATH.md §4.7: ṡ = (v/a)(√(1 + 4a²s²) − 1), G(w(t)) − G(w0) = 2v·sign(a)·t, w = 2|a|s.
    # RK4 with dt = 0.01 is accurate to ~1e-9 here; the quoted values have 7 decimals, so
    # 1e-7 is their rounding plus margin.
    field = _field(torch.tensor([[a]], dtype=F64), torch.tensor([[v]], dtype=F64))
    g0 = Gaussian(torch.tensor([0.4], dtype=F64), torch.tensor([[s0]], dtype=F64))
    traj = integrate(field, g0, 2.0, dt=0.01, method="rk4")
    s = float(traj.final.cov()[0, 0])
    assert traj.status == "completed"
    assert s == pytest.approx(s2, abs=1e-7)
    assert _G(2 * abs(a) * s) - _G(2 * abs(a) * s0) == pytest.approx(
        2 * v * math.copysign(1, a) * 2.0, abs=1e-7
    )
    assert float(traj.final.mean()[0]) == pytest.approx(0.4 * math.exp(2 * v), rel=1e-9)


def test_no_blow_up_where_softmax_blows_up(generator):
    # V = I, A ≻ 0: softmax blows up at t* = 1/λ_max(Σ0^{1/2}(A + Aᵀ)Σ0^{1/2}) (MATH.md §4.2);
    # Sinkhorn from the same start is finite (growth at most exponential) at 2t*.
    cov0 = random_spd(2, generator)
    A = random_spd(2, generator)
    R = sqrtm_psd(cov0)
    t_star = 1 / float(torch.linalg.eigvalsh(R @ (A + A.T) @ R)[-1])
    g0 = Gaussian(torch.zeros(2, dtype=F64), cov0)
    eye = torch.eye(2, dtype=F64)
    softmax = integrate(Softmax.from_interaction(A, eye), g0, 2 * t_star, method="dopri5")
    assert softmax.status == "blow_up" and float(softmax.event_time) < 1.01 * t_star
    sinkhorn = integrate(_field(A, eye), g0, 2 * t_star, method="dopri5")
    assert sinkhorn.status == "completed"
    # SAΣAᵀS ⪯ Σ bounds the slope, so λ_max(Σ) grows at most like e^{2‖V‖t} (‖V‖ = 1).
    top = torch.linalg.eigvalsh(torch.stack([sinkhorn.final.cov(), cov0]))[:, -1]
    assert math.isfinite(float(top[0])) and float(top[0] / top[1]) <= math.exp(2 * 2 * t_star)


def test_singular_covariance_is_the_limit_of_regular_ones(generator):
    # Σ of rank 1 in d = 2: the closure needs no Σ^{-1/2}; it is continuous at the boundary
    # of the PSD cone (Σ + δI, δ = 1e-9: first-order change ~ 1e-9·‖∂/∂Σ‖, allow 1e-6).
    u = torch.tensor([[0.6], [0.8]], dtype=F64)
    cov = 1.5 * u @ u.T
    A = torch.tensor([[0.3, -0.7], [0.5, 0.2]], dtype=F64)
    V = torch.tensor([[1.0, 0.4], [0.0, 0.6]], dtype=F64)
    mean = torch.tensor([0.1, -0.2], dtype=F64)
    field = _field(A, V)
    singular = field.gaussian_rhs(0.0, mean, cov)
    regular = field.gaussian_rhs(0.0, mean, cov + 1e-9 * torch.eye(2, dtype=F64))
    for a, b in zip(singular, regular, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # On the support the slope is the 1-D problem's: E[y|x] − α = g·(x − α) along u with
    # g = 2sa/(1 + √(1 + 4a²s²)), a = uᵀAu, s = 1.5 (the reduced problem).
    a, s = float(u.T @ A @ u), 1.5
    g = 2 * s * a / (1 + math.sqrt(1 + 4 * a * a * s * s))
    torch.testing.assert_close(conditional_slope(cov, A) @ u, g * u, rtol=1e-12, atol=1e-12)


def test_closure_gradients_at_repeated_eigenvalues():
    # Σ = I has a repeated eigenvalue, where autograd through eigh gives NaN; our square
    # root's backward does not. Central differences in one entry of A (h = 1e-6: error ~1e-10).
    A = torch.tensor([[0.4, -0.2], [0.3, 0.1]], dtype=F64, requires_grad=True)
    cov = torch.eye(2, dtype=F64, requires_grad=True)
    mean = torch.tensor([0.3, 0.1], dtype=F64)

    def loss(A_, cov_):
        return _field(A_, torch.eye(2, dtype=F64)).gaussian_rhs(0.0, mean, cov_)[1].square().sum()

    grad_A, grad_cov = torch.autograd.grad(loss(A, cov), (A, cov))
    assert torch.isfinite(grad_A).all() and torch.isfinite(grad_cov).all()
    bump = torch.zeros(2, 2, dtype=F64)
    bump[0, 1] = 1e-6
    with torch.no_grad():
        fd_A = (loss(A + bump, cov) - loss(A - bump, cov)) / 2e-6
        sym = 0.5 * (bump + bump.T)
        fd_cov = (loss(A, cov + sym) - loss(A, cov - sym)) / 2e-6
    assert float(grad_A[0, 1]) == pytest.approx(float(fd_A), rel=1e-6)
    assert float((grad_cov * sym).sum() / 1e-6) == pytest.approx(float(fd_cov), rel=1e-6)


def test_self_cost_of_particles_approaches_the_gaussian_closed_form(generator):
    # OT_ε(μ, μ) = ε(−αᵀ(A/ε)α − ½tr(D − I) + ½ log det((I + D)/2)) against the dual value of
    # particle Sinkhorn on 3000 samples (plug-in estimate: |error| ≤ 0.009 over 5 seeds,
    # ≈ 0.004 typical; allow 0.025).
    g = Gaussian(
        torch.tensor([0.3, -0.4], dtype=F64), torch.tensor([[0.8, 0.2], [0.2, 0.5]], dtype=F64)
    )
    A = torch.tensor([[0.5, 0.2], [-0.3, -0.4]], dtype=F64)
    field = _field(A, torch.eye(2, dtype=F64), eps=0.8, tol=1e-9)
    exact = field.self_cost(g)
    cloud = Empirical.from_gaussian(g, 3000, generator=generator)
    info = InnerSolves()
    estimate = field.self_cost(cloud, info=info)
    assert info.last.converged
    assert float(estimate) == pytest.approx(float(exact), abs=0.025)
    # 1-D check of the formula itself: a = 0 gives OT = 0 (independent coupling, KL = 0).
    zero = _field(torch.zeros(1, 1, dtype=F64), torch.eye(1, dtype=F64))
    unit = Gaussian(torch.ones(1, dtype=F64), torch.eye(1, dtype=F64))
    assert float(zero.self_cost(unit)) == 0.0


# ---------------------------------------------------------------------- mean field


def _mean_field_case(d: int, seed: int, contracting: bool):
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(d, d, generator=gen, dtype=F64)
    cov0 = 0.7 * G @ G.T / torch.linalg.eigvalsh(G @ G.T)[-1] + 0.3 * torch.eye(d, dtype=F64)
    mean0 = 0.5 * torch.randn(d, generator=gen, dtype=F64)
    A = 0.8 * torch.randn(d, d, generator=gen, dtype=F64) / d**0.5
    if contracting:  # A + Aᵀ ≺ 0 keeps the kernel flat: few Sinkhorn iterations
        A = A - (torch.linalg.eigvalsh(A + A.T)[-1] / 2 + 0.3) * torch.eye(d, dtype=F64)
    V = torch.eye(d, dtype=F64) + 0.3 * torch.randn(d, d, generator=gen, dtype=F64) / d**0.5
    # tol = 1e-4: the velocity error it leaves (~1e-4 relative) is far below the tolerances.
    return _field(A, V, tol=1e-4), Gaussian(mean0, cov0), gen


def _mean_field_errors(d, seed, contracting, n):
    field, g0, gen = _mean_field_case(d, seed, contracting)
    exact = integrate(field, g0, 1.0, dt=0.01, method="rk4").final
    cloud = Empirical.from_gaussian(g0, n, generator=gen).to(dtype=torch.float32)
    traj = integrate(
        field, cloud, 1.0, dt=0.5, method="rk4"
    )  # RK4, 2 steps: ODE error < 1e-2 (checked)
    assert traj.status == "completed"
    mean, cov = traj.final.mean().double(), traj.final.cov().double()
    mean_error = (mean - exact.mean()).norm() / (1 + exact.mean().norm())
    cov_error = (cov - exact.cov()).norm() / exact.cov().norm()
    return float(mean_error), float(cov_error)


@pytest.mark.parametrize("d", [2, 5])
def test_mean_field_particles_match_gaussian_ode_small(d):
    # 3000 float32 particles: the t = 0 moment estimates carry a relative error ≈ √(2/n) ≈
    # 0.026 and RK4 (2 steps) adds < 1e-2; over 10 draws the errors at t = 1 stayed ≤ 0.044
    # (cov) and ≤ 0.029 (mean): allow 0.08.
    mean_error, cov_error = _mean_field_errors(d, 20 + d, contracting=True, n=3000)
    assert mean_error < 0.08 and cov_error < 0.08


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 5])
def test_mean_field_particles_match_gaussian_ode(d):
    # 20,000 float32 particles, a general (expanding) A: moment errors ≈ √(2/n) ≈ 0.01 at
    # t = 0, amplified ≤ 2× by these flows, plus RK4 (2 steps) < 1e-2: allow 0.05 (as for
    # softmax). Measured: d = 2: mean 0.008, cov 0.016. Minutes on 2 cores (~100 Sinkhorn
    # iterations of 20,000² pairs per step).
    mean_error, cov_error = _mean_field_errors(d, 10 + d, contracting=False, n=20_000)
    assert mean_error < 0.05 and cov_error < 0.05


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf])
def test_eps_must_be_positive(eps):
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        _field(torch.eye(2), torch.eye(2), eps=eps)


def test_iteration_settings_are_checked():
    with pytest.raises(ValueError, match="iters must be an integer >= 1"):
        _field(torch.eye(2), torch.eye(2), iters=0)
    with pytest.raises(ValueError, match="iters must be an integer >= 1"):
        _field(torch.eye(2), torch.eye(2), iters=2.5)
    with pytest.raises(ValueError, match="pass iters too"):
        _field(torch.eye(2), torch.eye(2), tol=None)
    with pytest.raises(ValueError, match="tol must be finite and > 0"):
        _field(torch.eye(2), torch.eye(2), tol=0.0)


def test_without_the_flash_kernel_sdpa_raises_and_auto_falls_back(monkeypatch, generator):
    # A torch without its internal CPU flash op (or a non-CPU device): "sdpa" cannot compute
    # log-sum-exp reductions; "auto" then iterates on "chunked".
    import tpde._engines.torch_engines as te

    monkeypatch.setattr(te, "_flash_cpu", lambda: None)
    mu = Empirical(torch.randn(300, 2, generator=generator, dtype=F64))
    field = _field(-0.3 * torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    with pytest.raises(ValueError, match="CPU flash kernel, which is not available"):
        field.velocity(mu, engine="sdpa")
    torch.testing.assert_close(field.velocity(mu), field.velocity(mu, engine="dense"))
