"""Scale-free events and the flows' boundary checks (issue: robustness).

Each test here failed on the code before the fix it documents: an absolute BlowUp firing at
the first step of a contracting large cloud, events that meant different things at
different scales, NaN save times dropped silently, JKO steps "converging" on energies
without an autograd path, float32 overflow returned as NaN velocities.
"""

import math

import pytest
import torch

from tpde.fields import L2, GradientFlowField, NotAGradientFlow, PotentialEnergy, Softmax
from tpde.flows import BlowUp, Converged, integrate, jko_step
from tpde.measures import Empirical, Gaussian
from tpde.metrics import twisted_w2

F64 = torch.float64


def _linear_flow(rate: float, d: int = 2):
    """ẋ = rate·x: the W2 gradient flow of U(x) = −rate·|x|²/2 (homogeneous of degree 1)."""
    return GradientFlowField(PotentialEnergy.quadratic(-rate * torch.eye(d, dtype=F64)))


def _cloud(scale: float, n: int = 30):
    return Empirical(
        scale * torch.randn(n, 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    )


def test_a_large_contracting_start_is_not_a_blow_up():
    # Softmax with V = I, A = −I contracts (MATH.md §4 item 3); λ_max(Σ₀) = 1e7 is above the
    # default threshold 1e6 from the start. The event fires on upward crossings only.
    field = Softmax.from_interaction(-torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    g0 = Gaussian(torch.zeros(2, dtype=F64), 1e7 * torch.eye(2, dtype=F64))
    traj = integrate(field, g0, 1.0, method="dopri5")
    assert traj.status == "completed"
    assert float(traj.final.cov()[0, 0]) < 1e7  # it contracted
    # A start below the threshold that grows past it still stops there.
    grow = Softmax.from_interaction(torch.eye(1, dtype=F64), torch.eye(1, dtype=F64))
    small = Gaussian(torch.zeros(1, dtype=F64), torch.tensor([[0.5]], dtype=F64))
    assert integrate(grow, small, 5.0, method="dopri5").status == "blow_up"


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_relative_events_do_not_depend_on_the_scale(scale):
    # ẋ = x: the squared size grows as e^{2t}, so a relative BlowUp(1e4) fires at
    # t = ln(1e4)/2 for every scale; ẋ = −x: |ẋ| decays as e^{−t}, so a relative
    # Converged(1e-3) fires at t = ln(1e3). Event times resolve to the end of a step of
    # 0.01: tolerance 0.011.
    up = integrate(_linear_flow(1.0), _cloud(scale), 10.0, dt=0.01,
                   events=(BlowUp(1e4, relative=True),), method="rk4")  # fmt: skip
    assert up.status == "blow_up"
    assert float(up.event_time) == pytest.approx(math.log(1e4) / 2, abs=0.011)
    down = integrate(_linear_flow(-1.0), _cloud(scale), 20.0, dt=0.01,
                     events=(Converged(1e-3, relative=True),), method="rk4")  # fmt: skip
    assert down.status == "converged"
    assert float(down.event_time) == pytest.approx(math.log(1e3), abs=0.011)


def test_absolute_converged_is_documented_as_scale_dependent():
    # The paper's rule ‖rhs‖ < tol: a tiny cloud is "converged" at its first step.
    tiny = integrate(
        _linear_flow(-1.0), _cloud(1e-9), 1.0, dt=0.01, events=(Converged(1e-8),), method="rk4"
    )
    assert tiny.status == "converged" and float(tiny.event_time) == pytest.approx(0.01)


def test_bad_event_and_run_options():
    with pytest.raises(ValueError, match="relative BlowUp threshold is a growth factor"):
        BlowUp(0.5, relative=True)
    with pytest.raises(ValueError, match="relative Converged tol is a slow-down factor"):
        Converged(2.0, relative=True)
    field, mu = _linear_flow(1.0), _cloud(1.0)
    with pytest.raises(ValueError, match=r"save times must be finite; received \[0.5, nan\]"):
        integrate(field, mu, 1.0, save=[0.5, float("nan")])
    with pytest.raises(ValueError, match="max_steps must be a positive int; received 0"):
        integrate(field, mu, 1.0, max_steps=0)


def test_jko_needs_an_energy_with_an_autograd_path():
    mu = _cloud(1.0)
    constant = lambda m: torch.tensor(1.0, dtype=F64)  # noqa: E731
    with pytest.raises(ValueError, match="has no autograd path to the measure"):
        jko_step(mu, constant, 0.1)
    per_particle = lambda m: (m.points**2).sum(-1)  # noqa: E731
    with pytest.raises(ValueError, match=r"must return a 0-d tensor.*returned \(30,\)"):
        jko_step(mu, per_particle, 0.1)
    field = L2(torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    with pytest.raises(NotAGradientFlow, match="L2 attention is not a gradient flow in tpde"):
        jko_step(mu, field, 0.1)


def test_a_singular_interaction_matrix_is_named():
    g = Gaussian(torch.zeros(2, dtype=F64), torch.eye(2, dtype=F64))
    A = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=F64)
    with pytest.raises(NotAGradientFlow, match=r"twisted_w2: A is singular"):
        twisted_w2(g, g, A=A, V=torch.eye(2, dtype=F64))


def test_float32_overflow_raises_instead_of_returning_nan():
    field = Softmax.from_interaction(torch.eye(2), torch.eye(2))
    huge = Empirical(torch.tensor([[1e20, 0.0], [0.0, 1e20], [1e20, 1e20]]))
    with pytest.raises(OverflowError, match=r"overflowed in torch.float32.*float64"):
        field.velocity(huge)
    with pytest.raises(OverflowError, match="softmax energy overflowed"):
        field.energy(huge)
    # The same tokens in float64 are fine.
    assert torch.isfinite(field.velocity(huge.to(dtype=F64))).all()
