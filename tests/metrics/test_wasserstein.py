"""Exact W2: agreement with POT, the 1-D quantile path, gradients, invariances, dispatch."""

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tpde
from tpde.measures import Empirical, Gaussian, Measure
from tpde.metrics import w2
from tpde.metrics._common import as_empirical
from tpde.metrics.wasserstein import _w2_squared_1d, emd_cost, squared_distances

F64 = torch.float64


def random_cloud(n, d, generator, shift=0.0, weighted=True):
    points = torch.randn(n, d, generator=generator, dtype=F64) + shift
    if not weighted:
        return Empirical(points)
    w = torch.rand(n, generator=generator, dtype=F64) + 0.05
    return Empirical(points, w / w.sum())


class FakeGrid(Measure):
    """Stand-in for tpde.measures.Grid: weighted cell centres through ``to_empirical``."""

    def __init__(self, centres, masses):
        self._emp = Empirical(centres, masses)

    def to_empirical(self):
        return self._emp

    dim = property(lambda self: self._emp.dim)
    dtype = property(lambda self: self._emp.dtype)
    device = property(lambda self: self._emp.device)

    def mean(self):
        return self._emp.mean()

    def cov(self):
        return self._emp.cov()

    def sample(self, n, generator=None):
        return self._emp.sample(n, generator)

    def to(self, device=None, dtype=None):
        return self


FakeGrid.__name__ = "Grid"


def pot_emd2(mu, nu):
    return ot.emd2(
        mu.weights.numpy(), nu.weights.numpy(), ot.dist(mu.points.numpy(), nu.points.numpy())
    )


@pytest.mark.parametrize("d", [2, 3, 8])
def test_equals_pot_emd2_with_weights(d, generator):
    mu, nu = random_cloud(40, d, generator), random_cloud(30, d, generator, shift=0.5)
    # Same plan, cost recomputed in torch: equal up to float64 rounding of sums of ~1e3 terms.
    assert float(w2(mu, nu)) ** 2 == pytest.approx(pot_emd2(mu, nu), rel=1e-12)


def test_large_cost_route_equals_direct_route(generator):
    # d above DIRECT_DIM takes |x|² + |y|² − 2⟨x, y⟩ on centred points.
    x = torch.randn(70, 20, generator=generator, dtype=F64) + 3.0
    y = torch.randn(65, 20, generator=generator, dtype=F64)
    direct = ((x[:, None] - y[None]) ** 2).sum(-1)
    # Cancellation on centred points of norm ~3√20: a few 1e-14 absolute.
    torch.testing.assert_close(squared_distances(x, y), direct, atol=1e-12, rtol=0)


def test_one_dimensional_path_equals_emd2_with_ties_and_zero_weights(generator):
    x = torch.tensor([[0.0], [1.0], [1.0], [3.0], [-2.0]], dtype=F64)
    a = torch.tensor([0.1, 0.0, 0.4, 0.3, 0.2], dtype=F64)
    y = torch.randn(7, 1, generator=generator, dtype=F64)
    b = torch.rand(7, generator=generator, dtype=F64)
    b = b / b.sum()
    mu, nu = Empirical(x, a), Empirical(y, b)
    assert float(w2(mu, nu)) ** 2 == pytest.approx(pot_emd2(mu, nu), rel=1e-12)
    big_mu, big_nu = random_cloud(300, 1, generator), random_cloud(200, 1, generator, 1.0)
    assert float(w2(big_mu, big_nu)) ** 2 == pytest.approx(pot_emd2(big_mu, big_nu), rel=1e-12)


def test_gradients_match_pot_and_between_routes(generator):
    # Points: 2 Σ_j P_ij (x_i − y_j) (envelope theorem); weights: POT's emd2 gradient (its
    # centred duals), both through the same renormalisation w / Σw.
    x = torch.randn(12, 2, generator=generator, dtype=F64, requires_grad=True)
    w = (torch.rand(12, generator=generator, dtype=F64) + 0.1).requires_grad_(True)
    y = torch.randn(9, 2, generator=generator, dtype=F64)
    value = w2(Empirical(x, w / w.sum()), Empirical(y)) ** 2
    gx, gw = torch.autograd.grad(value, (x, w))
    x2, w2_ = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    pot = ot.emd2(w2_ / w2_.sum(), torch.full((9,), 1 / 9, dtype=F64), ot.dist(x2, y))
    pot.backward()
    torch.testing.assert_close(gx, x2.grad, atol=1e-12, rtol=0)
    torch.testing.assert_close(gw, w2_.grad, atol=1e-12, rtol=0)
    # 1-D: quantile path and network simplex give the same point gradients.
    x1 = torch.randn(15, 1, generator=generator, dtype=F64, requires_grad=True)
    y1 = torch.randn(11, 1, generator=generator, dtype=F64)
    a, b = torch.full((15,), 1 / 15, dtype=F64), torch.full((11,), 1 / 11, dtype=F64)
    (g_quantile,) = torch.autograd.grad(_w2_squared_1d(x1, a, y1, b), x1)
    (g_simplex,) = torch.autograd.grad(emd_cost(squared_distances(x1, y1), a, b), x1)
    torch.testing.assert_close(g_quantile, g_simplex, atol=1e-12, rtol=0)


