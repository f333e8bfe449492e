"""CircleDensity: validation, exact moments and distribution function, sampling (float64)."""

import math

import pytest
import torch
from scipy.special import ive

from tpde.measures import CircleDensity

TWO_PI = 2 * math.pi


def von_mises(M, kappa, centre, offset=0.0):
    theta = offset + torch.arange(M, dtype=torch.float64) * TWO_PI / M
    return CircleDensity(torch.exp(kappa * torch.cos(theta - centre)), offset=offset)


def test_normalised_to_mass_one():
    rho = CircleDensity(3 * torch.ones(16, dtype=torch.float64))
    assert float(rho.mass()) == pytest.approx(1.0, rel=1e-15)
    assert torch.allclose(rho.density, torch.full((16,), 1 / TWO_PI, dtype=torch.float64))


def test_von_mises_moments_exact():
    """Mean (I_1/I_0)(cos c, sin c); E[cos 2(θ − c)] = I_2/I_0 (the trapezoidal rule is exact
    up to aliasing of modes ≥ M, e^{−β}I_M(β) ≈ 0 here)."""
    kappa, centre = 3.0, 0.7
    rho = von_mises(64, kappa, centre, offset=0.1)
    r1, r2 = ive(1, kappa) / ive(0, kappa), ive(2, kappa) / ive(0, kappa)
    mean = torch.tensor([math.cos(centre), math.sin(centre)], dtype=torch.float64) * r1
    assert torch.allclose(rho.mean(), mean, rtol=0, atol=1e-14)
    u = torch.tensor([math.cos(centre), math.sin(centre)], dtype=torch.float64)
    v = torch.tensor([-math.sin(centre), math.cos(centre)], dtype=torch.float64)
    second = (1 + r2) / 2 * torch.outer(u, u) + (1 - r2) / 2 * torch.outer(v, v)
    assert torch.allclose(rho.cov(), second - torch.outer(mean, mean), rtol=0, atol=1e-14)


def test_cdf_exact_for_a_trigonometric_density():
    """ρ = (1 + a cos θ + b sin 2θ)/2π: F(θ) = (θ + a sin θ + b(1 − cos 2θ)/2)/2π from 0."""
    a, b, M = 0.5, 0.3, 16
    theta = torch.arange(M + 1, dtype=torch.float64) * TWO_PI / M
    rho = CircleDensity(1 + a * torch.cos(theta[:-1]) + b * torch.sin(2 * theta[:-1]))
    exact = (theta + a * torch.sin(theta) + b * (1 - torch.cos(2 * theta)) / 2) / TWO_PI
    assert torch.allclose(rho.cdf(), exact, rtol=0, atol=1e-15)


def test_refined_interpolant_is_the_same_function():
    rho = von_mises(32, 2.0, 1.0)
    fine = rho.refined(4)
    assert torch.allclose(fine.density[::4], rho.density, rtol=0, atol=1e-14)
    assert torch.allclose(fine.cdf()[::4], rho.cdf(), rtol=0, atol=1e-14)


def test_sample_mean_within_monte_carlo_error():
    rho = von_mises(128, 2.0, -1.0)
    g = torch.Generator().manual_seed(0)
    x = rho.sample(100_000, generator=g)
    assert torch.allclose(x.norm(dim=-1), torch.ones(100_000, dtype=torch.float64))
    assert float((x.mean(0) - rho.mean()).norm()) < 5 / math.sqrt(100_000)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (torch.tensor([1.0, -0.5] + [1.0] * 6), "nonnegative; received -0.5 at index 1"),
        (torch.tensor([1.0, float("nan")] + [1.0] * 6), "finite; received 1 non-finite"),
        (torch.zeros(8), "zero mass"),
        (torch.ones(4), "at least 8 grid points"),
        (torch.ones(4, 4), r"shape \(M,\)"),
    ],
)
def test_bad_densities_refused(values, message):
    with pytest.raises(ValueError, match=message):
        CircleDensity(values)
