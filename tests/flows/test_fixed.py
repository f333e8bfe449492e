"""The fixed-step path (tpde.flows.fixed) against the one stepping loop, bit for bit.

Every case is integrated twice, by the fixed-step path (integrate's own choice) and by the
loop (the choice switched off), and everything is compared exactly: saved times and states
(``torch.equal``: the same operations in the same order, no tolerance), statuses, event
times, warnings' messages and every statistic but the wall time. The cases reach every
rule the two share: landing on save times and on a piecewise field's jumps, every step
saved, projections, a step out of the domain ("lost_token", "stiff"), a velocity not
finite at the start, a state that overflows after a step ("blow_up"), an inner solve that
misses its tolerance ("not_converged"), the step budget ("max_steps"), t1 = t0, and
gradients through the run.
"""

import math
import warnings

import numpy as np
import pytest
import torch

from tpde.fields import MLP, LayerSchedule, Normalized, RMSNorm, Sinkhorn, Softmax
from tpde.flows import GridSystem, ParticleSystem, fixed, integrate
from tpde.flows.events import parse_events
from tpde.flows.methods import resolve_method
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64
I2 = torch.eye(2, dtype=F64)


def _run(monkeypatch, fast: bool, *args, **kwargs):
    """(trajectory, warning messages) of integrate(*args, **kwargs) on one path; the fast
    run asserts that integrate took the fixed-step path."""
    taken = []
    run = fixed.FixedSteps.run

    def spy(self, *a, **k):
        taken.append(True)
        return run(self, *a, **k)

    with monkeypatch.context() as patch:
        patch.setattr(fixed.FixedSteps, "run", spy)
        if not fast:
            patch.setattr(fixed, "applies", lambda *a: False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            traj = integrate(*args, **kwargs)
    assert bool(taken) == fast
    return traj, [str(w.message) for w in caught]


def _same(a, b) -> None:
    assert torch.equal(a.times, b.times)
    assert len(a.measures) == len(b.measures)
    for x, y in zip(a.measures, b.measures, strict=True):
        assert type(x) is type(y)
        for u, v in zip(x.values().values(), y.values().values(), strict=True):
            assert torch.equal(u, v) or (u.isnan().any() and torch.equal(u.isnan(), v.isnan()))
    assert np.array_equal(a.status, b.status) and a.status.shape == b.status.shape
    assert torch.equal(a.event_time.isnan(), b.event_time.isnan())
    assert torch.equal(a.event_time.nan_to_num(), b.event_time.nan_to_num())
    assert set(a.stats) == set(b.stats)
    for key, value in a.stats.items():
        if key == "wall_time_s":
            continue
        other = b.stats[key]
        if isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other), key
        else:
            assert type(value) is type(other) and value == other, key


def both(monkeypatch, *args, **kwargs):
    """Run both paths, assert they agree exactly; return the fast path's (trajectory,
    warnings)."""
    fast, said = _run(monkeypatch, True, *args, **kwargs)
    loop, told = _run(monkeypatch, False, *args, **kwargs)
    _same(fast, loop)
    assert said == told
    return fast, said


def _cloud(generator, n=6, d=2, scale=1.0):
    return Empirical(scale * torch.randn(n, d, generator=generator, dtype=F64))


def _attention(generator, d=2):
    return Softmax(*(torch.randn(d, d, generator=generator, dtype=F64) for _ in range(3)))


def _schedule(generator, layers=3, d=2):
    def layer():
        gain = torch.rand(d, generator=generator, dtype=F64) + 0.5
        mlp = MLP(
            torch.randn(5, d, generator=generator, dtype=F64),
            torch.randn(5, generator=generator, dtype=F64),
            0.3 * torch.randn(d, 5, generator=generator, dtype=F64),
            None,
        )
        return Normalized(_attention(generator, d), RMSNorm(gain)) + Normalized(mlp, RMSNorm(gain))

    return LayerSchedule([layer() for _ in range(layers)])


@pytest.mark.parametrize(
    ("method", "t0", "dt", "save"),
    [
        ("rk4", 0.0, 0.3, [0.25, 0.5, 1.0]),  # steps shortened to land on save times
        ("euler", 0.0, 0.1, None),  # 10 steps of 0.1 land on t1 = 1 within 1e-9
        ("heun", 0.0, 0.15, "steps"),  # every step saved
        ("rk4", 0.0, 0.07, 5),
        ("rk4", 0.2, 1.0, 3),  # t1 = 0.9: 0.45 + (0.9 − 0.45) rounds: the step lands on t1
        ("euler", 0.2, 1.0, None),  # 0.2 + (0.9 − 0.2) = 0.8999999999999999
    ],
)
def test_fixed_steps_match_the_loop(monkeypatch, generator, method, t0, dt, save):
    traj, said = both(
        monkeypatch, _attention(generator), _cloud(generator), 1.0 if t0 == 0 else 0.9, t0=t0,
        dt=dt, method=method, save=save, events=(),
    )  # fmt: skip
    assert traj.status == "completed" and not said
    assert float(traj.times[-1]) == (1.0 if t0 == 0 else 0.9)


