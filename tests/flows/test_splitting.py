"""Splitting methods over a sum's parts, and integrate's table of systems (ready systems too)."""

import math

import numpy as np
import pytest
import torch

from tpde.fields import (
    MLP,
    LayerNorm,
    LayerSchedule,
    Normalized,
    PreLN,
    RMSNorm,
    Softmax,
)
from tpde.flows import (
    SYSTEMS,
    BlowUp,
    GridSystem,
    ParticleSystem,
    Splitting,
    integrate,
    register_system,
)
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64


def _draw(generator, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=generator, dtype=F64)


def _layer(generator, d=3, post=False):
    attention = Softmax(
        _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d, scale=0.5)
    )
    mlp = MLP(_draw(generator, 6, d), _draw(generator, 6), _draw(generator, d, 6, scale=0.3), None)
    if post:
        return Normalized(attention, LayerNorm()) + Normalized(mlp, LayerNorm())
    gamma = torch.rand(d, generator=generator, dtype=F64) + 0.5
    return Normalized(attention, RMSNorm(gamma)) + Normalized(mlp, PreLN())


def test_lie_trotter_euler_at_h1_is_the_sequential_layer(generator):
    # The discrete network: x ← x + A(x) then x ← x + F(x), per layer; float64, exact (the
    # same operations in the same order), tolerance 0.
    layers = [_layer(generator) for _ in range(3)]
    mu = Empirical(_draw(generator, 5, 3))
    traj = integrate(LayerSchedule(layers), mu, 3.0, dt=1.0, method="lie-trotter", save=4)
    x = mu.points
    for index, layer in enumerate(layers):
        for part in layer.parts:
            x = x + part.velocity(Empirical(x), t=float(index))
        assert torch.equal(traj.measures[index + 1].points, x)
    assert traj.stats["n_rhs"] == 6  # one evaluation per part and layer, no extra derivative


def test_lie_trotter_applies_each_parts_projection_post_norm(generator):
    # BERT's Post-LN layer: x ← LN(x + A x); x ← LN(x + F x). float64, exact.
    layer = _layer(generator, post=True)
    mu = Empirical(_draw(generator, 5, 3))
    got = integrate(layer, mu, 1.0, dt=1.0, method="lie-trotter").final.points
    x = mu.points
    for part in layer.parts:
        x = part.project(x + part.velocity(Empirical(x)))
    assert torch.equal(got, x)


@pytest.mark.parametrize(("kind", "order"), [("lie-trotter", 1), ("strang", 2)])
def test_splittings_converge_at_their_order(generator, kind, order):
    # Against the unsplit flow (RK4, dt = 1e-2: error ~1e-10); steps h = 0.1, 0.05, 0.025 with
    # RK4 sub-steps. Measured slopes 1.00 and 2.00; accepted within 0.1.
    layer = _layer(generator)
    mu = Empirical(_draw(generator, 5, 3))
    reference = integrate(layer, mu, 1.0, dt=1e-2, method="rk4").final.points
    method = Splitting(kind, inner="rk4")
    assert method.order == order
    errors = [
        float((integrate(layer, mu, 1.0, dt=h, method=method).final.points - reference).norm())
        for h in (0.1, 0.05, 0.025)
    ]
    slopes = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    assert all(abs(s - order) < 0.1 for s in slopes), slopes


def test_splitting_on_gaussians_and_batches(generator):
    # A sum of Gaussian fields splits on its moment ODE; a batch of clouds steps per element.
    d = 2
    a = Softmax(_draw(generator, d, d), _draw(generator, d, d), -torch.eye(d, dtype=F64))
    b = Softmax(_draw(generator, d, d), _draw(generator, d, d), 0.5 * torch.eye(d, dtype=F64))
    g = Gaussian(torch.zeros(d, dtype=F64), 0.2 * torch.eye(d, dtype=F64))
    strang = Splitting("strang", inner="rk4")
    split = integrate(a + b, g, 0.5, dt=0.01, method=strang).final.cov()
    whole = integrate(a + b, g, 0.5, dt=0.01, method="rk4").final.cov()
    torch.testing.assert_close(split, whole, rtol=1e-4, atol=1e-6)  # O(h²) = 1e-4
    batch = Empirical(_draw(generator, 4, 6, d))
    traj = integrate(a + b, batch, 1.0, dt=0.1, method="lie-trotter", events=(BlowUp(1e6),))
    one = integrate(a + b, batch[2], 1.0, dt=0.1, method="lie-trotter").final.points
    torch.testing.assert_close(traj.final.points[2], one, rtol=1e-13, atol=1e-13)


