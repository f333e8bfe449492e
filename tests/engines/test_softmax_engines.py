"""Every engine against the dense reference: values and gradients (points, Q, K, V)."""

import math

import pytest
import torch

from tests.conftest import keops_ok
from tpde._engines import pick_engine, softmax_average, softmax_weights
from tpde.fields import Softmax
from tpde.measures import Empirical

ENGINES = [
    "chunked",
    "sdpa",
    pytest.param("keops", marks=[pytest.mark.keops]),
]
# float32: 1e-5 relative (the SDPA kernel sums in another order: ~1e-6 seen);
# float64: 1e-10 relative (rounding only).
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def _skip_without_keops(engine):
    if engine == "keops" and not keops_ok():
        pytest.skip("KeOps cannot compile here")


@pytest.mark.keops
@pytest.mark.keops_quick
def test_keops_forward_equals_dense_in_the_default_suite(generator):
    # One forward formula (16 s of CPU to compile on a fresh machine): the KeOps route of a
    # field works here; gradients and every variant are in the slow suite.
    _skip_without_keops("keops")
    Q, K, V, points, weights = (t.detach() for t in _setup(torch.float64, generator))
    field, mu = Softmax(Q, K, V), Empirical(points, weights)
    keops = field.velocity(mu, engine="keops")
    dense = field.velocity(mu, engine="dense")
    # float64 rounding of a 300-term softmax average (measured 1.2e-15)
    torch.testing.assert_close(keops, dense, rtol=1e-12, atol=1e-12)


def _setup(dtype, generator, n=300, d=3, k=2):
    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    Q, K, V = (
        draw(k, d).requires_grad_(),
        draw(k, d).requires_grad_(),
        draw(d, d).requires_grad_(),
    )
    points = draw(n, d).requires_grad_()
    weights = torch.rand(n, generator=generator, dtype=torch.float64).to(dtype) + 0.1
    return Q, K, V, points, weights / weights.sum()


def _relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("engine", ENGINES)
def test_engine_values_and_gradients_match_dense(engine, dtype, generator):
    _skip_without_keops(engine)
    Q, K, V, points, weights = _setup(dtype, generator)
    probe = torch.randn(points.shape, generator=generator, dtype=torch.float64).to(dtype)

    def run(name):
        field = Softmax(Q, K, V)
        velocity = field.velocity(Empirical(points, weights), engine=name)
        grads = torch.autograd.grad((velocity * probe).sum(), (points, Q, K, V))
        return velocity.detach(), grads

    ref_value, ref_grads = run("dense")
    value, grads = run(engine)
    tol = TOLERANCE[dtype]
    assert _relative_error(value, ref_value) < tol
    for name, g, g_ref in zip("xQKV", grads, ref_grads, strict=True):
        assert _relative_error(g, g_ref) < 10 * tol, f"gradient in {name}"


@pytest.mark.parametrize("engine", ["dense", "chunked", "sdpa"])
def test_evaluation_points_and_batched_primitive(engine, generator):
    q = torch.randn(2, 7, 4, generator=generator, dtype=torch.float64)
    k = torch.randn(9, 4, generator=generator, dtype=torch.float64)
    v = torch.randn(9, 5, generator=generator, dtype=torch.float64)  # value width ≠ key width
    bias = torch.randn(9, generator=generator, dtype=torch.float64)
    expected = torch.softmax(q @ k.T + bias, dim=-1) @ v
    torch.testing.assert_close(softmax_average(q, k, v, bias, engine=engine), expected)


def test_chunked_engine_splits_rows(monkeypatch, generator):
    import tpde._engines.torch_engines as te

    monkeypatch.setattr(te, "CHUNK_BYTES", 8 * 50 * 3)  # 3 rows of 50 keys per block
    q = torch.randn(10, 2, generator=generator, dtype=torch.float64, requires_grad=True)
    k = torch.randn(50, 2, generator=generator, dtype=torch.float64)
    out = te.softmax_average_chunked(q, k, k)
    torch.testing.assert_close(out, te.softmax_average_dense(q, k, k))
    assert te.chunk_rows(10, 50, 8) == 3
    out.sum().backward()
    assert q.grad is not None


def test_weighted_particles_equal_repeated_particles(generator):
    d = 2
    field = Softmax(
        *(torch.randn(2, d, generator=generator, dtype=torch.float64) for _ in "QK"),
        torch.randn(d, d, generator=generator, dtype=torch.float64),
    )
    points = torch.randn(6, d, generator=generator, dtype=torch.float64)
    counts = torch.tensor([1, 3, 2, 1, 1, 4])
    weights = counts.double() / counts.sum()
    weighted = Empirical(points, weights)
    repeated = Empirical(points.repeat_interleave(counts, dim=0))
    for engine in ("dense", "chunked", "sdpa"):
        v_w = field.velocity(weighted, x=points, engine=engine)
        v_r = field.velocity(repeated, x=points, engine=engine)
        torch.testing.assert_close(v_w, v_r, rtol=1e-12, atol=1e-12)


