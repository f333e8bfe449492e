"""MixtureOfExperts: against its formula written densely, the per-expert terms, the checks."""

from __future__ import annotations

import pytest
import torch

from tpde.fields import GaussianNotPreserved, MixtureOfExperts, SwiGLU
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _experts(generator, E=5, d=4, m=3):
    def expert():
        w = [torch.randn(*s, generator=generator, dtype=F64) for s in ((m, d), (m, d), (d, m))]
        return SwiGLU(*w)

    router = torch.randn(E, d, generator=generator, dtype=F64)
    return router, [expert() for _ in range(E)], expert()


def _dense(router, experts, k, x, normalize, shared=None, gate=None):
    """Σ_e g_e(x) F_e(x), every expert evaluated everywhere and masked (class equation)."""
    p = torch.softmax(x @ router.T, dim=-1)  # (..., n, E)
    kth = p.sort(dim=-1, descending=True).values[..., k - 1 : k]
    g = torch.where(p >= kth, p, torch.zeros_like(p))
    g = g / g.sum(-1, keepdim=True) if normalize else g
    out = sum(g[..., e, None] * f.feed_forward(0.0, x) for e, f in enumerate(experts))
    if shared is not None:
        weight = 1.0 if gate is None else torch.sigmoid(x @ gate.T)
        out = out + weight * shared.feed_forward(0.0, x)
    return out


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("with_shared", [False, True])
def test_velocity_is_the_dense_formula(generator, normalize, k, with_shared):
    router, experts, shared = _experts(generator)
    gate = torch.randn(1, 4, generator=generator, dtype=F64) if with_shared else None
    field = MixtureOfExperts(
        router, experts, k, normalize=normalize, shared=shared if with_shared else None,
        shared_gate=gate,
    )  # fmt: skip
    x = torch.randn(2, 9, 4, generator=generator, dtype=F64)  # batched tokens
    expected = _dense(router, experts, k, x, normalize, shared if with_shared else None, gate)
    torch.testing.assert_close(field.feed_forward(0.0, x), expected, rtol=1e-13, atol=1e-13)
    mu = Empirical(x[0])
    torch.testing.assert_close(field.velocity(mu), expected[0], rtol=1e-13, atol=1e-13)
    terms = field.expert_velocities(0.0, x)
    assert terms.shape == (5 + with_shared, 2, 9, 4)
    torch.testing.assert_close(terms.sum(0), expected, rtol=1e-13, atol=1e-13)
    acting = (terms[:5].abs().sum(-1) > 0).sum(0)  # experts with a term at each token
    assert bool((acting == k).all())


def test_top_one_without_renormalisation_is_the_probability_times_the_expert(generator):
    router, experts, _ = _experts(generator, E=3)
    x = torch.randn(6, 4, generator=generator, dtype=F64)
    weights, chosen = MixtureOfExperts(router, experts, 1, normalize=False).routing(0.0, x)
    p = torch.softmax(x @ router.T, dim=-1)
    torch.testing.assert_close(weights[:, 0], p.max(-1).values, rtol=0, atol=1e-15)
    assert torch.equal(chosen[:, 0], p.argmax(-1))
    ones, _ = MixtureOfExperts(router, experts, 1).routing(0.0, x)
    torch.testing.assert_close(ones, torch.ones_like(ones), rtol=0, atol=1e-15)


def test_checks_name_what_was_received(generator):
    router, experts, shared = _experts(generator)
    with pytest.raises(ValueError, match=r"top_k = 6 experts per token exceeds the E = 5"):
        MixtureOfExperts(router, experts, 6)
    with pytest.raises(ValueError, match="top_k must be a positive integer; received True"):
        MixtureOfExperts(router, experts, True)
    with pytest.raises(ValueError, match=r"scores E = 5 experts .* but 4 experts were given"):
        MixtureOfExperts(router, experts[:4], 2)
    with pytest.raises(TypeError, match="expert 1 must be a feed-forward field"):
        MixtureOfExperts(router, [experts[0], "mlp", *experts[2:]], 2)
    with pytest.raises(TypeError, match="non-empty list of feed-forward fields"):
        MixtureOfExperts(router, experts[0], 1)
    with pytest.raises(ValueError, match="shared_gate gates the shared expert; pass shared"):
        MixtureOfExperts(router, experts, 2, shared_gate=torch.ones(1, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"shared_gate must have shape \(1, 4\); received 2"):
        MixtureOfExperts(router, experts, 2, shared=shared, shared_gate=torch.ones(2, 4))
    with pytest.raises(TypeError, match="normalize must be True or False; received 1"):
        MixtureOfExperts(router, experts, 2, normalize=1)
    wide = SwiGLU(torch.ones(3, 6), torch.ones(3, 6), torch.ones(6, 3))
    with pytest.raises(ValueError, match="expert 4 acts on d = 6, the router on d = 4"):
        MixtureOfExperts(router, [*experts[:4], wide], 2)
    field = MixtureOfExperts(router, experts, 2)
    with pytest.raises(GaussianNotPreserved, match="MixtureOfExperts is a nonlinear"):
        field.velocity(
            Gaussian(torch.zeros(4, dtype=F64), torch.eye(4, dtype=F64)),
            torch.ones(2, 4, dtype=F64),
        )
