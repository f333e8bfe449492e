"""GroupedQueryAttention.probabilities: the field's own attention weights (float64 oracles).

Tolerances: 1e-12 relative against the hand-written head-by-head reference of
tests/fields/attention/test_grouped.py and for P·V against the velocity (the same sums in another
order); 1e-14 for row sums (n ≤ 9 terms of a softmax); masked entries exactly 0.
"""

import pytest
import torch

from tests.fields.attention.test_grouped import TIGHT, _reference, _relative, _tokens, _weights
from tpde._engines import softmax_average, softmax_weights
from tpde.fields import ALiBi, GroupedQueryAttention, RoPE
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64
OPTIONS = [
    ({"position": RoPE(base=100.0)}, {"rope": 100.0}),
    ({"position": ALiBi()}, {"slopes": [2.0 ** (-8 * h / 4) for h in range(1, 5)]}),
    ({"window": 3}, {"window": 3}),
    ({"position": RoPE(base=50.0), "window": 4}, {"rope": 50.0, "window": 4}),
    ({"causal": False, "position": RoPE()}, {"causal": False, "rope": 10000.0}),
    ({"causal": False}, {"causal": False}),
]
IDS = ["rope", "alibi", "window", "rope-window", "bidirectional-rope", "plain"]


def _weighted_tokens(generator, positions=None):
    weights = torch.rand(9, generator=generator, dtype=F64) + 0.2
    return _tokens(generator, positions=positions, weights=weights / weights.sum())


@pytest.mark.parametrize(("options", "reference"), OPTIONS, ids=IDS)
def test_probabilities_against_the_dense_reference(options, reference, generator):
    W = _weights(generator)
    mu = _weighted_tokens(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, **options)
    _, expected = _reference(mu, *W, 4, 2, probabilities=True, **reference)
    got = field.probabilities(mu)
    assert got.shape == (4, 9, 9)
    assert _relative(got, expected) < TIGHT


def test_rows_masks_zero_mass_and_the_velocity(generator):
    # Ties in the positions, a zero-mass token, biases, RoPE and a window of 3: rows sum to 1,
    # the keys after the query, outside the window or without mass weigh exactly 0, and
    # Γ(x_i) = W_o concat_h(Σ_j P^h_ij v_{g(h), j}) + b_o, written out head by head.
    (Wq, Wk, Wv, Wo), (bq, bk, bv, bo) = _weights(generator, bias=True)
    positions = torch.tensor([0.0, 0, 1, 2, 2, 3, 4, 6, 7], dtype=F64)
    weights = torch.rand(9, generator=generator, dtype=F64) + 0.2
    weights[4] = 0.0
    mu = _tokens(generator, positions=positions, weights=weights / weights.sum())
    field = GroupedQueryAttention(
        Wq, Wk, Wv, Wo, heads=4, kv_heads=2, position=RoPE(base=30.0), window=3,
        bq=bq, bk=bk, bv=bv, bo=bo,
    )  # fmt: skip
    P = field.probabilities(mu)
    assert P.shape == (4, 9, 9)
    torch.testing.assert_close(P.sum(-1), torch.ones(4, 9, dtype=F64), rtol=0, atol=1e-14)
    gap = positions[:, None] - positions[None, :]
    hidden = (gap < 0) | (gap >= 3)
    assert torch.equal(P[:, hidden], torch.zeros_like(P[:, hidden]))
    assert torch.equal(P[..., 4], torch.zeros(4, 9, dtype=F64))
    seen = ~hidden
    seen[:, 4] = False
    assert bool((P[:, seen] > 0).all())  # and every other key is seen
    values = mu.points @ Wv.T + bv  # (n, H_kv·d_h), head g in columns 4g … 4g + 3
    heads = [P[h] @ values[:, 4 * (h // 2) : 4 * (h // 2) + 4] for h in range(4)]
    velocity = torch.cat(heads, dim=-1) @ Wo.T + bo
    assert _relative(velocity, field.velocity(mu, engine="dense")) < TIGHT


def test_at_evaluation_points_batched_and_time_dependent(generator):
    W = _weights(generator)
    mu = _weighted_tokens(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=RoPE())
    own = field.probabilities(mu)
    at = field.probabilities(mu, mu.points[[2, 5]], positions=mu.positions[[2, 5]])
    assert _relative(at, own[:, [2, 5]]) < TIGHT
    # batched parameters (two layers at once) and a callable parameter at depth-time t
    Wq, Wk, Wv, Wo = W
    stacked = GroupedQueryAttention(torch.stack([Wq, 2 * Wq]), Wk, Wv, Wo, heads=4, kv_heads=2)
    doubled = GroupedQueryAttention(2 * Wq, Wk, Wv, Wo, heads=4, kv_heads=2)
    got = stacked.probabilities(mu)
    assert got.shape == (2, 4, 9, 9)
    assert _relative(got[1], doubled.probabilities(mu)) < TIGHT
    moving = GroupedQueryAttention(lambda t: (1 + t) * Wq, Wk, Wv, Wo, heads=4, kv_heads=2)
    assert _relative(moving.probabilities(mu, t=1.0), doubled.probabilities(mu)) < TIGHT


def test_a_field_without_positions_reads_grids(generator):
    W = _weights(generator, d=2, heads=2, kv_heads=1, head_dim=2)
    field = GroupedQueryAttention(*W, heads=2, kv_heads=1, causal=False)
    grid = Grid(torch.full((3, 3), 1 / 9, dtype=F64), [-1.0, -1.0], [1.0, 1.0])
    expected = field.probabilities(grid.to_empirical())
    torch.testing.assert_close(field.probabilities(grid), expected, rtol=0, atol=0)


def test_bad_input_raises(generator):
    W = _weights(generator)
    field = GroupedQueryAttention(*W, heads=4, kv_heads=2, position=RoPE())
    tokens = _tokens(generator)
    with pytest.raises(ValueError, match="causal attention at points x needs their positions"):
        field.probabilities(tokens, tokens.points[:2])
    with pytest.raises(ValueError, match="pass x too, or drop positions"):
        field.probabilities(tokens, positions=tokens.positions)
    with pytest.raises(ValueError, match="causal attention needs token positions, but this"):
        field.probabilities(Empirical(tokens.points))
    with pytest.raises(ValueError, match=r"x must have shape \(m, 6\); received shape \(2, 5\)"):
        field.probabilities(tokens, tokens.points[:2, :5], positions=tokens.positions[:2])
    free = GroupedQueryAttention(*W, heads=4, kv_heads=2, causal=False)
    gaussian = Gaussian(torch.zeros(6, dtype=F64), torch.eye(6, dtype=F64))
    with pytest.raises(TypeError, match="attention probabilities are between tokens, and a"):
        free.probabilities(gaussian)


@pytest.mark.parametrize("engine", ["dense", "chunked", "sdpa"])
def test_the_primitive_weights_times_v_are_the_average_on_every_engine(engine, generator):
    # tpde._engines.softmax_weights is softmax_average's matrix: with ties and a window
    # (1e-12 relative: SDPA and the row blocks sum in other orders).
    q, k, v = (torch.randn(2, 7, 3, generator=generator, dtype=F64) for _ in range(3))
    bias = torch.randn(7, generator=generator, dtype=F64)
    positions = torch.tensor([0.0, 1, 1, 2, 4, 5, 5], dtype=F64)
    mask = {"query_positions": positions, "key_positions": positions, "window": 2.0}
    expected = softmax_average(q, k, v, bias, engine, **mask)
    assert _relative(softmax_weights(q, k, bias, **mask) @ v, expected) < TIGHT
