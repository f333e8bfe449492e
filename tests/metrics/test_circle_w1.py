"""W1 on the circle (tpde.metrics.w1_circle) against closed forms and POT, float64."""

import math

import numpy as np
import ot
import pytest
import torch

from tpde.measures import CircleDensity, Empirical, Gaussian
from tpde.metrics import w1_circle

TWO_PI = 2 * math.pi


def on_circle(angles):
    angles = torch.as_tensor(angles, dtype=torch.float64)
    return torch.stack([angles.cos(), angles.sin()], -1)


def dirac(angle):
    return Empirical(on_circle([angle]))


PAIRS = [(0.3, 1.0, 0.7), (0.1, 6.0, TWO_PI - 5.9), (0.0, math.pi, math.pi), (2.0, 2.0, 0.0)]


@pytest.mark.parametrize(("a", "b", "distance"), PAIRS)
def test_two_diracs_arc_length(a, b, distance):
    assert float(w1_circle(dirac(a), dirac(b))) == pytest.approx(distance, abs=1e-14)


@pytest.mark.parametrize("angle", [0.0, 1.0, 4.0])
@pytest.mark.parametrize("offset", [0.0, 0.37])
def test_uniform_against_dirac_is_pi_over_two(angle, offset):
    uniform = CircleDensity(torch.ones(64, dtype=torch.float64), offset=offset)
    assert float(w1_circle(uniform, dirac(angle))) == pytest.approx(math.pi / 2, abs=1e-14)
    assert float(w1_circle(dirac(angle), uniform)) == pytest.approx(math.pi / 2, abs=1e-14)


def test_uniform_is_rotation_invariant():
    a = CircleDensity(torch.ones(64, dtype=torch.float64))
    b = CircleDensity(torch.ones(96, dtype=torch.float64), offset=0.3)
    assert float(w1_circle(a, b)) < 1e-15


@pytest.mark.parametrize("alpha", [0.1, 1.0, 2.5])
def test_rotated_cardioid_closed_form(alpha):
    """ρ = (1 + cos θ)/2π against its rotation by α: G = F − F(· − α) is
    (α + 2 sin(α/2) cos(θ − α/2))/2π, whose median is its mean, so
    W1 = ∫|2 sin(α/2) cos u|/2π du = 4 sin(α/2)/π. The grid reading (cell masses spread
    evenly) is within 2·2π h² max|ρ'|/8 = h²/4 of it (module notes), and second order."""
    exact = 4 * math.sin(alpha / 2) / math.pi
    errors = []
    for M in (64, 256):
        theta = torch.arange(M, dtype=torch.float64) * TWO_PI / M
        a = CircleDensity(1 + torch.cos(theta))
        b = CircleDensity(1 + torch.cos(theta - alpha), offset=0.0)
        error = abs(float(w1_circle(a, b)) - exact)
        assert error <= (TWO_PI / M) ** 2 / 4
        errors.append(error)
    assert errors[1] <= errors[0] / 8  # O(h²): 16× smaller at 4× the points


def test_particles_against_pot():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(500, generator=g, dtype=torch.float64) * TWO_PI
    b = torch.rand(300, generator=g, dtype=torch.float64) * TWO_PI
    wa = torch.rand(500, generator=g, dtype=torch.float64)
    wa = wa / wa.sum()
    ours = float(w1_circle(Empirical(on_circle(a), wa), Empirical(on_circle(b))))
    theirs = TWO_PI * float(
        ot.wasserstein_circle((a / TWO_PI).numpy(), (b / TWO_PI).numpy(), wa.numpy(), None, p=1)[0]
    )
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_particles_against_emd_with_arc_length_cost():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(40, generator=g, dtype=torch.float64) * TWO_PI
    b = torch.rand(30, generator=g, dtype=torch.float64) * TWO_PI
    gap = (a[:, None] - b[None, :]).abs()
    cost = torch.minimum(gap, TWO_PI - gap).numpy()
    theirs = ot.emd2(np.full(40, 1 / 40), np.full(30, 1 / 30), cost)
    ours = float(w1_circle(Empirical(on_circle(a)), Empirical(on_circle(b))))
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_density_against_emd_on_its_cells():
    """A grid density is its exact cell masses spread evenly over each cell: against POT's
    exact solver on a fine discretisation of those cells (error O(cell/refinement))."""
    M, refine = 32, 64
    theta = torch.arange(M, dtype=torch.float64) * TWO_PI / M
    rho = CircleDensity(1 + 0.6 * torch.cos(theta) + 0.3 * torch.sin(3 * theta), offset=0.2)
    cells = torch.diff(rho.cdf())
    centres = torch.arange(M * refine, dtype=torch.float64) + 0.5
    fine = rho.offset + centres * TWO_PI / (M * refine)
    mass = cells.repeat_interleave(refine) / refine
    g = torch.Generator().manual_seed(2)
    b = torch.rand(50, generator=g, dtype=torch.float64) * TWO_PI
    gap = torch.remainder(fine[:, None] - b[None, :], TWO_PI)
    cost = torch.minimum(gap, TWO_PI - gap).numpy()
    theirs = ot.emd2(mass.numpy() / mass.sum().item(), np.full(50, 1 / 50), cost)
    ours = float(w1_circle(rho, Empirical(on_circle(b))))
    assert ours == pytest.approx(theirs, abs=TWO_PI / (M * refine))


def test_sampled_density_converges():
    M = 128
    theta = torch.arange(M, dtype=torch.float64) * TWO_PI / M
    rho = CircleDensity(torch.exp(2 * torch.cos(theta - 1)))
    g = torch.Generator().manual_seed(3)
    distance = float(w1_circle(rho, Empirical(rho.sample(200_000, generator=g))))
    assert distance < 5 / math.sqrt(200_000)


def test_refuses_other_measures_and_tokens_off_the_circle():
    with pytest.raises(TypeError, match="received Gaussian as nu"):
        w1_circle(dirac(0.0), Gaussian(torch.zeros(2), torch.eye(2)))
    with pytest.raises(ValueError, match="norms are up to 1 away from 1"):
        w1_circle(dirac(0.0), Empirical(2 * on_circle([0.5])))
    with pytest.raises(ValueError, match=r"points of shape \(n, 2\); received shape \(1, 3\)"):
        w1_circle(dirac(0.0), Empirical(torch.ones(1, 3)))
