"""Grid measures: construction, moments, sampling, conversions, and every rejected input."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from tests.conftest import random_spd
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics import w2

F64 = torch.float64


def _random_grid(generator, shape=(6, 5), lower=(-1.0, -2.0), upper=(2.0, 1.0)):
    density = torch.rand(*shape, generator=generator, dtype=F64)
    return Grid(density / density.sum(), lower, upper)


def test_geometry_and_moments_of_the_piecewise_constant_density(generator):
    grid = _random_grid(generator)
    assert (grid.dim, grid.shape, grid.dtype) == (2, (6, 5), F64)
    torch.testing.assert_close(grid.cell_size, torch.tensor([0.5, 0.6], dtype=F64))
    centres = grid.centres()
    assert centres.shape == (30, 2)
    torch.testing.assert_close(centres[0], torch.tensor([-0.75, -1.7], dtype=F64))
    torch.testing.assert_close(centres[1], torch.tensor([-0.75, -1.1], dtype=F64))  # row-major
    # Oracle: the moments of ρ_h = m_c/|c| by the exact integral of each uniform cell.
    w = grid.density.reshape(-1)
    mean = w @ centres
    second = (w[:, None, None] * centres[:, :, None] * centres[:, None, :]).sum(0)
    second = second + torch.diag(grid.cell_size**2 / 12)
    torch.testing.assert_close(grid.mean(), mean, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(grid.cov(), second - torch.outer(mean, mean), rtol=1e-12, atol=1e-13)


def test_sampling_follows_the_density(generator):
    grid = Grid(torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=F64), 0.0, 4.0)
    draws = grid.sample(40_000, generator=generator)
    assert draws.shape == (40_000, 1)
    # Samples are uniform inside cells: a KS test against the piecewise-linear CDF
    # (p-value threshold 1e-3, deterministic seed).
    edges = np.arange(5.0)
    cdf = np.concatenate([[0.0], np.cumsum(grid.density.numpy())])
    result = stats.kstest(draws[:, 0].numpy(), lambda x: np.interp(x, edges, cdf))
    assert result.pvalue > 1e-3
    assert not ((draws > 1) & (draws < 2)).any()  # the empty cell gets nothing


def test_to_empirical_drops_or_keeps_empty_cells_and_is_at_known_w2():
    density = torch.tensor([[0.2, 0.0], [0.5, 0.3]], dtype=F64)
    grid = Grid(density, (0.0, 0.0), (1.0, 2.0))
    dropped, kept = grid.to_empirical(), grid.to_empirical(drop_empty=False)
    assert (dropped.n, kept.n) == (3, 4)
    torch.testing.assert_close(kept.weights, density.reshape(-1))
    torch.testing.assert_close(dropped.mean(), grid.mean())
    # Same mean; the atoms lack the within-cell variance h²/12 of the density.
    torch.testing.assert_close(dropped.cov() + torch.diag(grid.cell_size**2 / 12), grid.cov())
    # W2(density, atoms) = (Σ h_k²/12)^{1/2} exactly (grid cells = Voronoi cells of the
    # centres). Check by a fine sample of the density: 4000 points, W2 error O(n^{-1/2}).
    g = torch.Generator().manual_seed(3)
    sample = Empirical(grid.sample(4000, generator=g))
    expected = math.sqrt((0.5**2 + 1.0**2) / 12)
    assert float(w2(sample, dropped)) == pytest.approx(expected, rel=0.03)


def test_to_and_dtype_moves(generator):
    grid = _random_grid(generator).to(dtype=torch.float32)
    assert grid.dtype == torch.float32 and grid.lower.dtype == torch.float32
    assert grid.to_empirical().dtype == torch.float32


@pytest.mark.parametrize("dim", [1, 2])
def test_from_gaussian_cell_averages_match_scipy(dim, generator):
    # Diagonal (and 1-D) Gaussians: exact CDF differences; compare with scipy's CDF to
    # 1e-12 absolute (rounding of erfc differences).
    mean = torch.tensor([0.3, -0.5][:dim], dtype=F64)
    var = torch.tensor([0.4, 0.9][:dim], dtype=F64)
    grid = Grid.from_gaussian(Gaussian(mean, torch.diag(var)), (7, 9)[:dim], -5.0, 5.0)
    masses = []
    for k in range(dim):
        e = np.linspace(-5, 5, (7, 9)[k] + 1)
        masses.append(np.diff(stats.norm.cdf(e, float(mean[k]), math.sqrt(float(var[k])))))
    expected = masses[0] if dim == 1 else np.outer(*masses)
    np.testing.assert_allclose(grid.density.numpy() * (1 - grid.outside_mass), expected, atol=1e-12)
    assert grid.outside_mass == pytest.approx(1 - expected.sum(), abs=1e-12)


def test_from_gaussian_correlated_matches_scipy_rectangle_probabilities():
    # Correlated 2-D: Gauss–Legendre along one axis, exact CDF along the other; compared
    # with scipy's bivariate normal CDF (its own accuracy ~1e-8) by inclusion–exclusion.
    mean = torch.tensor([0.2, -0.1], dtype=F64)
    cov = torch.tensor([[0.5, 0.35], [0.35, 0.4]], dtype=F64)
    grid = Grid.from_gaussian(Gaussian(mean, cov), (10, 8), (-3.5, -3.0), (3.5, 3.0))
    ex, ey = np.linspace(-3.5, 3.5, 11), np.linspace(-3.0, 3.0, 9)
    X, Y = np.meshgrid(ex, ey, indexing="ij")
    F = stats.multivariate_normal.cdf(
        np.stack([X, Y], -1), mean.numpy(), cov.numpy(), abseps=1e-10, releps=1e-10
    )
    expected = F[1:, 1:] - F[:-1, 1:] - F[1:, :-1] + F[:-1, :-1]
    inside = grid.density.numpy() * (1 - grid.outside_mass)
    np.testing.assert_allclose(inside, expected, atol=2e-7)
    assert grid.outside_mass == pytest.approx(1 - expected.sum(), abs=2e-6)


def test_from_gaussian_moments_converge_like_h_squared(generator):
    # Cell averages of N(α, Σ): mean exact up to the truncated tails; covariance
    # Σ + diag(h²/6) (h²/12 from averaging, h²/12 from the piecewise-constant density),
    # up to the quadrature error (checked below 1e-6).
    cov = random_spd(2, generator, floor=0.3)
    cov = 0.8 * cov / torch.linalg.eigvalsh(cov)[-1]  # σ ≤ 0.9: the box is ±6.7σ wide
    g = Gaussian(torch.tensor([0.1, 0.2], dtype=F64), cov)
    grid = Grid.from_gaussian(g, (64, 64), -6.0, 6.0)
    h = grid.cell_size
    torch.testing.assert_close(grid.mean(), g.mean(), atol=1e-7, rtol=0)
    torch.testing.assert_close(grid.cov(), cov + torch.diag(h**2 / 6), atol=1e-6, rtol=0)


def test_from_gaussian_is_differentiable():
    mean = torch.tensor([0.1, -0.2], dtype=F64, requires_grad=True)
    cov = torch.tensor([[0.5, 0.1], [0.1, 0.3]], dtype=F64, requires_grad=True)
    grid = Grid.from_gaussian(Gaussian(mean, cov), (12, 12), -3.0, 3.0)
    (grid.mean()[0]).backward()
    # d mean_x / d α_x ≈ 1 (exact up to boundary truncation).
    assert float(mean.grad[0]) == pytest.approx(1.0, abs=1e-3)


def test_from_gaussian_reports_and_warns_about_mass_outside_the_box():
    g = Gaussian(torch.tensor([0.0], dtype=F64), torch.tensor([[1.0]], dtype=F64))
    with pytest.warns(UserWarning, match="falls outside the box"):
        grid = Grid.from_gaussian(g, 20, -1.0, 1.0)
    assert grid.outside_mass == pytest.approx(2 * stats.norm.sf(1.0), rel=1e-10)
    assert float(grid.mass) == pytest.approx(1.0, abs=1e-14)  # inside mass renormalised


@pytest.mark.parametrize("assignment", ["cic", "ngp"])
def test_from_empirical_conserves_mass_and_mean(assignment, generator):
    points = 0.5 * torch.randn(500, 2, generator=generator, dtype=F64)
    weights = torch.rand(500, generator=generator, dtype=F64)
    mu = Empirical(points, weights / weights.sum())
    grid = Grid.from_empirical(mu, (16, 16), -4.0, 4.0, assignment=assignment)
    assert grid.outside_mass == pytest.approx(0.0, abs=1e-14)
    assert float(grid.mass) == pytest.approx(1.0, abs=1e-14)
    if assignment == "cic":  # linear deposit: the mean is exact (no point near the edge)
        torch.testing.assert_close(grid.mean(), mu.mean(), atol=1e-13, rtol=0)
    else:  # nearest cell: the mean moves by at most h/2 per coordinate
        assert float((grid.mean() - mu.mean()).abs().max()) <= 0.25


def test_from_empirical_histogram_counts():
    mu = Empirical(torch.tensor([[0.1], [0.2], [0.9], [1.7], [3.5]], dtype=F64))
    with pytest.warns(UserWarning, match="falls outside"):
        grid = Grid.from_empirical(mu, 2, 0.0, 2.0, assignment="ngp")
    assert grid.outside_mass == pytest.approx(0.2)
    torch.testing.assert_close(grid.density, torch.tensor([0.75, 0.25], dtype=F64))


def test_from_empirical_is_differentiable_in_the_points(generator):
    points = torch.randn(50, 1, generator=generator, dtype=F64).requires_grad_()
    grid = Grid.from_empirical(Empirical(points), 32, -5.0, 5.0)
    grid.mean()[0].backward()
    torch.testing.assert_close(points.grad, torch.full_like(points, 1 / 50))


# ---------------------------------------------------------------------------- bad input


def test_rejects_more_than_two_dimensions():
    with pytest.raises(ValueError, match=r"d = 1 or 2 only.*particles"):
        Grid(torch.full((2, 2, 2), 1 / 8), 0.0, 1.0)
    g = Gaussian(torch.zeros(3), torch.eye(3))
    with pytest.raises(ValueError, match=r"d = 1 or 2 only.*Empirical"):
        Grid.from_gaussian(g, 4, -1.0, 1.0)
    with pytest.raises(ValueError, match="d = 1 or 2 only"):
        Grid.from_empirical(Empirical(torch.zeros(4, 3)), 4, -1.0, 1.0)


@pytest.mark.parametrize(
    ("density", "match"),
    [
        (torch.tensor([0.5, -0.1, 0.6]), "nonnegative"),
        (torch.tensor([0.5, float("nan"), 0.5]), "non-finite"),
        (torch.tensor([0.5, 0.2, 0.2]), "summing to 1"),
        (torch.tensor(1.0), "0-d"),
        (torch.zeros(0, 3), "at least one cell"),
    ],
)
def test_rejects_bad_densities(density, match):
    with pytest.raises(ValueError, match=match):
        Grid(density, 0.0, 1.0)


@pytest.mark.parametrize(
    ("lower", "upper", "match"),
    [
        (1.0, 1.0, "lower < upper"),
        ((0.0, 2.0), (1.0, 1.0), "lower < upper"),
        ((0.0, 0.0, 0.0), 1.0, r"shape \(2,\)"),
        (0.0, float("inf"), "non-finite"),
    ],
)
def test_rejects_bad_boxes(lower, upper, match):
    with pytest.raises(ValueError, match=match):
        Grid(torch.full((2, 2), 0.25), lower, upper)


def test_rejects_bad_conversion_arguments():
    mu = Empirical(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="unknown assignment"):
        Grid.from_empirical(mu, 4, -1.0, 1.0, assignment="tsc")
    with pytest.raises(ValueError, match="positive int"):
        Grid.from_empirical(mu, (4, 4), -1.0, 1.0)
    with pytest.raises(TypeError, match="must be an Empirical"):
        Grid.from_empirical(Gaussian(torch.zeros(1), torch.eye(1)), 4, -1.0, 1.0)
    with pytest.raises(ValueError, match="no mass falls inside"):
        Grid.from_empirical(mu, 4, 1.0, 2.0)
    batched = Gaussian(torch.zeros(2, 1), torch.eye(1))
    with pytest.raises(ValueError, match="single Gaussian"):
        Grid.from_gaussian(batched, 4, -1.0, 1.0)
    with pytest.raises(ValueError, match="quadrature"):
        Grid.from_gaussian(Gaussian(torch.zeros(1), torch.eye(1)), 4, -1.0, 1.0, quadrature=0)
    with pytest.raises(TypeError, match="must be a Gaussian"):
        Grid.from_gaussian(mu, 4, -1.0, 1.0)
