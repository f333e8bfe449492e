"""Eulerian (finite-volume) grid flows: conservation, positivity, CFL, orders, bad input."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from tpde.fields import Field, Masked, Sinkhorn, Softmax
from tpde.flows import CFLViolation, Converged, FiniteVolumes, integrate
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64


class Affine(Field):
    """Γ[μ](x) = c(t) + Bx, independent of μ: the flow map is affine and known exactly."""

    def __init__(self, c, B):
        self.c, self.B, self.dim = c, B, B.shape[-1]

    def particle_velocity(self, t, mu, x, engine, info=None):
        c = self.c(t) if callable(self.c) else self.c
        return c.to(x.dtype) + x @ self.B.T.to(x.dtype)

    def gaussian_affine(self, t, mean, cov):
        return (self.c(t) if callable(self.c) else self.c), self.B


def _order(sizes, errors) -> float:
    """Slope of log(error) against log(1/size): the observed order in h ∝ 1/size."""
    return -float(np.polyfit(np.log(sizes), np.log(errors), 1)[0])


# A smooth non-Gaussian start: a two-component mixture (its CDF is known, so the exact cell
# masses of its push-forward by an affine flow are CDF differences).
MIXTURE = ((0.6, -0.8, 0.35), (0.4, 0.9, 0.45))  # (weight, mean, std)


def _mixture_cdf(x):
    return sum(w * stats.norm.cdf(x, m, s) for w, m, s in MIXTURE)


def _mixture_grid(n, lower, upper):
    masses = np.diff(_mixture_cdf(np.linspace(lower, upper, n + 1)))
    return Grid(torch.tensor(masses / masses.sum()), lower, upper)


@pytest.mark.parametrize(("scheme", "order"), [("upwind", 1), ("muscl", 2)])
def test_affine_flow_1d_converges_at_the_scheme_order(scheme, order):
    # ẋ = c + bx (b < 0): x(t) = e^{bt}x0 + c(e^{bt} − 1)/b, so the exact cell masses at t
    # are differences of the initial CDF at the pulled-back edges, and the exact moments
    # are mean(t) = e^{bt}mean0 + c(e^{bt} − 1)/b, var(t) = e^{2bt}var0.
    b, c, t1, lower, upper = -0.6, 0.4, 1.0, -3.0, 3.5
    field = Affine(torch.tensor([c], dtype=F64), torch.tensor([[b]], dtype=F64))
    eb = math.exp(b * t1)
    mean0 = sum(w * m for w, m, _ in MIXTURE)
    var0 = sum(w * (s**2 + m**2) for w, m, s in MIXTURE) - mean0**2
    mean1, var1 = eb * mean0 + c * (eb - 1) / b, eb**2 * var0
    sizes, moment_errors, l1_errors = [100, 200, 400, 800], [], []
    for n in sizes:
        traj = integrate(field, FiniteVolumes(_mixture_grid(n, lower, upper), scheme), t1)
        final = traj.final
        # Conservation and positivity at every size: masses sum to 1 to rounding (nothing
        # reaches the boundary here), every mass is >= 0.
        assert traj.stats["mass_error"] < 1e-13 and traj.stats["outflow"] < 1e-13
        assert traj.stats["min_mass"] >= 0 and traj.stats["cfl_max"] <= 0.5 + 1e-12
        edges = (np.linspace(lower, upper, n + 1) - c * (eb - 1) / b) / eb
        exact = np.diff(_mixture_cdf(edges))
        l1_errors.append(np.abs(final.density.numpy() - exact).sum())
        moment_errors.append(
            abs(float(final.mean()[0]) - mean1) + abs(float(final.cov()[0, 0]) - var1)
        )
    # Moments: order 1 (upwind) and 2 (MUSCL + Heun) within 0.15 (measured 0.99/2.0).
    assert _order(sizes, moment_errors) == pytest.approx(order, abs=0.15)
    # Cell masses in L1: upwind ≈ 1; MUSCL between 1.5 and 2, since the minmod limiter
    # clips the slopes at the smooth extrema (a known loss of the limited scheme).
    l1_order = _order(sizes, l1_errors)
    assert l1_order == pytest.approx(1, abs=0.15) if order == 1 else 1.5 < l1_order < 2.1


@pytest.mark.parametrize(("scheme", "order"), [("upwind", 1), ("muscl", 2)])
def test_affine_rotation_2d_moments_converge_at_the_scheme_order(scheme, order):
    # A rotating, contracting affine field couples the two axes; the exact solution from
    # a correlated Gaussian is the Gaussian of the moment ODE (dopri5 at 1e-12).
    B = torch.tensor([[-0.4, 0.9], [-0.9, -0.4]], dtype=F64)
    field = Affine(torch.tensor([0.2, 0.0], dtype=F64), B)
    g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[0.6, 0.2], [0.2, 0.3]]))
    exact = integrate(field, g0, 1.0, method="dopri5", rtol=1e-12, atol=1e-12).final
    sizes, errors = [32, 64, 128], []
    for n in sizes:
        traj = integrate(
            field, FiniteVolumes(Grid.from_gaussian(g0, (n, n), -4.0, 4.0), scheme), 1.0
        )
        assert traj.stats["mass_error"] < 1e-13 and traj.stats["min_mass"] >= 0
        mean_error = (traj.final.mean() - exact.mean()).norm()
        errors.append(float(mean_error + (traj.final.cov() - exact.cov()).norm()))
    # Measured 1.03 (upwind), 1.90 (MUSCL, still pre-asymptotic at n = 32): tolerance 0.2.
    assert _order(sizes, errors) == pytest.approx(order, abs=0.2)


@pytest.mark.parametrize(("scheme", "order"), [("upwind", 1), ("muscl", 2)])
def test_softmax_1d_closed_form_converges_at_the_scheme_order(scheme, order):
    # MATH.md §4.1 with v a < 0 (contracting): s(t) = s0/(1 − 2vas0 t),
    # α(t) = α0 e^{vt}(1 − 2vas0 t)^{-1/2}; the density stays N(α(t), s(t)).
    v, a, s0, a0, t1 = -1.0, 1.0, 0.25, 0.3, 1.0
    field = Softmax.from_interaction(torch.tensor([[a]], dtype=F64), torch.tensor([[v]]))
    g0 = Gaussian(torch.tensor([a0], dtype=F64), torch.tensor([[s0]], dtype=F64))
    s1 = s0 / (1 - 2 * v * a * s0 * t1)
    alpha1 = a0 * math.exp(v * t1) / math.sqrt(1 - 2 * v * a * s0 * t1)
    exact = Gaussian(torch.tensor([alpha1], dtype=F64), torch.tensor([[s1]], dtype=F64))
    sizes, moment_errors, l1_errors = [50, 100, 200, 400], [], []
    for n in sizes:
        traj = integrate(field, FiniteVolumes(Grid.from_gaussian(g0, n, -4.0, 4.5), scheme), t1)
        assert traj.stats["mass_error"] < 1e-13 and traj.stats["min_mass"] >= 0
        final = traj.final
        cells = Grid.from_gaussian(exact, n, -4.0, 4.5).density
        l1_errors.append(float((final.density - cells).abs().sum()))
        moment_errors.append(
            abs(float(final.mean()[0]) - alpha1) + abs(float(final.cov()[0, 0]) - s1)
        )
    # Measured moment orders 1.04 (upwind) and 2.05 (MUSCL); L1 orders 0.94 and 1.71.
    assert _order(sizes, moment_errors) == pytest.approx(order, abs=0.15)
    l1_order = _order(sizes, l1_errors)
    assert l1_order == pytest.approx(1, abs=0.15) if order == 1 else 1.5 < l1_order < 2.1


@pytest.mark.parametrize("scheme", ["upwind", "muscl"])
def test_outflow_is_reported_and_mass_conserved_to_rounding(scheme):
    # An expanding flow (softmax, V = I, A ≻ 0) pushes mass through the box boundary:
    # masses + outflow stay 1 to rounding (1e-14), outflow grows, positivity holds.
    field = Softmax.from_interaction(torch.tensor([[0.8, 0.1], [0.1, 0.5]]), torch.eye(2))
    g0 = Gaussian(torch.tensor([0.2, 0.0], dtype=F64), 0.3 * torch.eye(2, dtype=F64))
    grid = Grid.from_gaussian(g0, (20, 20), -2.0, 2.0)
    traj = integrate(field, FiniteVolumes(grid, scheme), 1.0, save=4)
    outflow = traj.stats["outflow_saved"]
    assert outflow.shape == (4,) and float(outflow[-1]) > 0.02  # measured 0.044 and 0.063
    assert bool((outflow.diff() >= 0).all())
    for g, out in zip(traj.measures, outflow, strict=True):
        assert float(g.mass + out) == pytest.approx(1.0, abs=1e-14)
        assert float(g.density.min()) >= 0
    assert traj.stats["outflow"] == pytest.approx(float(outflow[-1]), abs=0)
    # Moments are those of the mass still inside the box (normalised).
    inside = traj.final.to_empirical()
    torch.testing.assert_close(inside.mean(), traj.final.mean())


def test_positivity_from_discontinuous_data_at_the_largest_stable_step():
    # An indicator start (MUSCL's limiter works hardest at jumps) with adaptive cfl = 1, the
    # positivity limit: every cell mass stays >= 0 exactly at every step.
    field = Affine(torch.tensor([1.0, -0.5], dtype=F64), -0.3 * torch.eye(2, dtype=F64))
    density = torch.zeros(24, 24, dtype=F64)
    density[6:12, 10:20] = 1.0
    grid = Grid(density / density.sum(), -3.0, 3.0)
    traj = integrate(field, FiniteVolumes(grid, cfl=1.0), 1.0, save="steps")
    assert traj.stats["cfl_max"] <= 1.0 + 1e-12
    assert all(float(g.density.min()) >= 0 for g in traj.measures)
    assert traj.stats["mass_error"] < 1e-14


def test_explicit_dt_checked_against_cfl_adaptive_is_automatic():
    field = Affine(torch.tensor([2.0], dtype=F64), torch.zeros(1, 1, dtype=F64))
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), 0.1 * torch.eye(1, dtype=F64)), 40, -2.0, 2.0
    )
    # Speed 2, h = 0.1: upwind needs dt <= 0.05; MUSCL's face values reach 3m/2, so
    # dt <= 1/(2·(1/2 + 1)/0.1) = 0.0333.
    with pytest.raises(CFLViolation, match=r"violates the CFL condition.*dt <= 0\.0333"):
        integrate(field, grid, 0.5, dt=0.04)
    ok = integrate(field, FiniteVolumes(grid, "upwind"), 0.5, dt=0.04)
    assert ok.stats["cfl_max"] == pytest.approx(0.8)
    adaptive = integrate(field, grid, 0.2)
    assert adaptive.stats["cfl_max"] == pytest.approx(0.5)
    assert adaptive.stats["dt_max"] == pytest.approx(0.5 / 30)
    # A translation by 2 · 0.2 = 0.4 of the mean. Upwind moves the mean exactly at a
    # constant speed (Σ of upwind face masses = the mass); the mass is 5σ away from the
    # boundary (upwind's numerical diffusion lets out < 1e-5), so the mean is exact to
    # 3e-5 (a lost mass ε moves the normalised mean by at most ε·(box width)). MUSCL's
    # limiter clips the slope at the peak, an O(h²) error in the speed of the mean
    # (measured 2e-4).
    upwind = integrate(field, FiniteVolumes(grid, "upwind"), 0.2)
    # Its CFL step 0.5/20 is above the cap of adaptive steps, 1/10 of the run length.
    assert upwind.stats["dt_max"] == pytest.approx(0.02) and upwind.stats["cfl_max"] < 0.5
    assert upwind.stats["outflow"] < 1e-5
    assert float(upwind.final.mean()[0]) == pytest.approx(0.4, abs=3e-5)
    assert float(adaptive.final.mean()[0]) == pytest.approx(0.4, abs=1e-3)


def test_heun_second_stage_is_checked_against_cfl():
    # The speed jumps from 1 to 30 at t = 0.05 (h = 0.1, MUSCL rate 1.5·speed/h): an
    # adaptive Heun step (capped at 0.006) whose second stage lands past the jump would
    # have ν = 0.006·450 = 2.7 > 1, so it is retried shorter; an explicit dt that crosses
    # it raises, naming the second stage.
    field = Affine(lambda t: torch.tensor([1.0 if t < 0.05 else 30.0]), torch.zeros(1, 1))
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), 0.05 * torch.eye(1, dtype=F64)), 40, -2.0, 2.0
    )
    traj = integrate(field, grid, 0.06)
    assert traj.stats["n_rejected"] >= 1 and traj.stats["cfl_max"] <= 1.0
    assert traj.stats["min_mass"] >= 0
    with pytest.raises(CFLViolation, match="second stage"):
        integrate(field, grid, 0.06, dt=0.02)


def test_step_budget_is_reported():
    field = Affine(torch.tensor([1.0], dtype=F64), torch.zeros(1, 1, dtype=F64))
    traj = integrate(field, _small_grid(), 10.0, max_steps=3)
    assert traj.status == "max_steps" and traj.stats["n_steps"] == 3
    assert float(traj.event_time) == pytest.approx(float(traj.times[-1]))


def test_time_dependent_velocity_uses_stage_times():
    # ẋ = cos t: the mean moves by sin(t1); Heun's second stage must use t + dt (a stage at
    # t would give an O(1) error). Error O(dt²) ≈ 1e-4 at 40 steps; tolerance 1e-3.
    field = Affine(lambda t: torch.tensor([math.cos(t)], dtype=F64), torch.zeros(1, 1))
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), 0.05 * torch.eye(1, dtype=F64)), 80, -2.0, 3.0
    )
    traj = integrate(field, grid, 1.5, dt=1.5 / 40)
    assert float(traj.final.mean()[0]) == pytest.approx(math.sin(1.5), abs=1e-3)


def test_converged_event_and_saved_times():
    # ẋ = −x concentrates the mass on the centre cell, where the face velocities cancel.
    field = Affine(torch.zeros(1, dtype=F64), -torch.eye(1, dtype=F64))
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), 0.3 * torch.eye(1, dtype=F64)), 21, -3.0, 3.0
    )
    traj = integrate(field, grid, 50.0, events=(Converged(tol=0.02),), save=11)
    assert traj.status == "converged" and float(traj.event_time) < 50
    assert float(traj.times[-1]) == float(traj.event_time)
    saved = integrate(field, grid, 1.0, save=5)
    torch.testing.assert_close(saved.times, torch.linspace(0, 1, 5, dtype=F64))
    assert saved.stats["outflow_saved"].shape == (5,)


def test_grid_flow_is_differentiable_in_parameters():
    # d/da of the final variance, by autograd through the fixed-step flow, against central
    # finite differences (h = 1e-5; agreement to 1e-6 relative).
    g0 = Gaussian(torch.tensor([0.2], dtype=F64), torch.tensor([[0.3]], dtype=F64))
    grid = Grid.from_gaussian(g0, 60, -3.0, 3.0)

    def final_var(a):
        field = Softmax.from_interaction(a.reshape(1, 1), torch.tensor([[-1.0]], dtype=F64))
        return integrate(field, grid, 0.3, dt=0.01).final.cov()[0, 0]

    a = torch.tensor(0.7, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(final_var(a), a)
    with torch.no_grad():
        fd = (final_var(a + 1e-5) - final_var(a - 1e-5)) / 2e-5
    assert float(grad) == pytest.approx(float(fd), rel=1e-6)


def test_sinkhorn_inner_failure_stops_the_grid_flow():
    field = Sinkhorn(torch.eye(1), -torch.eye(1), torch.eye(1), scale=1.0, iters=2, tol=1e-14)
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), 0.5 * torch.eye(1, dtype=F64)), 30, -4.0, 4.0
    )
    traj = integrate(field, grid, 1.0)
    assert traj.status == "not_converged" and float(traj.event_time) == 0.0


# ---------------------------------------------------------------------------- bad input


def _small_grid():
    return Grid(torch.full((4,), 0.25, dtype=F64), -1.0, 1.0)


def _one_d_softmax():
    return Softmax.from_interaction(torch.tensor([[-1.0]]), torch.tensor([[1.0]]))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"method": "rk4"}, ValueError, "strong-stability-preserving.*'rk4'"),
        ({"method": "dopri5"}, ValueError, "'euler' or 'heun'"),
        ({"dt": -0.1}, ValueError, "dt must be finite and > 0"),
        ({"engine": "magic"}, ValueError, "unknown engine"),
    ],
)
def test_rejects_bad_grid_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        integrate(_one_d_softmax(), _small_grid(), 0.1, **kwargs)


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ({"scheme": "weno"}, ValueError, "unknown scheme 'weno'"),
        ({"cfl": 1.5}, ValueError, r"cfl .* \(0, 1\]"),
        ({"cfl": 0.0}, ValueError, "cfl must be finite and > 0"),
    ],
)
def test_rejects_bad_finite_volume_options(spec, error, match):
    # The scheme and the CFL target belong to the grid system, not to integrate.
    with pytest.raises(error, match=match):
        FiniteVolumes(_small_grid(), **spec)


def test_grid_options_rejected_for_other_measures():
    cloud = Empirical(torch.zeros(3, 1))
    with pytest.raises(TypeError, match="FiniteVolumes discretises a Grid"):
        FiniteVolumes(cloud, "upwind")
    with pytest.raises(TypeError, match="unexpected keyword argument 'scheme'"):
        integrate(_one_d_softmax(), cloud, 0.1, scheme="upwind")


def test_rejects_dimension_mismatch_and_masked_fields_on_grids():
    field = Softmax.from_interaction(torch.eye(2) * -1.0, torch.eye(2))
    with pytest.raises(ValueError, match=r"dimension mismatch.*d = 1.*d = 2"):
        integrate(field, _small_grid(), 0.1)
    with pytest.raises(ValueError, match="positions"):
        integrate(Masked(_one_d_softmax()), _small_grid(), 0.1)


def test_rejects_batched_parameters_on_grids():
    field = Softmax.from_interaction(-torch.ones(3, 1, 1), torch.ones(1, 1))
    with pytest.raises(ValueError, match="unbatched field parameters"):
        integrate(field, _small_grid(), 0.1)


def test_a_cfl_step_cut_to_nothing_is_a_blow_up_not_a_long_run():
    # Unnormalised exponential attention e^{yᵀAx} with A = 40·I on the box [−3, 3]²: speeds of
    # order e^{360}·3 at the corners, so the CFL step is ~1e-150. The run used to crawl through
    # max_steps = 10⁵ such steps; now the cut step stops it at once with "blow_up".
    from tpde.fields import Exponential

    field = Exponential(
        40 * torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), scale=1.0
    )
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(2, dtype=F64), 0.3 * torch.eye(2, dtype=F64)), (12, 12), -3.0, 3.0
    )
    traj = integrate(field, grid, 1.0)
    assert traj.status == "blow_up" and traj.stats["n_steps"] == 0
    assert float(traj.event_time) == 0.0
