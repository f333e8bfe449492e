"""Adversarial inputs, second round (issue 20), part 1: the sphere and the cluster
diagnostics at the edges of the dtype, norm schemes that lose a token, batched clouds in
energies and fields.

Every case asserts a clear error (type and the informative part of the message) or a
finite, documented result.
"""

import math
import warnings

import pytest
import torch

from tests.adversarial.strategies import F64, cloud, scales
from tpde._scale_safe import safe_norm, tangent_part, unit
from tpde.fields import Normalized, Softmax
from tpde.fields.gradient_flow.energies import InteractionEnergy, PotentialEnergy
from tpde.fields.gradient_flow.field import GradientFlowField
from tpde.fields.norms.schemes import tangent
from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.metrics import (
    angular_cluster_count,
    angular_cluster_labels,
    cluster_density,
    cluster_diameter,
    clusters_over_time,
    time_to_single_cluster,
)

F32 = torch.float32


def two_clusters(dtype=F64, scale=1.0):
    """Six tokens in two tight clusters (around e1 and e2), every token scaled by ``scale``."""
    base = torch.tensor(
        [
            *([1.0, 1e-5, 0.0], [1.0, -1e-5, 0.0], [1.0, 0.0, 1e-5]),
            *([1e-5, 1.0, 0.0], [-1e-5, 1.0, 0.0], [0.0, 1.0, 1e-5]),
        ],
        dtype=F64,
    )
    return Empirical((base * scale).to(dtype))


# ============================================================== scale-safe normalisation
@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_normalize_and_norm_are_right_at_every_scale(dtype):
    direction = torch.tensor([[3.0, 4.0], [-0.6, 0.8]], dtype=F64)
    for s in scales(dtype):
        x = (direction * s).to(dtype)
        norms = (torch.tensor([5.0, 1.0], dtype=F64) * s).to(dtype)
        torch.testing.assert_close(safe_norm(x), norms)
        expected = torch.tensor([[0.6, 0.8], [-0.6, 0.8]], dtype=dtype)
        torch.testing.assert_close(unit(x), expected)
        torch.testing.assert_close(unit(x), expected)


@pytest.mark.parametrize("scale", [1e-200, 1e200, 1e-310])
def test_empirical_normalized_at_extreme_scales(scale):
    mu = Empirical(cloud(5, 3, seed=3) * scale).normalized()
    torch.testing.assert_close(safe_norm(mu.points), torch.ones(5, dtype=F64))


def test_zero_vector_stays_zero_and_zero_point_still_refused():
    assert torch.equal(unit(torch.zeros(2, 3, dtype=F64)), torch.zeros(2, 3, dtype=F64))
    with pytest.raises(ValueError, match="point at the origin"):
        Empirical(torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=F64)).normalized()


@pytest.mark.parametrize("scale", [1e-200, 1.0, 1e200])
def test_tangent_is_tangent_at_extreme_scales(scale):
    x, v = cloud(4, 3, seed=1) * scale, cloud(4, 3, seed=2)
    p = tangent(x, v)
    assert torch.isfinite(p).all()
    torch.testing.assert_close((unit(x) * p).sum(-1), torch.zeros(4, dtype=F64), atol=1e-14, rtol=0)
    torch.testing.assert_close(tangent_part(unit(x), v), p)


def test_post_ln_accepts_tokens_normalised_from_a_huge_cloud():
    eye = torch.eye(3, dtype=F64)
    mu = Empirical(cloud(6, 3, seed=4) * 1e250).normalized()
    traj = integrate(Normalized(Softmax.from_interaction(eye, eye)), mu, 0.1, method="rk4")
    assert traj.status == "completed"


# ============================================================== cluster diagnostics
@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_two_clusters_counted_at_every_scale(dtype):
    wrong = [s for s in scales(dtype) if int(angular_cluster_count(two_clusters(dtype, s))) != 2]
    assert wrong == []
    rank = [
        s
        for s in scales(dtype)
        if int(angular_cluster_count(two_clusters(dtype, s), definition="rank")) != 2
    ]
    assert rank == []


def test_a_zero_token_is_its_own_cluster():
    points = torch.cat([two_clusters().points, torch.zeros(1, 3, dtype=F64)])
    mu = Empirical(points)
    assert int(angular_cluster_count(mu)) == 3
    assert angular_cluster_labels(mu).tolist() == [0, 0, 0, 3, 3, 3, 6]


@pytest.mark.parametrize(
    ("dtype", "delta"), [(F32, 1e-8), (F64, 1e-300), (F64, 1e-17)], ids=["f32", "f64", "f64-eps"]
)
def test_delta_below_the_resolution_is_refused(dtype, delta):
    with pytest.raises(ValueError, match="cannot resolve"):
        angular_cluster_count(two_clusters(dtype), delta)


