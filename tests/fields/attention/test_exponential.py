"""Exponential (USA) attention: the kernel sum against loops, the sphere oracle, refusals."""

import math

import pytest
import torch

from tpde.fields import Exponential, GaussianNotPreserved, Normalized, registry
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _draw(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=F64)


def _loops(x, points, w, A, V):
    """Σ_j w_j e^{y_jᵀAx_i} V y_j, one term at a time (the definition)."""
    return torch.stack(
        [
            sum(w[j] * torch.exp(points[j] @ A @ xi) * (V @ points[j]) for j in range(len(w)))
            for xi in x
        ]
    )


@pytest.mark.parametrize("engine", ["auto", "dense", "chunked", "tiled"])
def test_particle_velocity_is_the_defining_sum(engine, generator):
    # General Q, K (k = 2 < d = 3), V, weights, and evaluation points off the particles.
    Q, K, V = _draw(generator, 2, 3), _draw(generator, 2, 3), _draw(generator, 3, 3)
    points, x = 0.6 * _draw(generator, 7, 3), 0.6 * _draw(generator, 4, 3)
    w = torch.rand(7, generator=generator, dtype=F64) + 0.1
    w = w / w.sum()
    field = Exponential(Q, K, V, scale=0.8)
    expected = _loops(x, points, w, 0.8 * K.T @ Q, V)
    got = field.velocity(Empirical(points, w), x=x, engine=engine)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)


def test_isotropic_parameters_and_a_batch_of_betas(generator):
    # Q = K = V = I, scale β (A = βI: the queries take the shortcut β·x), one β per batch
    # element and one cloud per element: each element is its own USA field.
    betas = torch.tensor([0.5, 2.0, 7.0], dtype=F64)
    eye = torch.eye(2, dtype=F64)
    points = _draw(generator, 3, 9, 2)
    field = Exponential(betas.view(3, 1, 1) * eye, eye, eye, scale=1.0)
    got = field.velocity(Empirical(points))
    for b, beta in enumerate(betas):
        expected = _loops(points[b], points[b], torch.full((9,), 1 / 9, dtype=F64), beta * eye, eye)
        torch.testing.assert_close(got[b], expected, rtol=1e-12, atol=1e-13)


def test_two_tokens_on_the_circle_follow_the_usa_angle_law():
    # MATH.md §7: two tokens at angle θ, post-LN USA with 1/n: θ̇ = −sin θ e^{β cos θ}.
    beta, theta = 3.0, 1.1
    eye = torch.eye(2, dtype=F64)
    field = Normalized(Exponential(eye, eye, eye, scale=beta), "post-ln")
    points = torch.tensor([[1.0, 0.0], [math.cos(theta), math.sin(theta)]], dtype=F64)
    v = field.velocity(Empirical(points))
    # angular speeds: token 0 moves by v₀·e_θ(0) = v₀[1], token 1 by v₁·(−sin θ, cos θ)
    rate = float(points[1, 0] * v[1, 1] - points[1, 1] * v[1, 0]) - float(v[0, 1])
    assert rate == pytest.approx(-math.sin(theta) * math.exp(beta * math.cos(theta)), rel=1e-14)


def test_a_split_particle_is_the_same_measure(generator):
    # Linear in μ: weights outside the kernel, so halving a particle changes nothing.
    Q, K, V = _draw(generator, 2, 2), _draw(generator, 2, 2), _draw(generator, 2, 2)
    x = _draw(generator, 5, 2)
    field = Exponential(Q, K, V)
    halves = Empirical(x.repeat(2, 1))
    torch.testing.assert_close(field.velocity(halves, x=x), field.velocity(Empirical(x)))


def test_registered_and_refusals():
    eye = torch.eye(2, dtype=F64)
    field = registry.build("exponential", eye, eye, eye, 1.0)
    assert isinstance(field, Exponential) and "exponential" in registry.variant_names(head=True)
    mu = Empirical(torch.tensor([[0.3, 0.1], [-0.2, 0.5]], dtype=F64))
    with pytest.raises(ValueError, match="engine 'sdpa' only computes softmax-normalised"):
        field.velocity(mu, engine="sdpa")
    g = Gaussian(torch.zeros(2, dtype=F64), eye)
    with pytest.raises(GaussianNotPreserved, match=r"V\(α \+ ΣAx\) is not affine in x"):
        field.velocity(g, x=mu.points)
    with pytest.raises(GaussianNotPreserved, match="does not keep Gaussians Gaussian"):
        field.gaussian_rhs(0.0, g.mean(), g.cov())
    with pytest.raises(TypeError, match="variant 'exponential' takes no option 'bias'"):
        registry.build("exponential", eye, eye, eye, bias=0.0)
    with pytest.raises(OverflowError, match=r"overflowed in torch\.float64"):
        Exponential(eye, eye, eye, scale=1.0).velocity(Empirical(100 * mu.points))
