"""The one stepping loop: per-element step control, method objects, declared orders, and
the protocol's bad inputs (tableaux, projections, capabilities, statuses)."""

import math

import numpy as np
import pytest
import torch

from tpde.fields import Field, Softmax
from tpde.flows import METHODS, BlowUp, ExplicitRK, Status, integrate
from tpde.flows.systems import GaussianSystem
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _one_d(v=1.0, a=1.0):
    return Softmax.from_interaction(torch.tensor([[a]], dtype=F64), torch.tensor([[v]], dtype=F64))


def _spread_batch(count=30):
    # Σ̇ = 2Σ² from Σ₀ ∈ [0.2, 2]: blow-up at t* = 1/(2Σ₀), spread over a decade [0.25, 2.5].
    s0 = torch.logspace(math.log10(0.2), math.log10(2.0), count, dtype=F64).reshape(count, 1, 1)
    return Gaussian(torch.zeros(count, 1, dtype=F64), s0), 1 / (2 * s0.flatten())


def test_each_element_stops_at_its_own_time_with_its_own_steps():
    g0, t_star = _spread_batch()
    traj = integrate(_one_d(), g0, 5.0, method="dopri5", events=(BlowUp(1e3),))
    assert (traj.status == "blow_up").all() and not traj.stats["synchronous"]
    exact = t_star - 1e-3 / 2  # Σ(t) = Σ₀/(1 − 2Σ₀t) reaches 1e3
    assert torch.allclose(traj.event_time, exact, atol=1e-3)
    # Per-element control: the vectorised loop takes about as many steps as its slowest
    # element alone (each element's singular approach is paid by that element only).
    alone = [
        integrate(_one_d(), g0[i], 5.0, method="dopri5", events=(BlowUp(1e3),)).stats
        for i in (0, len(t_star) - 1)
    ]
    slowest = max(s["n_steps"] + s["n_rejected"] for s in alone)
    assert traj.stats["n_iterations"] <= 1.3 * slowest
    assert traj.stats["steps"].shape == (len(t_star),)
    assert int(traj.stats["steps"].sum()) == traj.stats["n_steps"]


def test_saved_states_are_interpolated_per_element():
    # Each element takes its own steps; the state at a common save time inside an element's
    # step is its cubic Hermite interpolant (O(h⁴) of that step: measured 2e-8 relative at
    # rtol 1e-10, tolerance 1e-7), and t1 is landed on exactly (1e-9). Σ(t) = Σ₀/(1 + 2Σ₀t).
    s0 = torch.tensor([0.1, 1.0, 10.0], dtype=F64).reshape(3, 1, 1)
    g0 = Gaussian(torch.zeros(3, 1, dtype=F64), s0)
    times = [0.0, 0.3, 0.7, 1.0]
    traj = integrate(_one_d(a=-1.0), g0, 1.0, method="dopri5", rtol=1e-10, atol=1e-12, save=times)
    np.testing.assert_array_equal(traj.times.numpy(), times)
    for t, g in zip(times, traj.measures, strict=True):
        exact = s0.flatten() / (1 + 2 * s0.flatten() * t)
        tol = 1e-9 if t in (0.0, 1.0) else 1e-7
        torch.testing.assert_close(g.cov().flatten(), exact, rtol=tol, atol=0)
    steps = traj.stats["steps"]
    assert steps[2] > steps[0]  # the stiffest element took more steps, alone
    # Saving many times costs no step: the same run saving 200 times takes the same steps.
    dense = integrate(_one_d(a=-1.0), g0, 1.0, method="dopri5", rtol=1e-10, atol=1e-12, save=200)
    assert (dense.stats["steps"] == steps).all() and len(dense.times) == 200


def test_a_step_that_ends_on_a_save_time_saves_its_state_without_a_new_derivative():
    # A batched fixed-step run: every element lands on t1 and on the save times that are
    # multiples of dt; those states are the steps' own (bitwise), and no evaluation of the
    # field is spent on a derivative at t1 (chained runs, e.g. a phase diagram's checkpoints,
    # would pay one per segment): Euler takes one evaluation per step.
    s0 = torch.tensor([0.2, 0.5, 1.0], dtype=F64).reshape(3, 1, 1)
    g0 = Gaussian(torch.zeros(3, 1, dtype=F64), s0)
    field = _one_d(a=-1.0)  # Σ̇ = −2Σ²: decreasing
    traj = integrate(field, g0, 1.0, dt=0.25, method="euler", save=[0.5])
    assert not traj.stats["synchronous"]
    assert traj.stats["n_rhs"] == traj.stats["n_iterations"] == 4
    half = integrate(field, g0, 0.5, dt=0.25, method="euler")
    assert torch.equal(traj.measures[1].cov(), half.final.cov())
    # A save time inside a step is still interpolated, between the step's ends (the
    # derivative at its end is then the next step's first stage: no extra evaluation).
    inside = integrate(field, g0, 1.0, dt=0.25, method="euler", save=[0.5, 0.6, 0.75])
    low, mid, high = (inside.measures[k].cov().flatten() for k in (1, 2, 3))
    assert ((mid < low) & (mid > high)).all() and inside.stats["n_rhs"] == 4


