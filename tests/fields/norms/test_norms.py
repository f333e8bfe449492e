"""Norm schemes as objects: each scheme's equation, the aliases, RMSNorm, placements, bad input."""

import pytest
import torch

from tpde._scale_safe import layer_norm, rms_norm, unit
from tpde.fields import (
    NGPT,
    LayerNorm,
    MixLN,
    Normalized,
    PeriLN,
    PostLN,
    PreLN,
    RMSNorm,
    Sandwich,
    Softmax,
    SwiGLU,
)
from tpde.fields.norms.schemes import SCHEMES, tangent
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _field(generator, d=4):
    draw = lambda *s: torch.randn(*s, generator=generator, dtype=F64)  # noqa: E731
    return Softmax(draw(d, d), draw(d, d), draw(d, d) / d)


def _tokens(generator, n=6, d=4):
    return Empirical(torch.randn(n, d, generator=generator, dtype=F64) * 2)


def test_every_alias_builds_its_object_and_the_same_velocity(generator):
    # The string alias and the object are one scheme: identical velocities (bitwise).
    field, mu = _field(generator), _tokens(generator)
    sphere = mu.normalized()
    objects = {
        "post-ln": PostLN(),
        "pre-ln": PreLN(),
        "peri-ln": PeriLN(),
        "mix-ln": MixLN(switch=0.5),
        "ngpt": NGPT(alpha=2.0),
        "layernorm": LayerNorm(),
        "rmsnorm": RMSNorm(),
        "sandwich": Sandwich(RMSNorm(), RMSNorm()),
    }
    assert set(objects) == set(SCHEMES)
    sandwich = {"pre": objects["sandwich"].pre, "post": objects["sandwich"].post}
    options = {"mix-ln": {"switch": 0.5}, "ngpt": {"alpha": 2.0}, "sandwich": sandwich}
    for name, scheme in objects.items():
        tokens = sphere if scheme.on_sphere or name == "mix-ln" else mu
        by_name = Normalized(field, name, **options.get(name, {})).velocity(tokens)
        by_object = Normalized(field, scheme).velocity(tokens)
        assert torch.equal(by_name, by_object), name
        assert type(Normalized(field, name, **options.get(name, {})).scheme) is type(scheme)


def test_each_scheme_is_its_equation(generator):
    # float64, the same operations in another order: tolerance 1e-13.
    field, mu = _field(generator), _tokens(generator)
    x, sphere = mu.points, mu.normalized()
    y = sphere.points
    gamma = torch.rand(4, generator=generator, dtype=F64) + 0.5
    bias = torch.randn(4, generator=generator, dtype=F64)

    def raw(measure, points):
        return field.velocity(measure, points)

    def normed(norm):
        return raw(Empirical(norm(x)), norm(x))

    cases = {
        PostLN(): (sphere, tangent(y, raw(sphere, y))),
        PostLN(tangent=False): (sphere, raw(sphere, y)),
        PreLN(): (mu, normed(unit)),
        PeriLN(): (mu, unit(normed(unit))),
        NGPT(alpha=0.3): (sphere, 0.3 * tangent(y, unit(raw(sphere, y)))),
        RMSNorm(gamma, eps=1e-6): (mu, normed(lambda p: rms_norm(p, gamma, 1e-6))),
        LayerNorm(gamma, bias, placement="pre"): (
            mu,
            normed(lambda p: layer_norm(p, gamma, bias, 1e-12)),
        ),
        LayerNorm(gamma, bias): (mu, raw(mu, x)),
    }
    for scheme, (tokens, expected) in cases.items():
        got = Normalized(field, scheme).velocity(tokens)
        torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-13, msg=scheme.describe())


