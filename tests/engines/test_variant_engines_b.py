"""Engines for Sinkhorn and masked attention against dense: values and gradients.

Covers the log-sum-exp primitive, the causal softmax average (ties included), and the two
fields on every engine that expresses them.
"""

import pytest
import torch

from tests.conftest import keops_ok
from tpde._engines import logsumexp, pick_logsumexp_engine, softmax_average
from tpde._engines.torch_engines import causal_slots
from tpde.fields import L2, InnerSolves, Masked, Sinkhorn, Softmax
from tpde.measures import Empirical

# (engine, dtype) pairs; KeOps in float64 only: each new formula compiles for 10-100 s, and
# the shapes below are chosen so that the fields reuse the formulas of the primitives.
CASES = [
    pytest.param(engine, dtype, id=f"{engine}-{str(dtype)[6:]}")
    for engine in ("chunked", "sdpa")
    for dtype in (torch.float32, torch.float64)
] + [pytest.param("keops", torch.float64, marks=[pytest.mark.keops], id="keops-float64")]
# float32: 1e-5 relative (another summation order); float64: 1e-10 (rounding only).
# Gradients get 10×, Sinkhorn (6 chained reductions) another 10×.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def _skip_without_keops(engine):
    if engine == "keops" and not keops_ok():
        pytest.skip("KeOps cannot compile here")


def _draw(generator, dtype, *shape):
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


def _relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _positions(n, generator, dtype):
    """Positions on a coarse grid of 6 values in [0, 1]: many ties, 0 included."""
    return (
        (torch.randint(0, 6, (n,), generator=generator).to(dtype) / 5)
        .sort()
        .values[torch.randperm(n, generator=generator)]
    )


# ---------------------------------------------------------------------- primitives


@pytest.mark.parametrize(("engine", "dtype"), CASES)
def test_logsumexp_matches_dense(engine, dtype, generator):
    _skip_without_keops(engine)
    q = _draw(generator, dtype, 70, 3).requires_grad_()
    k = _draw(generator, dtype, 90, 3).requires_grad_()
    bias = _draw(generator, dtype, 90).requires_grad_()
    probe = _draw(generator, dtype, 70)

    def run(name):
        out = logsumexp(q, k, bias, engine=name)
        return out.detach(), torch.autograd.grad((out * probe).sum(), (q, k, bias))

    ref, ref_grads = run("dense")
    torch.testing.assert_close(ref, torch.logsumexp(q @ k.T + bias, -1).detach())
    out, grads = run(engine)
    tol = TOLERANCE[dtype]
    assert out.shape == (70,) and _relative_error(out, ref) < tol
    for name, g, g_ref in zip(["q", "k", "bias"], grads, ref_grads, strict=True):
        assert _relative_error(g, g_ref) < 10 * tol, f"gradient in {name}"