def test_non_finite_states_are_found_per_element():
    from tpde.flows.systems import ParticleSystem

    # One sum per element (NaN and ±inf make it non-finite); an element whose sum
    # overflows (entries near the largest float) is rechecked entry by entry and kept.
    mu = Empirical(torch.zeros(5, 3, 2, dtype=F64))
    eye = torch.eye(2, dtype=F64)
    system = ParticleSystem(Softmax.from_interaction(eye, eye), mu, "dense")
    points = mu.points.clone()
    points[1, 0, 1], points[2, 2, 0], points[3, 1, 1] = math.nan, math.inf, -math.inf
    points[4] = torch.finfo(F64).max / 2
    assert torch.isinf(points[4].sum())
    assert system.finite((points,)).tolist() == [True, False, False, False, True]
    # one unbatched state (the fixed-step path's): a 0-d flag, the same rule
    for element, expected in zip(points, [True, False, False, False, True], strict=True):
        flag = ParticleSystem(Softmax.from_interaction(eye, eye), Empirical(mu.points[0]),
                              "dense").finite((element,))  # fmt: skip
        assert flag.shape == () and bool(flag) is expected


def test_time_dependent_fields_step_in_lockstep():
    # A(t) = cos t: the field is evaluated at one time for the whole batch.
    field = Softmax.from_interaction(
        lambda t: torch.tensor([[math.cos(t)]], dtype=F64), torch.tensor([[1.0]], dtype=F64)
    )
    s0 = torch.tensor([0.2, 0.4], dtype=F64).reshape(2, 1, 1)
    traj = integrate(field, Gaussian(torch.zeros(2, 1, dtype=F64), s0), 1.0, method="dopri5")
    assert traj.stats["synchronous"]
    assert (traj.stats["steps"] == traj.stats["steps"][0]).all()
    exact = s0.flatten() / (1 - 2 * s0.flatten() * math.sin(1.0))  # ṡ = 2 cos(t) s²
    torch.testing.assert_close(traj.final.cov().flatten(), exact, rtol=1e-6, atol=0)


RALSTON = ExplicitRK("ralston", 2, a=((), (2 / 3,)), b=(1 / 4, 3 / 4), c=(0.0, 2 / 3))


class _RHS:
    """The right-hand side as the loop passes it: callable, with the system's Jacobian
    (which the stiff methods solve with)."""

    def __init__(self, system):
        self.system = system

    def __call__(self, t, y):
        return self.system.rhs(t, y)

    def jacobian(self, t, y):
        return self.system.jacobian(t, y)


def _fixed_step_error(method, h):
    """Relative error at t1 = 0.8 t* of fixed steps of ``method`` on MATH.md §4.1's closed
    form (d = 1 softmax: s(t) = s₀/(1 − 2vas₀t), α(t) = α₀e^{vt}(1 − 2vas₀t)^{-1/2})."""
    v, a, s0, a0 = 0.7, 0.9, 0.5, 1.3
    g0 = Gaussian(torch.tensor([a0], dtype=F64), torch.tensor([[s0]], dtype=F64))
    system = GaussianSystem(_one_d(v, a), g0, 0.0)
    t1 = 0.8 / (2 * v * a * s0)
    n = round(t1 / h)
    y, t, h = system.initial(), 0.0, t1 / n
    for _ in range(n):
        y, _, _ = method.step(_RHS(system), t, y, h, h_clock=h)
        t += h
    s = s0 / (1 - 2 * v * a * s0 * t1)
    alpha = a0 * math.exp(v * t1) / math.sqrt(1 - 2 * v * a * s0 * t1)
    return abs(float(y[1]) - s) / s + abs(float(y[0]) - alpha) / alpha


@pytest.mark.parametrize(
    "method", [*(m for m in METHODS.values() if not m.composite), RALSTON], ids=lambda m: m.name
)
def test_every_declared_method_has_its_declared_order(method):
    # The slope of log(error) against log(h) over two or three halvings is the declared
    # order (measured: euler 0.90, heun 1.96, Ralston 1.95, rk4 3.98, rodas4 3.84, dopri5
    # 5.13; ±0.3 for the pre-asymptotic curvature of the nonlinear problem: rodas4 reads
    # 3.65 on the larger steps that dopri5 needs to stay above rounding).
    steps = [0.1, 0.05, 0.025, 0.0125] if method.order >= 5 else [0.025, 0.0125, 0.00625]
    errors = [_fixed_step_error(method, h) for h in steps]
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert slope == pytest.approx(method.order, abs=0.3)


