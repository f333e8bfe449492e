"""Entropic JKO on grids (Peyré 2015): blur, mass, convergence to the W2 gradient flow."""

import math

import numpy as np
import pytest
import torch

from tpde.fields import GradientFlowField, PotentialEnergy, Softmax
from tpde.flows import integrate, jko_flow, jko_step
from tpde.flows.jko_grid import default_epsilon, log_gibbs
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics import bures_wasserstein

F64 = torch.float64
TAUS = (0.1, 0.05, 0.025, 0.0125)
ZERO = PotentialEnergy(lambda x: torch.zeros(x.shape[0], dtype=x.dtype))


def _slopes(taus, errors):
    logs = np.log(np.asarray(taus)), np.log(np.asarray(errors))
    return np.polyfit(*logs, 1)[0], np.diff(logs[1]) / np.diff(logs[0])


def _quantiles(grid: Grid, levels: torch.Tensor) -> torch.Tensor:
    """Quantile function of a 1-D grid's piecewise-constant density at the given levels."""
    edges = grid.edges()[0]
    cdf = torch.cat([torch.zeros(1, dtype=F64), grid.density.cumsum(0)])
    cdf = cdf / cdf[-1]
    index = torch.searchsorted(cdf, levels).clamp(1, len(edges) - 1)
    low, high = cdf[index - 1], cdf[index]
    frac = (levels - low) / (high - low).clamp_min(1e-300)
    return edges[index - 1] + frac * (edges[index] - edges[index - 1])


def _gaussian_quantiles(g: Gaussian, levels: torch.Tensor) -> torch.Tensor:
    std = float(g.cov()[0, 0]) ** 0.5
    return float(g.mean()[0]) + std * math.sqrt(2) * torch.erfinv(2 * levels - 1)


LEVELS = (torch.arange(1000, dtype=F64) + 0.5) / 1000


def test_gibbs_kernel_in_log_domain_matches_dense(generator):
    # Separable products against the dense kernel on a 2-D grid (float64 rounding).
    masses = torch.rand(7, 5, generator=generator, dtype=F64)
    grid = Grid(masses / masses.sum(), -1.0, 1.0)
    log_v = torch.randn(7, 5, generator=generator, dtype=F64)
    centres = grid.centres()
    cost = ((centres[:, None, :] - centres[None, :, :]) ** 2).sum(-1)
    dense = torch.logsumexp(-cost / 0.3 + log_v.reshape(-1), dim=-1).reshape(7, 5)
    torch.testing.assert_close(log_gibbs(log_v, grid.axes(), 0.3), dense)
    # Values spanning > 600 nats take the banded log-sum-exp route (exact to e^{−40}); an
    # empty cell (−inf) is allowed.
    log_v = 400 * torch.randn(7, 5, generator=generator, dtype=F64)
    log_v[2, 3] = -math.inf
    dense = torch.logsumexp(-cost / 0.05 + log_v.reshape(-1), dim=-1).reshape(7, 5)
    torch.testing.assert_close(log_gibbs(log_v, grid.axes(), 0.05), dense)


def test_a_step_without_energy_is_a_gaussian_blur_of_variance_eps_over_two():
    # φ = 0: μ₁ = K(p / K1), a blur of variance ε/2 per coordinate (module notes): the
    # diffusion D = ε/(4τ) of the entropic scheme. Fine grid, mass far from the boundary:
    # agreement to 1e-6 (discrete Gaussian sums, exponentially accurate once √ε ≥ 2h).
    g = Gaussian(torch.tensor([0.2, -0.1], dtype=F64), torch.tensor([[0.3, 0.1], [0.1, 0.2]]))
    grid = Grid.from_gaussian(g, (160, 160), -4.0, 4.0)
    step = jko_step(grid, ZERO, 0.1, "entropic", epsilon=0.04)
    blurred = step.measure.cov() - grid.cov()
    torch.testing.assert_close(blurred, 0.02 * torch.eye(2, dtype=F64), rtol=0, atol=1e-6)
    torch.testing.assert_close(step.measure.mean(), grid.mean(), rtol=0, atol=1e-10)
    assert step.converged and step.iterations == 1 and math.isnan(step.grad_norm)