@pytest.mark.parametrize("engine", ["dense", "chunked", "sdpa"])
def test_batched_logsumexp(engine, generator):
    q = _draw(generator, torch.float64, 2, 1, 7, 3)
    k = _draw(generator, torch.float64, 4, 9, 3)
    bias = _draw(generator, torch.float64, 9)
    expected = torch.logsumexp(q @ k.mT + bias, -1)
    torch.testing.assert_close(logsumexp(q, k, bias, engine=engine), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("engine", ["chunked", "sdpa"])  # keops: via the masked field below
def test_causal_softmax_average_matches_dense(engine, dtype, generator):
    n, m = 50, 40
    q = _draw(generator, dtype, 2, n, 3).requires_grad_()
    k = _draw(generator, dtype, m, 3).requires_grad_()
    v = _draw(generator, dtype, m, 5).requires_grad_()
    bias = _draw(generator, dtype, m).requires_grad_()
    key_positions = _positions(m, generator, dtype)
    query_positions = _positions(n, generator, dtype)
    probe = _draw(generator, dtype, 2, n, 5)

    def run(name):
        out = softmax_average(
            q, k, v, bias, name, query_positions=query_positions, key_positions=key_positions
        )
        return out.detach(), torch.autograd.grad((out * probe).sum(), (q, k, v, bias))

    ref, ref_grads = run("dense")
    hidden = key_positions[None, :] > query_positions[:, None]
    loops = torch.softmax((q @ k.T + bias).masked_fill(hidden, -torch.inf), -1) @ v
    torch.testing.assert_close(ref, loops.detach())
    out, grads = run(engine)
    tol = TOLERANCE[dtype]
    assert _relative_error(out, ref) < tol
    for name, g, g_ref in zip("qkvb", grads, ref_grads, strict=True):
        assert _relative_error(g, g_ref) < 10 * tol, f"gradient in {name}"


def test_causal_slots_place_ties_together(generator):
    # Distinct positions: the sorted tokens themselves (length n, slots = ranks).
    s = torch.rand(30, generator=generator, dtype=torch.float64)
    key_slot, query_slot, length = causal_slots(s, s)
    ranks = torch.argsort(torch.argsort(s))
    assert length == 30 and torch.equal(key_slot, ranks) and torch.equal(query_slot, ranks)
    # Tie groups of sizes 3 and 2 cost 2 + 1 extra slots; a query sits at or after the slot
    # of every key it sees and before the slot of every key it does not see.
    s = torch.tensor([0.5, 0.1, 0.5, 0.9, 0.1, 0.5, 0.7], dtype=torch.float64)
    key_slot, query_slot, length = causal_slots(s, s)
    assert length == 7 + 2 + 1
    sees = s[None, :] <= s[:, None]
    after = key_slot[None, :] <= query_slot[:, None]
    assert torch.equal(sees, after)
    assert len(set(query_slot.tolist())) == 7 and len(set(key_slot.tolist())) == 7


def test_chunked_engines_split_rows(monkeypatch, generator):
    import tpde._engines.torch_engines as te

    monkeypatch.setattr(te, "CHUNK_BYTES", 8 * 40 * 3)  # 3 rows of 40 keys per block
    q = _draw(generator, torch.float64, 10, 2).requires_grad_()
    k = _draw(generator, torch.float64, 40, 2)
    s_q, s_k = _positions(10, generator, torch.float64), _positions(40, generator, torch.float64)
    s_q[0] = 0.0
    torch.testing.assert_close(te.logsumexp_chunked(q, k), te.logsumexp_dense(q, k))
    out = te.softmax_average_chunked(q, k, k, None, s_q, s_k)
    torch.testing.assert_close(out, te.softmax_average_dense(q, k, k, None, s_q, s_k))
    (out.sum() + te.logsumexp_chunked(q, k).sum()).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_positions_come_in_pairs(generator):
    q = _draw(generator, torch.float64, 4, 2)
    with pytest.raises(ValueError, match="needs both query_positions and key_positions"):
        softmax_average(q, q, q, query_positions=torch.zeros(4, dtype=torch.float64))


def test_logsumexp_auto_rule():
    cpu = torch.device("cpu")
    assert pick_logsumexp_engine(100, 100, cpu, torch.float32) == "dense"
    assert pick_logsumexp_engine(10_000, 10_000, cpu, torch.float64) == "sdpa"


# ---------------------------------------------------------------------- fields


def _setup(dtype, generator, n=120, d=3, k=2):
    Q = _draw(generator, dtype, k, d).requires_grad_()
    K = _draw(generator, dtype, k, d).requires_grad_()
    V = _draw(generator, dtype, d, d).requires_grad_()
    points = _draw(generator, dtype, n, d).requires_grad_()
    weights = torch.rand(n, generator=generator, dtype=torch.float64).to(dtype) + 0.1
    return Q, K, V, points, weights / weights.sum()


def _agreement(make_field, make_measure, engine, dtype, generator, factor=1.0):
    Q, K, V, points, weights = _setup(dtype, generator)
    probe = _draw(generator, dtype, *points.shape)

    def run(name):
        velocity = make_field(Q, K, V).velocity(make_measure(points, weights), engine=name)
        grads = torch.autograd.grad((velocity * probe).sum(), (points, Q, K, V))
        return velocity.detach(), grads

    ref_value, ref_grads = run("dense")
    value, grads = run(engine)
    tol = factor * TOLERANCE[dtype]
    assert _relative_error(value, ref_value) < tol
    for name, g, g_ref in zip("xQKV", grads, ref_grads, strict=True):
        assert _relative_error(g, g_ref) < 10 * tol, f"gradient in {name}"


@pytest.mark.parametrize(("engine", "dtype"), CASES)
def test_sinkhorn_engines_match_dense(engine, dtype, generator):
    # A fixed number of iterations (tol=None), so every engine unrolls the same graph.
    _skip_without_keops(engine)
    _agreement(
        lambda Q, K, V: Sinkhorn(Q, K, V, eps=0.8, iters=6, tol=None),
        Empirical,
        engine,
        dtype,
        generator,
        factor=10.0,
    )


@pytest.mark.parametrize(("engine", "dtype"), CASES)
@pytest.mark.parametrize("inner", [Softmax, L2])
def test_masked_engines_match_dense(inner, engine, dtype, generator):
    _skip_without_keops(engine)
    positions = _positions(120, generator, torch.float64)
    _agreement(
        lambda Q, K, V: Masked(inner(Q, K, V), sink_mass=0.2),
        lambda x, w: Empirical(x, w, positions),
        engine,
        dtype,
        generator,
    )


def test_sinkhorn_with_a_tolerance_agrees_across_engines(generator):
    # tol-mode: every engine stops within tol, so velocities agree to ~tol·scale.
    Q, K, V, points, weights = (t.detach() for t in _setup(torch.float64, generator, n=300))
    mu = Empirical(points, weights)
    field = Sinkhorn(Q, K, V, tol=1e-10)
    ref = field.velocity(mu, engine="dense")
    for engine in ("chunked", "sdpa", "auto"):
        info = InnerSolves()
        assert _relative_error(field.velocity(mu, engine=engine, info=info), ref) < 1e-8
        assert info.last.converged
