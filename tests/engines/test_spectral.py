"""The spectral engine: Fourier sums of e^{β⟨x, y⟩} on the circle against dense and SDPA.

Tolerances: float64 1e-12 relative (max-norm over the output; measured ≤ 2e-14 at β = 100),
float32 1e-5 against float64 sums of the same float32 tokens (measured ~1e-6).
"""

import math

import numpy as np
import pytest
import scipy.special
import torch

import tpde._engines.spectral as spectral
from tpde._engines import kernel_sum, softmax_average
from tpde.fields import Exponential, Masked, Normalized, Sigmoid, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

F32, F64 = torch.float32, torch.float64
BETAS = (0.1, 1.0, 5.0, 20.0, 100.0)


def _circle(generator, *shape, dtype=F64):
    angles = 2 * math.pi * torch.rand(*shape, generator=generator, dtype=F64)
    return torch.stack([angles.cos(), angles.sin()], -1).to(dtype)


def _field(kind, beta, value=1.0, dtype=F64):
    """Softmax (SA) or Exponential (USA) with A = βI (Q = β·I, K = I, scale 1), V = vI."""
    eye = torch.eye(2, dtype=dtype)
    beta = torch.as_tensor(beta, dtype=dtype)
    value = torch.as_tensor(value, dtype=dtype)
    return kind(beta[..., None, None] * eye, eye, value[..., None, None] * eye, scale=1.0)


def _reference(kind, points, weights, beta):
    """Σ_j w_j e^{β⟨x_i, x_j⟩}(x_j) dense in float64, normalised for Softmax."""
    points, weights = points.to(F64), weights.to(F64)
    kernel = torch.exp(torch.as_tensor(beta, dtype=F64)[..., None, None] * points @ points.mT)
    kernel = kernel * weights.unsqueeze(-2)
    out = kernel @ points
    return out / kernel.sum(-1, keepdim=True) if kind is Softmax else out


def _relative(a, b):
    return float((a.to(F64) - b).abs().max() / b.abs().max())


def test_scaled_bessel_coefficients_match_scipy():
    betas = torch.tensor(BETAS, dtype=F64)
    ours = spectral.bessel_ive(betas, 150).numpy()
    ref = scipy.special.ive(np.arange(151)[None], np.array(BETAS)[:, None])
    normal = ref > 1e-280  # below, both underflow towards subnormals
    assert np.abs(ours - ref).max() < 1e-15
    assert (np.abs(ours - ref)[normal] / ref[normal]).max() < 1e-12


@pytest.mark.parametrize("dtype", [F64, F32], ids=str)
def test_truncation_is_the_smallest_below_the_target(dtype):
    for beta in BETAS:
        for floor in (1.0, 1e-6):
            K = spectral.truncation(beta, dtype, floor)
            ive = scipy.special.ive(np.arange(K + 400), beta)
            tails = 2 * ive[::-1].cumsum()[::-1]  # tails[k] = τ(k − 1)
            target = torch.finfo(dtype).eps * floor
            assert tails[K + 1] <= target < tails[K], (beta, floor, K)
    # modes grow with β and with the dynamic range 1/floor
    modes = [spectral.truncation(beta, F64, 1e-6) for beta in BETAS]
    assert modes == sorted(modes) and spectral.truncation(5.0, F64, 1.0) < modes[2]


@pytest.mark.parametrize("kind", [Softmax, Exponential], ids=["SA", "USA"])
@pytest.mark.parametrize("n", [1, 7, 500])
def test_spectral_matches_dense_and_sdpa_to_1e_12(kind, n, generator):
    for beta in BETAS:
        for weighted in (False, True):
            points = _circle(generator, n)
            weights = None
            if weighted:
                weights = torch.rand(n, generator=generator, dtype=F64) + 0.1
                weights = weights / weights.sum()
            mu = Empirical(points, weights)
            field = _field(kind, beta)
            got = field.velocity(mu, engine="spectral")
            ref = _reference(kind, points, mu.weights, beta)
            assert _relative(got, ref) < 1e-12, (beta, weighted)
            other = "sdpa" if kind is Softmax else "dense"
            assert _relative(got, field.velocity(mu, engine=other)) < 1e-12


def test_batched_betas_values_and_broadcast_tokens(generator):
    # One β and one v per batch element (a phase diagram's sweep), one cloud per element,
    # and one shared cloud broadcast against the batch of parameters.
    betas = torch.tensor([0.5, 3.0, 9.0, 40.0], dtype=F64)
    values = torch.tensor([1.0, -0.5, 2.0, 0.25], dtype=F64)
    clouds = _circle(generator, 4, 300)
    weights = torch.rand(300, generator=generator, dtype=F64) + 0.1
    weights = weights / weights.sum()
    for kind in (Softmax, Exponential):
        field = _field(kind, betas, values)
        got = field.velocity(Empirical(clouds, weights), engine="spectral")
        shared = field.velocity(Empirical(clouds[0], weights), engine="spectral")
        assert got.shape == shared.shape == (4, 300, 2)
        for b in range(4):
            ref = values[b] * _reference(kind, clouds[b], weights, betas[b])
            assert _relative(got[b], ref) < 1e-12
            ref = values[b] * _reference(kind, clouds[0], weights, betas[b])
            assert _relative(shared[b], ref) < 1e-12