@pytest.mark.parametrize(
    ("method", "dt", "save"), [("lie-trotter", 1.0, 4), ("strang", 0.4, 4), ("lie-trotter", 0.4, 2)]
)
def test_a_layer_schedule_lands_on_every_layer(monkeypatch, generator, method, dt, save):
    # Jumps at t = 1, 2: no step straddles a layer boundary (saved there or not).
    traj, _ = both(
        monkeypatch, _schedule(generator), _cloud(generator), 3.0, dt=dt, method=method,
        save=save, events=(),
    )  # fmt: skip
    assert traj.times.tolist() == [0.0, 1.0, 2.0, 3.0][:: 3 // (save - 1)]
    assert traj.status == "completed" and traj.stats["n_steps"] == (3 if dt == 1 else 9)


def test_tokens_on_the_sphere_are_projected_after_every_step(monkeypatch, generator):
    mu = _cloud(generator).normalized()
    traj, _ = both(monkeypatch, Normalized(_attention(generator)), mu, 2.0, dt=0.25,
                   method="rk4", events=(), save=3)  # fmt: skip
    assert torch.allclose(traj.final.points.norm(dim=-1), torch.ones(6, dtype=F64))


def test_a_token_sent_to_the_origin_stops_the_same_way(monkeypatch):
    # Γ(x) = −x for one token; the Post-LN step without tangent lands on 0.
    mu = Empirical(torch.tensor([[1.0, 0.0]], dtype=F64))
    field = Normalized(Softmax.from_interaction(I2, -I2), tangent=False)
    traj, said = both(monkeypatch, field, mu, 2.0, dt=1.0, method="euler", events=())
    assert traj.status == "lost_token" and float(traj.event_time) == 0.0
    assert traj.stats["n_rejected"] == 1 and len(said) == 1 and "tangent=True" in said[0]


def test_a_covariance_out_of_the_psd_cone_stops_the_same_way(monkeypatch):
    g0 = Gaussian(torch.zeros(2, dtype=F64), 1e7 * I2)
    traj, said = both(monkeypatch, Softmax.from_interaction(I2, -I2), g0, 1.0, method="rk4",
                      events=())  # fmt: skip
    assert traj.status == "stiff" and len(said) == 1 and 'method="rodas4"' in said[0]


def test_a_velocity_not_finite_at_the_start_stops_the_same_way(monkeypatch):
    g0 = Gaussian(torch.zeros(2, dtype=F64), 1e200 * I2)
    traj, said = both(monkeypatch, Softmax(-I2, I2, I2), g0, 1.0, method="euler", events=())
    assert traj.status == "blow_up" and float(traj.event_time) == 0.0
    assert len(said) == 1 and "velocity at the initial state is not finite" in said[0]
    assert torch.equal(traj.final.cov(), g0.cov()) and traj.stats["n_steps"] == 0


@pytest.mark.parametrize("method", ["euler", "lie-trotter"])
def test_a_state_that_overflows_stops_the_same_way(monkeypatch, method):
    # Σ̇ = +√2Σ²: finite after the first step (Σ ≈ 1.4e300), infinite after the second;
    # the state before that step is kept.
    g0 = Gaussian(torch.zeros(2, dtype=F64), 1e150 * I2)
    field = Softmax(I2, I2, I2)
    field = field + field if method == "lie-trotter" else field
    traj, said = both(monkeypatch, field, g0, 5.0, dt=1.0, method=method, events=())
    assert traj.status == "blow_up" and not said
    assert math.isfinite(float(traj.final.cov().max())) and traj.stats["n_steps"] >= 1
    assert float(traj.event_time) == float(traj.times[-1])


def test_an_unconverged_inner_solve_stops_the_same_way(monkeypatch, generator):
    field = Sinkhorn(I2, -I2, I2, scale=1.0, iters=2, tol=1e-14)
    traj, _ = both(monkeypatch, field, _cloud(generator, scale=2.0), 1.0, dt=0.25,
                   method="rk4", events=())  # fmt: skip
    assert traj.status == "not_converged" and float(traj.event_time) == 0.0


def test_the_step_budget_stops_the_same_way(monkeypatch, generator):
    traj, _ = both(monkeypatch, _attention(generator), _cloud(generator), 1.0, dt=0.1,
                   method="rk4", events=(), max_steps=3)  # fmt: skip
    assert traj.status == "max_steps" and traj.stats["n_steps"] == 3


def test_a_run_of_no_length(monkeypatch, generator):
    traj, _ = both(monkeypatch, _attention(generator), _cloud(generator), 0.0, method="rk4",
                   events=())  # fmt: skip
    assert traj.times.tolist() == [0.0] and traj.status == "completed"


def test_gradients_through_the_run_are_the_same(monkeypatch, generator):
    field, points = _attention(generator), torch.randn(5, 2, generator=generator, dtype=F64)
    grads = []
    for fast in (True, False):
        x = points.clone().requires_grad_(True)
        traj, _ = _run(monkeypatch, fast, field, Empirical(x), 1.0, dt=0.2, method="rk4",
                       events=())  # fmt: skip
        (grad,) = torch.autograd.grad(traj.final.points.square().sum(), x)
        grads.append(grad)
    assert torch.equal(*grads)


def test_what_the_fixed_step_path_leaves_to_the_loop(generator):
    field, mu = _attention(generator), _cloud(generator)
    system = ParticleSystem(field, mu)
    rk4, dopri5 = resolve_method("rk4"), resolve_method("dopri5")
    assert fixed.applies(system, rk4, ())
    assert not fixed.applies(system, dopri5, ())  # adaptive
    assert not fixed.applies(system, rk4, parse_events(("blow_up",)))
    batch = Empirical(torch.randn(3, 6, 2, generator=generator, dtype=F64))
    assert not fixed.applies(ParticleSystem(field, batch), rk4, ())
    grid = Grid(torch.full((4,), 0.25, dtype=F64), -1.0, 1.0)
    assert not fixed.applies(GridSystem(Softmax(I2[:1, :1], I2[:1, :1], I2[:1, :1]), grid),
                             rk4, ())  # fmt: skip
