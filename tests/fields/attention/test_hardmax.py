"""Hardmax attention against brute force, softmax at large β, and its bad input; batched Masked."""

import pytest
import torch

from tpde.fields import L2, Hardmax, Masked, Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

F64 = torch.float64


def _brute(points, weights, queries, A, V, tol):
    """Loop over queries: the tied maximisers of yᵀAx, averaged by mass, then V."""
    out = []
    for x in queries:
        scores = torch.stack([y @ A @ x for y in points])
        bound = float((A @ x).norm() * points.norm(dim=-1).max())
        tied = scores >= scores.max() - tol * bound
        w = weights * tied
        out.append(V @ (w @ points / w.sum()))
    return torch.stack(out)


def test_hardmax_matches_brute_force_with_masses_and_values():
    gen = torch.Generator().manual_seed(0)
    points = torch.randn(30, 3, generator=gen, dtype=F64)
    weights = torch.rand(30, generator=gen, dtype=F64)
    weights = weights / weights.sum()
    A, V = (torch.randn(3, 3, generator=gen, dtype=F64) for _ in range(2))
    field = Hardmax.from_interaction(A, V)
    queries = torch.randn(7, 3, generator=gen, dtype=F64)
    expected = _brute(points, weights, queries, A, V, 64 * torch.finfo(F64).eps)
    got = field.velocity(Empirical(points, weights), queries)
    assert float((got - expected).abs().max()) < 1e-14
    # Q, K, scale as for softmax: A = scale·KᵀQ.
    Q, K = torch.randn(2, 3, generator=gen, dtype=F64), torch.randn(2, 3, generator=gen, dtype=F64)
    qk = Hardmax(Q, K, V, scale=0.5)
    assert torch.allclose(
        qk.velocity(Empirical(points), queries),
        _brute(points, torch.full((30,), 1 / 30, dtype=F64), queries, 0.5 * K.T @ Q, V, 1e-14),
        atol=1e-14,
    )


def test_ties_are_shared_by_mass_and_distinct_scores_are_not():
    eye = torch.eye(2, dtype=F64)
    points = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]], dtype=F64)
    mu = Empirical(points, torch.tensor([0.5, 0.25, 0.25], dtype=F64))
    query = torch.tensor([[0.0, 1.0]], dtype=F64)  # every score 0: a three-way tie
    got = Hardmax.from_interaction(eye, eye).velocity(mu, query)
    assert torch.allclose(got, torch.tensor([[0.5 * 1 + 0.25 * -1, 0.0]], dtype=F64))
    near = torch.tensor([[1e-9, 1.0]], dtype=F64)  # scores 1e-9, −1e-9, 0: no tie
    assert torch.equal(Hardmax.from_interaction(eye, eye).velocity(mu, near), points[:1])
    wide = Hardmax.from_interaction(eye, eye, tie_tol=1e-6)  # 1e-9 is within 1e-6·|Ax|·max|y|
    assert torch.allclose(wide.velocity(mu, near), got, atol=1e-15)


def test_softmax_at_large_beta_tends_to_hardmax_and_batches_broadcast():
    gen = torch.Generator().manual_seed(2)
    points = torch.randn(4, 25, 2, generator=gen, dtype=F64)
    A = torch.randn(4, 2, 2, generator=gen, dtype=F64)
    V = torch.eye(2, dtype=F64)
    hard = Hardmax.from_interaction(A, V).velocity(Empirical(points))
    assert hard.shape == (4, 25, 2)
    for b in range(4):
        one = Hardmax.from_interaction(A[b], V).velocity(Empirical(points[b]))
        assert torch.equal(hard[b], one)
    soft = Softmax.from_interaction(1e5 * A, V).velocity(Empirical(points), engine="dense")
    assert float((soft - hard).abs().max()) < 1e-10
    assert (
        Hardmax.from_field(Softmax.from_interaction(A[0], V))
        .velocity(Empirical(points[0]))
        .equal(hard[0])
    )


def test_hardmax_flows_under_a_norm_scheme():
    eye = torch.eye(3, dtype=F64)
    gen = torch.Generator().manual_seed(3)
    mu = Empirical(torch.randn(12, 3, generator=gen, dtype=F64)).normalized()
    traj = integrate(Normalized(Hardmax.from_interaction(eye, eye)), mu, 1.0, dt=0.1,
                     method="rk4", events=())  # fmt: skip
    assert float((traj.final.points.norm(dim=-1) - 1).abs().max()) < 1e-14
    # A = I on the sphere: every token's maximiser is itself, so nothing moves.
    assert torch.allclose(traj.final.points, mu.points, atol=1e-15)


def test_hardmax_bad_input():
    eye = torch.eye(2, dtype=F64)
    l2 = L2(eye, eye, eye)
    with pytest.raises(TypeError, match=r"takes a Softmax or Cosine field .* received L2"):
        Hardmax.from_field(l2)
    with pytest.raises(TypeError, match="received Masked"):
        Hardmax.from_field(Masked(Softmax(eye, eye, eye)))
    biased = Softmax(eye, eye, eye, query_bias=torch.ones(2, dtype=F64))
    with pytest.raises(TypeError, match="without query/key/value biases"):
        Hardmax.from_field(biased)
    field = Hardmax.from_interaction(eye, eye)
    mu = Empirical(torch.randn(5, 2, dtype=F64))
    with pytest.raises(ValueError, match="engine must be 'auto', 'dense' or 'chunked'; received "
                                         "'sdpa'"):  # fmt: skip
        field.velocity(mu, engine="sdpa")
    with pytest.raises(ValueError, match="tie_tol"):
        Hardmax.from_interaction(eye, eye, tie_tol=0.0)


def test_masked_accepts_a_batch_of_token_clouds():
    gen = torch.Generator().manual_seed(4)
    S, n, d = 3, 6, 2
    points = torch.randn(S, n, d, generator=gen, dtype=F64)
    Q = torch.randn(S, d, d, generator=gen, dtype=F64)
    positions = torch.linspace(0, 1, n, dtype=F64)
    batched = Masked(Softmax(Q, torch.eye(d, dtype=F64), torch.eye(d, dtype=F64), scale=1.0))
    got = batched.velocity(Empirical(points, positions=positions))
    for s in range(S):
        one = Masked(Softmax(Q[s], torch.eye(d, dtype=F64), torch.eye(d, dtype=F64), scale=1.0))
        expected = one.velocity(Empirical(points[s], positions=positions))
        assert float((got[s] - expected).abs().max()) < 1e-14