def test_splitting_refuses_fields_that_are_not_sums(generator):
    field = Softmax(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    mu = Empirical(_draw(generator, 4, 2))
    with pytest.raises(ValueError, match=r"'strang' splits a sum.*a Softmax, not a sum.*rk4"):
        integrate(field, mu, 1.0, method="strang")
    with pytest.raises(ValueError, match="not a sum"):
        integrate(LayerSchedule([field + field, field]), mu, 2.0, method="lie-trotter")
    grid = Grid(torch.full((8,), 1 / 8, dtype=F64), [-1.0], [1.0])
    one_d = Softmax(torch.eye(1, dtype=F64), torch.eye(1, dtype=F64), torch.eye(1, dtype=F64))
    with pytest.raises(ValueError, match=r"strong-stability-preserving.*'lie-trotter'"):
        integrate(one_d + one_d, grid, 1.0, method="lie-trotter")


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Splitting("yoshida"), "unknown splitting 'yoshida'"),
        (lambda: Splitting(inner="strang"), "cannot be a splitting itself"),
        (lambda: Splitting(inner="rodas4"), "must be explicit"),
        (lambda: Splitting(inner="rk5"), "unknown method 'rk5'.*'lie-trotter', 'strang'"),
    ],
)
def test_bad_splittings_name_the_cause(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_integrate_takes_a_ready_system_and_the_table_takes_new_states(generator):
    field = Softmax(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64))
    mu = Empirical(_draw(generator, 5, 2))
    ready = integrate(ParticleSystem(field, mu, "dense"), 0.5, dt=0.05, method="rk4").final.points
    torch.testing.assert_close(ready, integrate(field, mu, 0.5, dt=0.05, method="rk4").final.points)
    # Grid options live on the system, not in the mu0 slot.
    grid = Grid(torch.full((10,), 0.1, dtype=F64), [-1.0], [1.0])
    one_d = Softmax(torch.eye(1, dtype=F64), torch.eye(1, dtype=F64), -torch.eye(1, dtype=F64))
    traj = integrate(GridSystem(one_d, grid, scheme="upwind", cfl=0.4), 0.2)
    assert traj.stats["scheme"] == "upwind" and traj.stats["cfl"] == 0.4

    class Tokens(Empirical):  # a new kind of state: one table entry, no edit of integrate
        pass

    register_system(Tokens, lambda f, m, t0, engine: ParticleSystem(f, m, engine))
    try:
        out = integrate(field, Tokens(mu.points), 0.5, dt=0.05, method="rk4").final.points
    finally:
        del SYSTEMS[Tokens]
    np.testing.assert_allclose(out.numpy(), ready.numpy(), rtol=1e-14)
    with pytest.raises(TypeError, match=r"carries its own state.*received a Empirical"):
        integrate(ParticleSystem(field, mu), mu, 1.0)
    with pytest.raises(TypeError, match=r"needs the final time t1: integrate\(system, t1\)"):
        integrate(ParticleSystem(field, mu))
    with pytest.raises(TypeError, match="register_system takes a measure type"):
        register_system("tokens", None)


def _llama_block(x, weights, base, eps):
    """A hand-written Pre-RMSNorm decoder layer (Llama's, float64): RMSNorm, causal GQA with
    rotate-half RoPE at positions 0 … n−1, residual; RMSNorm, SwiGLU, residual."""
    (g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd), (H, Hkv, dh) = weights, (4, 2, 4)
    n = x.shape[0]

    def rms(z, g):
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps) * g

    def rope(z):  # (heads, n, dh), rotate half
        freq = base ** (-torch.arange(0, dh, 2, dtype=F64) / dh)
        angle = torch.arange(n, dtype=F64)[:, None] * freq[None]
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
        half = torch.cat([-z[..., dh // 2 :], z[..., : dh // 2]], -1)
        return z * cos + half * sin

    h = rms(x, g1)
    q = rope((h @ Wq.T).reshape(n, H, dh).transpose(0, 1))
    k = rope((h @ Wk.T).reshape(n, Hkv, dh).transpose(0, 1)).repeat_interleave(H // Hkv, 0)
    v = (h @ Wv.T).reshape(n, Hkv, dh).transpose(0, 1).repeat_interleave(H // Hkv, 0)
    scores = q @ k.transpose(-1, -2) / dh**0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    x = x + (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, H * dh) @ Wo.T
    h = rms(x, g2)
    return x + (torch.nn.functional.silu(h @ Wg.T) * (h @ Wu.T)) @ Wd.T


def test_lie_trotter_at_h1_is_a_hand_written_llama_block_stack(generator):
    # Pre-RMSNorm layers with causal GQA (4 query heads, 2 key/value heads, RoPE) and SwiGLU,
    # 4 layers, float64: tpde's Lie–Trotter/Euler at h = 1 against the hand-written forward.
    # The same products in another order: measured ~1e-15 relative, tolerance 1e-12.
    from tpde.fields import GroupedQueryAttention, RoPE, SwiGLU

    d, n, base, eps = 8, 7, 500.0, 1e-5
    stack, blocks = [], []
    for _ in range(4):
        g = lambda: 0.5 + torch.rand(d, generator=generator, dtype=F64)  # noqa: E731
        w = lambda *s: _draw(generator, *s, scale=s[-1] ** -0.5)  # noqa: E731
        weights = (g(), w(16, d), w(8, d), w(8, d), w(d, 16), g(), w(12, d), w(12, d), w(d, 12))
        g1, Wq, Wk, Wv, Wo, g2, Wg, Wu, Wd = weights
        attention = GroupedQueryAttention(Wq, Wk, Wv, Wo, 4, 2, position=RoPE(base=base))
        stack.append(
            Normalized(attention, RMSNorm(g1, eps=eps))
            + Normalized(SwiGLU(Wg, Wu, Wd), RMSNorm(g2, eps=eps))
        )
        blocks.append(weights)
    x0 = _draw(generator, n, d)
    mu = Empirical(x0, positions=torch.arange(n, dtype=F64))
    got = integrate(LayerSchedule(stack), mu, 4.0, dt=1.0, method="lie-trotter").final.points
    x = x0
    for weights in blocks:
        x = _llama_block(x, weights, base, eps)
    torch.testing.assert_close(got, x, rtol=1e-12, atol=1e-12)
