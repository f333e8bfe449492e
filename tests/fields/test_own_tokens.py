"""``own``: whether the queries are the keys (x are μ's own tokens), said by the caller.

The particle flows and ``velocity(mu)`` say own=True, ``velocity(mu, x)`` and a grid's faces
own=False (even where x equals μ's tokens in value), wrappers pass it on to their parts; a
field whose ``particle_velocity`` does not declare ``own`` is called without it. Where it is
not said (None: a caller outside tpde), x counts as μ's tokens when equal to them.

Tolerances: float64; spectral against dense sums 1e-11 relative (the engine's own tests
measure ≤ 2e-14 per sum; a flow of 8 stages compounds rounding).
"""

import math

import pytest
import torch

import tpde._engines.spectral as spectral
from tpde.fields import (
    Exponential,
    Field,
    GradientFlowField,
    LayerSchedule,
    Masked,
    MultiHead,
    Normalized,
    Softmax,
)
from tpde.fields.calls import queries_are_keys, takes_own
from tpde.flows import integrate
from tpde.measures import Empirical

F64 = torch.float64
EYE = torch.eye(2, dtype=F64)
OWN_ONLY = "it evaluates the field at μ's own tokens"


def _circle(n: int, seed: int = 0) -> Empirical:
    gen = torch.Generator().manual_seed(seed)
    angles = 2 * math.pi * torch.rand(n, generator=gen, dtype=F64)
    return Empirical(torch.stack([angles.cos(), angles.sin()], -1))


def _softmax(beta: float = 2.0):
    return Softmax(beta * EYE, EYE, EYE, scale=1.0)  # A = βI, V = I: the circle's engine


def _exponential(beta: float = 1.0):
    return Exponential(beta * EYE, EYE, 0.5 * EYE, scale=1.0)


