"""Geodesic convexity probe: exact constants, the V = I, A = −I counterexample, controls."""

import pytest
import torch

from tpde.fields import (
    InteractionEnergy,
    PotentialEnergy,
    Sinkhorn,
    Softmax,
    convexity_probe,
    geodesic_second_derivative,
)
from tpde.fields.gradient_flow.convexity import _particle_path
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_geodesic

F64 = torch.float64
EYE2 = torch.eye(2, dtype=F64)


def _clustering():
    """V = I, A = −I: s = −1, the softmax PDE descends G = E (MATH.md §5)."""
    return Softmax.from_interaction(-EYE2, EYE2)


def _second_difference(G, path, t, h=1e-3):
    """(G(t + h) − 2G(t) + G(t − h)) / h²: an autograd-free second derivative (error O(h²))."""
    values = [float(G(path(torch.tensor(t + k * h, dtype=F64)))) for k in (-1, 0, 1)]
    return (values[0] - 2 * values[1] + values[2]) / h**2


def test_quadratic_potential_has_convexity_constant_one(generator):
    # U = ½|x|²: d²/dt² ∫U dγ(t) = W2(γ(0), γ(1))² exactly along every geodesic, so every
    # normalised second derivative is 1 (float64 rounding of the double backward).
    energy = PotentialEnergy.quadratic(EYE2)
    cloud = Empirical(torch.randn(40, 2, generator=generator, dtype=F64))
    g = Gaussian(torch.tensor([0.2, -0.1], dtype=F64), torch.tensor([[0.5, 0.1], [0.1, 0.3]]))
    for mu in (cloud, g):
        probe = convexity_probe(energy, mu, n_geodesics=6, generator=generator)
        torch.testing.assert_close(probe.second_derivatives, torch.ones(6, 3, dtype=F64))
        assert probe.convex and probe.n_negative == 0


def test_softmax_energy_is_not_geodesically_convex_for_v_identity_a_minus_identity(generator):
    # MATH.md §5: E is not geodesically convex for V = I, A = −I (where the PDE descends E).
    # The probe finds negative second derivatives on particles and on Gaussians; the worst
    # one is confirmed by a second difference along the same geodesic (no autograd; h = 1e-3,
    # error O(h²) ≈ 1e-6 relative, we allow 1e-4).
    field = _clustering()
    cloud = Empirical(0.5 * torch.randn(64, 2, generator=generator, dtype=F64))
    g = Gaussian(torch.zeros(2, dtype=F64), 0.3 * EYE2)
    for mu in (cloud, g):
        probe = convexity_probe(field, mu, n_geodesics=16, generator=generator)
        assert probe.n_negative > 0 and not probe.convex
        k, _ = probe.worst
        assert probe.min_value < -1e3 * float(probe.tol[k])  # far beyond rounding
    # Reproduce one negative direction explicitly: translating a centred cloud.
    shifted = Empirical(cloud.points + torch.tensor([1.0, 0.0], dtype=F64))
    path, _ = _particle_path(cloud, shifted)
    lyapunov = field.gradient_structure().lyapunov
    values = geodesic_second_derivative(field, cloud, shifted, times=(0.0,))
    numeric = _second_difference(lambda m: lyapunov(m, "dense"), path, 0.0)
    assert float(values[0]) < 0
    assert float(values[0]) == pytest.approx(numeric, rel=1e-4)


def test_convex_controls_find_no_negative_second_derivative(generator):
    # A convex potential (¼|x|⁴ + ½|x|², strictly convex) and an interaction energy with a
    # convex kernel (|z|²): geodesically convex, so the probe must find nothing negative.
    cloud = Empirical(torch.randn(40, 2, generator=generator, dtype=F64))
    potential = PotentialEnergy(lambda x: 0.25 * (x**2).sum(-1) ** 2 + 0.5 * (x**2).sum(-1))
    interaction = InteractionEnergy(lambda z: (z**2).sum(-1))
    for energy in (potential, interaction):
        probe = convexity_probe(energy, cloud, n_geodesics=12, generator=generator)
        assert probe.convex, probe.min_value
    g = Gaussian(torch.zeros(2, dtype=F64), 0.3 * EYE2)
    probe = convexity_probe(PotentialEnergy.quadratic(torch.diag(torch.tensor([1.0, 3.0]))), g)
    assert probe.convex and probe.min_value >= 1 - 1e-10  # λ ≥ λ_min(P) = 1


def test_gaussian_second_derivative_matches_the_metrics_geodesic():
    # Autograd along the polynomial path ((1−t)I + tT)Σ₀((1−t)I + tT) against a second
    # difference of the energy on tpde.metrics.bures_geodesic (an independent construction
    # of the same geodesic); softmax energy of V = I, A = −I inside its domain.
    field = _clustering()
    g0 = Gaussian(torch.tensor([0.1, 0.2], dtype=F64), torch.tensor([[0.4, 0.1], [0.1, 0.2]]))
    g1 = Gaussian(torch.tensor([-0.3, 0.1], dtype=F64), torch.tensor([[0.2, -0.05], [-0.05, 0.5]]))
    times = (0.2, 0.5, 0.8)
    auto = geodesic_second_derivative(field, g0, g1, times=times)
    lyapunov = field.gradient_structure().lyapunov
    for t, value in zip(times, auto, strict=True):
        numeric = _second_difference(lyapunov, lambda s: bures_geodesic(g0, g1, s), t)
        assert float(value) == pytest.approx(numeric, rel=1e-5, abs=1e-8)


def test_convexity_probe_errors(generator):
    cloud = Empirical(torch.randn(10, 2, generator=generator, dtype=F64))
    g = Gaussian(torch.zeros(2, dtype=F64), 0.3 * EYE2)
    field = _clustering()
    with pytest.raises(TypeError, match="two Gaussians or two Empirical"):
        geodesic_second_derivative(field, cloud, g)
    with pytest.raises(TypeError, match="Empirical measure or a Gaussian"):
        convexity_probe(field, torch.zeros(3))
    with pytest.raises(ValueError, match="n_geodesics must be a positive int"):
        convexity_probe(field, cloud, n_geodesics=0)
    with pytest.raises(ValueError, match=r"radius must lie in \(0, 1\)"):
        convexity_probe(field, g, radius=1.5)
    with pytest.raises(ValueError, match="radius must be > 0"):
        convexity_probe(field, cloud, radius=-1.0)
    with pytest.raises(ValueError, match="single Gaussian"):
        convexity_probe(field, Gaussian(torch.zeros(3, 2, dtype=F64), EYE2))
    with pytest.raises(ValueError, match="not twice differentiable"):
        convexity_probe(field, cloud, engine="sdpa", n_geodesics=1, generator=generator)
    sinkhorn = Sinkhorn(-EYE2, EYE2, EYE2, scale=1.0)  # its Gaussian energy takes a sqrtm
    with pytest.raises(ValueError, match="not twice differentiable"):
        convexity_probe(sinkhorn, g, n_geodesics=1, generator=generator)
    wide = Gaussian(torch.zeros(2, dtype=F64), 0.9 * EYE2)  # ρ = 0.9: endpoints leave it
    with pytest.raises(ValueError, match="is inf"):
        convexity_probe(field, wide, radius=0.9, generator=generator)
