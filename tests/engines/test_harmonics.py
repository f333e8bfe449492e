"""The harmonics engine: spherical-harmonic sums of e^{β⟨x, y⟩} on S² against dense rows.

Tolerances: float64 1e-12 relative (max-norm over the output; measured ≤ 3e-14 at β = 100
for 2000 tokens), float32 1e-5 against float64 sums of the same float32 tokens.
"""

import numpy as np
import pytest
import scipy.special
import torch

import tpde._engines.harmonics as harmonics
from tpde._engines import kernel_sum, softmax_average
from tpde.fields import Exponential, Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

F32, F64 = torch.float32, torch.float64
BETAS = (0.1, 1.0, 10.0, 100.0)


def _sphere(generator, *shape, dtype=F64):
    points = torch.randn(*shape, 3, generator=generator, dtype=F64)
    return (points / points.norm(dim=-1, keepdim=True)).to(dtype)


def _field(kind, beta, value=1.0, dtype=F64):
    """Softmax (SA) or Exponential (USA) with A = βI (Q = β·I, K = I, scale 1), V = vI."""
    eye = torch.eye(3, dtype=dtype)
    beta = torch.as_tensor(beta, dtype=dtype)
    value = torch.as_tensor(value, dtype=dtype)
    return kind(beta[..., None, None] * eye, eye, value[..., None, None] * eye, scale=1.0)


def _reference(kind, points, weights, beta):
    """Σ_j w_j e^{β⟨x_i, x_j⟩} x_j dense in float64, normalised for Softmax."""
    points, weights = points.to(F64), weights.to(F64)
    beta = torch.as_tensor(beta, dtype=F64)[..., None, None]
    kernel = torch.exp(beta * (points @ points.mT - 1)) * weights.unsqueeze(-2)
    out = kernel @ points
    return out / kernel.sum(-1, keepdim=True) if kind is Softmax else torch.exp(beta) * out


def _relative(a, b):
    return float((a.to(F64) - b).abs().max() / b.abs().max())


def test_scaled_spherical_bessel_coefficients_match_scipy():
    betas = np.array(BETAS)
    ours = harmonics.spherical_ive(torch.tensor(betas), 150).numpy()
    degrees = np.arange(151)
    ref = (
        np.exp(-betas[:, None])
        * (2 * degrees + 1)
        * scipy.special.spherical_in(degrees[None], betas[:, None])
    )
    normal = ref > 1e-280
    assert np.abs(ours - ref).max() < 1e-15
    assert (np.abs(ours - ref)[normal] / ref[normal]).max() < 1e-12
    # Σ_l c_l = 1 (e^{βt} at t = 1)
    assert (
        np.abs(harmonics.spherical_ive(torch.tensor(betas), 600).sum(-1).numpy() - 1).max() < 1e-14
    )


def test_legendre_fourier_reproduces_the_addition_theorem(generator):
    """Σ_m ε_m Λ_l^m Λ_l^m cos mΔφ = (2l + 1)/4π P_l(⟨x, y⟩) through the Fourier coefficients."""
    L = 20
    C = harmonics.legendre_fourier(L).numpy()
    x, y = _sphere(generator, 2).numpy()
    theta = np.arccos([x[2], y[2]])
    phi = np.arctan2([x[1], y[1]], [x[0], y[0]])
    k = np.arange(L + 1)
    for l in (0, 1, 7, 20):
        total = 0.0
        for m in range(l + 1):
            basis = np.sin if m % 2 else np.cos
            values = [(C[m, l] * basis(k * t)).sum() for t in theta]
            total += (1 if m == 0 else 2) * values[0] * values[1] * np.cos(m * (phi[0] - phi[1]))
        expected = (2 * l + 1) / (4 * np.pi) * scipy.special.eval_legendre(l, x @ y)
        assert abs(total - expected) < 1e-13


def test_truncation_is_the_smallest_below_the_target():
    for beta in BETAS:
        for floor in (1.0, 1e-6):
            L = harmonics.truncation(beta, F64, floor)
            c = harmonics.spherical_ive(torch.tensor([beta]), L + 400)[0].numpy()
            tails = c[::-1].cumsum()[::-1]  # tails[l] = τ(l − 1)
            target = torch.finfo(F64).eps * floor
            assert tails[L + 1] <= target < tails[L], (beta, floor, L)
    degrees = [harmonics.truncation(beta, F64, 1e-6) for beta in BETAS]
    assert degrees == sorted(degrees)


@pytest.mark.parametrize("kind", [Softmax, Exponential], ids=["SA", "USA"])
@pytest.mark.parametrize("n", [1, 9, 600])
def test_harmonics_match_dense_to_1e_12(kind, n, generator):
    for beta in BETAS:
        points = _sphere(generator, n)
        weights = torch.rand(n, generator=generator, dtype=F64) + 0.05
        mu = Empirical(points, weights / weights.sum())
        out = _field(kind, beta).velocity(mu, engine="harmonics")
        ref = _reference(kind, points, mu.weights, beta)
        assert _relative(out, ref) < 1e-12, (beta, n)


def test_matches_the_pairwise_engines_at_a_pole_and_with_duplicates(generator):
    points = _sphere(generator, 40)
    points[0] = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    points[1] = torch.tensor([0.0, 0.0, -1.0], dtype=F64)
    points[2] = points[3]
    mu = Empirical(points)
    for beta in (1.0, 30.0):
        out = _field(Softmax, beta).velocity(mu, engine="harmonics")
        ref = softmax_average(beta * points, points, points, engine="dense")
        assert _relative(out, ref) < 1e-12
        usa = _field(Exponential, beta).velocity(mu, engine="harmonics")
        ref = kernel_sum(beta * points, points, points * mu.weights[:, None], kernel="exp")
        assert _relative(usa, ref) < 1e-12


