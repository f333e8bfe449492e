"""Affine attention parameters: query, key, value and output biases (issue: real attention)."""

import pytest
import torch

from tpde.fields import L2, MultiHead, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _draw(generator, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=generator, dtype=F64)


def _params(generator, d=3, k=2):
    return {
        "Q": _draw(generator, k, d, scale=0.5),
        "K": _draw(generator, k, d, scale=0.5),
        "V": _draw(generator, d, d),
        "query_bias": _draw(generator, k),
        "key_bias": _draw(generator, k),
        "value_bias": _draw(generator, d),
    }


def _loop_velocity(kernel, x, w, V, bv):
    """Σ_j w_j k(x_i, x_j)(V x_j + b_v) / Σ_j w_j k(x_i, x_j), written out with loops."""
    n = len(x)
    rows = []
    for i in range(n):
        weights = torch.stack([w[j] * kernel(x[i], x[j]) for j in range(n)])
        values = torch.stack([V @ x[j] + bv for j in range(n)])
        rows.append(weights @ values / weights.sum())
    return torch.stack(rows)


@pytest.mark.parametrize("k", [2, 3, 5])  # head dimension below, at and above d = 3
def test_softmax_with_biases_is_the_affine_layer(k, generator):
    p = _params(generator, k=k)
    x = _draw(generator, 6, 3)
    w = torch.rand(6, generator=generator, dtype=F64) + 0.2
    w = w / w.sum()
    scale = 0.7

    def kernel(xi, yj):
        return torch.exp(scale * (p["Q"] @ xi + p["query_bias"]) @ (p["K"] @ yj + p["key_bias"]))

    expected = _loop_velocity(kernel, x, w, p["V"], p["value_bias"])
    got = Softmax(scale=scale, **p).velocity(Empirical(x, w))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_key_bias_cancels_in_softmax(generator):
    p = _params(generator)
    mu = Empirical(_draw(generator, 5, 3))
    with_bias = Softmax(**p).velocity(mu)
    p["key_bias"] = None
    torch.testing.assert_close(Softmax(**p).velocity(mu), with_bias, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", ["distance", "code"])
def test_l2_with_biases_is_the_affine_layer(form, generator):
    p = _params(generator)
    x = _draw(generator, 6, 3)
    w = torch.full((6,), 1 / 6, dtype=F64)
    scale = 0.6

    def kernel(xi, yj):
        u, v = p["Q"] @ xi + p["query_bias"], p["K"] @ yj + p["key_bias"]
        if form == "distance":
            return torch.exp(-scale * (u - v).pow(2).sum())
        return torch.exp(2 * scale * u @ v - v @ v)  # the authors' code form

    expected = _loop_velocity(kernel, x, w, p["V"], p["value_bias"])
    got = L2(scale=scale, form=form, **p).velocity(Empirical(x, w))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [Softmax, L2])
def test_gaussian_closure_with_biases_matches_monte_carlo(cls, generator):
    # The closed-form affine field on N(α, Σ) against a self-normalised Monte Carlo
    # average over 4·10⁵ samples: standard error ≈ 2e-3 here; tolerance 1.5e-2.
    p = _params(generator)
    field = cls(**p)
    g = Gaussian(_draw(generator, 3, scale=0.3), 0.3 * torch.eye(3, dtype=F64) + 0.05)
    x = _draw(generator, 4, 3, scale=0.5)
    exact = field.velocity(g, x)
    cloud = Empirical.from_gaussian(g, 400_000, generator=generator)
    assert float((field.velocity(cloud, x) - exact).abs().max()) < 1.5e-2


def test_multihead_output_bias_adds_a_constant(generator):
    heads = [Softmax(**_params(generator)), L2(**_params(generator))]
    bias = _draw(generator, 3)
    mu = Empirical(_draw(generator, 5, 3))
    plain, biased = MultiHead(heads), MultiHead(heads, bias=bias)
    torch.testing.assert_close(biased.velocity(mu), plain.velocity(mu) + bias)
    mean, cov = torch.zeros(3, dtype=F64), torch.eye(3, dtype=F64)
    (c0, B0), (c1, B1) = (
        plain.gaussian_affine(0.0, mean, cov),
        biased.gaussian_affine(0.0, mean, cov),
    )
    torch.testing.assert_close(c1, c0 + bias)
    torch.testing.assert_close(B1, B0)


def test_constant_value_bias_translates_the_gaussian_flow(generator):
    # Γ = Γ₀ + b_v shifts α̇ by b_v and leaves Σ̇ unchanged (V = 0 isolates the bias).
    b = torch.tensor([0.3, -0.2], dtype=F64)
    field = Softmax(
        torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), torch.zeros(2, 2, dtype=F64), value_bias=b
    )
    g0 = Gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64))
    traj = integrate(field, g0, 2.0, dt=0.1, method="rk4")
    torch.testing.assert_close(traj.final.mean(), 2.0 * b)
    torch.testing.assert_close(traj.final.cov(), torch.eye(2, dtype=F64))


@pytest.mark.parametrize(
    ("name", "shape", "match"),
    [
        ("query_bias", (3,), r"query_bias must have shape \(\.\.\., 2\)"),
        ("key_bias", (2, 2, 1), r"key_bias must have shape \(\.\.\., 2\)"),
        ("value_bias", (2,), r"value_bias must have shape \(\.\.\., 3\)"),
    ],
)
def test_bias_shapes_are_checked(name, shape, match, generator):
    p = _params(generator)
    p[name] = torch.zeros(shape, dtype=F64)
    with pytest.raises(ValueError, match=match):
        Softmax(**p)


def test_multihead_bias_shape_and_nan_are_checked(generator):
    heads = [Softmax(**_params(generator))]
    with pytest.raises(ValueError, match=r"bias must have shape \(\.\.\., d\) = \(\.\.\., 3\)"):
        MultiHead(heads, bias=torch.zeros(2))
    with pytest.raises(ValueError, match="non-finite"):
        MultiHead(heads, bias=torch.tensor([0.0, float("nan"), 0.0]))
