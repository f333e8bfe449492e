"""Angular clustering diagnostics: labels, counts, GLPR's density, times; batched."""

import pytest
import torch

from tpde.fields import Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, uniform_on_sphere
from tpde.metrics import (
    angular_cluster_count,
    angular_cluster_labels,
    cluster_density,
    clusters_over_time,
    time_to_single_cluster,
)

F64 = torch.float64


def _clusters(sizes, d=3, spread=1e-4, seed=0):
    """Tokens on the sphere in len(sizes) tight clusters of the given sizes, far apart."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.eye(d, dtype=F64)[: len(sizes)]
    points = [
        centres[k] + spread * torch.randn(s, d, generator=gen, dtype=F64)
        for k, s in enumerate(sizes)
    ]
    return Empirical(torch.nn.functional.normalize(torch.cat(points), dim=1))


def test_labels_counts_and_density_of_known_clusters():
    mu = _clusters((3, 5))
    labels = angular_cluster_labels(mu, 1e-3)
    assert labels.tolist() == [0] * 3 + [3] * 5  # each cluster takes its smallest index
    assert int(angular_cluster_count(mu, 1e-3)) == 2
    # Linked pairs i ≠ j: 3·2 + 5·4 = 26 of 8·7 = 56 ordered pairs.
    assert float(cluster_density(mu, 1e-3)) == pytest.approx(26 / 56, rel=1e-14)
    # Single linkage: a chain of close tokens is one cluster even if its ends are far apart.
    angles = torch.arange(10, dtype=F64) * 0.03
    chain = Empirical(torch.stack([angles.cos(), angles.sin()], dim=1))
    assert int(angular_cluster_count(chain, 1e-3)) == 1  # neighbours: 1 − cos 0.03 = 4.5e-4


def test_weights_enter_the_density():
    mu = _clusters((1, 1, 2))
    w = torch.tensor([0.5, 0.3, 0.1, 0.1], dtype=F64)
    weighted = Empirical(mu.points, w)
    pairs = w[:, None] * w[None, :]
    total = float(pairs.sum() - pairs.diagonal().sum())
    assert float(cluster_density(weighted)) == pytest.approx(2 * 0.1 * 0.1 / total, rel=1e-14)


def test_batched_clouds_give_one_value_each():
    clouds = [_clusters(s, seed=k) for k, s in enumerate([(4, 4), (8,), (2, 3, 3)])]
    batch = Empirical(torch.stack([c.points for c in clouds]))
    assert angular_cluster_count(batch).tolist() == [2, 1, 3]
    density = cluster_density(batch)
    for k, c in enumerate(clouds):
        assert float(density[k]) == pytest.approx(float(cluster_density(c)), rel=1e-14)
    assert angular_cluster_labels(batch).shape == (3, 8)


def test_counts_over_time_and_time_to_one_cluster():
    mu = uniform_on_sphere(16, 3, batch=(4,), generator=torch.Generator().manual_seed(2))
    field = Normalized(Softmax.from_interaction(torch.eye(3, dtype=F64), torch.eye(3, dtype=F64)))
    traj = integrate(field, mu, 30.0, method="dopri5", save=31)
    counts = clusters_over_time(traj)
    assert counts.shape == (31, 4) and (counts[0] == 16).all() and (counts[-1] == 1).all()
    assert (counts.diff(dim=0) <= 0).all()  # clusters only merge
    first = time_to_single_cluster(traj)
    index = (counts == 1).to(torch.int64).argmax(0)
    torch.testing.assert_close(first, traj.times[index])
    never = time_to_single_cluster(integrate(field, mu, 0.5, save=3))
    assert torch.isnan(never).all()


def test_bad_input():
    mu = _clusters((2, 2))
    with pytest.raises(ValueError, match=r"delta must lie in \(0, 2\)"):
        cluster_density(mu, 2.5)
    with pytest.raises(ValueError, match="delta must be finite and > 0"):
        angular_cluster_count(mu, 0.0)
    with pytest.raises(TypeError, match="takes token clouds"):
        angular_cluster_labels(mu.points)
    assert float(cluster_density(Empirical(mu.points[:1]))) == 1.0  # one token: one cluster
