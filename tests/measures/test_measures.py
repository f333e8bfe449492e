"""Measures: construction, moments, sampling, moves, and every rejected input."""

import numpy as np
import pytest
import torch

from tests.conftest import random_spd
from tpde.measures import Empirical, Gaussian


def test_empirical_defaults_and_moments(generator):
    points = torch.randn(50, 3, generator=generator, dtype=torch.float64)
    mu = Empirical(points)
    assert (mu.n, mu.dim, mu.dtype) == (50, 3, torch.float64)
    torch.testing.assert_close(mu.weights, torch.full((50,), 1 / 50, dtype=torch.float64))
    torch.testing.assert_close(mu.mean(), points.mean(0))
    # Population covariance (1/n), as the measure's second central moment.
    torch.testing.assert_close(mu.cov(), torch.cov(points.T, correction=0))


def test_weighted_moments_match_numpy(generator):
    points = torch.randn(40, 2, generator=generator, dtype=torch.float64)
    w = torch.rand(40, generator=generator, dtype=torch.float64)
    w = w / w.sum()
    mu = Empirical(points, w)
    expected = np.cov(points.numpy().T, aweights=w.numpy(), bias=True)
    np.testing.assert_allclose(mu.cov().numpy(), expected, rtol=1e-12)


def test_numpy_input_keeps_float64_and_weights_renormalised():
    w = np.array([0.2, 0.3, 0.5 + 1e-9])  # within √eps of 1: accepted, renormalised
    mu = Empirical(np.zeros((3, 2)), w)
    assert mu.dtype == torch.float64
    assert float(mu.weights.sum()) == pytest.approx(1.0, abs=1e-15)


def test_empirical_sample_and_from_gaussian(generator):
    mu = Empirical(torch.tensor([[0.0], [1.0]]), torch.tensor([0.25, 0.75]))
    draws = mu.sample(20000, generator=generator)
    assert draws.shape == (20000, 1)
    # Binomial proportion, sd = sqrt(.25*.75/20000) = 0.003: 5 sd.
    assert float(draws.mean()) == pytest.approx(0.75, abs=0.015)
    g = Gaussian(torch.zeros(2), torch.eye(2))
    cloud = Empirical.from_gaussian(g, 100, generator=generator)
    assert cloud.points.shape == (100, 2)


def test_empirical_to_and_autograd(generator):
    points = torch.randn(5, 2, generator=generator, requires_grad=True)
    mu = Empirical(points)
    mu.mean().sum().backward()
    assert points.grad is not None
    assert Empirical(points.detach()).to(dtype=torch.float64).dtype == torch.float64


def test_gaussian_batched_moments_and_sampling(generator):
    cov = random_spd(3, generator, batch=(4,))
    mean = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    g = Gaussian(mean, cov)
    assert g.batch_shape == (4,) and g.dim == 3
    x = g.sample(40000, generator=generator)
    assert x.shape == (4, 40000, 3)
    # Sample covariance error ~ ‖Σ‖ sqrt(2/n) ≈ 0.007 ‖Σ‖: allow 0.05 ‖Σ‖.
    centred = x - x.mean(-2, keepdim=True)
    sample_cov = centred.mT @ centred / x.shape[-2]
    assert torch.all((sample_cov - cov).abs().amax((-2, -1)) < 0.05 * cov.abs().amax((-2, -1)))
    assert g[1].batch_shape == () and torch.equal(g[1].cov(), cov[1])


def test_gaussian_broadcasts_mean_and_cov(generator):
    g = Gaussian(torch.zeros(2), torch.eye(2).expand(5, 2, 2))
    assert g.batch_shape == (5,) and g.mean().shape == (5, 2)