def test_rms_norm_is_llama_rmsnorm_and_sqrt_d_times_the_sphere_map(generator):
    # Llama's RMSNorm (HF LlamaRMSNorm): x * rsqrt(mean(x²) + eps) * weight; with γ = 1 and
    # ε = 0 it is √d · x/|x|. float64, 1e-14.
    x = torch.randn(5, 6, generator=generator, dtype=F64)
    gamma = torch.rand(6, generator=generator, dtype=F64)
    hf = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * gamma
    torch.testing.assert_close(rms_norm(x, gamma, 1e-5), hf, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(rms_norm(x, 1.0, 0.0), 6**0.5 * unit(x), rtol=1e-14, atol=0)
    torch.testing.assert_close(
        RMSNorm(placement="post", eps=0.0 + 1e-300).project(x), 6**0.5 * unit(x)
    )


def test_post_placement_projects_after_each_step_and_pre_does_not(generator):
    field, mu = _field(generator), _tokens(generator)
    gamma = torch.rand(4, generator=generator, dtype=F64) + 0.5
    post = Normalized(field, RMSNorm(gamma, placement="post"))
    pre = Normalized(field, RMSNorm(gamma))
    assert post.supports("projection") and not pre.supports("projection")
    step = integrate(post, mu, 1.0, dt=1.0, method="euler").final.points
    x = mu.points
    expected = rms_norm(x + field.velocity(mu, x), gamma, 1e-6)
    torch.testing.assert_close(step, expected, rtol=1e-13, atol=1e-13)


def test_a_scheme_on_a_feed_forward_field(generator):
    # Pre-RMSNorm SwiGLU: F(RMS(x)), the MLP half of a Llama layer.
    draw = lambda *s: torch.randn(*s, generator=generator, dtype=F64) / 3  # noqa: E731
    mlp = SwiGLU(draw(8, 4), draw(8, 4), draw(4, 8))
    gamma = torch.rand(4, generator=generator, dtype=F64) + 0.5
    mu = _tokens(generator)
    got = Normalized(mlp, RMSNorm(gamma, eps=1e-5)).velocity(mu)
    expected = mlp.velocity(mu, rms_norm(mu.points, gamma, 1e-5))
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=1e-14)


def test_mix_ln_is_piecewise_and_its_pieces_are_built_once(generator):
    field = _field(generator)
    mixed = Normalized(field, MixLN(switch=0.25))
    assert mixed.breakpoints == (0.25,) and mixed.time_dependent
    before, after = mixed.piece(0.1), mixed.piece(0.3)
    assert isinstance(before.scheme, PostLN) and isinstance(after.scheme, PreLN)
    assert mixed.piece(0.2) is before and mixed.piece(0.9) is after
    assert Normalized(field, "pre-ln").piece(5.0).scheme.name == "pre-ln"


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda f: Normalized(f, "rms"),
            ValueError,
            "unknown normalisation scheme 'rms'.*'rmsnorm'",
        ),
        (lambda f: Normalized(f, PostLN(), alpha=2), ValueError, "go to the scheme object"),
        (lambda f: Normalized(f, "pre-ln", alpha=2), ValueError, "alpha applies to the 'ngpt'"),
        (lambda f: Normalized(f, "pre-ln", tangent=False), ValueError, "tangent applies to"),
        (lambda f: Normalized(f, "post-ln", flavour=1), TypeError, "unexpected option 'flavour'"),
        (
            lambda f: Normalized(f, RMSNorm(torch.ones(3))),
            ValueError,
            r"RMSNorm gamma must have "
            r"shape \(4,\).*received \(3,\)",
        ),
        (lambda f: RMSNorm(torch.ones(2, 2)), ValueError, r"must be a vector \(d,\)"),
        (lambda f: RMSNorm(eps=0), ValueError, "eps must be"),
        (lambda f: LayerNorm(placement="middle"), ValueError, "placement must be 'pre'"),
        (lambda f: LayerNorm(bias=[1.0, float("nan")]), ValueError, "LayerNorm bias"),
        (lambda f: MixLN(switch="abc"), TypeError, "switch is a depth-time.*string 'abc'"),
        (lambda f: MixLN(switch=2.0), ValueError, r"inside the depth range \(0, 1\)"),
        (lambda f: MixLN(), ValueError, "needs switch=t"),
        (lambda f: NGPT(alpha=-1.0), ValueError, "nGPT alpha"),
        (lambda f: PostLN(tangent="yes"), TypeError, "tangent must be True or False"),
    ],
)
def test_bad_scheme_input_names_the_cause(generator, build, error, match):
    with pytest.raises(error, match=match):
        build(_field(generator))


def test_an_ngpt_step_that_returns_a_vector_is_refused(generator):
    field = Normalized(_field(generator), NGPT(alpha=lambda t: torch.ones(3)))
    with pytest.raises(ValueError, match=r"one number per depth-time.*shape \(3,\)"):
        field.velocity(_tokens(generator).normalized())


def test_normalized_refuses_gaussians_with_its_schemes_name(generator):
    g = Gaussian(torch.zeros(4, dtype=F64), torch.eye(4, dtype=F64))
    with pytest.raises(Exception, match=r"normalised \(rmsnorm\) attention does not keep"):
        integrate(Normalized(_field(generator), RMSNorm()), g, 1.0)
