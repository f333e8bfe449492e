"""BlowUp(size="trace"): the paper's stopping rule tr Σ > tol_high (MATH.md §6)."""

import math

import pytest
import torch

from tpde.fields import Softmax
from tpde.flows import BlowUp, integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def test_trace_event_stops_at_the_closed_form_crossing():
    # V = I, A = diag(1, 0.25): Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹ (MATH.md §4 item 2); with Σ₀ = I,
    # tr Σ(t) = 1/(1 − 2t) + 1/(1 − t/2). The trace event fires at the end of the step that
    # crosses 50 (dopri5, rtol 1e-9: steps shrink near the singularity; measured lag 3.9e-4,
    # allowed 1e-3); the λ_max event (default) fires no earlier (λ_max ≤ tr Σ).
    field = Softmax.from_interaction(
        torch.diag(torch.tensor([1.0, 0.25], dtype=F64)), torch.eye(2, dtype=F64)
    )
    g0 = Gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64))
    kw = {"method": "dopri5", "rtol": 1e-9, "atol": 1e-12, "dt": 1e-3}
    trace = integrate(field, g0, 1.0, events=(BlowUp(50.0, size="trace"),), **kw)
    top = integrate(field, g0, 1.0, events=(BlowUp(50.0),), **kw)
    lo, hi = 0.0, 0.5
    for _ in range(100):  # bisection: tr Σ(t) = 50
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if 1 / (1 - 2 * mid) + 1 / (1 - mid / 2) > 50 else (mid, hi)
    assert trace.status == top.status == "blow_up"
    assert 0 <= float(trace.event_time) - hi < 1e-3
    assert float(trace.final.cov().trace()) > 50
    assert float(top.event_time) >= float(trace.event_time)  # tr Σ ≥ λ_max: never later
    assert float(top.event_time) - (1 - 1 / 50) / 2 < 1e-3  # λ_max(t) = 1/(1 − 2t) = 50


def test_trace_event_on_particles_uses_the_total_variance():
    # Particles: size "trace" is Σ_i w_i |x_i − m|² = tr Cov (the default size is the largest
    # squared distance to the mean, here larger). Exact reductions on a fixed state.
    points = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]], dtype=F64)
    mu = Empirical(points)
    from tpde.flows.systems import ParticleSystem

    system = ParticleSystem(
        Softmax.from_interaction(torch.zeros(2, 2, dtype=F64), torch.eye(2, dtype=F64)), mu, "dense"
    )
    assert float(system.trace((points,))) == pytest.approx(float(mu.cov().trace()), rel=1e-12)
    assert float(system.size((points,))) > float(system.trace((points,)))
    assert math.isfinite(float(system.trace((points,))))


def test_unknown_size_is_refused():
    with pytest.raises(ValueError, match="BlowUp size"):
        BlowUp(10.0, size="largest")


def test_no_save_after_the_event_that_stopped_the_run():
    # Save times past an event are not reached: the trajectory ends at the event time, with
    # increasing times (a stopped run used to record the next save time's frozen state).
    field = Softmax.from_interaction(
        torch.diag(torch.tensor([1.0, 0.25], dtype=F64)), torch.eye(2, dtype=F64)
    )
    g0 = Gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64))
    save = torch.linspace(0, 0.5, 11, dtype=F64)  # tr Σ passes 50 at t ≈ 0.49
    for method in ("rk4", "dopri5"):
        traj = integrate(field, g0, 0.5, dt=1e-3, method=method, save=save,
                         events=(BlowUp(50.0, size="trace"),))  # fmt: skip
        assert traj.status == "blow_up"
        assert (traj.times.diff() > 0).all()
        assert float(traj.times[-1]) == float(traj.event_time) < 0.5
        torch.testing.assert_close(traj.times[:-1], save[: len(traj.times) - 1])
