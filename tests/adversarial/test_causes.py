"""Adversarial inputs, second round (issue 20), part 2: one Status everywhere, errors that
name the real cause, the safe handling of stiff Gaussian flows, experiment configurations
checked before running, sweep rows that carry their status.
"""

import numpy as np
import pytest
import torch

from tests.adversarial.strategies import F64, cloud, error_table_test
from tpde._status import Status
from tpde.fields import MultiHead, Normalized, Softmax
from tpde.fields.base import Field
from tpde.flows import Trajectory, integrate
from tpde.flows.methods import RK4
from tpde.flows.methods.rosenbrock import RODAS4, Rosenbrock
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_barycenter, clusters_over_time, sinkhorn_solve

I2 = torch.eye(2, dtype=F64)
MU = Empirical(cloud(5, 2, seed=1))
G = Gaussian(torch.zeros(2, dtype=F64), I2)


# ============================================================== one Status
@pytest.mark.parametrize(
    "other", [3, None, 1.5, b"completed"], ids=["int", "None", "float", "bytes"]
)
def test_status_compared_with_a_non_string_raises(other):
    with pytest.raises(TypeError, match="compare a Status with a status name"):
        _ = Status.COMPLETED == other


def test_every_status_has_one_meaning_and_a_fix():
    for s in Status:
        assert s.meaning and s.fix and "\n" not in s.fix
    assert len({s.meaning for s in Status}) == len(Status)


def test_bures_barycenter_status_is_a_status():
    result = bures_barycenter([G, Gaussian(torch.ones(2, dtype=F64), 2 * I2)])
    assert isinstance(result.status, Status) and result.status == "converged"
    with pytest.raises(ValueError, match="unknown status 'convergd'"):
        _ = result.status == "convergd"
    batched = bures_barycenter([G, Gaussian(torch.zeros(3, 2, dtype=F64), I2.expand(3, 2, 2))])
    with pytest.raises(ValueError, match="unknown status"):
        _ = batched.status == "convergd"


def test_sinkhorn_solve_status_is_a_status():
    result = sinkhorn_solve(MU, Empirical(cloud(4, 2, seed=2)), 0.5)
    assert isinstance(result.status, Status)
    with pytest.raises(ValueError, match="unknown status 'convergd'"):
        _ = result.status == "convergd"


def test_flows_status_is_the_ground_floor_status():
    from tpde.flows import Status as FlowStatus

    assert FlowStatus is Status


# ============================================================== errors that name the real cause
class NaNField(Field):
    dim = 2
    time_dependent = False

    def particle_velocity(self, t, mu, x, engine, info=None):
        return torch.full_like(x, float("nan"))


class NoDim(Field):
    def particle_velocity(self, t, mu, x, engine, info=None):
        return x


class NumpyField(Field):
    dim = 2

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x.numpy()


class NarrowField(Field):
    dim = 2

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x[..., :1]


class NoAdaptive:
    name, order = "mine", 1

    def step(self, f, t, y, h, k1=None, h_clock=0.0):
        return y, None, None


class ReturnsNone(NoAdaptive):
    adaptive = False

    def step(self, f, t, y, h, k1=None, h_clock=0.0):
        return None


class WrongShape(NoAdaptive):
    adaptive = False

    def step(self, f, t, y, h, k1=None, h_clock=0.0):
        return (y[0][:1],), None, None


def _mixln_after_switch():
    field = Normalized(Softmax.from_interaction(I2, I2), "mix-ln", switch=0.5)
    return integrate(field, MU, 1.0, t0=0.6, method="rk4")


CASES = {
    "custom-field-nan": (lambda: NaNField().velocity(MU), FloatingPointError, "NaNField returned"),
    "from-interaction-shape": (
        lambda: Softmax.from_interaction(torch.ones(2, 3, dtype=F64), I2),
        ValueError,
        "A must be a square",
    ),
    "method-no-adaptive": (
        lambda: integrate(Softmax.from_interaction(I2, I2), MU, 1.0, method=NoAdaptive()),
        TypeError,
        "adaptive",
    ),
    "method-step-none": (
        lambda: integrate(Softmax.from_interaction(I2, I2), MU, 1.0, method=ReturnsNone()),
        TypeError,
        r"step must return \(new state, error estimate, derivative\)",
    ),
    "method-step-shape": (
        lambda: integrate(Softmax.from_interaction(I2, I2), MU, 1.0, method=WrongShape()),
        ValueError,
        "changed the shape",
    ),
    "rosenbrock-gamma-nan": (
        lambda: Rosenbrock(
            "r", 4, 3, float("nan"), RODAS4.a, RODAS4.C, RODAS4.c, RODAS4.d, RODAS4.m, RODAS4.e
        ),
        ValueError,
        "gamma",
    ),
    "field-without-dim": (
        lambda: integrate(NoDim(), MU, 1.0),
        TypeError,
        "NoDim has no dim",
    ),
    "field-returns-numpy": (
        lambda: NumpyField().velocity(MU),
        TypeError,
        "NumpyField.particle_velocity returned ndarray",
    ),
    "flow-of-a-field-returning-a-narrow-velocity": (  # was "unbatched field parameters"
        lambda: integrate(NarrowField(), MU, 0.1, method="rk4"),
        ValueError,
        r"NarrowField.particle_velocity returned shape \(5, 1\) for points of shape \(5, 2\)",
    ),
    "multihead-masked-head": (
        lambda: MultiHead.split(I2, I2, I2, heads=2, kind="masked"),
        ValueError,
        "'masked' is registered but cannot be a head",
    ),
    "barycenter-batch-mismatch": (
        lambda: bures_barycenter(
            [G, Gaussian(torch.zeros(3, 2, dtype=F64), I2.expand(3, 2, 2))],
            torch.full((2, 2), 0.5, dtype=F64),
        ),
        ValueError,
        "batch shape",
    ),
    "empty-trajectory": (
        lambda: clusters_over_time(
            Trajectory(torch.zeros(0, dtype=F64), [], np.array([]), torch.zeros(0))
        ),
        ValueError,
        "no saved measure",
    ),
}
test_bad_input_raises_a_clear_error = error_table_test(CASES)


