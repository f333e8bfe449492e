"""SwiGLU feed-forward field: against Llama's MLP written with nn.Linear, batches, grids."""

import math
import re

import pytest
import torch
from torch import nn

from tpde.fields import GaussianNotPreserved, SwiGLU
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64


def _weights(generator, d=4, m=6, batch=(), dtype=F64):
    draw = lambda *shape: torch.randn(*batch, *shape, generator=generator, dtype=dtype)  # noqa: E731
    return draw(m, d) / math.sqrt(d), draw(m, d) / math.sqrt(d), draw(d, m) / math.sqrt(m)


class LlamaMLP(nn.Module):
    """transformers' LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)), act_fn = SiLU."""

    def __init__(self, W_gate, W_up, W_down):
        super().__init__()
        m, d = W_gate.shape
        self.gate_proj = nn.Linear(d, m, bias=False, dtype=W_gate.dtype)
        self.up_proj = nn.Linear(d, m, bias=False, dtype=W_gate.dtype)
        self.down_proj = nn.Linear(m, d, bias=False, dtype=W_gate.dtype)
        with torch.no_grad():
            for layer, weight in zip(
                (self.gate_proj, self.up_proj, self.down_proj), (W_gate, W_up, W_down), strict=True
            ):
                layer.weight.copy_(weight)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def test_velocity_is_llamas_mlp_float64(generator):
    weights = _weights(generator)
    x = torch.randn(9, 4, generator=generator, dtype=F64)
    expected = LlamaMLP(*weights)(x).detach()
    got = SwiGLU(*weights).velocity(Empirical(x))
    assert got.dtype == F64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # silu written out: W_down ((z / (1 + e^{−z})) ⊙ W_up x), z = W_gate x.
    W_gate, W_up, W_down = weights
    z = x @ W_gate.T
    torch.testing.assert_close(
        got, (z / (1 + torch.exp(-z)) * (x @ W_up.T)) @ W_down.T, rtol=1e-12, atol=1e-12
    )


def test_float32(generator):
    # float32 weights and tokens: float32 out, within float32 rounding of float64 (|F| ~ 1).
    weights = _weights(generator)
    x = torch.randn(9, 4, generator=generator, dtype=F64)
    got = SwiGLU(*(w.float() for w in weights)).velocity(Empirical(x.float()))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), LlamaMLP(*weights)(x).detach(), rtol=0, atol=1e-5)


def test_batched_points_and_weights(generator):
    weights = _weights(generator, batch=(3,))
    x = torch.randn(3, 5, 4, generator=generator, dtype=F64)
    field = SwiGLU(*weights)
    got = field.particle_velocity(0.0, Empirical(x), x, "auto")
    assert got.shape == (3, 5, 4)
    for b in range(3):
        expected = LlamaMLP(*(w[b] for w in weights))(x[b]).detach()
        torch.testing.assert_close(got[b], expected, rtol=1e-12, atol=1e-12)
    # One Euler step of size 1 on the batch: each element's residual update x + F_b(x).
    final = integrate(field, Empirical(x), 1.0, dt=1.0, method="euler").final.points
    torch.testing.assert_close(final, x + got, rtol=1e-13, atol=0)


def test_callables_of_t_as_a_layer_schedule(generator):
    # A depth-dependent gate, W_gate(t) = (1 − t)·G₀ + t·G₁: at t = 0.25, the interpolated
    # layer; the flow is the same as that of the field built at each time (RK4, frozen t).
    (G0, W_up, W_down), G1 = _weights(generator), _weights(generator)[0]
    field = SwiGLU(lambda t: (1 - t) * G0 + t * G1, W_up, W_down)
    assert field.time_dependent and not SwiGLU(G0, W_up, W_down).time_dependent
    x = torch.randn(5, 4, generator=generator, dtype=F64)
    expected = LlamaMLP(0.75 * G0 + 0.25 * G1, W_up, W_down)(x).detach()
    torch.testing.assert_close(
        field.velocity(Empirical(x), t=0.25), expected, rtol=1e-12, atol=1e-12
    )


def test_gradients_to_points_and_weights():
    generator = torch.Generator().manual_seed(5)
    weights = tuple(w.requires_grad_() for w in _weights(generator, d=2, m=3))
    x = torch.randn(3, 2, generator=generator, dtype=F64, requires_grad=True)

    def velocity(x, W_gate, W_up, W_down):
        return SwiGLU(W_gate, W_up, W_down).particle_velocity(0.0, None, x, "auto")

    assert torch.autograd.gradcheck(velocity, (x, *weights))


