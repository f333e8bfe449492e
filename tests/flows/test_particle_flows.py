"""Particle flows: mean-field agreement with the Gaussian ODE, events, invariances."""

import pytest
import torch

from tpde.fields import Softmax
from tpde.flows import BlowUp, integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _case(d: int, expanding: bool, seed: int):
    """A Gaussian and a softmax field; expanding cases stop at half the blow-up time."""
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(d, d, generator=gen, dtype=F64)
    cov0 = 0.7 * G @ G.T / torch.linalg.eigvalsh(G @ G.T)[-1] + 0.3 * torch.eye(d, dtype=F64)
    mean0 = 0.5 * torch.randn(d, generator=gen, dtype=F64)
    B = torch.randn(d, d, generator=gen, dtype=F64)
    P = B @ B.T / torch.linalg.eigvalsh(B @ B.T)[-1]
    if expanding:  # V = I, A ≻ 0: blow-up at t* = 1/λ_max(Σ0^{1/2}(A + Aᵀ)Σ0^{1/2})
        A, V = 0.6 * P, torch.eye(d, dtype=F64)
        root = torch.linalg.cholesky(cov0)
        t1 = 0.5 / float(torch.linalg.eigvalsh(root.T @ (A + A.T) @ root)[-1])
    else:  # A ≺ 0 plus a small asymmetric part, V near I
        A = -0.6 * P + 0.2 * torch.randn(d, d, generator=gen, dtype=F64) / d**0.5
        V = torch.eye(d, dtype=F64) + 0.3 * torch.randn(d, d, generator=gen, dtype=F64) / d**0.5
        t1 = 1.0
    return Softmax.from_interaction(A, V), Gaussian(mean0, cov0), t1, gen


@pytest.mark.parametrize("expanding", [False, True], ids=["contracting", "expanding"])
@pytest.mark.parametrize("d", [1, 2, 5])
def test_mean_field_particles_match_gaussian_ode(d, expanding):
    # 20,000 particles (float32, SDPA) against the float64 moment ODE at t1. The t = 0
    # moment estimates already carry a relative error ≈ 0.01 (1/√n scale); we allow 0.05,
    # about five such standard errors. RK4 with dt = t1/2 adds < 1e-3 (checked at dt/5).
    field, g0, t1, gen = _case(d, expanding, seed=10 + d)
    exact = integrate(field, g0, t1, dt=t1 / 100, method="rk4").final
    cloud = Empirical.from_gaussian(g0, 20_000, generator=gen).to(dtype=torch.float32)
    traj = integrate(field, cloud, t1, dt=t1 / 2, method="rk4")
    assert traj.status == "completed"
    mean, cov = traj.final.mean().double(), traj.final.cov().double()
    mean_error = (mean - exact.mean()).norm() / (1 + exact.mean().norm())
    cov_error = (cov - exact.cov()).norm() / exact.cov().norm()
    assert float(mean_error) < 0.05 and float(cov_error) < 0.05


def test_particle_blow_up_threshold_stops_the_run():
    field = Softmax.from_interaction(
        torch.tensor([[2.0]], dtype=F64), torch.tensor([[1.0]], dtype=F64)
    )
    cloud = Empirical(torch.linspace(-1, 1, 50, dtype=F64)[:, None])
    traj = integrate(field, cloud, 50.0, dt=0.05, events=(BlowUp(threshold=1e3),), method="rk4")
    assert traj.status == "blow_up" and float(traj.event_time) < 50
    spread = ((traj.final.points - traj.final.mean()) ** 2).sum(-1).max()
    assert float(spread) > 1e3 and torch.isfinite(traj.final.points).all()


def test_permuting_particles_permutes_the_flow(generator):
    field = Softmax(
        torch.randn(2, 3, generator=generator, dtype=F64),
        torch.randn(2, 3, generator=generator, dtype=F64),
        torch.randn(3, 3, generator=generator, dtype=F64),
    )
    points = torch.randn(30, 3, generator=generator, dtype=F64)
    weights = torch.rand(30, generator=generator, dtype=F64)
    weights = weights / weights.sum()
    perm = torch.randperm(30, generator=generator)
    a = integrate(field, Empirical(points, weights), 0.5, dt=0.05, method="rk4").final.points
    b = integrate(
        field, Empirical(points[perm], weights[perm]), 0.5, dt=0.05, method="rk4"
    ).final.points
    torch.testing.assert_close(a[perm], b, rtol=1e-12, atol=1e-12)


def test_particle_flow_is_differentiable_in_parameters(generator):
    A = torch.tensor([[-0.3, 0.1], [0.0, -0.2]], dtype=F64, requires_grad=True)
    field = Softmax.from_interaction(A, torch.eye(2, dtype=F64))
    cloud = Empirical(torch.randn(20, 2, generator=generator, dtype=F64))
    loss = integrate(field, cloud, 0.3, dt=0.1, method="rk4").final.cov().trace()
    (grad,) = torch.autograd.grad(loss, A)
    eps, bump = 1e-6, torch.zeros(2, 2, dtype=F64)
    bump[0, 0] = 1.0
    shifted = Softmax.from_interaction(A.detach() + eps * bump, torch.eye(2, dtype=F64))
    fd = (
        integrate(shifted, cloud, 0.3, dt=0.1, method="rk4").final.cov().trace() - loss.detach()
    ) / eps
    assert float(grad[0, 0]) == pytest.approx(float(fd), rel=1e-4)  # forward difference, O(eps)


def test_batched_parameters_are_refused_for_particles():
    field = Softmax.from_interaction(torch.zeros(2, 1, 1), torch.eye(1))
    with pytest.raises(ValueError, match="unbatched field parameters"):
        integrate(field, Empirical(torch.zeros(3, 1)), 1.0)
