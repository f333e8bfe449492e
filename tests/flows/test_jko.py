"""JKO steps on particles and Gaussians: closed forms, convergence to the flow, agreement."""

import math

import numpy as np
import pytest
import torch

from tpde.fields import GradientFlowField, NotAGradientFlow, PotentialEnergy, Sinkhorn, Softmax
from tpde.flows import integrate, jko_flow, jko_step
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics import bures_wasserstein, twisted_w2

F64 = torch.float64
EYE2 = torch.eye(2, dtype=F64)
TAUS = (0.1, 0.05, 0.025, 0.0125)  # the steps
P = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=F64)  # SPD quadratic potential
B = torch.tensor([0.3, -0.2], dtype=F64)
M = torch.tensor([[1.0, 0.3], [0.3, 0.6]], dtype=F64)  # SPD mobility
A_INDEF = torch.tensor([[0.6, 0.2], [0.2, -0.4]], dtype=F64)  # symmetric, indefinite


def _slopes(taus, errors):
    """(least-squares log-log slope, consecutive slopes)."""
    logs = np.log(np.asarray(taus)), np.log(np.asarray(errors))
    return np.polyfit(*logs, 1)[0], np.diff(logs[1]) / np.diff(logs[0])


def _softmax_descent():
    """V = I, A ≺ 0 (non-diagonal): M = A⁻¹ ≺ 0, s = −1, the PDE descends G = E."""
    return Softmax.from_interaction(-0.5 * torch.tensor([[1.0, 0.3], [0.3, 0.8]], dtype=F64), EYE2)


def _sinkhorn(mobility, **kwargs):
    return Sinkhorn(A_INDEF, EYE2, mobility @ A_INDEF, scale=1.0, **kwargs)


def _g0():
    return Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))


# ----------------------------------------------------------------------------- closed forms


def test_particle_step_of_a_quadratic_potential_is_exact(generator):
    # G = Σ w_i U(y_i), U = ½yᵀPy + bᵀy: the W2 step solves (y − x)/τ = −(Py + b) particle by
    # particle, y = (I + τP)⁻¹(x − τb); with mobility M, y = (I + τMP)⁻¹(x − τMb). The inner
    # solve stops at relative gradient 1e-10, so 1e-9 on y.
    mu = Empirical(torch.randn(30, 2, generator=generator, dtype=F64))
    energy, tau = PotentialEnergy.quadratic(P, B), 0.3
    step = jko_step(mu, energy, tau, "w2", tol=1e-10)
    exact = torch.linalg.solve(EYE2 + tau * P, (mu.points - tau * B).T).T
    assert step.converged and step.message == "converged"
    torch.testing.assert_close(step.measure.points, exact, rtol=1e-9, atol=1e-10)
    distance = float((mu.weights @ ((exact - mu.points) ** 2).sum(-1)).sqrt())
    assert step.distance == pytest.approx(distance, rel=1e-8)
    assert step.energy == pytest.approx(float(energy(Empirical(exact))), rel=1e-12)
    twisted = jko_step(mu, energy, tau, "twisted", mobility=M, tol=1e-10)
    exact = torch.linalg.solve(EYE2 + tau * M @ P, (mu.points - tau * B @ M).T).T
    torch.testing.assert_close(twisted.measure.points, exact, rtol=1e-9, atol=1e-10)


def test_gaussian_step_of_a_quadratic_potential_is_exact():
    # The particle maps above are linear, so on Gaussians the step pushes N(m, Σ) by them:
    # N(T(m − τ b'), TΣTᵀ). "twisted-bures" with mobility M is the same push with T =
    # (I + τMP)⁻¹ (symmetric in the whitened coordinates x ↦ M^{-1/2}x, hence a Monge map).
    g, energy, tau = _g0(), PotentialEnergy.quadratic(P, B), 0.3
    for geometry, mobility in (("bures", None), ("twisted-bures", M)):
        Mob = EYE2 if mobility is None else mobility
        T = torch.linalg.inv(EYE2 + tau * Mob @ P)
        step = jko_step(g, energy, tau, geometry, mobility=mobility, tol=1e-10)
        assert step.converged
        torch.testing.assert_close(step.measure.mean(), T @ (g.mean() - tau * Mob @ B))
        torch.testing.assert_close(step.measure.cov(), T @ g.cov() @ T.T, rtol=1e-9, atol=1e-10)


