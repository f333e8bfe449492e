"""MLP feed-forward field: against torch's nn.Linear layers, on particles, batches and grids."""

import math
import re

import pytest
import torch
from torch import nn

from tpde.fields import MLP, GaussianNotPreserved
from tpde.fields.feedforward.activations import ACTIVATIONS
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64

#: Each activation written out from its formula (MATH.md §8), independent of the table.
REFERENCE = {
    "relu": lambda z: torch.where(z > 0, z, torch.zeros_like(z)),
    "gelu": lambda z: z * 0.5 * (1 + torch.erf(z / math.sqrt(2))),  # z·Φ(z)
    "silu": lambda z: z / (1 + torch.exp(-z)),  # z·sigmoid(z)
    "gelu-tanh": lambda z: (
        0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    ),
    "gelu-tanh-bloom": lambda z: 0.5 * z * (1 + torch.tanh(0.79788456 * (z + 0.044715 * z**3))),
}


#: torch's module for each activation (the nn.Sequential reference).
class _BloomGelu(nn.Module):
    """transformers' ``bloom_gelu_forward`` (BloomGelu in eval mode), written out."""

    def forward(self, z):
        return z * 0.5 * (1.0 + torch.tanh(0.79788456 * z * (1 + 0.044715 * z * z)))


MODULES = {
    "relu": nn.ReLU(),
    "gelu": nn.GELU(),
    "silu": nn.SiLU(),
    "gelu-tanh": nn.GELU(approximate="tanh"),
    "gelu-tanh-bloom": _BloomGelu(),
}


def _weights(generator, d=3, m=5, batch=(), dtype=F64):
    draw = lambda *shape: torch.randn(*batch, *shape, generator=generator, dtype=dtype)  # noqa: E731
    return draw(m, d) / math.sqrt(d), draw(m), draw(d, m) / math.sqrt(m), draw(d)


def _torch_mlp(W1, b1, W2, b2, activation):
    """The block as torch writes it: Linear(d, m), σ, Linear(m, d), weights copied in."""
    m, d = W1.shape
    fc1, fc2 = nn.Linear(d, m, dtype=W1.dtype), nn.Linear(m, d, dtype=W1.dtype)
    with torch.no_grad():
        fc1.weight.copy_(W1), fc1.bias.copy_(b1), fc2.weight.copy_(W2), fc2.bias.copy_(b2)
    return nn.Sequential(fc1, MODULES[activation], fc2)


