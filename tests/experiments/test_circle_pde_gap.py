"""The circle-pde study's gap against the PDE past its clusters (experiments/circle_pde/gap.py):
the linear prediction against the exact W1, draws from a PDE state, the departure rule."""

import math

import numpy as np
import pytest
import torch

from tpde.experiments.circle_pde.gap import (
    draw_from,
    expected_level,
    first_over,
    linear_gap,
    state_cdf,
)
from tpde.measures import CircleDensity, Empirical
from tpde.metrics import w1_circle
from tpde.theory import instability_rate

TWO_PI = 2 * math.pi


def nodes(weights):
    """Nodes at the midpoints (j + ½)2π/M with the given weights: an Empirical on S¹."""
    weights = torch.as_tensor(weights, dtype=torch.float64)
    theta = (torch.arange(len(weights), dtype=torch.float64) + 0.5) * TWO_PI / len(weights)
    return Empirical(torch.stack([theta.cos(), theta.sin()], -1), weights / weights.sum())


def test_linear_gap_at_zero_is_the_exact_w1():
    """L(0) = W1(μ_N, ρ₀) of the exact W1 (tpde.metrics.w1_circle) to the midpoint rule's
    bound 2π·2/G = 1.9e-4 (G = 2¹⁶; measured ≈ 1e-8 relative at G = 2²⁰)."""
    theta = torch.arange(512, dtype=torch.float64) * TWO_PI / 512
    rho = CircleDensity(1 + 0.3 * torch.cos(theta - 1) + 0.2 * torch.cos(3 * theta))
    cloud = Empirical(rho.sample(1000, generator=torch.Generator().manual_seed(0)))
    expected = float(w1_circle(cloud, rho))
    found = linear_gap(cloud, rho, 5.0, [0.0], grid=2**16)[0]
    assert found == pytest.approx(expected, abs=TWO_PI * 2 / 2**16)
    assert found == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_linear_gap_grows_one_mode_like_the_linearised_flow(k):
    """Nodes of weights ∝ 1 + ε cos kθ against the uniform law: the prediction at t is the
    exact W1 of the nodes with weights ∝ 1 + ε e^{λ_k t} cos kθ (ε = 1e-3, β = 5) to 1e-5
    (measured ≤ 6e-7: the M = 4096 nodes sit on edges of the G = 2¹⁶ cells, so no jump
    falls inside a cell and the midpoint rule errs only on the smooth part and the cells
    where F crosses the median; the modes M ± k that the nodes' weights also carry are
    below ε e^{λt}/M); ≈ 2εe^{λ_k t}/(πk) once that part dominates. The mode's growth
    from t = 0 to 2 moves W1 by ≥ 1.5e-4 (k = 5), far above the tolerance."""
    M, eps, beta = 4096, 1e-3, 5.0
    theta = (torch.arange(M, dtype=torch.float64) + 0.5) * TWO_PI / M
    uniform = CircleDensity(torch.ones(256, dtype=torch.float64))
    rate = float(instability_rate(k, beta))
    times = [0.0, 2.0, 5.0]
    found = linear_gap(nodes(1 + eps * torch.cos(k * theta)), uniform, beta, times, grid=2**16)
    for t, value in zip(times, found, strict=True):
        grown = nodes(1 + eps * math.exp(rate * t) * torch.cos(k * theta))
        assert value == pytest.approx(float(w1_circle(grown, uniform)), abs=1e-5)
    # The mode's own W1, ∫|ε e^{λt} sin kθ/(2πk)|dθ = 2εe^{λt}/(πk), plus the staircase's
    # (the nodes against the uniform law: h/4·… ≤ 2π/(4M) = 3.8e-4).
    assert found[-1] == pytest.approx(2 * eps * math.exp(5 * rate) / (math.pi * k), abs=4e-4)