def test_entropic_jko_of_a_quadratic_potential_converges_at_order_one():
    # U = ½x²: the W2 flow is x ↦ x e^{−t}, exact. The default ε = max(τ, 2h)² needs h ≤ τ/2
    # at the smallest τ, so 960 cells on [−3, 3]. Error: L2 distance of quantile functions
    # (the 1-D W2 between the grid's piecewise-constant density and the exact Gaussian).
    # Measured slope 0.94 (consecutive 0.94, 0.96, 0.93); we require 0.85–1.1.
    g0 = Gaussian(torch.tensor([0.5], dtype=F64), torch.tensor([[0.4]], dtype=F64))
    grid = Grid.from_gaussian(g0, 960, -3.0, 3.0)
    exact = Gaussian(g0.mean() * math.exp(-1.0), g0.cov() * math.exp(-2.0))
    target = _gaussian_quantiles(exact, LEVELS)
    errors = []
    for tau in TAUS:
        traj = jko_flow(grid, PotentialEnergy.quadratic(torch.eye(1, dtype=F64)), tau, 1.0,
                        "entropic")  # fmt: skip
        errors.append(float(((_quantiles(traj.final, LEVELS) - target) ** 2).mean().sqrt()))
        assert traj.stats["epsilon"] == pytest.approx(max(tau, 2 * 6 / 960) ** 2)
        assert traj.stats["mass_error"] < 1e-12
        energy = traj.stats["energy"]
        assert (energy.diff() <= 1e-12).all()  # monotone here (convex energy)
    slope, consecutive = _slopes(TAUS, errors)
    assert 0.85 < slope < 1.1 and (consecutive > 0.85).all(), errors


def test_entropic_jko_of_the_softmax_energy_converges_to_the_flow():
    # V = I, A = −I in d = 1 (G = E): reference = the Lagrangian W2 gradient flow of E
    # (GradientFlowField) of 1000 particles at the quantiles of the initial grid (RK4,
    # dt = 0.01; halving dt changes the result by < 1e-9). Measured slope 0.96
    # (consecutive 0.93, 0.96, 0.98); we require 0.9–1.1 and energy monotone.
    field = Softmax.from_interaction(-torch.eye(1, dtype=F64), torch.eye(1, dtype=F64))
    g0 = Gaussian(torch.tensor([0.3], dtype=F64), torch.tensor([[0.5]], dtype=F64))
    grid = Grid.from_gaussian(g0, 960, -3.0, 3.0)
    start = Empirical(_quantiles(grid, LEVELS)[:, None])
    flow = integrate(GradientFlowField(field), start, 0.5, dt=0.01, method="rk4")
    target = flow.final.points[:, 0]
    errors = []
    for tau in TAUS:
        traj = jko_flow(grid, field, tau, 0.5, "entropic")
        errors.append(float(((_quantiles(traj.final, LEVELS) - target) ** 2).mean().sqrt()))
        assert (traj.stats["energy"].diff() <= 1e-12).all()
    slope, consecutive = _slopes(TAUS, errors)
    assert 0.9 < slope < 1.1 and (consecutive > 0.9).all(), errors