def test_zero_weight_particles_move_but_attract_nothing(generator):
    field = Softmax.from_interaction(
        torch.eye(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    )
    points = torch.randn(4, 2, generator=generator, dtype=torch.float64)
    with_ghost = Empirical(points, torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64))
    without = Empirical(points[:2])
    torch.testing.assert_close(field.velocity(with_ghost), field.velocity(without, x=points))


def test_auto_rule():
    cpu = torch.device("cpu")
    assert pick_engine(100, 100, cpu, torch.float32) == "dense"
    assert pick_engine(10_000, 10_000, cpu, torch.float64) == "sdpa"
    # A batch of small clouds (a phase diagram) counts all its scores on the CPU.
    assert pick_engine(32, 32, cpu, torch.float64, batch=64) == "dense"
    assert pick_engine(32, 32, cpu, torch.float64, batch=4096) == "sdpa"
    assert pick_engine(32, 32, torch.device("cuda"), torch.float64, batch=4096) == "dense"


@pytest.mark.parametrize("engine", ["dense", "chunked", "sdpa"])
def test_a_key_bias_equal_on_every_key_cancels(engine, generator):
    # Uniform weights give the key bias log(1/n) on every key: the softmax does not see it,
    # so it is dropped (SDPA then runs at width e, not e + 1), the result unchanged. A bias
    # under autograd is kept: its gradient is not zero entry by entry.
    q = torch.randn(3, 5, 2, generator=generator, dtype=torch.float64)
    k = torch.randn(3, 7, 2, generator=generator, dtype=torch.float64)
    v = torch.randn(3, 7, 4, generator=generator, dtype=torch.float64)
    bias = torch.full((7,), -math.log(7), dtype=torch.float64)
    expected = torch.softmax(q @ k.mT, dim=-1) @ v
    torch.testing.assert_close(softmax_average(q, k, v, bias, engine=engine), expected)
    bias.requires_grad_()
    weights = torch.randn(3, 5, 4, generator=generator, dtype=torch.float64)
    (softmax_average(q, k, v, bias, engine=engine) * weights).sum().backward()
    # ∂out_i/∂b_j = p_ij (v_j − out_i), so ∂L/∂b_j = Σ_i p_ij (w_i·v_j − w_i·out_i).
    p = torch.softmax(q @ k.mT, dim=-1)
    exact = (p * (weights @ v.mT - (weights * expected).sum(-1, keepdim=True))).sum((0, 1))
    torch.testing.assert_close(bias.grad, exact)
    assert float(bias.grad.abs().max()) > 1e-3


def _filled_weights(q, k, positions):
    """The causal softmax weights with the mask filled in (masked_fill: the reference)."""
    hidden = positions.unsqueeze(-1) < positions.unsqueeze(-2)
    return torch.softmax((q @ k.mT).masked_fill(hidden, -math.inf), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_added_causal_mask_gives_the_filled_masks_weights_bit_for_bit(dtype, generator):
    # The CPU adds self-attention's mask (0 / −inf) instead of filling it in: s + 0 = s and
    # s − ∞ = −∞, so the weights and gradients are the same bit for bit (torch.equal), zero
    # scores (q = 0 in one head: −0 + 0 = +0) included.
    q = torch.randn(3, 40, 4, generator=generator, dtype=dtype)
    q[1] = 0.0
    k = torch.randn(3, 40, 4, generator=generator, dtype=dtype)
    positions = torch.arange(40, dtype=dtype)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, q, k)]
    added = softmax_weights(
        leaves[0], leaves[1], query_positions=positions, key_positions=positions
    )
    filled = _filled_weights(leaves[2], leaves[3], positions)
    assert torch.equal(added, filled)
    up = torch.randn(added.shape, generator=generator, dtype=dtype)
    grads = torch.autograd.grad([(added * up).sum(), (filled * up).sum()], leaves)
    assert torch.equal(grads[0], grads[2]) and torch.equal(grads[1], grads[3])


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_hidden_key_that_overflows_is_not_read_by_the_queries_before_it(bad):
    # A key whose score is +inf (or NaN) for every query: the sum s + (−inf) would be NaN
    # for the queries that do not see it; they are computed with the mask filled in, so
    # only the queries that see it (positions ≥ 3) are not finite.
    q = torch.ones(1, 6, 2, dtype=torch.float64)
    k = torch.zeros(1, 6, 2, dtype=torch.float64)
    k[0, 3, 0] = bad
    positions = torch.arange(6, dtype=torch.float64)
    weights = softmax_weights(q, k, query_positions=positions, key_positions=positions)
    reference = _filled_weights(q, k, positions)
    assert torch.isfinite(weights[0, :3]).all() and not torch.isfinite(weights[0, 3:]).any()
    assert torch.equal(weights[0, :3], reference[0, :3])
    assert torch.equal(weights.isnan(), reference.isnan())
