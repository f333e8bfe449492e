"""Masked (causal) attention: the defining sum, the sink, causality, invariances, bad input."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tpde.fields import L2, GaussianNotPreserved, Masked, Sigmoid, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64
# Positions with ties (0.3 three times) and a token at 0.
POSITIONS = torch.tensor([0.3, 0.0, 0.5, 0.3, 1.0, 0.8, 0.3, 0.65], dtype=F64)


def _params(generator, d=3, k=2):
    Q, K = (torch.randn(k, d, generator=generator, dtype=F64) for _ in "QK")
    return Q, K, torch.randn(d, d, generator=generator, dtype=F64)


def _tokens(generator, positions=POSITIONS, d=3):
    n = positions.shape[0]
    points = torch.randn(n, d, generator=generator, dtype=F64)
    weights = torch.rand(n, generator=generator, dtype=F64) + 0.2
    return Empirical(points, weights / weights.sum(), positions)


def _loop_velocity(kernel, V, mu):
    """ẋ_i = V Σ_{s_j ≤ s_i} w_j k(x_i, x_j) x_j / Σ_{s_j ≤ s_i} w_j k(x_i, x_j), with loops."""
    x, w, s = mu.points, mu.weights, mu.positions
    rows = []
    for i in range(mu.n):
        seen = [j for j in range(mu.n) if s[j] <= s[i]]
        num = sum(w[j] * kernel(x[i], x[j]) * x[j] for j in seen)
        den = sum(w[j] * kernel(x[i], x[j]) for j in seen)
        rows.append(V @ (num / den))
    return torch.stack(rows)


@pytest.mark.parametrize("engine", ["dense", "chunked", "sdpa"])
def test_masked_velocity_is_the_causal_sum(engine, generator):
    Q, K, V = _params(generator)
    mu = _tokens(generator)
    A = K.T @ Q / 2**0.5  # scale 1/√k, k = 2
    expected = _loop_velocity(lambda x, y: torch.exp(y @ A @ x), V, mu)
    got = Masked(Softmax(Q, K, V)).velocity(mu, engine=engine)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # L2: k(x, y) = exp(−scale·|Qx − Ky|²), scale = 1/√2.
    expected = _loop_velocity(lambda x, y: torch.exp(-((Q @ x - K @ y) ** 2).sum() / 2**0.5), V, mu)
    got = Masked(L2(Q, K, V)).velocity(mu, engine=engine)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_first_token_only_attends_to_itself_and_the_sink(generator):
    Q, K, V = _params(generator)
    mu = _tokens(generator)  # token 1 is alone at position 0
    x0, w0 = mu.points[1], mu.weights[1]
    # Without an external sink: ẋ_0 = Vx_0 under softmax.
    plain = Masked(Softmax(Q, K, V)).velocity(mu, engine="sdpa")
    torch.testing.assert_close(plain[1], V @ x0, rtol=1e-13, atol=1e-13)
    # External sink m·δ_z: softmax over {x_0 (mass w_0), z (mass m)}.
    z = torch.tensor([0.5, -1.0, 0.2], dtype=F64)
    A = K.T @ Q / 2**0.5
    m = 0.3
    a, b = w0 * torch.exp(x0 @ A @ x0), m * torch.exp(z @ A @ x0)
    sink = Masked(Softmax(Q, K, V), sink_mass=m, sink_point=z)
    for engine in ("dense", "chunked", "sdpa"):
        torch.testing.assert_close(
            sink.velocity(mu, engine=engine)[1], V @ (a * x0 + b * z) / (a + b), rtol=1e-12, atol=0
        )
    # ... and later tokens do not matter to it.
    moved = mu.points.clone()
    moved[[0, 2, 4]] += 5.0
    later = sink.velocity(Empirical(moved, mu.weights, mu.positions))
    torch.testing.assert_close(later[1], sink.velocity(mu)[1], rtol=1e-14, atol=1e-14)


def test_null_sink_at_the_origin_only_adds_to_the_normaliser(generator):
    # z = 0 under softmax: e^{0} = 1 joins every denominator with weight m, 0 the numerators.
    Q, K, V = _params(generator)
    mu = _tokens(generator, positions=torch.zeros(5, dtype=F64))
    A = K.T @ Q / 2**0.5
    x, w = mu.points, mu.weights
    kernel = w[None, :] * torch.exp(x @ A.T @ x.T)
    expected = (kernel @ x / (kernel.sum(1, keepdim=True) + 0.4)) @ V.T
    got = Masked(Softmax(Q, K, V), sink_mass=0.4).velocity(mu)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("engine", ["dense", "sdpa"])
def test_equal_positions_see_everything(engine, generator):
    # One tie group of all tokens: the causal mask is empty and Masked(f) = f.
    Q, K, V = _params(generator)
    mu = _tokens(generator, positions=torch.full((6,), 0.4, dtype=F64))
    for field in (Softmax(Q, K, V), L2(Q, K, V)):
        torch.testing.assert_close(
            Masked(field).velocity(mu, engine=engine), field.velocity(mu), rtol=1e-12, atol=1e-12
        )


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), engine=st.sampled_from(["dense", "sdpa"]))
def test_permuting_tokens_with_positions_permutes_velocities(seed, engine):
    gen = torch.Generator().manual_seed(seed)
    Q, K, V = _params(gen)
    n = 12
    positions = torch.randint(0, 5, (n,), generator=gen).double() / 4  # many ties
    mu = _tokens(gen, positions=positions)
    perm = torch.randperm(n, generator=gen)
    field = Masked(Softmax(Q, K, V), sink_mass=0.1)
    permuted = Empirical(mu.points[perm], mu.weights[perm], mu.positions[perm])
    torch.testing.assert_close(
        field.velocity(permuted, engine=engine),
        field.velocity(mu, engine=engine)[perm],
        rtol=1e-12,
        atol=1e-12,
    )


def test_earlier_tokens_ignore_later_ones(generator):
    Q, K, V = _params(generator)
    mu = _tokens(generator)
    field = Masked(L2(Q, K, V))
    moved = mu.points.clone()
    moved[4] += 3.0  # the token at position 1.0
    after = field.velocity(Empirical(moved, mu.weights, mu.positions), engine="sdpa")
    before = field.velocity(mu, engine="sdpa")
    earlier = POSITIONS < 1.0
    torch.testing.assert_close(after[earlier], before[earlier], rtol=1e-14, atol=1e-14)
    assert not torch.allclose(after[4], before[4])


def test_velocity_at_other_points_uses_their_positions(generator):
    Q, K, V = _params(generator)
    mu = _tokens(generator)
    field = Masked(Softmax(Q, K, V))
    own = field.velocity(mu)
    at = field.velocity(mu, mu.points[[2, 5]], positions=POSITIONS[[2, 5]], engine="chunked")
    torch.testing.assert_close(at, own[[2, 5]], rtol=1e-13, atol=1e-13)


def test_flow_keeps_positions_and_the_first_token_follows_exp_tv(generator):
    # The token alone at position 0 sees only itself: x(t) = e^{tV}x(0) exactly.
    Q, K, V = _params(generator)
    V = 0.5 * V
    mu = _tokens(generator)
    traj = integrate(Masked(Softmax(Q, K, V)), mu, 1.0, dt=0.02, method="rk4")
    assert traj.status == "completed"
    assert torch.equal(traj.final.positions, mu.positions)
    torch.testing.assert_close(
        traj.final.points[1], torch.linalg.matrix_exp(V) @ mu.points[1], rtol=1e-9, atol=1e-9
    )  # RK4, dt = 0.02: local error ~ (0.02·‖V‖)^5


def test_time_dependent_parameters(generator):
    _, K, V = _params(generator)
    mu = _tokens(generator)
    field = Masked(Softmax(lambda t: t * torch.ones(2, 3, dtype=F64), K, V))
    assert not torch.allclose(field.velocity(mu, t=0.0), field.velocity(mu, t=1.0))


# ---------------------------------------------------------------------- bad input


def test_missing_positions_raise(generator):
    Q, K, V = _params(generator)
    field = Masked(Softmax(Q, K, V))
    mu = Empirical(torch.randn(5, 3, generator=generator, dtype=F64))
    with pytest.raises(ValueError, match="needs token positions"):
        field.velocity(mu)
    with pytest.raises(ValueError, match="needs token positions"):
        integrate(field, mu, 1.0)
    with pytest.raises(ValueError, match="needs their positions"):
        field.velocity(_tokens(generator), mu.points)
    with pytest.raises(ValueError, match="pass x too"):
        field.velocity(_tokens(generator), positions=POSITIONS)


@pytest.mark.parametrize("engine", ["dense", "sdpa"])
def test_the_mask_depends_only_on_the_order_of_positions(engine, generator):
    # integer token indices and s = p / (n - 1) give the same causal field (ties kept)
    Q, K, V = _params(generator)
    mu = _tokens(generator)
    integers = torch.tensor([2.0, 0, 3, 2, 7, 6, 2, 4], dtype=F64)  # the order of POSITIONS
    field = Masked(Softmax(Q, K, V))
    relabelled = Empirical(mu.points, mu.weights, positions=integers)
    torch.testing.assert_close(
        field.velocity(relabelled, engine=engine),
        field.velocity(mu, engine=engine),
        rtol=1e-12,
        atol=0,
    )


def test_negative_positions_raise(generator):
    Q, K, V = _params(generator)
    points = torch.randn(3, 3, generator=generator, dtype=F64)
    with pytest.raises(ValueError, match=r"positions must be ≥ 0.*received a minimum of -1.5"):
        Empirical(points, positions=[0.0, -1.5, 1.5])
    with pytest.raises(ValueError, match=r"positions must be ≥ 0.*received a minimum of -0.1"):
        Masked(Softmax(Q, K, V)).velocity(_tokens(generator), points, positions=[-0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"positions must have shape \(3,\)"):
        Masked(Softmax(Q, K, V)).velocity(_tokens(generator), points, positions=[0.1, 0.2])


def test_a_query_that_sees_no_key_raises(generator):
    Q, K, V = _params(generator)
    mu = _tokens(generator, positions=torch.tensor([0.5, 0.6, 0.9], dtype=F64))
    with pytest.raises(ValueError, match="sees no key"):
        Masked(Softmax(Q, K, V)).velocity(mu, mu.points[:1], positions=[0.2])
    # An external sink at position 0 is seen by every query.
    out = Masked(Softmax(Q, K, V), sink_mass=0.1).velocity(mu, mu.points[:1], positions=[0.2])
    torch.testing.assert_close(out, torch.zeros(1, 3, dtype=F64))  # z = 0: Vz = 0


def test_gaussians_have_no_masked_closure(generator):
    Q, K, V = _params(generator)
    field = Masked(Softmax(Q, K, V))
    g = Gaussian(torch.zeros(3, dtype=F64), torch.eye(3, dtype=F64))
    with pytest.raises(GaussianNotPreserved, match="a Gaussian carries none"):
        integrate(field, g, 1.0)
    with pytest.raises(GaussianNotPreserved, match="a Gaussian carries none"):
        field.velocity(g, torch.zeros(1, 3, dtype=F64))
    with pytest.raises(GaussianNotPreserved, match="a Gaussian carries none"):
        field.gaussian_rhs(0.0, g.mean(), g.cov())


def test_bad_construction(generator):
    Q, K, V = _params(generator)
    with pytest.raises(TypeError, match="wraps a field whose attention is one softmax average"):
        Masked(Sigmoid(Q, K, V))
    with pytest.raises(TypeError, match="wraps a field whose attention is one softmax average"):
        Masked(Masked(Softmax(Q, K, V)))
    with pytest.raises(ValueError, match="sink_mass must be finite and >= 0"):
        Masked(Softmax(Q, K, V), sink_mass=-0.1)
    with pytest.raises(ValueError, match=r"sink_point must have shape \(3,\)"):
        Masked(Softmax(Q, K, V), sink_mass=0.1, sink_point=torch.zeros(2))
    with pytest.raises(ValueError, match="sink_point contains 1 non-finite"):
        Masked(Softmax(Q, K, V), sink_mass=0.1, sink_point=[0.0, float("nan"), 0.0])


def test_the_flow_hook_only_evaluates_at_own_tokens(generator):
    # integrate calls particle_velocity at μ's own tokens; other points need positions.
    Q, K, V = _params(generator)
    mu = _tokens(generator)
    with pytest.raises(ValueError, match="evaluates at points x other than μ's tokens only"):
        Masked(Softmax(Q, K, V)).particle_velocity(0.0, mu, mu.points[:2], "dense")
