"""Diagnostics: spectrum, ranks, anisotropy, cluster count, distance to the best Gaussian."""

import math

import pytest
import torch

from tests.conftest import random_spd
from tpde.measures import Empirical, Gaussian
from tpde.metrics import diagnostics as dg

F64 = torch.float64


def test_spectrum_of_measures_and_tensors(generator):
    cov = torch.diag(torch.tensor([1.0, 3.0, 2.0], dtype=F64))
    g = Gaussian(torch.zeros(3, dtype=F64), cov)
    expected = torch.tensor([3.0, 2.0, 1.0], dtype=F64)
    torch.testing.assert_close(dg.spectrum(g), expected)
    torch.testing.assert_close(dg.spectrum(cov), expected)
    batch = Gaussian(torch.zeros(4, 3, dtype=F64), random_spd(3, generator, batch=(4,)))
    assert dg.spectrum(batch).shape == (4, 3)
    cloud = Empirical(torch.randn(50, 2, generator=generator, dtype=F64))
    torch.testing.assert_close(
        dg.spectrum(cloud), torch.linalg.eigvalsh(cloud.cov()).flip(-1), atol=1e-14, rtol=0
    )


def test_numerical_and_effective_rank_and_anisotropy(generator):
    factor = torch.randn(5, 2, generator=generator, dtype=F64)
    low = factor @ factor.T  # rank 2, eigenvalues ~1e-16 where zero
    assert int(dg.numerical_rank(low)) == 2
    eye = torch.eye(4, dtype=F64)
    assert int(dg.numerical_rank(eye)) == 4
    # The paper's rank histograms: eigenvalues > 0.1 (MATH.md §6).
    spectrum = torch.diag(torch.tensor([2.0, 0.5, 0.05, 0.0], dtype=F64))
    assert int(dg.numerical_rank(spectrum, rtol=0, atol=0.1)) == 2
    assert float(dg.effective_rank(eye)) == pytest.approx(4.0, rel=1e-14)
    assert float(dg.effective_rank(torch.diag(torch.tensor([1.0, 1.0, 0.0])))) == pytest.approx(
        2.0, rel=1e-6
    )
    # p = (1/2, 1/4, 1/4): H = 1.5 log 2, effective rank 2^{1.5}.
    p = torch.diag(torch.tensor([2.0, 1.0, 1.0], dtype=F64))
    assert float(dg.effective_rank(p)) == pytest.approx(2**1.5, rel=1e-14)
    assert float(dg.anisotropy(p)) == pytest.approx(0.5, rel=1e-14)
    assert float(dg.anisotropy(eye)) == pytest.approx(0.25, rel=1e-14)
    u = torch.randn(3, 1, generator=generator, dtype=F64)
    assert float(dg.anisotropy(u @ u.T)) == pytest.approx(1.0, abs=1e-14)
    # A collapsed point: documented sentinels, not NaN.
    zero = torch.zeros(3, 3, dtype=F64)
    assert float(dg.effective_rank(zero)) == 0.0 and float(dg.anisotropy(zero)) == 0.0
    assert int(dg.numerical_rank(zero)) == 0
    batched = dg.numerical_rank(torch.stack([low, torch.eye(5, dtype=F64)]))
    assert batched.tolist() == [2, 5]


def test_cluster_count_matches_brute_force(generator):
    centres = torch.tensor([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]], dtype=F64)
    points = torch.cat([c + 0.1 * torch.randn(20, 2, generator=generator, dtype=F64)
                        for c in centres])  # fmt: skip
    cloud = Empirical(points)
    assert dg.cluster_count(cloud, 1.0) == 3
    assert dg.cluster_count(cloud, 100.0) == 1
    assert dg.cluster_count(cloud, 1e-9) == 60
    labels = dg.cluster_labels(cloud, 1.0)
    assert [len(set(labels[20 * k : 20 * (k + 1)].tolist())) for k in range(3)] == [1, 1, 1]
    # Random cloud at an intermediate threshold: union-find over all pairs as the oracle.
    x = torch.rand(80, 2, generator=generator, dtype=F64)
    parent = list(range(80))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    dist = torch.cdist(x, x)
    for i in range(80):
        for j in range(i + 1, 80):
            if dist[i, j] <= 0.08:
                parent[find(i)] = find(j)
    assert dg.cluster_count(Empirical(x), 0.08) == len({find(i) for i in range(80)})


def test_distance_to_gaussian(generator):
    gaussian_cloud = Empirical(torch.randn(200, 2, generator=generator, dtype=F64))
    two_points = Empirical(
        torch.cat([torch.full((100, 2), -1.0), torch.full((100, 2), 1.0)]).to(F64)
    )
    near = dg.distance_to_gaussian(gaussian_cloud, seed=1)
    far = dg.distance_to_gaussian(two_points, seed=1)
    # Same covariance scale (Σ = I for both, up to sampling); a Gaussian cloud is within the
    # two-sample noise floor, the two-point cloud is far from its moment-matched Gaussian.
    assert float(far) > 2 * float(near)
    assert float(dg.distance_to_gaussian(gaussian_cloud, seed=1)) == float(near)  # fixed seed
    assert float(dg.distance_to_gaussian(gaussian_cloud, seed=2)) != float(near)
    assert dg.distance_to_gaussian(gaussian_cloud, n_samples=50).shape == ()
    # Two-point ±1 in each coordinate: every atom sits at distance ≥ 0 from samples; the
    # value is O(1), not a rounding artefact.
    assert 0.3 < float(far) < math.sqrt(2) * 2


# ----------------------------------------------------------------------------- bad input


def test_bad_input(generator):
    cloud = Empirical(torch.randn(10, 2, generator=generator))
    with pytest.raises(ValueError, match="threshold must be finite and > 0"):
        dg.cluster_count(cloud, 0.0)
    with pytest.raises(TypeError, match="particle clouds; received a Gaussian"):
        dg.cluster_count(Gaussian(torch.zeros(2), torch.eye(2)), 1.0)
    with pytest.raises(ValueError, match="n_samples must be a positive int"):
        dg.distance_to_gaussian(cloud, n_samples=0)
    with pytest.raises(TypeError, match="takes an Empirical"):
        dg.distance_to_gaussian(Gaussian(torch.zeros(2), torch.eye(2)))
    with pytest.raises(ValueError, match="symmetric"):
        dg.spectrum(torch.tensor([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="covariance"):
        dg.spectrum(torch.ones(3))
    with pytest.raises(ValueError, match="rtol must be finite"):
        dg.numerical_rank(torch.eye(2), rtol=-1.0)
