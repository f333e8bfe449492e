"""The circle PDE on refined grids (tpde.flows.circle_adaptive): exact refinement, agreement
with a fixed fine grid, mass, the stop past the finest grid, the followed nodes, refusals."""

import math

import pytest
import torch

from tpde.fields import Normalized, Softmax
from tpde.flows import CircleSystem, integrate
from tpde.flows.circle_adaptive import integrate_circle, quadrature_gap
from tpde.measures import CircleDensity, Empirical

TWO_PI = 2 * math.pi
EYE = torch.eye(2, dtype=torch.float64)


def field(beta=5.0):
    return Normalized(Softmax(EYE, EYE, EYE, scale=beta), "post-ln")


def angles(M):
    return torch.arange(M, dtype=torch.float64) * TWO_PI / M


def start(M=128):
    """1 + 0.2 cos 3θ + 0.05 sin θ: three clusters at β = 5 by t ≈ 4, sharpening past
    M = 128 at t ≈ 1.1 and past 1024 at t ≈ 4.3."""
    theta = angles(M)
    return CircleDensity(1 + 0.2 * torch.cos(3 * theta) + 0.05 * torch.sin(theta))


def polynomial(theta):
    return (
        1
        + 0.3 * torch.cos(3 * theta - 0.4)
        + 0.2 * torch.sin(7 * theta)
        + 0.1 * torch.cos(21 * theta)
    )


@pytest.mark.parametrize("factor", [2, 3, 8])
def test_refinement_is_the_same_polynomial(factor):
    """A trigonometric polynomial of degree 21 < M/2 on M = 64 angles, refined: its values
    at the fine angles are the polynomial's (to rounding), the coarse angles are kept."""
    rho = CircleDensity(polynomial(angles(64)))
    fine = rho.refined(factor)
    exact = polynomial(angles(64 * factor)) / (TWO_PI * 1.0)  # mass of the polynomial: 2π
    assert fine.size == 64 * factor
    assert torch.allclose(fine.density, exact, rtol=0, atol=1e-15)
    assert torch.allclose(fine.density[::factor], rho.density, rtol=0, atol=1e-15)
    assert float(fine.mass()) == pytest.approx(1.0, abs=1e-15)


def test_adaptive_run_equals_a_fixed_fine_grid():
    """128 → 1024 angles as the density sharpens, against the fixed grid of 1024 from t = 0
    (resolved throughout [0, 4]): max|Δρ| ≤ 2e-6 max ρ at every save (measured 7.0e-7 at
    t = 4 with cfl 0.5, 9.9e-8 with cfl 0.1: the two runs take different steps, and the
    coarse grids drop modes below 1e-8 c_0 by their check)."""
    rho = start()
    run = integrate_circle(field(), rho, 4.0, save=[1, 2, 3, 4], max_grid=1024)
    assert run.status == "completed"
    assert [M for _, M in run.stats["refinements"]] == [256, 512, 1024]
    fixed = integrate(CircleSystem(field(), rho.refined(8)), 4.0, save=[1, 2, 3, 4], events=())
    assert fixed.status == "completed"
    for ours, theirs, M in zip(run.measures, fixed.measures, run.stats["grids"], strict=True):
        values = ours.refined(1024 // M).density if M < 1024 else ours.density
        gap = float((values - theirs.density).abs().max())
        assert gap <= 2e-6 * float(theirs.density.max())


def test_mass_is_conserved_across_refinements():
    run = integrate_circle(field(), start(), 4.0, save=[2, 4], max_grid=1024)
    assert run.stats["mass_error"] < 1e-13
    for measure in run.measures:
        assert abs(float(measure.mass()) - 1) < 1e-13


def test_a_horizon_past_the_finest_grid_stops_unresolved_naming_the_grid():
    """max_grid = 512 cannot hold the clusters past t ≈ 3.6: the run stops there, keeps the
    last resolved state, and names the time and the grid it would need."""
    run = integrate_circle(field(), start(), 8.0, save=[1, 2, 3, 5, 8], max_grid=512)
    assert run.status == "unresolved"
    stop = float(run.event_time)
    assert 3 < stop < 5
    assert float(run.times[-1]) == stop and run.stats["grids"][-1] == 512
    assert run.stats["unresolved"].startswith("resolution: the modes 85 < |k| <= 170")
    assert f"stopped at t = {stop:.6g}" in run.stats["unresolved"]
    assert "needs at least M = 1024 to go on" in run.stats["unresolved"]
    assert "t1 = 8 would need M ≈" in run.stats["unresolved"]


def test_followed_nodes_continue_past_the_finest_grid():
    """follow=True: from the grid of 512 at t ≈ 3.6 on the nodes carry the mass; at t = 4.3
    (the grid of 1024 still resolves it) the velocity they make at the 1024 angles is the
    Eulerian run's to 1e-9 of max|u| (measured 5.4e-12; W1 would see only the nodes'
    spacing, ~h/4), their quadrature check holds and the mass is the weights' sum."""
    run = integrate_circle(field(), start(), 4.3, save=[4.3], max_grid=512, follow=True)
    assert run.status == "completed"
    assert 3 < run.stats["switch"] < 4
    final = run.measures[-1]
    assert isinstance(final, Empirical) and run.stats["grids"][-1] <= 512
    assert run.stats["quadrature"] < 1e-6 and run.stats["clipped_mass"] < 1e-12
    assert float(final.weights.sum()) == pytest.approx(1.0, abs=1e-14)
    euler = integrate_circle(field(), start(), 4.3, save=[4.3], max_grid=1024)
    assert euler.status == "completed"
    rho = euler.measures[-1]
    theta = rho.angles()
    velocity = field().particle_velocity(
        0.0, final, torch.stack([theta.cos(), theta.sin()], -1), "auto"
    )
    u_nodes = (velocity * torch.stack([-theta.sin(), theta.cos()], -1)).sum(-1)
    u = CircleSystem(field(), rho).velocity(rho.density)
    assert float((u_nodes - u).abs().max()) < 1e-9 * float(u.abs().max())


def test_followed_nodes_stop_where_their_quadrature_fails():
    """A tolerance of 1e-9 on the 512 nodes' check fails by t = 4.3 (gap 7.8e-8 measured):
    the run stops there, unresolved, naming the check."""
    run = integrate_circle(
        field(), start(), 5.0, save=[4.3, 5.0], max_grid=512, follow=True, quadrature=1e-9
    )
    assert run.status == "unresolved" and float(run.event_time) == pytest.approx(4.3)
    assert run.stats["unresolved"].startswith("quadrature: the followed nodes' velocity")
    assert "the flow map is no longer resolved on the 512 nodes" in run.stats["unresolved"]
    assert float(run.times[-1]) == pytest.approx(4.3)


def test_quadrature_gap_is_small_for_a_resolved_grid():
    rho = start(256)
    theta = rho.angles()
    weights = rho.density * rho.spacing
    nodes = Empirical(torch.stack([theta.cos(), theta.sin()], -1), weights / weights.sum())
    assert quadrature_gap(field(), nodes) < 1e-13


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"factor": 1}, ValueError, "factor must be >= 2"),
        ({"max_grid": 64}, ValueError, "max_grid >= the initial grid M = 128"),
        ({"save": [9.0]}, ValueError, r"save times must be finite and lie in \[t0, t1\]"),
    ],
)
def test_bad_arguments_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        integrate_circle(field(), start(), 4.0, **kwargs)


def test_other_measures_refused():
    with pytest.raises(TypeError, match="integrate_circle steps a CircleDensity"):
        integrate_circle(field(), Empirical(torch.tensor([[1.0, 0.0]])), 1.0)