def test_draws_from_nodes_and_from_a_density():
    """Nodes: each drawn with probability its weight (0.25, 0.75: the share of the first
    within 5 s.d. of 0.25 at n = 10⁵, s.d. 1.4e-3); a density: W1 to the draw at the
    Monte-Carlo level, W1·√n = 2π min_c∫|B − c| for a Brownian bridge B in the limit (≈ 1.1
    near uniform): within [0.1, 4] (a far wider band than its spread, ≈ 0.4)."""
    g = torch.Generator().manual_seed(1)
    two = Empirical(
        torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64),
        torch.tensor([0.25, 0.75], dtype=torch.float64),
    )
    drawn = draw_from(two, 100_000, g)
    share = float((drawn.points[:, 0] > 0.5).double().mean())
    assert drawn.points.shape == (100_000, 2) and abs(share - 0.25) < 5 * 1.4e-3
    theta = torch.arange(256, dtype=torch.float64) * TWO_PI / 256
    rho = CircleDensity(1 + 0.5 * torch.cos(theta))
    sample = draw_from(rho, 10_000, g)
    assert 0.1 < float(w1_circle(rho, sample)) * math.sqrt(10_000) < 4


def test_first_over_skips_missing_values():
    times = np.arange(5.0)
    values = np.array([1.0, np.nan, 5.0, 1.0, 9.0])
    limit = np.array([2.0, 2.0, np.nan, 2.0, 2.0])
    assert first_over(times, values, limit) == 4.0
    assert first_over(times, values, np.full(5, 10.0)) is None


def test_state_cdf_of_a_shifted_density_and_of_nodes():
    """ρ ∝ 1 + cos θ on angles from offset 0.3: F(θ) = (θ + sin θ)/2π from 0, read through
    the exact cell masses spread evenly (linear between the angles: error ≤ h²max|ρ'|/8 =
    (2π/256)²/(8·2π) = 1.2e-5); nodes: the share at or below each angle, exactly."""
    M, offset = 256, 0.3
    theta = offset + torch.arange(M, dtype=torch.float64) * TWO_PI / M
    found = state_cdf(CircleDensity(1 + torch.cos(theta), offset=offset), 1024)
    grid = np.arange(1024) * TWO_PI / 1024
    assert found == pytest.approx((grid + np.sin(grid)) / TWO_PI, abs=1.2e-5)
    two = nodes([1.0, 3.0])  # at π/2 and 3π/2
    assert state_cdf(two, 4).tolist() == [0.0, 0.25, 0.25, 1.0]


@pytest.mark.parametrize("as_nodes", [False, True])
def test_expected_level_is_the_mean_w1_to_fresh_draws(as_nodes):
    """E W1(μ, μ_n) from Brownian bridges against the mean of 100 sampled W1 at n = 10⁴
    (three clusters, ρ ∝ e^{8 cos 3θ}, as a density and as its 1024 nodes): within 4
    combined standard errors (√n·W1 has a spread ≈ 0.5: s.e. ≈ 0.04/√n of the mean)."""
    theta = torch.arange(1024, dtype=torch.float64) * TWO_PI / 1024
    rho = CircleDensity(torch.exp(8 * torch.cos(3 * theta)))
    state = nodes(rho.density.roll(-512)) if as_nodes else rho  # nodes at (j + ½)h: any ρ
    n, g = 10_000, torch.Generator().manual_seed(2)
    mean, se = expected_level(state, n, np.random.default_rng(0))
    clouds = draw_from(state, 100 * n, g).points.split(n)  # one call: 100 i.i.d. n-draws
    drawn = [float(w1_circle(state, Empirical(points))) for points in clouds]
    spread = np.std(drawn, ddof=1) / math.sqrt(len(drawn))
    assert abs(np.mean(drawn) - mean) < 4 * math.hypot(se, spread)
    assert 0.5 < mean * math.sqrt(n) < 3  # the level's scale, ≈ 1.4/√n near uniform