def _relative(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture
def spectral_calls(monkeypatch):
    """The number of clouds the spectral engine summed over (one entry per call)."""
    calls = []
    original = spectral.circle_sums

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(spectral, "circle_sums", counting)
    return calls


WRAPPERS = {
    "normalized-post-ln": lambda: Normalized(_softmax(), "post-ln"),
    "normalized-peri-ln": lambda: Normalized(_softmax(), "peri-ln"),
    "sum": lambda: _softmax() + _exponential(),
    "normalized-sum": lambda: Normalized(_softmax() + _exponential(), "post-ln"),
    "schedule": lambda: LayerSchedule([_softmax(), _softmax(3.0)]),
    "multihead": lambda: MultiHead([_softmax(), _exponential()]),
}


@pytest.mark.parametrize("name", WRAPPERS)
def test_a_wrapped_circle_field_is_told_own_and_takes_the_spectral_engine(name, spectral_calls):
    wrapper, mu = WRAPPERS[name](), _circle(24)
    fast = wrapper.velocity(mu, engine="spectral")
    assert spectral_calls  # the flag reached the part through the wrapper
    assert _relative(fast, wrapper.velocity(mu, engine="dense")) < 1e-11
    # the particle flow says own=True at every stage: 2 steps of RK4 where a norm scheme
    # keeps the tokens on the circle, else one Euler step (its only stage is on it)
    on_circle = isinstance(wrapper, Normalized)
    steps = dict(method="rk4", t1=0.02) if on_circle else dict(method="euler", t1=0.01)
    before = len(spectral_calls)
    flow = integrate(wrapper, mu, dt=0.01, engine="spectral", **steps)
    assert len(spectral_calls) - before >= (8 if on_circle else 1)
    dense = integrate(wrapper, mu, dt=0.01, engine="dense", **steps)
    assert _relative(flow.final.points, dense.final.points) < 1e-11
    # at points x (here the tokens themselves, another tensor) the wrapper says own=False
    with pytest.raises(ValueError, match=OWN_ONLY):
        wrapper.velocity(mu, mu.points.clone(), engine="spectral")


def test_points_equal_to_the_tokens_are_new_points_unless_own_says_so(spectral_calls):
    field, mu = _softmax(), _circle(16)
    same, copy = mu.points, mu.points.clone()
    reference = field.velocity(mu, engine="dense")
    for x in (same, copy):  # said: new points, whatever their values or identity
        with pytest.raises(ValueError, match=OWN_ONLY):
            field.particle_velocity(0.0, mu, x, "spectral", own=False)
    with pytest.raises(ValueError, match=OWN_ONLY):
        field.velocity(mu, same, engine="spectral")  # velocity(mu, x): new points
    assert not spectral_calls
    out = field.particle_velocity(0.0, mu, copy, "spectral", own=True)
    assert len(spectral_calls) == 1 and _relative(out, reference) < 1e-12
    out = field.particle_velocity(0.0, mu, copy, "spectral")  # not said: compared, equal
    assert len(spectral_calls) == 2 and _relative(out, reference) < 1e-12
    moved = copy + 1e-3
    assert queries_are_keys(None, copy, mu) and not queries_are_keys(None, moved, mu)
    assert queries_are_keys(True, moved, mu) and not queries_are_keys(False, same, mu)


def test_a_causal_mask_uses_the_tokens_positions_only_when_told_own():
    points = _circle(6).points
    mu = Empirical(points, positions=torch.arange(6.0, dtype=F64))
    field = Masked(_softmax())
    with pytest.raises(ValueError, match="masked attention evaluates at points x other than"):
        field.particle_velocity(0.0, mu, points, "dense", own=False)
    own = field.particle_velocity(0.0, mu, points.clone(), "dense", own=True)
    torch.testing.assert_close(own, field.velocity(mu), rtol=1e-14, atol=0)
    # not said (a wrapper outside tpde): points equal to the tokens are the tokens
    torch.testing.assert_close(
        field.particle_velocity(0.0, mu, points.clone(), "dense"), own, rtol=1e-14, atol=0
    )


def test_a_gradient_at_the_particles_only_needs_own():
    mu = _circle(5)
    field = GradientFlowField(lambda m: (m.weights * (m.points**2).sum(-1)).sum())
    with pytest.raises(ValueError, match="gives its gradient at the particles only"):
        field.particle_velocity(0.0, mu, mu.points, "auto", own=False)
    out = field.particle_velocity(0.0, mu, mu.points.clone(), "auto", own=True)
    torch.testing.assert_close(out, -2 * mu.points, rtol=1e-14, atol=1e-15)  # −∇|x|²


class _Says(Field):
    """A user field that declares ``own`` and records what its callers said."""

    def __init__(self):
        self.dim, self.said = 2, []

    @property
    def time_dependent(self) -> bool:
        return False

    def particle_velocity(self, t, mu, x, engine, info=None, *, own=None):
        self.said.append(own)
        return -x


class _Older(Field):
    """A user field with the signature before ``own``: called without it."""

    def __init__(self):
        self.dim = 2

    @property
    def time_dependent(self) -> bool:
        return False

    def particle_velocity(self, t, mu, x, engine, info=None):
        return -x


def test_callers_say_own_and_older_signatures_are_called_without_it():
    mu = _circle(4)
    assert takes_own(_Says) and not takes_own(_Older) and takes_own(Softmax)
    says = _Says()
    says.velocity(mu)
    says.velocity(mu, mu.points)
    integrate(says, mu, 0.01, dt=0.01, method="euler")
    assert says.said == [True, False, True]
    says.said.clear()
    wrapped = Normalized(says + _Older(), "post-ln")
    wrapped.velocity(mu)
    wrapped.velocity(mu, mu.points)
    assert says.said == [True, False]
    older = _Older() + _softmax()
    flow = integrate(older, mu, 0.02, dt=0.01, method="rk4")
    torch.testing.assert_close(older.velocity(mu), -mu.points + _softmax().velocity(mu))
    assert flow.final.points.shape == mu.points.shape