def test_reported_distance_is_the_metric_of_the_geometry(generator):
    # The whitened unknown gives d² = τ|ζ|² exactly: checked against tpde.metrics
    # (twisted_w2 with the identity coupling and reference μ_k for softmax particles, the
    # Bures closed forms for Gaussians).
    field = _softmax_descent()
    mu = Empirical(torch.randn(25, 2, generator=generator, dtype=F64))
    step = jko_step(mu, field, 0.2, "twisted")
    structure = field.gradient_structure()
    expected = twisted_w2(
        mu, step.measure, M=structure.M, A=structure.A, reference=mu, coupling="identity"
    )
    assert step.distance == pytest.approx(float(expected), rel=1e-10)
    g = _g0()
    step = jko_step(g, _sinkhorn(EYE2), 0.2, "bures")
    assert step.distance == pytest.approx(float(bures_wasserstein(g, step.measure)), rel=1e-8)
    step = jko_step(g, _sinkhorn(M), 0.2, "twisted-bures")
    assert step.distance == pytest.approx(float(twisted_w2(g, step.measure, M=M)), rel=1e-8)


# ----------------------------------------------------------------------------- τ → 0


def _check_convergence(errors, trajectories):
    # Log-log slope over τ ∈ {0.1, …, 0.0125}: measured 0.970 (particles, consecutive 0.95,
    # 0.97, 0.99) and 1.026–1.029 (Gaussians, consecutive 1.05, 1.02, 1.01); we require
    # 0.9–1.1 overall and the last consecutive slope in 0.95–1.05 (asymptotic regime).
    slope, consecutive = _slopes(TAUS, errors)
    assert 0.9 < slope < 1.1, (errors, slope)
    assert 0.95 < consecutive[-1] < 1.05, (errors, consecutive)
    for traj in trajectories:  # energy monotone along the iterates (to rounding)
        assert traj.status == "completed"
        energy = traj.stats["energy"]
        assert (energy.diff() <= 1e-12 * energy.abs().max()).all()
        assert max(traj.stats["grad_norm"]) <= 1e-6


@pytest.mark.parametrize("geometry", ["w2", "twisted"])
def test_particle_jko_converges_to_the_flow_at_order_one(generator, geometry):
    # "w2": the W2 gradient flow of G = E (GradientFlowField); "twisted": the softmax PDE
    # itself. Reference: RK4 with dt = 0.005 (error ~1e-10, far below the JKO's 1e-3).
    field = _softmax_descent()
    mu = Empirical(torch.randn(32, 2, generator=generator, dtype=F64))
    reference = GradientFlowField(field) if geometry == "w2" else field
    target = integrate(reference, mu, 1.0, dt=0.005, method="rk4").final.points
    errors, trajectories = [], []
    for tau in TAUS:
        traj = jko_flow(mu, field, tau, 1.0, geometry)
        errors.append(float(((traj.final.points - target) ** 2).sum(-1).mean().sqrt()))
        trajectories.append(traj)
    _check_convergence(errors, trajectories)


@pytest.mark.parametrize(("geometry", "mobility"), [("bures", EYE2), ("twisted-bures", M)])
def test_gaussian_jko_converges_to_the_sinkhorn_ode_at_order_one(geometry, mobility):
    # Sinkhorn attention with A symmetric and V = MA is the gradient flow of F in the metric
    # of mobility M (M = I: Bures): its Gaussian ODE is the τ → 0 limit. Error: Bures
    # distance at T = 1 to the RK4 solution (dt = 0.001).
    field = _sinkhorn(mobility)
    target = integrate(field, _g0(), 1.0, dt=0.001, method="rk4").final
    errors, trajectories = [], []
    for tau in TAUS:
        traj = jko_flow(_g0(), field, tau, 1.0, geometry)
        errors.append(float(bures_wasserstein(traj.final, target)))
        trajectories.append(traj)
    _check_convergence(errors, trajectories)