@pytest.mark.parametrize("kind", [Softmax, Exponential], ids=["SA", "USA"])
def test_float32(kind, generator):
    points = torch.nn.functional.normalize(_circle(generator, 2000, dtype=F32), dim=-1)
    for beta in (1.0, 10.0, 40.0):
        got = _field(kind, beta, dtype=F32).velocity(Empirical(points), engine="spectral")
        assert got.dtype == F32
        ref = _reference(kind, points, torch.full((2000,), 1 / 2000), beta)
        assert _relative(got, ref) < 1e-5


def test_gradients_along_the_circle_match_dense(generator):
    # Differentiable in the tokens (torch operations only). The Fourier sums extend the
    # kernel off the circle differently from e^{β⟨x, y⟩}, so the tangential part of the
    # gradient agrees; under Normalized (tokens normalised first) the whole gradient does.
    points = _circle(generator, 40).requires_grad_()
    probe = torch.randn(40, 2, generator=generator, dtype=F64)
    for kind in (Softmax, Exponential):
        field = _field(kind, 3.0)

        def grad(engine, field=field):
            out = field.velocity(Empirical(points), engine=engine)
            return torch.autograd.grad((out * probe).sum(), points)[0]

        g, ref = grad("spectral"), grad("dense")
        x = points.detach()
        g, ref = (v - x * (x * v).sum(-1, keepdim=True) for v in (g, ref))  # tangential
        assert _relative(g, ref) < 1e-11
        weights = torch.full((40,), 1 / 40, dtype=F64, requires_grad=True)  # and in w
        sums = [
            spectral.exp_sum_spectral(x, weights, 3.0),
            _reference(Exponential, x, weights, 3.0),
        ]
        g, ref = (torch.autograd.grad((s * probe).sum(), weights)[0] for s in sums)
        assert _relative(g, ref) < 1e-12
        sphere = Normalized(field, "post-ln")
        outs = [sphere.velocity(Empirical(points), engine=e) for e in ("spectral", "dense")]
        grads = [torch.autograd.grad((o * probe).sum(), points)[0] for o in outs]
        assert _relative(grads[0], grads[1]) < 1e-11


def test_auto_takes_spectral_where_it_wins(monkeypatch, generator):
    calls = []
    original = spectral.circle_sums

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(spectral, "circle_sums", counting)
    assert spectral.pick_spectral(2048, 16) and not spectral.pick_spectral(2048, 300)
    assert not spectral.pick_spectral(500, 16)  # one small cloud: fixed cost dominates
    assert spectral.pick_spectral(200, 16, batch=64)
    big, small = Empirical(_circle(generator, 2048)), Empirical(_circle(generator, 50))
    field = _field(Softmax, 1.0)
    fast = field.velocity(big)
    assert len(calls) == 1
    assert _relative(fast, field.velocity(big, engine="sdpa")) < 1e-12
    field.velocity(small)
    off = Empirical(1.001 * big.points)
    field.velocity(off)
    _field(Softmax, 1000.0).velocity(big)  # K = 288 modes: 8(K + 1) > 2048 tokens
    assert len(calls) == 1
    # A post-LN flow reaches the engine at every Runge–Kutta stage (off-sphere stages too).
    sphere = Normalized(_field(Exponential, 1.0), "post-ln")
    integrate(sphere, big, 0.02, dt=0.01, method="rk4")
    assert len(calls) == 1 + 8


