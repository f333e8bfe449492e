"""Every order about the uniform measure on S² (experiments/theory/galerkin.py, MATH.md §9):
(5) from a draw's moments against the particle flow, its second-order term against
forcing.py's (2), its first against e^{λt}, and the refusals."""

import math

import numpy as np
import pytest
import torch

from tpde.experiments.theory.forcing import initial_moments, mode_rates, second_order_grid
from tpde.experiments.theory.galerkin import (
    Galerkin,
    galerkin_degree,
    galerkin_energies,
    galerkin_rates,
)
from tpde.experiments.theory.rates import random_rates
from tpde.experiments.theory.sphere import harmonic_energy
from tpde.measures import uniform_on_sphere


@pytest.mark.parametrize(("kernel", "beta"), [("sa", 1.0), ("usa", 1.0), ("sa", 5.0)])
def test_galerkin_follows_the_particles(kernel, beta):
    """2 × 1500 uniform tokens, the theory study's window (level 0.01, 12 RK4 steps), the
    harmonics engine; (5) from each draw's moments at L = K + 2·L_kernel with the same RK4
    steps: every seed's E_k(t) to 1e-4 relative (measured ≤ 3e-5: the degrees above L and
    the harmonics engine's rounding), so the fitted rates to 1e-3 of λ_k, where the second
    order alone misses by up to 30 % (N = 2000, SA β = 1, k = 3)."""
    degree = galerkin_degree(beta, 4)
    run = random_rates(kernel, beta, d=3, modes=4, tokens=1500, seeds=2, level=0.01, saves=13,
                       steps=12, seed=11, power=lambda p: harmonic_energy(p, 4).numpy(),
                       engine="harmonics",
                       initial=lambda p: initial_moments(p.numpy(), degree))  # fmt: skip
    nu = Galerkin(kernel, beta, degree).run(run["initial"], run["times"])
    used = run["used"]
    energy = galerkin_energies(nu, 4)
    assert np.abs(energy[:used] / run["seed_power"][:used] - 1).max() < 1e-4
    rates = galerkin_rates(run, nu, kernel, beta, used)
    assert np.abs((rates - run["measured"]) / run["predicted"]).max() < 1e-3


@pytest.mark.parametrize("kernel", ["sa", "usa"])
def test_orders_one_and_two_are_rk4s_linear_flow_and_forcing_second_order(kernel):
    """The Cauchy terms of (5) (16 points on |ε| = 1, RK4 steps h = 0.08 to t = 1.6) for the
    moments of degree ≤ 8 of 400 uniform tokens, β = 1: ν^(1) is RK4's linear propagator
    R(λh)^n ν̂(0), R(z) = Σ_{j≤4} z^j/j!, to 1e-12 relative (rounding of the 16-point sum);
    ν^(2) is the quadratic term of (2) by :func:`second_order_grid` (exact in time, its own
    s-quadrature) on degrees ≤ 3 to 1e-6 of its largest entry (RK4's error, (2λ_1h)⁵/120 per
    step ≈ 1e-8, over 20 steps and the faster pairs); the sum of the terms is the whole flow
    to 1e-12 (aliasing r^16 of a series whose terms fall ~10× per order)."""
    beta, modes, degree, steps = 1.0, 3, 8, 10
    points = uniform_on_sphere(400, 3, batch=(1,), generator=torch.Generator().manual_seed(0))
    nu0 = initial_moments(points.points.numpy(), degree)
    times = np.array([0.0, 0.8, 1.6])
    model = Galerkin(kernel, beta, degree)
    terms = model.orders(nu0, times, steps=steps)
    z = mode_rates(kernel, beta, degree) * 0.08
    step = 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24
    linear = step ** (steps * np.arange(3))[:, None, None] * nu0
    linear[..., 0] = 0.0
    assert np.abs(terms[1] - linear).max() < 1e-12 * np.abs(linear).max()
    exact = np.exp(np.outer(times, mode_rates(kernel, beta, degree)))[:, None] * nu0
    grid = second_order_grid(nu0, times, kernel, beta, modes)[0]  # (T, (K + 1)²)
    second = grid - exact[:, 0, : (modes + 1) ** 2]
    got = terms[2][:, 0, : (modes + 1) ** 2]
    assert np.abs(got - second).max() < 1e-6 * np.abs(second).max()
    whole = model.run(nu0, times, steps=steps)
    assert np.abs(terms.sum(0) - whole).max() < 1e-12 * np.abs(whole).max()


def test_galerkin_refusals():
    with pytest.raises(ValueError, match="kernel must be 'sa' or 'usa'; received 'softmax'"):
        Galerkin("softmax", 1.0, 4)
    with pytest.raises(ValueError, match="degree must be >= 1 and beta > 0; received degree = 0"):
        Galerkin("sa", 1.0, 0)
    model = Galerkin("usa", 1.0, 2)
    with pytest.raises(ValueError, match=r"\(degree \+ 1\)² = 9 columns .* received 4 columns"):
        model.run(np.zeros(4), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"count must be an even number >= 2 .* count = 3"):
        model.orders(np.zeros(9), [0.0, 1.0], count=3)
    assert math.isnan(galerkin_rates({"predicted": np.ones(2), "times": [0, 1]}, None, "sa",
                                     1.0, 2)[0])  # fmt: skip