def test_mix_ln_after_the_switch_accepts_tokens_off_the_sphere():
    assert _mixln_after_switch().status == "completed"


def test_barycenter_indefinite_covariance_raises():
    indefinite = torch.diag(torch.tensor([1.0, -1.0], dtype=F64))
    bad = Gaussian._trusted(torch.zeros(2, dtype=F64), indefinite)
    with pytest.raises(ValueError, match="positive semidefinite"):
        bures_barycenter([G, bad])


def test_nan_from_a_flow_field_is_not_called_an_overflow():
    with pytest.raises(FloatingPointError, match="NaN") as info:
        NaNField().velocity(MU)
    assert "overflowed" not in str(info.value)


def test_mix_ln_switch_text_is_refused_clearly():
    with pytest.raises(TypeError, match=r"switch is a depth-time .*received the string 'abc'"):
        Normalized(Softmax.from_interaction(I2, I2), "mix-ln", switch="abc")


def test_ngpt_alpha_returning_a_vector_is_refused_clearly():
    field = Normalized(Softmax.from_interaction(I2, I2), "ngpt", alpha=lambda t: torch.ones(2))
    with pytest.raises(ValueError, match="alpha"):
        integrate(field, MU.normalized(), 0.1, method="rk4")


# ============================================================== stiff flows
def contracting():
    return Softmax.from_interaction(I2, -I2), Gaussian(torch.zeros(2, dtype=F64), 1e7 * I2)


def test_the_default_method_is_right_on_the_stiff_flow():
    # The case: rk4 (the old default) landed on Σ = −1.3e67·I in one step.
    field, g0 = contracting()
    traj = integrate(field, g0, 1.0)
    assert traj.stats["method"] == "auto" and traj.status == "completed"
    torch.testing.assert_close(traj.final.cov(), 0.5 * I2, rtol=1e-4, atol=0)
    for g in traj.measures:
        assert torch.linalg.eigvalsh(g.cov()).min() > 0


def test_a_fixed_step_never_returns_a_covariance_outside_the_psd_cone():
    field, g0 = contracting()
    with pytest.warns(RuntimeWarning, match='method="rodas4"'):
        traj = integrate(field, g0, 1.0, method="rk4")
    for g in traj.measures:
        assert torch.linalg.eigvalsh(g.cov()).min() >= 0
    assert traj.status == "stiff"
    assert 'method="rodas4"' in traj.status[()].fix


def test_rank_row_with_v_gram_and_the_default_method():
    gen = torch.Generator().manual_seed(0)
    Q = torch.randn(3, 3, generator=gen, dtype=F64)
    G_ = torch.randn(3, 3, generator=gen, dtype=F64)
    field = Softmax(Q / 3**0.5, -Q, G_.mT @ G_, scale=1.0)
    g0 = Gaussian(torch.zeros(3, dtype=F64), torch.eye(3, dtype=F64))
    traj = integrate(field, g0, 1000.0)
    assert traj.status == "completed" and traj.stats["switched_at"] is not None
    for g in traj.measures:
        assert torch.linalg.eigvalsh(g.cov()).min() >= -1e-12
    with pytest.warns(RuntimeWarning, match='method="rodas4"'):
        fixed = integrate(field, g0, 1000.0, method="rk4")
    assert fixed.status == "stiff"


def test_adaptive_methods_are_unchanged_on_the_stiff_flow():
    field, g0 = contracting()
    for method in ("dopri5", "rodas4"):
        traj = integrate(field, g0, 1.0, method=method)
        assert traj.status == "completed"
        torch.testing.assert_close(traj.final.cov(), 0.5 * I2, rtol=1e-4, atol=0)


def test_rk4_is_still_fixed_step_where_stable():
    traj = integrate(Softmax.from_interaction(I2, I2), G, 0.1, method="rk4")
    assert traj.stats["method"] == RK4.name and traj.stats["n_steps"] == 100


def test_a_query_point_at_the_origin_is_not_an_overflow():
    field = Normalized(Softmax.from_interaction(I2, I2))
    out = field.velocity(MU.normalized(), torch.zeros(1, 2, dtype=F64))
    assert torch.isfinite(out).all()  # P⊥ at the origin (no direction) is the identity
