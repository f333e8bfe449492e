"""Sums of fields: velocity on every measure kind, capabilities from the parts, bad input."""

import pytest
import torch

from tpde.fields import (
    MLP,
    LayerSchedule,
    Linear,
    Masked,
    Normalized,
    PreLN,
    Sigmoid,
    Softmax,
    Sum,
    supports,
)
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64


def _draw(generator, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=generator, dtype=F64)


def _parts(generator, d=2):
    softmax = Softmax(_draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d))
    mlp = MLP(_draw(generator, 5, d), None, _draw(generator, d, 5, scale=0.3), None, "silu")
    return softmax, mlp


def test_the_sum_is_the_sum_of_the_velocities_on_particles_batches_and_grids(generator):
    # float64; the same two evaluations added: equal to rounding (1e-14).
    softmax, mlp = _parts(generator)
    layer = softmax + mlp
    assert isinstance(layer, Sum) and layer.parts == (softmax, mlp)
    mu = Empirical(_draw(generator, 7, 2))
    batch = Empirical(_draw(generator, 3, 7, 2))
    grid = Grid(torch.full((6, 5), 1 / 30, dtype=F64), [-1.0, -1.0], [1.0, 1.0])
    for measure in (mu, batch, grid):
        for engine in ("dense", "chunked", "sdpa"):
            expected = softmax.velocity(measure, engine=engine) + mlp.velocity(measure)
            got = layer.velocity(measure, engine=engine)
            torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-14)


def test_sums_flatten_and_keep_gaussians_only_when_every_part_does(generator):
    softmax, mlp = _parts(generator)
    linear = Linear(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64))
    three = softmax + linear + softmax
    assert len(three) == 3 and supports(three, "gaussian")
    assert not supports(three, "softmax_form") and not supports(three, "gradient_flow")
    assert not supports(softmax + mlp, "gaussian")
    # The moment ODE of a sum is the summed closure: c = Σ c_p, B = Σ B_p.
    g = Gaussian(_draw(generator, 2), torch.eye(2, dtype=F64) * 0.3)
    x = _draw(generator, 4, 2)
    expected = 2 * softmax.velocity(g, x) + linear.velocity(g, x)
    torch.testing.assert_close(three.velocity(g, x), expected, rtol=1e-13, atol=1e-13)
    flow = integrate(three, g, 0.2, dt=0.01, method="rk4").final.cov()
    assert torch.isfinite(flow).all()
    with pytest.raises(Exception, match=r"a sum keeps Gaussians Gaussian only if every part.*MLP"):
        integrate(softmax + mlp, g, 0.2)


def test_capabilities_of_wrappers_come_from_their_parts(generator):
    # A schedule with a sigmoid layer used to claim "gaussian"; now it is derived.
    softmax, _ = _parts(generator)
    sigmoid = Sigmoid(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    assert supports(LayerSchedule([softmax, softmax]), "gaussian")
    assert not supports(LayerSchedule([softmax, sigmoid]), "gaussian")
    assert not supports(Masked(softmax), "gaussian")
    assert supports(Normalized(softmax), "projection")
    assert not supports(Normalized(softmax, PreLN()), "projection")
    sphere = Normalized(softmax)
    assert supports(sphere + sphere, "projection")  # one scheme object: one projection
    mixed = sphere + Normalized(softmax)  # two post-LN objects: refused unsplit
    assert not supports(mixed, "projection") and mixed.projection_needs_split()


def test_a_post_norm_sum_needs_a_splitting_method(generator):
    softmax, mlp = _parts(generator)
    layer = Normalized(softmax, "layernorm") + Normalized(mlp, "layernorm")
    mu = Empirical(_draw(generator, 5, 2))
    with pytest.raises(ValueError, match=r"project differently.*method='lie-trotter'"):
        integrate(layer, mu, 1.0)
    with pytest.raises(ValueError, match="has no single projection"):
        layer.project(mu.points)


def test_piecewise_parts_make_a_piecewise_sum(generator):
    softmax, mlp = _parts(generator)
    stack = LayerSchedule([softmax, mlp])
    layer = stack + mlp
    assert layer.breakpoints == (1.0,)
    first, second = layer.piece(0.5), layer.piece(1.5)
    assert first.parts == (softmax, mlp) and second.parts == (mlp, mlp)
    assert layer.piece(0.2) is first  # built once per combination
    assert (mlp + mlp).piece(3.0).parts == (mlp, mlp)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda s, m: Sum([]), TypeError, "non-empty list of fields"),
        (lambda s, m: Sum([s, 3]), TypeError, "part 1 of the sum is a int"),
        (lambda s, m: s + 3, TypeError, "unsupported operand"),
        (
            lambda s, m: s + Softmax(torch.eye(3), torch.eye(3), torch.eye(3)),
            ValueError,
            r"one dimension d; received parts of dimensions \[2, 3\]",
        ),
    ],
)
def test_bad_sums_name_the_cause(generator, build, error, match):
    with pytest.raises(error, match=match):
        build(*_parts(generator))
