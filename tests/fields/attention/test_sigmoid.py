"""Sigmoid attention: the kernel sum, the bias conventions, no Gaussian closure."""

import math

import pytest
import torch

from tpde.fields import GaussianNotPreserved, Sigmoid
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _draw(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=F64)


def _setup(generator, n=7, d=3):
    Q, K, V = _draw(generator, 2, d), _draw(generator, 2, d), _draw(generator, d, d)
    x = _draw(generator, n, d)
    w = torch.rand(n, generator=generator, dtype=F64) + 0.1
    return Q, K, V, x, w / w.sum()


def _loops(x, w, V, A, b):
    """Σ_j w_j σ(x_jᵀAx_i + b) V x_j (b a float) or Σ_j σ(x_jᵀAx_i + log w_j) V x_j (None)."""
    n = len(x)

    def term(i, j):
        if b is None:
            return torch.sigmoid(x[j] @ A @ x[i] + torch.log(w[j])) * x[j]
        return w[j] * torch.sigmoid(x[j] @ A @ x[i] + b) * x[j]

    return torch.stack([V @ sum(term(i, j) for j in range(n)) for i in range(n)])


@pytest.mark.parametrize("bias", [None, 0.0, -1.5])
def test_particle_velocity_is_the_defining_sum(bias, generator):
    Q, K, V, x, w = _setup(generator)
    field = Sigmoid(Q, K, V, scale=0.8, bias=bias)
    expected = _loops(x, w, V, 0.8 * K.T @ Q, bias)
    for engine in ("auto", "dense", "chunked", "tiled"):
        got = field.velocity(Empirical(x, w), engine=engine)
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_default_is_the_literature_layer(generator):
    # Ramapuram et al. (2024): out_i = Σ_j σ(s_ij − log n) v_j, no 1/n, uniform tokens.
    Q, K, V, x, _ = _setup(generator, n=9)
    A = K.T @ Q / math.sqrt(2)
    layer = torch.stack(
        [
            V @ sum(torch.sigmoid(x[j] @ A @ x[i] - math.log(9)) * x[j] for j in range(9))
            for i in range(9)
        ]
    )
    got = Sigmoid(Q, K, V).velocity(Empirical(x))
    torch.testing.assert_close(got, layer, rtol=1e-12, atol=1e-12)


def test_default_layer_is_not_a_function_of_the_measure_but_a_float_bias_is(generator):
    Q, K, V, x, w = _setup(generator, n=6)
    field = Sigmoid(Q, K, V)
    # Zero-weight particles attract nothing in either form.
    ghosts = Empirical(torch.cat([x, x[:2] + 1]), torch.cat([w, torch.zeros(2, dtype=F64)]))
    torch.testing.assert_close(field.velocity(ghosts, x=x), field.velocity(Empirical(x, w)))
    # Splitting every particle into two halves is the same measure: a constant bias sees
    # the same field; the literature layer does not (σ is not linear in the weight).
    halves = Empirical(x.repeat(2, 1), w.repeat(2) / 2)
    fixed = Sigmoid(Q, K, V, bias=0.0)
    torch.testing.assert_close(fixed.velocity(halves, x=x), fixed.velocity(Empirical(x, w)))
    assert not torch.allclose(field.velocity(halves, x=x), field.velocity(Empirical(x, w)))


def test_light_keys_act_like_the_unnormalised_exponential_kernel(generator):
    # σ(s + log w) = w e^s + O(w² e^{2s}): keys of mass 1e-6 w_j contribute
    # 1e-6 w_j e^{s_ij} V x_j to relative O(1e-6 max e^s) (tolerance 1e-4). A heavy atom
    # carries the remaining mass and contributes its own sigmoid term.
    Q, K, V, x, w = _setup(generator, n=6)
    field = Sigmoid(Q, K, V, scale=0.5)
    A = 0.5 * K.T @ Q
    heavy_point = torch.zeros(1, 3, dtype=F64) + 0.3
    mu = Empirical(
        torch.cat([x, heavy_point]), torch.cat([1e-6 * w, torch.tensor([1 - 1e-6], dtype=F64)])
    )
    light = (torch.exp(x @ A.T @ x.T) * (1e-6 * w)) @ x @ V.T
    heavy = torch.sigmoid(x @ A.T @ heavy_point[0] + math.log(1 - 1e-6))[:, None] * (
        heavy_point @ V.T
    )
    torch.testing.assert_close(field.velocity(mu, x=x), light + heavy, rtol=1e-4, atol=1e-12)


def test_particle_flow_runs_and_is_time_dependent(generator):
    Q = lambda t: (1 + t) * torch.eye(2, dtype=F64)  # noqa: E731
    field = Sigmoid(Q, torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64))
    mu = Empirical(_draw(generator, 40, 2))
    static = Sigmoid(Q(0.5), torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64))
    torch.testing.assert_close(field.velocity(mu, t=0.5), static.velocity(mu))
    traj = integrate(field, mu, 1.0, dt=0.1, method="rk4")
    assert traj.status == "completed"
    assert float(traj.final.cov().trace()) < float(mu.cov().trace())  # V = −I contracts


def test_gaussians_are_not_preserved():
    field = Sigmoid(torch.eye(2), torch.eye(2), torch.eye(2))
    g = Gaussian(torch.zeros(2), torch.eye(2))
    with pytest.raises(GaussianNotPreserved, match=r"Sigmoid attention does not keep .*particles"):
        field.gaussian_rhs(0.0, g.mean(), g.cov())
    with pytest.raises(GaussianNotPreserved, match=r"Empirical\.from_gaussian"):
        integrate(field, g, 1.0)
    with pytest.raises(GaussianNotPreserved, match="tilt lemma"):
        field.velocity(g, torch.zeros(1, 2))


def test_bad_bias_and_sdpa_are_refused():
    eye = torch.eye(2)
    with pytest.raises(TypeError, match=r"bias must be a number or None \(the literature"):
        Sigmoid(eye, eye, eye, bias="auto")
    with pytest.raises(ValueError, match="bias contains 1 non-finite"):
        Sigmoid(eye, eye, eye, bias=float("nan"))
    with pytest.raises(ValueError, match="cannot express the unnormalised sigmoid"):
        Sigmoid(eye, eye, eye).velocity(Empirical(torch.zeros(3, 2)), engine="sdpa")
