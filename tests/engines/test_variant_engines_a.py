"""L2, linear, sigmoid, exponential and multi-head on every engine that expresses them.

Values and gradients in the points and in Q, K, V against dense; plus the unnormalised
kernel-sum primitive itself (sigmoid, linear, exp) on dense, chunked, tiled and KeOps.
"""

import pytest
import torch

from tests.conftest import keops_ok
from tpde._engines import kernel_sum, logsumexp, pick_kernel_sum_engine, softmax_average
from tpde.fields import L2, Exponential, Linear, MultiHead, Sigmoid, Softmax
from tpde.measures import Empirical

KEOPS = pytest.param("keops", marks=[pytest.mark.keops])


F32, F64 = torch.float32, torch.float64


def _keops_case(variant, dtype):
    return pytest.param(variant, "keops", dtype, marks=[pytest.mark.keops])


# (variant, engine compared with "dense", dtype); "auto" for linear is the factorised
# V M₂ A x. KeOps compiles every new formula (~10 s, a first backward ~1 min, cached in
# build/keops): the L2 and general multi-head cases reuse the shapes of the softmax engine
# test (key width 3 + 1 bias coordinate, values 3), and the new sigmoid and linear kernel
# sums are compiled for float64 only (float32 differs only in rounding).
CASES = [
    *[
        (v, e, t)
        for v in ("l2", "multihead", "multihead-split")
        for e in ("chunked", "sdpa")
        for t in (F32, F64)
    ],
    *[("l2-code", "sdpa", t) for t in (F32, F64)],
    *[
        (v, e, t)
        for v in ("linear", "sigmoid", "sigmoid-mean-field", "exponential")
        for e in ("auto", "chunked", "tiled")
        for t in (F32, F64)
    ],
    *[_keops_case(v, t) for v in ("l2", "multihead") for t in (F32, F64)],
    *[_keops_case(v, F64) for v in ("linear", "sigmoid")],
    # a new formula (~10–40 s to compile): with make test-slow
    pytest.param("exponential", "keops", F64, marks=[pytest.mark.keops, pytest.mark.slow]),
]


def _case_id(value):
    return str(value).removeprefix("torch.")


# float32: 1e-5 relative (SDPA and KeOps sum in another order: ~1e-6 seen);
# float64: 1e-10 relative (rounding only). Gradients get 10× that.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def _field(variant, Q, K, V):
    # d = 3, k = 3 for the single heads (the key-biased softmax formula then has the shape
    # of tests/engines/test_softmax_engines.py, so KeOps reuses its compiled formulas).
    if variant == "l2":
        return L2(Q, K, V)
    if variant == "l2-code":
        return L2(Q, K, V, scale=0.5, form="code")
    if variant == "multihead":  # general heads with output matrices
        W = torch.stack([torch.eye(3, dtype=Q.dtype), V.detach().T])
        return MultiHead([Softmax(Q, K, V), L2(K, Q, V.T)], W=W)
    if variant == "multihead-split":  # the paper's layout: 3 heads of width 1
        return MultiHead.split(Q, K, V, heads=3)
    if variant == "linear":
        return Linear(Q, K, V / 3)
    if variant == "exponential":  # USA: e^{yᵀAx}, weights outside
        return Exponential(Q, K, V / 3)
    if variant == "sigmoid-mean-field":  # weights outside σ, a numeric bias inside
        return Sigmoid(Q, K, V, bias=-0.5)
    return Sigmoid(Q, K, V)  # the literature layer: log-weights inside σ


def _relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize(("variant", "engine", "dtype"), CASES, ids=_case_id)
def test_engine_values_and_gradients_match_dense(variant, engine, dtype, generator):
    if engine == "keops" and not keops_ok():
        pytest.skip("KeOps cannot compile here")
    n, d = 300, 3

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

    Q, K, V = (draw(d, d).requires_grad_() for _ in range(3))
    points = (0.7 * draw(n, d)).requires_grad_()
    weights = torch.rand(n, generator=generator, dtype=torch.float64).to(dtype) + 0.1
    weights = weights / weights.sum()
    probe = draw(n, d)

    def run(name):
        velocity = _field(variant, Q, K, V).velocity(Empirical(points, weights), engine=name)
        grads = torch.autograd.grad((velocity * probe).sum(), (points, Q, K, V))
        return velocity.detach(), grads

    ref_value, ref_grads = run("dense")
    value, grads = run(engine)
    tol = TOLERANCE[dtype]
    assert _relative_error(value, ref_value) < tol
    for name, g, g_ref in zip("xQKV", grads, ref_grads, strict=True):
        assert _relative_error(g, g_ref) < 10 * tol, f"gradient in {name}"


