"""Cosine-similarity attention: the defining sum, invariances, capabilities, registry."""

import pytest
import torch

from tpde.fields import Cosine, GaussianNotPreserved, Masked, MultiHead, Softmax, registry
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _params(generator, k=3, d=3):
    Q, K = (torch.randn(k, d, generator=generator, dtype=F64) for _ in "QK")
    return Q, K, torch.randn(d, d, generator=generator, dtype=F64)


def test_velocity_is_the_defining_sum(generator):
    # ẋ_i = V Σ_j w_j e^{β cos(Qx_i, Kx_j)} x_j / Σ_j w_j e^{β cos(Qx_i, Kx_j)}, by hand.
    Q, K, V = _params(generator)
    points = torch.randn(40, 3, generator=generator, dtype=F64)
    weights = torch.rand(40, generator=generator, dtype=F64) + 0.1
    mu = Empirical(points, weights / weights.sum())
    q, k = points @ Q.T, points @ K.T
    cos = (q @ k.T) / (q.norm(dim=1)[:, None] * k.norm(dim=1)[None, :])
    kernel = torch.exp(2.5 * cos) * mu.weights[None, :]
    expected = (kernel @ points) / kernel.sum(1, keepdim=True) @ V.T
    for engine in ("dense", "chunked", "sdpa"):
        torch.testing.assert_close(
            Cosine(Q, K, V, scale=2.5).velocity(mu, engine=engine), expected, rtol=1e-11, atol=1e-12
        )


def test_scores_see_directions_only(generator):
    # Rescaling every token by c > 0 keeps every weight: Γ[c#μ](cx) = c Γ[μ](x).
    Q, K, V = _params(generator)
    mu = Empirical(torch.randn(30, 3, generator=generator, dtype=F64))
    field = Cosine(Q, K, V, scale=4.0)
    scaled = Empirical(3.7 * mu.points)
    torch.testing.assert_close(field.velocity(scaled), 3.7 * field.velocity(mu))


def test_it_is_softmax_with_normalised_queries_and_keys(generator):
    # With Q = K = I, scale β, tokens on the sphere: cos = ⟨x, y⟩, so Cosine = Softmax(βI).
    eye = torch.eye(3, dtype=F64)
    x = torch.nn.functional.normalize(torch.randn(25, 3, generator=generator, dtype=F64), dim=1)
    mu = Empirical(x)
    softmax = Softmax(2.0 * eye, eye, eye, scale=1.0)
    torch.testing.assert_close(Cosine(eye, eye, eye, scale=2.0).velocity(mu), softmax.velocity(mu))


def test_registry_masked_and_multihead_pick_it_up(generator):
    Q, K, V = _params(generator, k=2, d=4)
    assert "cosine" in registry.variant_names(head=True)
    assert isinstance(registry.build("cosine", Q, K, V), Cosine)
    positions = torch.linspace(0, 1, 20, dtype=F64)
    mu = Empirical(torch.randn(20, 4, generator=generator, dtype=F64), positions=positions)
    masked = Masked(Cosine(Q, K, V, scale=3.0))
    # The first token only sees itself: ẋ = Vx.
    first = masked.velocity(mu)[0]
    torch.testing.assert_close(first, V @ mu.points[0])
    for engine in ("chunked", "sdpa"):
        torch.testing.assert_close(masked.velocity(mu, engine=engine), masked.velocity(mu))
    heads = MultiHead.split(torch.cat([Q, K]), torch.cat([K, Q]), V, heads=2, kind="cosine")
    assert all(isinstance(h, Cosine) for h in heads.heads)
    traj = integrate(Cosine(Q, K, V), Empirical(mu.points), 0.5, dt=0.1, method="rk4")
    assert traj.status == "completed"


def test_no_gaussian_closure():
    eye = torch.eye(2, dtype=F64)
    field = Cosine(eye, eye, eye)
    assert not field.supports("gaussian") and field.supports("softmax_form")
    with pytest.raises(GaussianNotPreserved, match="does not keep Gaussians Gaussian"):
        integrate(field, Gaussian(torch.zeros(2, dtype=F64), eye), 1.0)