def test_shifted_copy_and_self_distance(generator):
    mu = random_cloud(25, 3, generator)
    shift = torch.tensor([0.3, -1.0, 2.0], dtype=F64)
    moved = Empirical(mu.points + shift, mu.weights)
    assert float(w2(mu, moved)) == pytest.approx(float(shift.norm()), rel=1e-12)
    assert float(w2(mu, mu)) == 0.0  # exact zeros on the diagonal of the direct cost


def test_grid_like_measures_use_their_cell_centres(generator):
    centres = torch.linspace(-1, 1, 9, dtype=F64)[:, None]
    masses = torch.rand(9, generator=generator, dtype=F64)
    grid = FakeGrid(centres, masses / masses.sum())
    cloud = random_cloud(20, 1, generator)
    assert float(w2(grid, cloud)) == pytest.approx(float(w2(grid.to_empirical(), cloud)))


def test_real_grid_if_available():
    Grid = getattr(tpde.measures, "Grid", None)
    if Grid is None:
        pytest.skip("tpde.measures.Grid is not built yet (issue 6)")
    grid = Grid(torch.full((10,), 0.1, dtype=F64), -1.0, 1.0)
    g = Gaussian(torch.zeros(1, dtype=F64), torch.eye(1, dtype=F64))
    with pytest.raises(TypeError, match="Grid"):
        w2(grid, g)
    assert float(w2(grid, grid)) == 0.0


def test_float32_and_no_silent_promotion(generator):
    mu = Empirical(torch.randn(10, 2, generator=generator))
    nu = Empirical(torch.randn(8, 2, generator=generator))
    assert w2(mu, nu).dtype == torch.float32


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), d=st.integers(1, 3), n=st.integers(2, 12))
def test_invariances_hypothesis(seed, d, n):
    gen = torch.Generator().manual_seed(seed)
    mu, nu, rho = (random_cloud(n + k, d, gen, shift=float(k)) for k in range(3))
    d_mn, d_nm = float(w2(mu, nu)), float(w2(nu, mu))
    assert d_mn == pytest.approx(d_nm, abs=1e-12)  # symmetry (LP optimum, same value)
    assert float(w2(mu, rho)) <= d_mn + float(w2(nu, rho)) + 1e-12  # triangle inequality
    # Translation: W2² = |Δm|² + W2² of the centred measures (exact for any coupling).
    c_mu = Empirical(mu.points - mu.mean(), mu.weights)
    c_nu = Empirical(nu.points - nu.mean(), nu.weights)
    shift = float(((mu.mean() - nu.mean()) ** 2).sum())
    assert d_mn**2 == pytest.approx(shift + float(w2(c_mu, c_nu)) ** 2, rel=1e-9, abs=1e-12)


# ----------------------------------------------------------------------------- bad input


def test_gaussian_against_particles_or_grid_raises(generator):
    g = Gaussian(torch.zeros(2), torch.eye(2))
    cloud = Empirical(torch.randn(5, 2, generator=generator))
    with pytest.raises(TypeError, match=r"no closed form.*Empirical\.from_gaussian"):
        w2(g, cloud)
    grid = FakeGrid(torch.zeros(3, 2), torch.full((3,), 1 / 3))
    with pytest.raises(TypeError, match=r"Grid is compared as weighted cell.*Grid\.from_gaussian"):
        w2(grid, g)


def test_dimension_mismatch_non_measure_nan_and_empty(generator):
    with pytest.raises(ValueError, match="different dimensions"):
        w2(Empirical(torch.zeros(3, 2)), Empirical(torch.zeros(3, 3)))
    with pytest.raises(TypeError, match="takes tpde measures"):
        w2(np.zeros((3, 2)), Empirical(torch.zeros(3, 2)))
    broken = Empirical(torch.zeros(3, 2)).with_points(torch.full((3, 2), float("nan")))
    with pytest.raises(ValueError, match="non-finite"):
        w2(broken, Empirical(torch.zeros(3, 2)))
    with pytest.raises(ValueError, match="at least one point"):
        w2(Empirical(torch.zeros(0, 2)), Empirical(torch.zeros(3, 2)))


def test_particle_conversion_rejects_other_measures():
    with pytest.raises(TypeError, match="must be an Empirical measure"):
        as_empirical(Gaussian(torch.zeros(2), torch.eye(2)), "mu", "w2")


def test_simplex_iteration_cap_raises(generator):
    mu, nu = random_cloud(30, 2, generator), random_cloud(30, 2, generator, shift=1.0)
    with pytest.raises(RuntimeError, match=r"without an optimal plan.*max_iter"):
        w2(mu, nu, max_iter=3)
    with pytest.raises(ValueError, match="max_iter must be a positive int"):
        w2(mu, nu, max_iter=0)