@pytest.mark.parametrize("kernel", ["sigmoid", "linear", "exp"])
@pytest.mark.parametrize("engine", ["dense", "chunked", "tiled", "auto"])
def test_kernel_sum_primitive_batched_with_bias(kernel, engine, generator):
    # out_i = Σ_j φ(q_i·k_j + b_j) v_j, with a batch dimension on the queries and a value
    # width ≠ key width.
    q = torch.randn(2, 7, 4, generator=generator, dtype=F64)
    k = torch.randn(9, 4, generator=generator, dtype=F64)
    v = torch.randn(9, 5, generator=generator, dtype=F64)
    bias = torch.randn(9, generator=generator, dtype=F64)
    phi = {"sigmoid": torch.sigmoid, "exp": torch.exp, "linear": lambda s: s}[kernel]
    expected = phi(q @ k.T + bias) @ v
    got = kernel_sum(q, k, v, bias, kernel=kernel, engine=engine)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.keops
def test_keops_sigmoid_is_overflow_free(generator):
    if not keops_ok():
        pytest.skip("KeOps cannot compile here")
    # Scores up to |s| ≈ 10³ overflow e^{−s} even in float64; the KeOps formula
    # e^{−relu(−s)}/(1 + e^{−|s|}) keeps values and gradients finite and equal to torch's.
    q = (300 * torch.randn(7, 3, generator=generator, dtype=F64)).requires_grad_()
    k = torch.randn(9, 3, generator=generator, dtype=F64)
    v = torch.randn(9, 3, generator=generator, dtype=F64)
    bias = torch.randn(9, generator=generator, dtype=F64)
    assert float((q.detach() @ k.T).abs().max()) > 710  # e^{710} overflows float64
    out = kernel_sum(q, k, v, bias, kernel="sigmoid", engine="keops")
    ref = kernel_sum(q, k, v, bias, kernel="sigmoid", engine="dense")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    (grad,) = torch.autograd.grad(out.sum(), q)
    (grad_ref,) = torch.autograd.grad(ref.sum(), q)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)


def test_chunked_kernel_sum_splits_rows(monkeypatch, generator):
    import tpde._engines.torch_engines as te

    monkeypatch.setattr(te, "CHUNK_BYTES", 8 * 50 * 3)  # 3 rows of 50 keys per block
    q = torch.randn(10, 2, generator=generator, dtype=torch.float64, requires_grad=True)
    k = torch.randn(50, 2, generator=generator, dtype=torch.float64)
    out = te.kernel_sum_chunked(q, k, k, None, "sigmoid")
    torch.testing.assert_close(out, te.kernel_sum_dense(q, k, k, None, "sigmoid"))
    (grad,) = torch.autograd.grad(out.sum(), q)
    (ref,) = torch.autograd.grad(te.kernel_sum_dense(q, k, k, None, "sigmoid").sum(), q)
    torch.testing.assert_close(grad, ref)


def test_kernel_sum_auto_rule_and_bad_arguments():
    cpu = torch.device("cpu")
    assert pick_kernel_sum_engine(100, 100, cpu, torch.float32) == "dense"
    assert pick_kernel_sum_engine(10_000, 10_000, cpu, torch.float32) == "tiled"
    assert pick_kernel_sum_engine(10_000, 10_000, cpu, torch.float64) == "tiled"
    q = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="engine 'sdpa' only computes softmax-normalised"):
        kernel_sum(q, q, q, engine="sdpa")
    with pytest.raises(ValueError, match="unknown kernel 'relu'; choose one of 'sigmoid'"):
        kernel_sum(q, q, q, kernel="relu")
    with pytest.raises(ValueError, match="engine 'tiled' does not compute softmax averages"):
        softmax_average(q, q, q, engine="tiled")
    with pytest.raises(ValueError, match="engine 'tiled' does not compute log-sum-exp"):
        logsumexp(q, q, engine="tiled")
    with pytest.raises(ValueError, match="engine 'tiled' does not compute softmax averages"):
        Softmax(*torch.eye(2).expand(3, 2, 2)).velocity(Empirical(q), engine="tiled")