def test_a_nan_token_is_refused():
    points = two_clusters().points.clone()
    points[2, 1] = math.nan
    mu = two_clusters().with_points(points)
    with pytest.raises(ValueError, match="non-finite"):
        angular_cluster_count(mu)
    with pytest.raises(ValueError, match="non-finite"):
        cluster_density(mu)


def test_density_with_all_the_weight_on_one_token_is_one():
    mu = Empirical(cloud(4, 3, seed=5), torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
    assert float(cluster_density(mu)) == 1.0


def chain(width=0.35, n=36):
    angles = torch.linspace(0, width, n, dtype=F64)
    return Empirical(torch.stack([angles.cos(), angles.sin()], dim=1))


def test_a_chain_is_one_component_but_not_one_cluster_by_rank_or_diameter():
    mu = chain()
    assert int(angular_cluster_count(mu)) == 1  # single linkage: neighbours 0.01 rad apart
    assert int(angular_cluster_count(mu, definition="rank")) > 1
    assert float(cluster_diameter(mu)) == pytest.approx(0.35, rel=1e-12)
    with pytest.raises(ValueError, match="unknown definition"):
        angular_cluster_count(mu, definition="average")


def test_time_to_single_cluster_by_diameter_does_not_fire_on_a_chain():
    mu = chain()
    eye = torch.eye(2, dtype=F64)
    field = Normalized(Softmax.from_interaction(1e-9 * eye, eye))
    traj = integrate(field, mu, 0.01, method="rk4", save=3)
    assert float(time_to_single_cluster(traj)) == 0.0  # components: "one cluster" at once
    assert math.isnan(float(time_to_single_cluster(traj, criterion="diameter")))
    assert math.isnan(float(time_to_single_cluster(traj, criterion="rank")))
    assert clusters_over_time(traj, definition="rank").shape == (3,)


# ============================================================== norm schemes that lose a token
def one_token_field(d=2):
    eye = torch.eye(d, dtype=F64)
    return Softmax.from_interaction(eye, -eye)  # Γ(x) = −x for a cloud of one token


@pytest.mark.parametrize("method", ["euler", "dopri5"])
def test_post_ln_discrete_step_onto_the_origin_is_not_completed_silently(method):
    mu = Empirical(torch.tensor([[1.0, 0.0]], dtype=F64))
    field = Normalized(one_token_field(), tangent=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "1 element", RuntimeWarning)
        traj = integrate(field, mu, 2.0, dt=1.0, method=method)
    norms = safe_norm(traj.final.points)
    assert torch.allclose(norms, torch.ones_like(norms)) or traj.status == "lost_token"
    assert traj.status != "completed" or torch.allclose(norms, torch.ones_like(norms))


def test_fixed_step_onto_the_origin_stops_with_lost_token():
    mu = Empirical(torch.tensor([[1.0, 0.0]], dtype=F64))
    field = Normalized(one_token_field(), tangent=False)
    with pytest.warns(RuntimeWarning, match="tangent=True"):
        traj = integrate(field, mu, 2.0, dt=1.0, method="euler")
    assert traj.status == "lost_token"
    assert float(safe_norm(traj.final.points)) == 1.0  # the state before the step


def test_ngpt_discrete_step_onto_the_origin():
    mu = Empirical(torch.tensor([[1.0, 0.0]], dtype=F64))
    field = Normalized(one_token_field(), "ngpt", tangent=False, alpha=0.5)
    with pytest.warns(RuntimeWarning, match="lost_token"):
        traj = integrate(field, mu, 1.0, dt=1.0, method="euler")  # x + 0.5·(−x − x) = 0
    assert traj.status == "lost_token"
    assert float(safe_norm(traj.final.points)) == 1.0


# ============================================================== batched clouds in energies
def batch_of_clouds():
    return torch.stack([cloud(5, 2, seed=s) for s in range(3)])


def test_interaction_energy_gradient_flow_is_batch_correct():
    field = GradientFlowField(InteractionEnergy(lambda z: (z**2).sum(-1)))
    points = batch_of_clouds()
    batched = field.velocity(Empirical(points))
    for b in range(points.shape[0]):
        torch.testing.assert_close(batched[b], field.velocity(Empirical(points[b])))


@pytest.mark.parametrize(
    "energy",
    [InteractionEnergy(lambda z: (z**2).sum(-1)), PotentialEnergy(lambda x: (x**4).sum(-1))],
    ids=["interaction", "potential"],
)
def test_energy_values_are_batch_correct(energy):
    points = batch_of_clouds()
    values = energy(Empirical(points))
    assert values.shape == (3,)
    for b in range(3):
        torch.testing.assert_close(values[b], energy(Empirical(points[b])))


def test_normalized_gradient_flow_field_message_names_the_dimension():
    field = GradientFlowField(InteractionEnergy(lambda z: (z**2).sum(-1)))
    mu = Empirical(cloud(4, 3)).normalized()
    traj = integrate(Normalized(field), mu, 0.1, method="rk4")
    assert traj.status == "completed"
