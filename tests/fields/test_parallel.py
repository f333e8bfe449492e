"""Parallel blocks: the same velocity as a Sum, stepped whole by the splitting methods."""

import pytest
import torch

from tpde.fields import (
    MLP,
    LayerNorm,
    LayerSchedule,
    Normalized,
    Parallel,
    RMSNorm,
    Softmax,
    Sum,
)
from tpde.flows import integrate
from tpde.measures import Empirical

F64 = torch.float64


def _draw(generator, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=generator, dtype=F64)


def _branches(generator, d=3):
    attention = Softmax(
        _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d, scale=0.5)
    )
    mlp = MLP(_draw(generator, 6, d), _draw(generator, 6), _draw(generator, d, 6, scale=0.3), None)
    gamma = torch.rand(d, generator=generator, dtype=F64) + 0.5
    norm = LayerNorm(gamma, _draw(generator, d), placement="pre")
    return Normalized(attention, RMSNorm(gamma)), Normalized(mlp, norm)


def test_velocity_is_the_sums(generator):
    a, b = _branches(generator)
    mu = Empirical(_draw(generator, 5, 3))
    assert torch.equal(Parallel([a, b]).velocity(mu), Sum([a, b]).velocity(mu))
    assert Parallel([a, b]).branches == (a, b) and len(Parallel([a, b])) == 2
    assert not hasattr(Parallel([a, b]), "parts")  # the splitting methods step it whole


def test_lie_trotter_euler_at_h1_is_the_parallel_block(generator):
    # x ← x + A(x) + F(x), both at the same x, per layer: float64, the same operations in
    # the same order (tolerance 0), and not the sequential block.
    layers = [Sum([Parallel(_branches(generator))]) for _ in range(3)]
    mu = Empirical(_draw(generator, 5, 3))
    traj = integrate(LayerSchedule(layers), mu, 3.0, dt=1.0, method="lie-trotter", save=4)
    x = mu.points
    for index, layer in enumerate(layers):
        (block,) = layer.parts
        a, b = (branch.velocity(Empirical(x), t=float(index)) for branch in block.branches)
        x = x + (a + b)
        assert torch.equal(traj.measures[index + 1].points, x)
    sequential = integrate(Sum(list(layers[0].parts[0].branches)), mu, 1.0, dt=1.0,
                           method="lie-trotter").final.points  # fmt: skip
    assert float((sequential - traj.measures[1].points).abs().max()) > 1e-3


def test_one_shared_post_projection_is_applied_once(generator):
    a, b = _branches(generator)
    post = LayerNorm()
    block = Parallel([Normalized(a.field, post), Normalized(b.field, post)])
    assert block.supports("projection")
    mu = Empirical(_draw(generator, 5, 3))
    got = integrate(Sum([block]), mu, 1.0, dt=1.0, method="lie-trotter").final.points
    assert torch.equal(got, post.project(mu.points + block.velocity(mu)))


def test_bad_input_raises(generator):
    a, b = _branches(generator)
    with pytest.raises(TypeError, match=r"non-empty list of fields.*received Normalized"):
        Parallel(a)
    with pytest.raises(TypeError, match=r"non-empty list of fields.*received list"):
        Parallel([])
    with pytest.raises(TypeError, match="part 1 of the sum is a int"):
        Parallel([a, 3])
    with pytest.raises(ValueError, match="branches of a Parallel project differently"):
        Parallel([Normalized(a.field, LayerNorm()), Normalized(b.field, LayerNorm())])


def test_positions_and_own_tokens_reach_the_branches():
    # A parallel block of causal RoPE attention: new points need their positions, which the
    # block passes to its branch (as Sum does); at μ's own tokens it equals its Sum.
    from tpde.fields import GroupedQueryAttention, RoPE

    g = torch.Generator().manual_seed(3)
    d, n = 4, 5
    wq, wo = (torch.randn(d, d, generator=g, dtype=torch.float64) for _ in range(2))
    wk, wv = (torch.randn(2, d, generator=g, dtype=torch.float64) for _ in range(2))
    attention = GroupedQueryAttention(wq, wk, wv, wo, 2, 1, position=RoPE(), causal=True)
    mlp_weights = torch.randn(6, d, generator=g, dtype=torch.float64)
    block = Parallel([attention, MLP(mlp_weights, None, mlp_weights.T.clone(), None)])
    mu = Empirical(torch.randn(n, d, generator=g, dtype=torch.float64), positions=torch.arange(n))
    x = torch.randn(3, d, generator=g, dtype=torch.float64)
    assert block.needs_positions
    # the branch is named: a Parallel declares its branches as children (it was unnamed)
    with pytest.raises(
        ValueError,
        match=r"Parallel \(its part GroupedQueryAttention uses positions\) at points x needs",
    ):
        block.velocity(mu, x)
    at = torch.tensor([0, 2, 4])
    expected = Sum([attention, MLP(mlp_weights, None, mlp_weights.T.clone(), None)]).velocity(
        mu, x, positions=at
    )
    torch.testing.assert_close(block.velocity(mu, x, positions=at), expected, rtol=1e-14, atol=0)
    torch.testing.assert_close(block.velocity(mu), Sum(list(block.branches)).velocity(mu))