def test_twisted_particles_agree_with_twisted_bures_gaussians():
    # The pair that corresponds: Sinkhorn energy, particles under the M-twisted W2 (Z ≡ 1,
    # "twisted" for a Sinkhorn field) vs the Gaussian "twisted-bures" JKO, same τ. The
    # particles are a moment-matched sample of the Gaussian (exact mean and covariance), so
    # what remains is the mean-field error of a non-Gaussian sample: measured Bures distance
    # between the particles' moments and the Gaussian 6e-4–8e-4 for n = 250–1000; we allow
    # 5e-3. The mean follows α̇ = Vα on both sides (the coupling's marginal), to 1e-8.
    field = _sinkhorn(M, tol=1e-11)
    g0, n, tau, t1 = _g0(), 250, 0.05, 0.5
    z = torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    z = z - z.mean(0)
    z = z @ torch.linalg.inv(torch.linalg.cholesky(z.T @ z / n)).T
    particles = Empirical(g0.mean() + z @ torch.linalg.cholesky(g0.cov()).T)
    gauss = jko_flow(g0, field, tau, t1, "twisted-bures").final
    cloud = jko_flow(particles, field, tau, t1, "twisted").final
    moments = Gaussian(cloud.mean(), cloud.cov())
    assert float(bures_wasserstein(moments, gauss)) < 5e-3
    torch.testing.assert_close(cloud.mean(), gauss.mean(), rtol=0, atol=1e-8)


def test_particle_steps_are_permutation_equivariant(generator):
    # Relabelling the particles relabels the step (weights included); same inner tolerance.
    points = torch.randn(20, 2, generator=generator, dtype=F64)
    weights = torch.rand(20, generator=generator, dtype=F64) + 0.5
    mu = Empirical(points, weights / weights.sum())
    perm = torch.randperm(20, generator=generator)
    shuffled = Empirical(points[perm], mu.weights[perm])
    for geometry in ("w2", "twisted"):
        step = jko_step(mu, _softmax_descent(), 0.2, geometry, tol=1e-12)
        other = jko_step(shuffled, _softmax_descent(), 0.2, geometry, tol=1e-12)
        torch.testing.assert_close(other.measure.points, step.measure.points[perm])


# ----------------------------------------------------------------------------- trajectory


def test_flow_times_stats_and_a_short_last_step(generator):
    mu = Empirical(torch.randn(10, 2, generator=generator, dtype=F64))
    traj = jko_flow(mu, PotentialEnergy.quadratic(P), 0.1, 0.25)
    torch.testing.assert_close(traj.times, torch.tensor([0.0, 0.1, 0.2, 0.25], dtype=F64))
    assert traj.status == "completed" and math.isnan(float(traj.event_time))
    assert len(traj.stats["inner_iterations"]) == 3 == traj.stats["n_steps"]
    assert traj.stats["geometry"] == "w2" and traj.stats["energy"].shape == (4,)
    # Exact iterates (I + τP)⁻¹ per step, the last with τ = 0.05.
    expected = mu.points
    for tau in (0.1, 0.1, 0.05):
        expected = torch.linalg.solve(EYE2 + tau * P, expected.T).T
    torch.testing.assert_close(traj.final.points, expected, rtol=1e-6, atol=1e-7)


def test_a_failed_inner_solve_sets_the_status(generator):
    mu = Empirical(torch.randn(20, 2, generator=generator, dtype=F64))
    traj = jko_flow(mu, _softmax_descent(), 0.5, 2.0, "w2", tol=1e-15, max_iter=1)
    assert traj.status == "not_converged"
    assert float(traj.event_time) == 0.0 and len(traj.measures) == 1
    assert "max_iter" in traj.stats["failure"]
    step = jko_step(mu, _softmax_descent(), 0.5, "w2", tol=1e-15, max_iter=1)
    assert not step.converged and step.iterations == 1


# ----------------------------------------------------------------------------- bad input