def test_every_activation_has_a_written_reference():
    assert set(REFERENCE) == set(ACTIVATIONS) == set(MODULES)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_table_is_its_formula(name):
    z = torch.linspace(-6, 6, 241, dtype=F64)
    torch.testing.assert_close(ACTIVATIONS[name](z), REFERENCE[name](z), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_velocity_is_torchs_mlp_float64(name, generator):
    W1, b1, W2, b2 = _weights(generator)
    x = torch.randn(7, 3, generator=generator, dtype=F64)
    field = MLP(W1, b1, W2, b2, activation=name)
    expected = _torch_mlp(W1, b1, W2, b2, name)(x).detach()
    got = field.velocity(Empirical(x))
    assert got.dtype == F64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # μ plays no part: the velocity at x is F(x) whatever the tokens are.
    other = Empirical(torch.randn(4, 3, generator=generator, dtype=F64))
    torch.testing.assert_close(field.velocity(other, x), expected, rtol=1e-12, atol=1e-12)


def test_float32_points_take_their_dtype(generator):
    # float64 weights, float32 tokens: computed in float32 (the library's dtype rule),
    # within float32 rounding of the float64 reference (|F| ~ 1: 1e-5 absolute).
    W1, b1, W2, b2 = _weights(generator)
    x = torch.randn(6, 3, generator=generator, dtype=F64)
    field = MLP(W1, b1, W2, b2)
    got = field.velocity(Empirical(x.float()))
    assert got.dtype == torch.float32
    expected = _torch_mlp(W1, b1, W2, b2, "gelu")(x).detach()
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


def test_no_biases_and_a_callable_activation(generator):
    W1, _, W2, _ = _weights(generator)
    x = torch.randn(5, 3, generator=generator, dtype=F64)
    field = MLP(W1, None, W2, None, activation=torch.tanh)
    torch.testing.assert_close(
        field.velocity(Empirical(x)), torch.tanh(x @ W1.T) @ W2.T, rtol=1e-12, atol=1e-12
    )
    assert repr(field) == "MLP(d=3, m=5, activation='tanh')"


def test_batched_points_and_batched_weights(generator):
    # Weights (2, ...) and points (2, n, d): element b is MLP_b at its own points; unbatched
    # weights broadcast over a batch of clouds.
    W1, b1, W2, b2 = _weights(generator, batch=(2,))
    x = torch.randn(2, 6, 3, generator=generator, dtype=F64)
    batched = MLP(W1, b1, W2, b2, activation="silu")
    got = batched.particle_velocity(0.0, Empirical(x), x, "auto")
    for b in range(2):
        single = MLP(W1[b], b1[b], W2[b], b2[b], activation="silu")
        torch.testing.assert_close(got[b], single.velocity(Empirical(x[b])), rtol=1e-13, atol=0)
    shared = MLP(W1[0], b1[0], W2[0], b2[0], activation="silu")
    torch.testing.assert_close(
        shared.particle_velocity(0.0, Empirical(x), x, "auto")[1],
        shared.velocity(Empirical(x[1])),
        rtol=1e-13,
        atol=0,
    )


def test_callables_of_t(generator):
    W1, b1, W2, b2 = _weights(generator)
    field = MLP(lambda t: (1 + t) * W1, b1, W2, lambda t: t * b2, activation="relu")
    assert field.time_dependent and not MLP(W1, b1, W2, b2).time_dependent
    x = torch.randn(5, 3, generator=generator, dtype=F64)
    expected = _torch_mlp(1.5 * W1, b1, W2, 0.5 * b2, "relu")(x).detach()
    torch.testing.assert_close(field.velocity(Empirical(x), t=0.5), expected, rtol=1e-12, atol=0)


def test_kept_weights_follow_in_place_edits_and_dtypes(generator):
    """Constant weights are resolved once per dtype (the stored tensors themselves): an
    in-place edit shows at the next call, a float32 call then a float64 call each get
    their dtype, and time-dependent weights are evaluated at every t (exact comparisons:
    the same arithmetic as a fresh field)."""
    W1, b1, W2, b2 = _weights(generator)
    x = torch.randn(5, 3, generator=generator, dtype=F64)
    field = MLP(W1, b1, W2, b2, activation="relu")
    field.velocity(Empirical(x))
    W1.mul_(2.0)  # the field holds W1 itself
    fresh = MLP(W1.clone(), b1, W2, b2, activation="relu")
    torch.testing.assert_close(field.velocity(Empirical(x)), fresh.velocity(Empirical(x)),
                               rtol=0, atol=0)  # fmt: skip
    single = field.velocity(Empirical(x.float()))
    assert single.dtype == torch.float32
    torch.testing.assert_close(single, fresh.velocity(Empirical(x.float())), rtol=0, atol=0)
    assert field.velocity(Empirical(x)).dtype == F64
    moving = MLP(lambda t: (1 + t) * W1, b1, W2, b2, activation="relu")
    for t in (0.0, 0.5, 0.0):
        expected = MLP((1 + t) * W1, b1, W2, b2, activation="relu").velocity(Empirical(x))
        torch.testing.assert_close(moving.velocity(Empirical(x), t=t), expected, rtol=0, atol=0)


def test_gradients_to_points_and_weights():
    generator = torch.Generator().manual_seed(3)
    W1, b1, W2, b2 = (p.requires_grad_() for p in _weights(generator, d=2, m=3))
    x = torch.randn(4, 2, generator=generator, dtype=F64, requires_grad=True)

    def velocity(x, W1, b1, W2, b2):
        return MLP(W1, b1, W2, b2, activation="gelu").particle_velocity(0.0, None, x, "auto")

    assert torch.autograd.gradcheck(velocity, (x, W1, b1, W2, b2))


def test_one_euler_step_of_size_one_is_the_residual_update(generator):
    # integrate with Euler, h = 1, one layer: x ← x + W₂σ(W₁x + b₁) + b₂ exactly.
    W1, b1, W2, b2 = _weights(generator, batch=(2,))
    x = torch.randn(2, 6, 3, generator=generator, dtype=F64)
    field = MLP(W1, b1, W2, b2)
    final = integrate(field, Empirical(x), 1.0, dt=1.0, method="euler").final.points
    for b in range(2):
        block = _torch_mlp(W1[b], b1[b], W2[b], b2[b], "gelu")
        torch.testing.assert_close(final[b], x[b] + block(x[b]).detach(), rtol=1e-12, atol=0)


def _contracting_mlp():
    """F(x) = gelu(1/2 − x) − gelu(x + 1/2) on R: odd, F'(0) < 0, |F(x)| ≈ |x| far out."""
    return MLP(
        torch.tensor([[1.0], [-1.0]], dtype=F64),
        torch.tensor([0.5, 0.5], dtype=F64),
        torch.tensor([[-1.0, 1.0]], dtype=F64),
        None,
    )


def test_grid_velocity_and_flow_match_particles():
    # 1-D: the velocity on a Grid is F at its cell centres; the finite-volume flow against
    # the cell masses carried along the characteristics (RK4): mean and variance agree to
    # the finite-volume error (cell = 0.05, t = 0.5; seen: 1e-4 and 2e-3).
    field = _contracting_mlp()
    g0 = Gaussian(torch.tensor([0.3], dtype=F64), torch.eye(1, dtype=F64))
    grid = Grid.from_gaussian(g0, 200, -5.0, 5.0)
    centres = grid.centres()
    gelu = REFERENCE["gelu"]
    torch.testing.assert_close(
        field.velocity(grid), gelu(0.5 - centres) - gelu(centres + 0.5), rtol=1e-12, atol=1e-14
    )
    grid_final = integrate(field, grid, 0.5).final
    cloud = Empirical(centres, grid.density.reshape(-1))
    particles = integrate(field, cloud, 0.5, dt=0.01, method="rk4").final
    assert float(grid_final.density.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float(grid_final.mean()[0]) == pytest.approx(float(particles.mean()[0]), abs=1e-3)
    assert float(grid_final.cov()[0, 0]) == pytest.approx(float(particles.cov()[0, 0]), abs=5e-3)


def test_gaussians_are_refused(generator):
    field = MLP(*_weights(generator))
    g = Gaussian(torch.zeros(3, dtype=F64), torch.eye(3, dtype=F64))
    with pytest.raises(
        GaussianNotPreserved, match=r"nonlinear per-token field.*no closed moment ODE"
    ):
        field.velocity(g, torch.zeros(1, 3, dtype=F64))
    with pytest.raises(GaussianNotPreserved, match="Integrate particles instead"):
        integrate(field, g, 1.0)
    assert "no closed moment ODE" in field.gaussian_refusal()


# ---------------------------------------------------------------------- bad input
def test_unknown_activation_lists_the_known_ones(generator):
    with pytest.raises(ValueError, match=r"unknown activation 'gleu'; known: relu, gelu, silu"):
        MLP(*_weights(generator), activation="gleu")
    with pytest.raises(TypeError, match=r"activation must be a name .* received int"):
        MLP(*_weights(generator), activation=3)


def test_an_activation_that_is_not_elementwise(generator):
    field = MLP(*_weights(generator), activation=lambda z: z.sum(-1))
    with pytest.raises(
        ValueError, match=r"returned shape \(4,\) for hidden units of shape \(4, 5\)"
    ):
        field.velocity(Empirical(torch.zeros(4, 3, dtype=F64)))


@pytest.mark.parametrize(
    ("name", "shape", "message"),
    [
        ("W2", (3, 4), "W2 has shape (3, 4) but W1 has shape (5, 3), so W2 must have "
                        "shape (..., 3, 5)"),
        ("W2", (2, 5), "W2 has shape (2, 5) but W1 has shape (5, 3), so W2 must have "
                        "shape (..., 3, 5)"),
        ("b1", (3,), "b1 has shape (3,) but W1 has shape (5, 3), so b1 must have shape (..., 5)"),
        ("b2", (5,), "b2 has shape (5,) but W1 has shape (5, 3), so b2 must have shape (..., 3)"),
        ("W1", (5,), "W1 must have shape (..., m, d) with sizes >= 1; received shape (5,)"),
    ],
)  # fmt: skip
def test_weights_that_do_not_chain(name, shape, message, generator):
    weights = dict(zip(("W1", "b1", "W2", "b2"), _weights(generator), strict=True))
    weights[name] = torch.zeros(shape, dtype=F64)
    with pytest.raises(ValueError, match="MLP: .*" + re.escape(message)):
        MLP(**weights)


def test_batches_that_do_not_broadcast(generator):
    W1, b1, W2, b2 = _weights(generator)
    with pytest.raises(
        ValueError,
        match=r"batch shapes of the weights do not broadcast: W1 \(2,\), b1 \(\), W2 \(3,\)",
    ):
        MLP(W1.expand(2, 5, 3), b1, W2.expand(3, 3, 5), b2)


def test_non_finite_weights(generator):
    W1, b1, W2, b2 = _weights(generator)
    W2 = W2.clone()
    W2[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"W2 contains 1 non-finite value\(s\).*index \(1, 2\)"):
        MLP(W1, b1, W2, b2)
    inf_later = MLP(W1, lambda t: b1 / (1 - t), _weights(generator)[2], b2)
    with pytest.raises(ValueError, match=r"b1\(1.0\) contains 5 non-finite"):
        inf_later.velocity(Empirical(torch.zeros(2, 3, dtype=F64)), t=1.0)


def test_a_layer_that_changes_shape_in_time(generator):
    W1, b1, W2, b2 = _weights(generator)
    field = MLP(lambda t: W1 if t < 1 else W1[:4], b1, W2, b2)
    with pytest.raises(
        ValueError, match=r"W1 changed shape over time: \(4, 3\) instead of \(5, 3\)"
    ):
        field.velocity(Empirical(torch.zeros(2, 3, dtype=F64)), t=1.0)


def test_dimension_mismatch_with_the_measure(generator):
    field = MLP(*_weights(generator))
    with pytest.raises(
        ValueError,
        match=r"measure lives in d = 2 but the MLP acts on d = 3 \(W1 has shape \(5, 3\)\)",
    ):
        field.velocity(Empirical(torch.zeros(4, 2, dtype=F64)))
    with pytest.raises(ValueError, match="measure lives in d = 2 but the MLP acts on d = 3"):
        integrate(field, Empirical(torch.zeros(4, 2, dtype=F64)), 1.0)


def test_a_feed_forward_field_without_its_map():
    from tpde.fields import FeedForward, Weights

    class Unfinished(FeedForward):
        def __init__(self):
            self.params = Weights("Unfinished", {"W": ("d", "d")}, {"W": torch.eye(2)})
            self.dim = 2

    with pytest.raises(NotImplementedError, match=r"Unfinished does not implement feed_forward"):
        Unfinished().velocity(Empirical(torch.zeros(3, 2)))
