"""Declared children (Field.children): a composite's capabilities, positions and checks follow
from the fields it declares, whatever attribute holds them.

A user's wrapper keeps its child under an unusual name (``wrapped_thing``) and declares it;
before ``children()`` the library found a wrapper's parts by probing the names ``field``,
``parts``, ``layers`` and ``heads``, so this wrapper claimed Gaussians over a sigmoid
field, hid a causal child's positions and a masked child's measure checks, and took the
blame for its child's NaN.
"""

import math
import re
from pathlib import Path

import pytest
import torch

import tpde
from tests.adversarial.strategies import F64, cloud
from tpde.fields import (
    MLP,
    Field,
    GroupedQueryAttention,
    LayerSchedule,
    Masked,
    MultiHead,
    Normalized,
    Parallel,
    Sigmoid,
    Softmax,
    Sum,
    part_velocity,
    supports,
)
from tpde.measures import Empirical, Gaussian

D, N = 4, 5


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


EYE = torch.eye(D, dtype=F64)
SEQ = Empirical(cloud(N, D), positions=torch.arange(float(N), dtype=F64))
X = _r(N, D, seed=5)
P = torch.tensor([4.0, 0.0, 2.0, 3.0, 1.0], dtype=F64)


class Scaled(Field):
    """A user's wrapper, c·Γ, holding its field under an unusual name and declaring it."""

    def __init__(self, field, c=2.0):
        self.wrapped_thing, self.c, self.dim = field, c, field.dim

    def children(self):
        return (self.wrapped_thing,)

    @property
    def time_dependent(self):
        return self.wrapped_thing.time_dependent

    def particle_velocity(self, t, mu, x, engine, info=None, positions=None, *, own=None):
        v = part_velocity(self.wrapped_thing, t, mu, x, engine, info, positions, own=own)
        return self.c * v

    def gaussian_affine(self, t, mean, cov):
        c, B = self.wrapped_thing.gaussian_affine(t, mean, cov)
        return self.c * c, self.c * B


class NoPositions(Scaled):
    """A wrapper that declares its child but takes no positions."""

    def particle_velocity(self, t, mu, x, engine, info=None):
        return self.c * self.wrapped_thing.particle_velocity(t, mu, x, engine, info)


class NaNField(Field):
    """A user's field that returns NaN."""

    dim = D

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x * math.nan


def gqa(**options):
    H, HKV, DH = 2, 1, 2
    weights = {
        "Wq": _r(H * DH, D, seed=1),
        "Wk": _r(HKV * DH, D, seed=2),
        "Wv": _r(HKV * DH, D, seed=3),
        "Wo": _r(D, H * DH, seed=4),
    }
    return GroupedQueryAttention(**weights, heads=H, kv_heads=HKV, **options)


def mlp():
    return MLP(_r(6, D, seed=6), _r(6, seed=7), _r(D, 6, seed=8), _r(D, seed=9))


def softmax():
    return Softmax(EYE, EYE, -EYE)


# ---------------------------------------------------------------- the library's composites
def test_every_composite_declares_its_children():
    a, b, c = softmax(), Softmax(EYE, EYE, EYE), mlp()
    assert Sum([a, b]).children() == (a, b)
    assert MultiHead([a, b]).children() == (a, b)
    assert LayerSchedule([a, c]).children() == (a, c)
    assert Masked(a).children() == (a,)
    assert Normalized(a, "pre-ln").children() == (a,)
    assert Parallel([a, c]).children() == (a, c)
    assert a.children() == () and c.children() == () and gqa().children() == ()


def test_no_attribute_name_is_probed_for_children():
    """The library asks children(), never getattr(field, "parts") and the like."""
    probe = re.compile(
        r'getattr\([^)]*"(field|fields|parts|heads|inner|layers|branches|wrapped|scheme)"'
        r'|getattr\([^)]*"_(W|bias)_at"'
        r'|for \w+ in \("(parts|layers|heads|field)"'
    )
    root = Path(tpde.__file__).parent
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if probe.search(line)
    ]
    assert found == []