def test_batched_betas_values_and_broadcast_tokens(generator):
    betas = torch.tensor([0.5, 4.0, 4.0, 40.0], dtype=F64)
    values = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=F64)
    points = _sphere(generator, 4, 300)
    mu = Empirical(points)
    for kind in (Softmax, Exponential):
        out = _field(kind, betas, values).velocity(mu, engine="harmonics")
        assert out.shape == (4, 300, 3)
        for b in range(4):
            ref = values[b] * _reference(kind, points[b], mu.weights, betas[b])
            assert _relative(out[b], ref) < 1e-12
    # one cloud, a batch of β: the tokens broadcast
    single = Empirical(points[0])
    out = _field(Softmax, betas).velocity(single, engine="harmonics")
    for b in range(4):
        assert _relative(out[b], _reference(Softmax, points[0], single.weights, betas[b])) < 1e-12


def test_float32(generator):
    points = _sphere(generator, 500, dtype=F32)
    mu = Empirical(points)
    out = _field(Softmax, 10.0, dtype=F32).velocity(mu, engine="harmonics")
    assert out.dtype == F32
    assert _relative(out, _reference(Softmax, points, mu.weights, 10.0)) < 1e-5


def test_gradients_match_dense_through_normalisation(generator):
    """Derivatives of a loss through x = u/|u| (tangent directions only): exact."""
    u = torch.randn(50, 3, generator=generator, dtype=F64).requires_grad_()
    direction = torch.randn(50, 3, generator=generator, dtype=F64)
    grads = []
    for engine in ("harmonics", "dense"):
        points = u / u.norm(dim=-1, keepdim=True)
        out = _field(Softmax, 3.0).velocity(Empirical(points), engine=engine)
        grads.append(torch.autograd.grad((out * direction).sum(), u)[0])
    assert _relative(grads[0], grads[1]) < 1e-11


def test_gradcheck_tokens_and_weights(generator):
    points = _sphere(generator, 6).requires_grad_()
    weights = (torch.rand(6, generator=generator, dtype=F64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w: harmonics.sphere_sums(x, w, 2.0, L=12), (points, weights)
    )


def test_auto_takes_harmonics_where_it_wins(monkeypatch, generator):
    calls = []
    original = harmonics.sphere_sums

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(harmonics, "sphere_sums", counting)
    # n ≥ max(1000, (L + 1)²): the measured crossovers (pick_harmonics)
    assert harmonics.pick_harmonics(1000, 16) and not harmonics.pick_harmonics(750, 16)
    assert harmonics.pick_harmonics(1296, 35) and not harmonics.pick_harmonics(1295, 35)
    assert harmonics.pick_harmonics(3136, 55) and not harmonics.pick_harmonics(2000, 55)
    assert not harmonics.pick_harmonics(5000, 100)  # (L + 1)² > n
    big, small = Empirical(_sphere(generator, 2000)), Empirical(_sphere(generator, 50))
    field = _field(Softmax, 1.0)
    fast = field.velocity(big)
    assert len(calls) == 1
    assert _relative(fast, field.velocity(big, engine="sdpa")) < 1e-12
    field.velocity(small)
    field.velocity(Empirical(1.001 * big.points))  # off the sphere: pairwise
    _field(Softmax, 1000.0).velocity(big)  # too high a degree for 2000 tokens
    assert len(calls) == 1
    # A post-LN flow reaches the engine at every Runge–Kutta stage.
    flow = Normalized(_field(Exponential, 1.0), "post-ln")
    integrate(flow, big, 0.02, dt=0.01, method="rk4")
    assert len(calls) == 1 + 8


def test_engine_harmonics_refusals(generator):
    mu = Empirical(_sphere(generator, 6))
    eye = torch.eye(3, dtype=F64)
    match = "engine 'harmonics' does not apply to this Softmax field: "
    cases = [
        (Softmax(torch.diag(torch.tensor([1.0, 2.0, 3.0])), eye, eye), "it needs a constant"),
        (Softmax(eye, eye, torch.ones(3, 3)), r"it needs V = vI"),
        (Softmax(-eye, eye, eye, scale=1.0), r"it needs β > 0 \(A = βI\); received β = -1"),
    ]
    for field, reason in cases:
        with pytest.raises(ValueError, match=match + reason):
            field.velocity(mu, engine="harmonics")
    with pytest.raises(ValueError, match=match + "it needs every token on the unit sphere"):
        Softmax(eye, eye, eye).velocity(Empirical(2 * mu.points), engine="harmonics")
    with pytest.raises(ValueError, match=match + "it needs every token's weight > 0"):
        weights = torch.tensor([0.0, 1, 1, 1, 1, 1], dtype=F64) / 5
        Softmax(eye, eye, eye).velocity(Empirical(mu.points, weights), engine="harmonics")
    eye2 = torch.eye(2, dtype=F64)
    circle = Empirical(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=F64))
    with pytest.raises(ValueError, match=match + r"it needs tokens in d = 3 \(the sphere S²\)"):
        Softmax(eye2, eye2, eye2).velocity(circle, engine="harmonics")
    with pytest.raises(ValueError, match=match + "it evaluates the field at μ's own tokens"):
        Softmax(eye, eye, eye).velocity(mu, mu.points[:2].clone(), engine="harmonics")
    with pytest.raises(ValueError, match="engine 'harmonics' does not compute general"):
        softmax_average(mu.points, mu.points, mu.points, engine="harmonics")