def test_two_d_grid(generator):
    # The velocity on a Grid is F at its cell centres; a short finite-volume flow keeps
    # the mass (what it holds plus what flowed out of the box) and moves the mean (by 7e-3)
    # as the cell masses carried by the characteristics do (cell = 0.1; seen: 7e-5).
    weights = tuple(0.5 * w for w in _weights(generator, d=2, m=3))
    field = SwiGLU(*weights)
    g0 = Gaussian(torch.tensor([0.2, -0.1], dtype=F64), 0.5 * torch.eye(2, dtype=F64))
    grid = Grid.from_gaussian(g0, (60, 60), -3.0, 3.0)
    centres = grid.centres()
    torch.testing.assert_close(
        field.velocity(grid), LlamaMLP(*weights)(centres).detach(), rtol=1e-12, atol=1e-14
    )
    run = integrate(field, grid, 0.3)
    cloud = Empirical(centres, grid.density.reshape(-1))
    particles = integrate(field, cloud, 0.3, dt=0.03, method="rk4").final
    kept = float(run.final.density.sum())
    assert kept + run.stats["outflow"] == pytest.approx(1.0, abs=1e-12)  # 4e-6 flows out
    assert float((grid.mean() - particles.mean()).abs().max()) > 5e-3  # the mean moves
    torch.testing.assert_close(run.final.mean(), particles.mean(), rtol=0, atol=5e-4)


def test_gaussians_are_refused(generator):
    field = SwiGLU(*_weights(generator))
    g = Gaussian(torch.zeros(4, dtype=F64), torch.eye(4, dtype=F64))
    with pytest.raises(
        GaussianNotPreserved, match=r"nonlinear per-token field.*no closed moment ODE"
    ):
        integrate(field, g, 1.0)
    assert "no closed moment ODE" in field.gaussian_refusal()


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("index", "shape", "message"),
    [
        (1, (6, 3), "W_up has shape (6, 3) but W_gate has shape (6, 4), so W_up must have "
                    "shape (..., 6, 4)"),
        (1, (5, 4), "W_up has shape (5, 4) but W_gate has shape (6, 4), so W_up must have "
                    "shape (..., 6, 4)"),
        (2, (6, 4), "W_down has shape (6, 4) but W_gate has shape (6, 4), so W_down must "
                    "have shape (..., 4, 6)"),
    ],
)  # fmt: skip
def test_weights_that_do_not_chain(index, shape, message, generator):
    weights = list(_weights(generator))
    weights[index] = torch.zeros(shape, dtype=F64)
    with pytest.raises(
        ValueError, match=r"SwiGLU: the weights do not chain: " + re.escape(message)
    ):
        SwiGLU(*weights)


def test_a_missing_weight(generator):
    W_gate, _, W_down = _weights(generator)
    with pytest.raises(ValueError, match="SwiGLU: W_up is required; received None"):
        SwiGLU(W_gate, None, W_down)


def test_non_finite_weights(generator):
    W_gate, W_up, W_down = _weights(generator)
    W_gate = W_gate.clone()
    W_gate[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"W_gate contains 1 non-finite value\(s\)"):
        SwiGLU(W_gate, W_up, W_down)


def test_dimension_mismatch_with_the_measure(generator):
    field = SwiGLU(*_weights(generator))
    grid = Grid(torch.full((8,), 1 / 8, dtype=F64), -1.0, 1.0)
    with pytest.raises(
        ValueError, match=r"measure lives in d = 1 but the SwiGLU acts on d = 4 \(W_gate has"
    ):
        integrate(field, grid, 1.0)


def test_batches_of_weights_and_points_that_do_not_broadcast(generator):
    field = SwiGLU(*_weights(generator, batch=(2,)))
    with pytest.raises(ValueError, match=r"batch mismatch: the measure is a batch of shape \(3,\)"):
        integrate(field, Empirical(torch.zeros(3, 5, 4, dtype=F64)), 1.0)


# ---------------------------------------------------------------------- GeGLU
def test_gelu_tanh_gate_is_geglu():
    """SwiGLU(activation="gelu-tanh"): W_down(gelu_tanh(W_gate x) ⊙ W_up x) (Gemma's MLP)."""
    generator = torch.Generator().manual_seed(11)
    W_gate, W_up, W_down = _weights(generator)
    x = torch.randn(5, 4, generator=generator, dtype=F64)
    z = x @ W_gate.T
    gelu = 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    expected = (gelu * (x @ W_up.T)) @ W_down.T
    field = SwiGLU(W_gate, W_up, W_down, activation="gelu-tanh")
    mine = field.velocity(Empirical(x))
    assert float((mine - expected).abs().max() / expected.abs().max()) < 1e-12
    assert "gelu-tanh" in repr(field) and "activation" not in repr(SwiGLU(W_gate, W_up, W_down))


def test_gate_activation_is_checked():
    weights = _weights(torch.Generator().manual_seed(12))
    with pytest.raises(ValueError, match="unknown activation 'swish2'"):
        SwiGLU(*weights, activation="swish2")
    field = SwiGLU(*weights, activation=lambda z: z.sum(-1))
    with pytest.raises(ValueError, match="must act elementwise"):
        field.velocity(Empirical(torch.randn(3, 4, dtype=F64)))