# ---------------------------------------------------------------- capabilities
def test_a_user_wrapper_takes_its_capabilities_from_its_child():
    assert supports(Scaled(softmax()), "gaussian")
    # the wrapper implements gaussian_affine, but its child has no closure: not claimed
    sigmoid = Sigmoid(EYE, EYE, EYE)
    assert not supports(Scaled(sigmoid), "gaussian")
    assert not supports(Scaled(mlp()), "gaussian")
    # and the Gaussian closure it claims is the child's, scaled
    mean, cov = _r(D, seed=11), EYE * 0.3
    dm, dc = Scaled(softmax()).gaussian_rhs(0.0, mean, cov)
    dm0, dc0 = softmax().gaussian_rhs(0.0, mean, cov)
    torch.testing.assert_close((dm, dc), (2 * dm0, 2 * dc0))
    # inside a library composite: a sum keeps Gaussians only if every part does
    assert supports(Scaled(softmax()) + softmax(), "gaussian")
    assert not supports(Scaled(sigmoid) + softmax(), "gaussian")


def test_a_user_wrapper_refuses_a_gaussian_its_child_cannot_follow():
    g = Gaussian(torch.zeros(D, dtype=F64), EYE)
    with pytest.raises(tpde.fields.GaussianNotPreserved, match="Sigmoid attention does not"):
        Scaled(Sigmoid(EYE, EYE, EYE)).velocity(g, X)


# ---------------------------------------------------------------- positions
def test_positions_reach_a_declared_child():
    inner = gqa()
    wrapper = Scaled(inner)
    assert wrapper.needs_positions and (mlp() + wrapper).needs_positions
    got = wrapper.velocity(SEQ, X, positions=P)
    torch.testing.assert_close(got, 2 * inner.velocity(SEQ, X, positions=P))
    moved = wrapper.velocity(SEQ, X, positions=torch.arange(float(N), dtype=F64))
    assert float((got - moved).abs().max()) > 1e-6  # the positions are used, not μ's
    stack = LayerSchedule([mlp(), wrapper])
    torch.testing.assert_close(
        stack.velocity(SEQ, X, positions=P, t=1.5), 2 * inner.velocity(SEQ, X, positions=P)
    )


def test_a_declared_positional_child_is_named_when_positions_are_missing():
    with pytest.raises(
        ValueError, match=r"Scaled \(its part GroupedQueryAttention uses positions\) at points x"
    ):
        Scaled(gqa()).velocity(SEQ, X)
    with pytest.raises(
        ValueError, match=r"Sum \(its part GroupedQueryAttention uses positions\) at points x"
    ):
        (mlp() + Scaled(gqa())).velocity(SEQ, X)


def test_a_wrapper_without_positions_for_a_positional_child_is_refused():
    with pytest.raises(TypeError, match=r"NoPositions.particle_velocity takes no positions="):
        NoPositions(gqa()).velocity(SEQ, X, positions=P)


def test_a_wrapper_without_children_is_unchanged():
    """A wrapper that declares nothing is a plain field: no positions, its own capabilities."""

    class Hidden(Scaled):
        def children(self):
            return ()

    hidden = Hidden(gqa())
    assert not hidden.needs_positions
    with pytest.raises(ValueError, match="positions were given, but this field uses none"):
        hidden.velocity(SEQ, X, positions=P)


# ---------------------------------------------------------------- checks
def test_measure_checks_reach_a_declared_child():
    unpositioned = Empirical(cloud(N, D))
    with pytest.raises(ValueError, match="masked attention needs token positions"):
        Scaled(Masked(softmax())).velocity(unpositioned)
    off_sphere = Empirical(3 * cloud(N, D))
    with pytest.raises(ValueError, match="moves tokens on the unit sphere"):
        Scaled(Normalized(softmax(), "post-ln")).velocity(off_sphere)
    with pytest.raises(ValueError, match="masked attention needs token positions"):
        tpde.flows.integrate(Scaled(Masked(softmax())), unpositioned, 0.1)


def test_a_nan_is_blamed_on_the_declared_child():
    mu = Empirical(cloud(N, D))
    with pytest.raises(FloatingPointError, match=r"^NaNField inside Scaled returned 20 non-"):
        Scaled(NaNField()).velocity(mu)
    with pytest.raises(
        FloatingPointError, match=r"^NaNField inside Scaled \(inside Normalized\) returned 20"
    ):
        Normalized(Scaled(NaNField()), "pre-ln").velocity(mu)
    with pytest.raises(
        FloatingPointError,
        match=r"part 1 of the sum, Normalized, \(a field defined outside tpde: NaNField inside "
        r"Scaled\) returned 20 non-finite",
    ):
        (softmax() + Normalized(Scaled(NaNField()), "pre-ln")).velocity(mu)
    with pytest.raises(FloatingPointError, match=r"^NaNField \(inside MultiHead\) returned 20"):
        MultiHead([NaNField()]).velocity(mu)
