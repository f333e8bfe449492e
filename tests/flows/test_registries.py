"""The method and system tables (issue 26): registration refuses what the loop cannot
step, a subclass of a measure finds its own system, one Auto per run, per-run caching."""

import pytest
import torch

from tpde.fields import Softmax
from tpde.flows import (
    METHODS,
    SYSTEMS,
    Auto,
    Method,
    ParticleSystem,
    integrate,
    register_method,
    register_system,
)
from tpde.flows.methods import method_listing, resolve_method
from tpde.measures import Empirical

F64 = torch.float64
FIELD = Softmax.from_interaction(torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64))
MU = Empirical(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]], dtype=F64))


class Midpoint(Method):
    """The explicit midpoint rule (order 2), a method written from the base."""

    name, order, adaptive = "midpoint-test", 2, False

    def step(self, f, t, y, h, k1=None, h_clock=0.0):
        k1 = f(t, y) if k1 is None else k1
        half = tuple(p + 0.5 * h * k for p, k in zip(y, k1, strict=True))
        k2 = f(t + 0.5 * h_clock, half)
        return tuple(p + h * k for p, k in zip(y, k2, strict=True)), None, None


def test_a_registered_method_is_known_by_name_everywhere():
    try:
        register_method(Midpoint())
        assert "'midpoint-test' (order 2, fixed step)" in method_listing()
        traj = integrate(FIELD, MU, 0.5, method="midpoint-test", dt=0.05)
        reference = integrate(FIELD, MU, 0.5, method="dopri5", rtol=1e-12, atol=1e-14)
        assert traj.stats["method"] == "midpoint-test"
        torch.testing.assert_close(traj.final.points, reference.final.points, rtol=0, atol=1e-3)
        with pytest.raises(ValueError, match=r"unknown method 'nope'.*'midpoint-test'"):
            resolve_method("nope")
    finally:
        METHODS.pop("midpoint-test", None)


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="a method named 'rk4' is already registered"):
        register_method(METHODS["rk4"])


@pytest.mark.parametrize(
    ("attributes", "match"),
    [
        ({"order": 2, "adaptive": False}, "lacks the trait 'name'"),
        ({"name": "x", "adaptive": False}, "lacks the trait 'order'"),
        ({"name": "x", "order": 2}, "lacks the trait 'adaptive'"),
        ({"name": "x", "order": 0, "adaptive": False}, "trait 'order' as an int >= 1"),
        ({"name": "x", "order": 2, "adaptive": "no"}, "trait 'adaptive' as a bool"),
        ({"name": "x", "order": 2, "adaptive": False, "splits": 1}, "trait 'splits'"),
        ({"name": "x", "order": 2, "adaptive": True, "error_exponent": -1.0}, "error_expon"),
    ],
)
def test_a_method_missing_a_trait_is_refused_at_registration(attributes, match):
    broken = type("Broken", (Method,), {"step": Midpoint.step, **attributes})()
    with pytest.raises(TypeError, match=match):
        register_method(broken)
    assert "x" not in METHODS


def test_register_method_takes_a_method():
    with pytest.raises(TypeError, match=r"register_method takes a Method.*received str"):
        register_method("rk4")


def test_one_auto_per_run():
    built = []
    original = Auto.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    Auto.__init__ = counting
    try:
        traj = integrate(FIELD, MU, 0.5)
    finally:
        Auto.__init__ = original
    assert traj.stats["method"] == "auto" and len(built) == 1


class Tokens(Empirical):
    """A subclass of Empirical with a system of its own."""


def test_a_subclass_registered_on_its_own_gets_its_own_system():
    used = []

    def build(field, mu0, t0, engine):
        used.append(type(mu0))
        return ParticleSystem(field, mu0, engine, t0=t0)

    try:
        register_system(Tokens, build)
        integrate(FIELD, Tokens(MU.points), 0.1, method="rk4", dt=0.05)
        integrate(FIELD, MU, 0.1, method="rk4", dt=0.05)  # the parent's own system
    finally:
        SYSTEMS.pop(Tokens, None)
    assert used == [Tokens]


def test_registering_a_measure_type_twice_is_refused():
    with pytest.raises(ValueError, match="Empirical already has a system builder"):
        register_system(Empirical, lambda field, mu0, t0, engine: None)


def test_capabilities_are_asked_once_per_run():
    asked = []
    original = type(FIELD).supports

    def supports(self, capability):
        asked.append(capability)
        return original(self, capability)

    type(FIELD).supports = supports
    try:
        integrate(FIELD, MU, 1.0, method="rk4", dt=1 / 30)
    finally:
        del type(FIELD).supports  # Field's own again
    assert asked.count("projection") == 1  # measured before: 3 per step, 90 in 30 steps
