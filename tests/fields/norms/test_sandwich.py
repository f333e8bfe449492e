"""The Sandwich scheme (real Peri-LN, Gemma; output norm only, OLMo-2): its equation, the
Lie–Trotter step at h = 1 as the sublayer, bad input. float64, tolerance 1e-13."""

import pytest
import torch

from tpde._scale_safe import rms_norm
from tpde.fields import LayerNorm, Normalized, RMSNorm, Sandwich, Softmax, SwiGLU
from tpde.flows import integrate
from tpde.measures import Empirical

F64 = torch.float64


def _parts(generator, d=4, n=6):
    draw = lambda *s: torch.randn(*s, generator=generator, dtype=F64)  # noqa: E731
    field = Softmax(draw(d, d), draw(d, d), draw(d, d) / d)
    g1, g2 = draw(d) + 1.5, draw(d) + 1.5
    return field, g1, g2, Empirical(draw(n, d) * 2)


def test_velocity_is_post_norm_of_the_field_on_pre_normed_tokens(generator):
    field, g1, g2, mu = _parts(generator)
    x = mu.points
    pre, post = RMSNorm(g1, 1e-6), RMSNorm(g2, 1e-5)
    inner = rms_norm(x, g1, 1e-6)
    expected = rms_norm(field.velocity(Empirical(inner), inner), g2, 1e-5)
    mine = Normalized(field, Sandwich(pre, post)).velocity(mu)
    assert float((mine - expected).abs().max() / expected.abs().max()) < 1e-13
    output_only = Normalized(field, Sandwich(None, post)).velocity(mu)
    expected = rms_norm(field.velocity(mu, x), g2, 1e-5)
    assert float((output_only - expected).abs().max() / expected.abs().max()) < 1e-13


def test_one_euler_step_is_the_gemma_sublayer(generator):
    """x ← x + N₂(F(N₁x)): one Lie–Trotter step (Euler, h = 1) of a feed-forward part."""
    _, g1, g2, mu = _parts(generator)
    draw = lambda *s: torch.randn(*s, generator=generator, dtype=F64) / 2  # noqa: E731
    mlp = SwiGLU(draw(6, 4), draw(6, 4), draw(4, 6), activation="gelu-tanh")
    layer = Normalized(mlp, Sandwich(RMSNorm(g1), RMSNorm(g2)))
    out = integrate(layer, mu, 1.0, dt=1.0, method="euler").measures[-1].points
    x = mu.points
    expected = x + rms_norm(mlp.velocity(Empirical(rms_norm(x, g1, 1e-6))), g2, 1e-6)
    assert float((out - expected).abs().max() / expected.abs().max()) < 1e-13
    assert layer.scheme.norm(x).shape == x.shape and layer.scheme.placement == "pre"
    assert "Sandwich(pre=RMSNorm" in repr(layer)


def test_bad_norms_are_refused(generator):
    field, g1, g2, _ = _parts(generator)
    with pytest.raises(TypeError, match="Sandwich post must be an RMSNorm or LayerNorm"):
        Sandwich(RMSNorm(g1), None)
    with pytest.raises(TypeError, match=r"Sandwich pre must be .* placement 'pre'"):
        Sandwich(LayerNorm(placement="post"), RMSNorm(g2))
    with pytest.raises(ValueError, match=r"gamma must have shape \(4,\)"):
        Normalized(field, Sandwich(RMSNorm(torch.ones(3, dtype=F64)), RMSNorm(g2)))