def test_two_dimensional_steps_factorise_and_converge():
    # A separable potential and a product density: the 2-D step is the outer product of two
    # 1-D steps (the kernel and the tilt factorise), to rounding.
    gx = Gaussian(torch.tensor([0.3], dtype=F64), torch.tensor([[0.5]], dtype=F64))
    gy = Gaussian(torch.tensor([-0.2], dtype=F64), torch.tensor([[0.3]], dtype=F64))
    gxy = Gaussian(
        torch.tensor([0.3, -0.2], dtype=F64), torch.diag(torch.tensor([0.5, 0.3], dtype=F64))
    )
    P = torch.diag(torch.tensor([1.0, 2.0], dtype=F64))
    two = jko_flow(Grid.from_gaussian(gxy, (60, 50), -3.0, 3.0), PotentialEnergy.quadratic(P),
                   0.1, 0.3, "entropic", epsilon=0.02).final.density  # fmt: skip
    ones = [
        jko_flow(
            Grid.from_gaussian(g, n, -3.0, 3.0),
            PotentialEnergy.quadratic(p * torch.eye(1)),
            0.1,
            0.3,
            "entropic",
            epsilon=0.02,
        ).final.density
        for g, n, p in ((gx, 60, 1.0), (gy, 50, 2.0))
    ]
    torch.testing.assert_close(two, ones[0][:, None] * ones[1][None, :], rtol=1e-10, atol=1e-15)
    # A correlated Gaussian under U = ½xᵀPx stays Gaussian: exact moments at T = 0.4,
    # Bures distance of the grid's moments, τ ∈ {0.2, 0.1, 0.05} on 240² cells (h = τ_min/2):
    # consecutive slopes measured 0.92, 0.96; we require 0.85–1.1.
    g0 = Gaussian(torch.tensor([0.4, -0.3], dtype=F64), torch.tensor([[0.5, 0.2], [0.2, 0.4]]))
    grid = Grid.from_gaussian(g0, (240, 240), -3.0, 3.0)
    T = torch.linalg.matrix_exp(-0.4 * P)
    exact = Gaussian(T @ g0.mean(), T @ g0.cov() @ T)
    taus, errors = (0.2, 0.1, 0.05), []
    for tau in taus:
        final = jko_flow(grid, PotentialEnergy.quadratic(P), tau, 0.4, "entropic").final
        errors.append(float(bures_wasserstein(Gaussian(final.mean(), final.cov()), exact)))
    slope, _ = _slopes(taus, errors)
    assert 0.85 < slope < 1.1, errors


def test_grid_errors_and_status(generator):
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), torch.ones(1, 1, dtype=F64)), 40, -4.0, 4.0
    )
    with pytest.raises(ValueError, match="epsilon must be finite and > 0"):
        jko_step(grid, ZERO, 0.1, "entropic", epsilon=-1.0)
    with pytest.raises(ValueError, match="steps densities on a Grid"):
        jko_step(Gaussian(torch.zeros(1), torch.ones(1, 1)), ZERO, 0.1, "entropic")
    assert default_epsilon(grid, 0.01) == pytest.approx((2 * 0.2) ** 2)
    # An energy that overflows on the box (exp(50 x y) on [−4, 4]): not_converged, no NaN.
    field = Softmax.from_interaction(torch.tensor([[50.0]], dtype=F64), torch.eye(1, dtype=F64))
    traj = jko_flow(grid, field, 0.1, 0.5, "entropic")
    assert traj.status == "not_converged" and "not finite" in traj.stats["failure"]


@pytest.mark.slow
def test_two_dimensional_convergence_on_a_finer_grid():
    # The 2-D study one level finer than the default test: 480² cells (h = 0.0125 = τ_min/2),
    # τ ∈ {0.1, 0.05, 0.025}; the smallest step takes the banded log-sum-exp route (the tilt
    # spans > 600 nats). Measured consecutive slopes 0.96, 0.99 (~10 s on one core).
    P = torch.diag(torch.tensor([1.0, 2.0], dtype=F64))
    g0 = Gaussian(torch.tensor([0.4, -0.3], dtype=F64), torch.tensor([[0.5, 0.2], [0.2, 0.4]]))
    grid = Grid.from_gaussian(g0, (480, 480), -3.0, 3.0)
    T = torch.linalg.matrix_exp(-0.4 * P)
    exact = Gaussian(T @ g0.mean(), T @ g0.cov() @ T)
    taus, errors = (0.1, 0.05, 0.025), []
    for tau in taus:
        traj = jko_flow(grid, PotentialEnergy.quadratic(P), tau, 0.4, "entropic")
        final = traj.final
        errors.append(float(bures_wasserstein(Gaussian(final.mean(), final.cov()), exact)))
        assert traj.stats["mass_error"] < 1e-12
    slope, consecutive = _slopes(taus, errors)
    assert 0.9 < slope < 1.1 and (consecutive > 0.9).all(), errors