def test_a_tableau_object_is_a_method():
    g0 = Gaussian(torch.zeros(1, dtype=F64), torch.tensor([[0.5]], dtype=F64))
    by_object = integrate(_one_d(v=0.7, a=0.9), g0, 0.5, dt=0.01, method=RALSTON)
    heun = integrate(_one_d(v=0.7, a=0.9), g0, 0.5, dt=0.01, method="heun")
    assert by_object.stats["method"] == "ralston"
    exact = 0.5 / (1 - 2 * 0.7 * 0.9 * 0.5 * 0.5)
    for traj in (by_object, heun):
        assert float(traj.final.cov()) == pytest.approx(exact, rel=1e-4)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"a": ((), (1.0,)), "b": (1.0,), "c": (0.0,)}, "inconsistent tableau sizes.*a has 2"),
        ({"a": ((), (0.5, 0.5)), "b": (0.5, 0.5), "c": (0.0, 1.0)}, "row 1 of a must have 1"),
        ({"a": ((), (1.0,)), "b": (0.5, 0.5), "c": (0.0, 0.5)}, r"c\[1\] = 0.5 must equal"),
        ({"a": ((), (1.0,)), "b": (0.5, 0.6), "c": (0.0, 1.0)}, "weights b must sum to 1"),
        ({"a": ((),), "b": (1.0,), "c": (0.0,), "fsal": True}, "fsal needs an adaptive"),
    ],
)
def test_an_inconsistent_tableau_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ExplicitRK("broken", 1, **kwargs)


def test_unknown_methods_are_refused():
    g0 = Gaussian(torch.zeros(1, dtype=F64), torch.eye(1, dtype=F64))
    with pytest.raises(ValueError, match=r"unknown method 'rk45'.*ExplicitRK"):
        integrate(_one_d(), g0, 1.0, method="rk45")
    with pytest.raises(TypeError, match="method must be a name"):
        integrate(_one_d(), g0, 1.0, method=4)


class _Shrinking(Field):
    """A field whose projection drops a particle (a broken retraction)."""

    dim = 1

    @property
    def time_dependent(self):
        return False

    def particle_velocity(self, t, mu, x, engine, info=None):
        return -x

    def project(self, points):
        return points[1:]


def test_a_projection_that_changes_the_shape_is_refused():
    with pytest.raises(ValueError, match=r"_Shrinking.project returned shape \(2, 1\)"):
        integrate(_Shrinking(), Empirical(torch.zeros(3, 1, dtype=F64)), 1.0)


def test_capabilities_are_derived_from_the_methods_a_class_implements():
    # A projection is a capability because _Shrinking implements project; nothing declared.
    assert _Shrinking().capabilities == frozenset({"projection"})

    class _Partial(Field):  # energy alone is not the gradient_flow capability
        dim = 1

        def energy(self, mu, *, t=0.0, engine="auto", info=None):
            return mu.points.sum()

    assert not _Partial().supports("gradient_flow") and _Partial().capabilities == frozenset()
    with pytest.raises(TypeError, match=r"declares capabilities = .*derived from the methods"):

        class _Claims(Field):
            capabilities = frozenset({"gradient_flow"})


def test_statuses_are_one_enum_and_unknown_names_raise():
    g0 = Gaussian(torch.zeros(2, 1, dtype=F64), torch.ones(2, 1, 1, dtype=F64))
    traj = integrate(_one_d(a=-1.0), g0, 0.1)
    assert traj.status.shape == (2,) and all(isinstance(s, Status) for s in traj.status)
    assert (traj.status == "completed").all() and traj.status[0] == Status.COMPLETED
    single = integrate(_one_d(a=-1.0), g0[0], 0.1)
    assert single.status.shape == () and single.status == "completed"
    assert str(Status.BLOW_UP) == "blow_up" and f"{Status.BLOW_UP}" == "blow_up"
    assert all(s.meaning for s in Status)
    with pytest.raises(ValueError, match="unknown status 'complete'; known statuses"):
        _ = traj.status == "complete"
    with pytest.raises(ValueError, match="unknown status 'blowup'"):
        Status.parse("blowup")


@pytest.mark.parametrize(
    ("t0", "t1", "count"),
    [(0.0, 4.0, 2), (0.0, 1.0, 7), (0.3, 2.9, 11), (1e-3, 1e-3, 3), (0.0, 1e6 / 3, 60)],
)
def test_save_counts_are_spaced_as_numpy_spaces_them(t0, t1, count):
    """save=int spaces its times as np.linspace does, bit for bit (the times a run lands on)."""
    from tpde.flows.integrate import _linspace

    assert _linspace(t0, t1, count) == np.linspace(t0, t1, count).tolist()