def test_degenerate_covariance_is_allowed():
    g = Gaussian(torch.zeros(2), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    x = g.sample(10)
    assert torch.all(x[:, 1] == 0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"points": torch.zeros(3)}, r"points must have shape \(n, d\); received shape \(3,\)"),
        ({"points": torch.zeros(0, 2)}, "at least one point"),
        ({"points": torch.tensor([[0.0], [float("nan")]])}, "non-finite"),
        ({"points": torch.zeros(3, 1), "weights": torch.ones(2) / 2}, r"weights must have shape"),
        ({"points": torch.zeros(2, 1), "weights": torch.tensor([1.5, -0.5])}, "nonnegative"),
        ({"points": torch.zeros(2, 1), "weights": torch.tensor([0.5, 0.6])}, "sum to 1"),
        ({"points": torch.zeros(2, 1), "weights": torch.tensor([0.5, float("inf")])}, "non-finite"),
        ({"points": torch.zeros(2, 1), "positions": torch.tensor([0.0, -1.5])}, "must be ≥ 0"),
        ({"points": torch.zeros(2, 1), "positions": torch.tensor([0, -1])}, "minimum of -1"),
        ({"points": torch.zeros(2, 1), "positions": torch.zeros(3)}, "positions must have shape"),
    ],
)
def test_empirical_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Empirical(**kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_integer_positions_are_kept_exactly_up_to_the_dtypes_last_exact_integer(dtype):
    # float32 holds every integer up to 2^24, float16 up to 2^11: positions there stay
    # distinct (no sort is needed to tell); one past it merges with its neighbour (float64: 2^53).
    bound = {torch.float32: 2**24, torch.float64: 2**53, torch.float16: 2**11}[dtype]
    kept = Empirical(torch.zeros(3, 1, dtype=dtype), positions=[0, bound - 1, bound])
    assert kept.positions.tolist() == [0, bound - 1, bound] and kept.positions.dtype == dtype
    with pytest.raises(ValueError, match=f"positions {bound} and {bound + 1} are not distinct"):
        Empirical(torch.zeros(2, 1, dtype=dtype), positions=[bound, bound + 1])


@pytest.mark.parametrize(
    ("mean", "cov", "match"),
    [
        (torch.zeros(2), torch.eye(3), r"cov must have shape \(\.\.\., 2, 2\)"),
        (torch.zeros(2), torch.tensor([[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
        (torch.zeros(2), torch.tensor([[1.0, 2.0], [2.0, 1.0]]), "positive semidefinite"),
        (torch.tensor([0.0, float("nan")]), torch.eye(2), "non-finite"),
        (torch.zeros(3, 2), torch.eye(2).expand(4, 2, 2), "do not broadcast"),
        (torch.zeros(()), torch.eye(1), r"mean must have shape \(\.\.\., d\)"),
    ],
)
def test_gaussian_rejects_bad_input(mean, cov, match):
    with pytest.raises(ValueError, match=match):
        Gaussian(mean, cov)


def test_bad_types_and_sample_sizes():
    with pytest.raises(TypeError, match="torch tensor or a numpy array"):
        Empirical({"a": 1})
    with pytest.raises(TypeError, match="must be real"):
        Empirical(torch.zeros(2, 1, dtype=torch.complex64))
    with pytest.raises(ValueError, match="positive int"):
        Gaussian(torch.zeros(1), torch.eye(1)).sample(0)
    with pytest.raises(ValueError, match="single Gaussian"):
        Empirical.from_gaussian(Gaussian(torch.zeros(2, 1), torch.eye(1)), 3)
    with pytest.raises(IndexError, match="unbatched"):
        Gaussian(torch.zeros(1), torch.eye(1))[0]
    with pytest.raises(ValueError, match="new points must have shape"):
        Empirical(torch.zeros(2, 1)).with_points(torch.zeros(3, 1))


def test_gaussian_sampling_has_finite_gradients_at_repeated_eigenvalues(generator):
    # Σ = I has repeated eigenvalues, where autograd through eigh divides by zero.
    cov = torch.eye(3, dtype=torch.float64, requires_grad=True)
    x = Gaussian(torch.zeros(3, dtype=torch.float64), cov).sample(50, generator=generator)
    (grad,) = torch.autograd.grad(x.pow(2).sum(), cov)
    assert torch.isfinite(grad).all()


def test_uniform_on_sphere_and_batches_of_clouds():
    from tpde.measures import uniform_on_sphere

    gen = torch.Generator().manual_seed(0)
    mu = uniform_on_sphere(4000, 3, generator=gen)
    assert mu.points.dtype == torch.float64 and mu.n == 4000 and mu.dim == 3
    torch.testing.assert_close(mu.points.norm(dim=1), torch.ones(4000, dtype=torch.float64))
    # Uniform on S²: mean 0 and covariance I/3 (4000 samples: 5 standard errors ≈ 0.05).
    assert float(mu.mean().abs().max()) < 0.05
    assert float((mu.cov() - torch.eye(3, dtype=torch.float64) / 3).abs().max()) < 0.05
    batch = uniform_on_sphere(8, 2, batch=(3, 2), generator=gen)
    assert batch.batch_shape == (3, 2) and batch.mean().shape == (3, 2, 2)
    assert batch.cov().shape == (3, 2, 2, 2)
    torch.testing.assert_close(batch[1, 0].cov(), Empirical(batch.points[1, 0]).cov())
    with pytest.raises(ValueError, match=r"needs d >= 2"):
        uniform_on_sphere(3, 1)
    with pytest.raises(ValueError, match="index an element first"):
        batch.sample(3)
    with pytest.raises(TypeError, match="holds one cloud, not a batch"):
        mu[0]
    with pytest.raises(ValueError, match="nonzero points"):
        Empirical(torch.zeros(2, 3)).normalized()
    torch.testing.assert_close(
        Empirical(torch.tensor([[3.0, 4.0]])).normalized().points, torch.tensor([[0.6, 0.8]])
    )
    from tpde.metrics import w2

    with pytest.raises(ValueError, match="compare one cloud at a time"):
        w2(batch, batch)