def test_engine_spectral_refusals(generator):
    mu = Empirical(_circle(generator, 6))
    eye = torch.eye(2, dtype=F64)
    match = "engine 'spectral' does not apply to this Softmax field: "
    cases = [
        (Softmax(2 * eye, eye, eye, scale=0.5, query_bias=torch.ones(2)), "it needs a constant"),
        (Softmax(torch.diag(torch.tensor([1.0, 2.0])), eye, eye), "it needs a constant"),
        (
            Softmax(lambda t: eye, eye, eye),
            r"it needs a constant interaction A = scale·KᵀQ = βI \(",
        ),
        (Softmax(eye, eye, torch.ones(2, 2)), r"it needs V = vI"),
        (Softmax(-eye, eye, eye, scale=1.0), r"it needs β > 0 \(A = βI\); received β = -1"),
    ]
    for field, reason in cases:
        with pytest.raises(ValueError, match=match + reason):
            field.velocity(mu, engine="spectral")
    field = Softmax(eye, eye, eye, scale=1.0)
    with pytest.raises(ValueError, match=match + "it needs tokens in d = 2"):
        Softmax(*torch.eye(3).expand(3, 3, 3)).velocity(Empirical(torch.eye(3)), engine="spectral")
    with pytest.raises(ValueError, match=match + "it evaluates the field at μ's own tokens"):
        field.velocity(mu, x=mu.points.clone(), engine="spectral")
    with pytest.raises(ValueError, match=match + r"it needs every token's weight > 0"):
        field.velocity(
            Empirical(mu.points, torch.tensor([0.5, 0.5, 0, 0, 0, 0])), engine="spectral"
        )
    with pytest.raises(ValueError, match=match + "it computes in float32 or float64"):
        half = torch.eye(2, dtype=torch.float16)
        Softmax(half, half, half, scale=1.0).velocity(mu.to(dtype=torch.float16), engine="spectral")
    with pytest.raises(ValueError, match=match + "it needs every token on the unit circle"):
        field.velocity(Empirical(1.01 * mu.points), engine="spectral")
    with pytest.raises(ValueError, match="engine 'spectral' does not compute general softmax"):
        softmax_average(mu.points, mu.points, mu.points, engine="spectral")
    with pytest.raises(ValueError, match="engine 'spectral' does not compute general kernel"):
        kernel_sum(mu.points, mu.points, mu.points, engine="spectral")
    for other in (Sigmoid(eye, eye, eye), Masked(field)):
        tokens = Empirical(mu.points, positions=torch.linspace(0, 1, 6))
        with pytest.raises(ValueError, match="engine 'spectral' does not compute general"):
            other.velocity(tokens if isinstance(other, Masked) else mu, engine="spectral")


@pytest.fixture
def two_threads():
    """torch at 2 threads within the test, the previous count restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def _recording(monkeypatch, seen):
    """Record the calling thread's torch thread count when the bilinear forms are built
    (between the two passes, on the calling thread)."""
    original = spectral._bilinear

    def recording(*args):
        seen.append(torch.get_num_threads())
        return original(*args)

    monkeypatch.setattr(spectral, "_bilinear", recording)


def test_two_threads_give_the_same_sums_and_keep_the_caller_on_one(generator, monkeypatch):
    """Without autograd, 2 torch threads send the blocks to 2 Python threads (each block's
    arithmetic is the same on either: tolerance 1e-14 relative, measured 0) while the
    calling thread runs torch on one thread in between, and gets its count back after.
    The blocks' tables and products in reused arrays give the sums of fresh tensors (the
    path under autograd): the same operations in the same order."""
    n = 3 * spectral.BLOCK_ROWS + 5  # four blocks per pass
    points, weights = _circle(generator, n), torch.rand(n, generator=generator, dtype=F64) + 0.5
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = spectral.circle_sums(points, weights, 5.0)
        seen = []
        _recording(monkeypatch, seen)
        torch.set_num_threads(2)
        two = spectral.circle_sums(points, weights, 5.0)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
    fresh = spectral.circle_sums(points.clone().requires_grad_(), weights, 5.0).detach()
    assert set(seen) == {1} and after == 2
    assert _relative(two, one) < 1e-14 and _relative(one, fresh) < 1e-14


def test_autograd_keeps_the_threads(generator, monkeypatch, two_threads):
    """Under autograd the blocks run one after the other, torch keeping its 2 threads."""
    n = 2 * spectral.BLOCK_ROWS
    points = _circle(generator, n).requires_grad_()
    weights = torch.full((n,), 1 / n, dtype=F64)
    seen = []
    _recording(monkeypatch, seen)
    spectral.circle_sums(points, weights, 2.0).sum().backward()
    assert set(seen) == {2} and torch.get_num_threads() == 2
    assert torch.isfinite(points.grad).all()


@pytest.mark.parametrize("where", ["_tables_into", "_bilinear"])
def test_a_failing_evaluation_restores_the_thread_count(where, generator, monkeypatch, two_threads):
    """An error in a block's thread (the tables) or on the calling thread (the forms)
    reaches the caller, whose thread count is back at 2."""

    def fail(*args):
        raise ArithmeticError(f"{where} failed")

    monkeypatch.setattr(spectral, where, fail)
    n = 2 * spectral.BLOCK_ROWS
    points, weights = _circle(generator, n), torch.full((n,), 1 / n, dtype=F64)
    with pytest.raises(ArithmeticError, match=f"{where} failed"):
        spectral.circle_sums(points, weights, 2.0)
    assert torch.get_num_threads() == 2