def test_bad_input_raises_with_a_fix(generator):
    mu = Empirical(torch.randn(8, 2, generator=generator, dtype=F64))
    field = _softmax_descent()
    with pytest.raises(ValueError, match="tau must be finite and > 0"):
        jko_step(mu, field, 0.0)
    with pytest.raises(ValueError, match="tau must be finite and > 0"):
        jko_flow(mu, field, -0.1, 1.0)
    with pytest.raises(ValueError, match="t1 must be finite and > 0"):
        jko_flow(mu, field, 0.1, 0.0)
    with pytest.raises(ValueError, match="unknown geometry 'wasserstein'"):
        jko_step(mu, field, 0.1, "wasserstein")
    with pytest.raises(TypeError, match="steps Gaussian measures"):
        jko_step(mu, field, 0.1, "bures")
    with pytest.raises(ValueError, match="d = 3"):
        jko_step(Empirical(torch.randn(5, 3, dtype=F64)), field, 0.1, "entropic")
    indefinite = Softmax.from_interaction(torch.diag(torch.tensor([1.0, -1.0], dtype=F64)), EYE2)
    with pytest.raises(NotAGradientFlow, match="must be definite"):
        jko_step(mu, indefinite, 0.1, "twisted")
    skew = Softmax.from_interaction(torch.tensor([[0.5, 0.3], [0.0, 0.2]], dtype=F64), EYE2)
    with pytest.raises(NotAGradientFlow, match="must be symmetric"):
        jko_step(mu, skew, 0.1, "twisted")
    with pytest.raises(ValueError, match="no Z_μ weight"):
        jko_step(_g0(), field, 0.1, "twisted-bures")
    quadratic = PotentialEnergy.quadratic(P)
    with pytest.raises(ValueError, match="needs the metric's mobility"):
        jko_step(mu, quadratic, 0.1, "twisted")
    with pytest.raises(ValueError, match="sets its own mobility"):
        jko_step(mu, field, 0.1, "twisted", mobility=M)
    with pytest.raises(ValueError, match="mobility applies to the twisted"):
        jko_step(mu, quadratic, 0.1, "w2", mobility=M)
    with pytest.raises(ValueError, match="symmetric positive definite"):
        jko_step(mu, quadratic, 0.1, "twisted", mobility=-M)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        jko_step(mu, quadratic, 0.1, "twisted", mobility=torch.eye(3))
    with pytest.raises(ValueError, match="epsilon applies"):
        jko_step(mu, quadratic, 0.1, epsilon=0.1)
    with pytest.raises(ValueError, match="max_iter must be a positive int"):
        jko_step(mu, quadratic, 0.1, max_iter=0)
    zero = Empirical(mu.points, torch.tensor([0.5, 0.5, 0, 0, 0, 0, 0, 0], dtype=F64))
    with pytest.raises(ValueError, match="positive weights"):
        jko_step(zero, quadratic, 0.1)
    timed = Softmax(lambda t: -EYE2 * (1 + t), EYE2, EYE2, scale=1.0)
    with pytest.raises(ValueError, match="time-dependent"):
        jko_step(mu, timed, 0.1)
    grid = Grid.from_empirical(mu, 4, -4.0, 4.0)
    with pytest.raises(TypeError, match="steps Empirical measures"):
        jko_step(grid, field, 0.1, "w2")


def test_gaussian_bad_input(generator):
    # V = I, A = −I: G = E, finite only while ρ = ‖Σ^{1/2}AΣ^{1/2}‖ = λ_max(Σ) < 1.
    field = Softmax.from_interaction(-EYE2, EYE2)
    wide = Gaussian(torch.zeros(2, dtype=F64), 2 * EYE2)
    with pytest.raises(ValueError, match="ρ = 2"):
        jko_step(wide, field, 0.1, "bures")
    flat = Gaussian(torch.zeros(2, dtype=F64), torch.diag(torch.tensor([1.0, 0.0], dtype=F64)))
    with pytest.raises(ValueError, match="nondegenerate covariance"):
        jko_step(flat, PotentialEnergy.quadratic(P), 0.1, "bures")
    batch = Gaussian(torch.zeros(3, 2, dtype=F64), EYE2)
    with pytest.raises(ValueError, match="one Gaussian at a time"):
        jko_step(batch, PotentialEnergy.quadratic(P), 0.1, "bures")
    # A step too large for the Monge-map parametrisation is reported, not hidden.
    step = jko_step(_g0(), PotentialEnergy.quadratic(-P), 1.0, "bures", max_iter=5)
    assert not step.converged
