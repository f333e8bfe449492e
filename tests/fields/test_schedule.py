"""Layer schedules: a stack of fields as one depth-time field, integrated layer by layer."""

import pytest
import torch

from tpde.fields import LayerSchedule, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def _layers():
    A = [
        torch.tensor([[-0.4, 0.1], [0.0, -0.2]], dtype=F64),
        torch.tensor([[0.2, 0.0], [0.1, -0.5]], dtype=F64),
    ]
    V = [torch.eye(2, dtype=F64), torch.tensor([[0.5, 0.2], [0.0, 1.0]], dtype=F64)]
    return [Softmax.from_interaction(a, v) for a, v in zip(A, V, strict=True)]


def test_piece_follows_the_depth_time():
    layers = _layers()
    schedule = LayerSchedule(layers)
    assert schedule.piece(0.0) is layers[0] and schedule.piece(0.999) is layers[0]
    assert schedule.piece(1.0) is layers[1] and schedule.piece(7.0) is layers[1]
    assert schedule.breakpoints == (1.0,)


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_schedule_flow_equals_the_chained_layer_flows(method):
    # RK4 over [0, 2] with the schedule equals layer 0 on [0, 1] then layer 1 on [1, 2]:
    # steps land on t = 1 and never mix the layers (to rounding, 1e-12).
    layers = _layers()
    g0 = Gaussian(
        torch.tensor([0.3, -0.1], dtype=F64), torch.tensor([[1.0, 0.2], [0.2, 0.6]], dtype=F64)
    )
    opts = {"method": method, "dt": 0.3, "rtol": 1e-10, "atol": 1e-12}
    whole = integrate(LayerSchedule(layers), g0, 2.0, save=[1.0], **opts)
    first = integrate(layers[0], g0, 1.0, **opts)
    second = integrate(layers[1], first.final, 2.0, t0=1.0, **opts)
    torch.testing.assert_close(whole.measures[1].cov(), first.final.cov(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(whole.final.cov(), second.final.cov(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(whole.final.mean(), second.final.mean(), rtol=1e-12, atol=1e-12)


def test_schedule_on_particles_and_euler_step_one_is_the_residual_stack(generator):
    # Euler with dt = 1 is x ↦ x + Γ^{(l)}(x) layer after layer (depth as time).
    layers = _layers()
    cloud = Empirical(torch.randn(20, 2, generator=generator, dtype=F64))
    traj = integrate(LayerSchedule(layers), cloud, 2.0, dt=1.0, method="euler")
    x = cloud.points
    for layer in layers:
        x = x + layer.velocity(Empirical(x))
    torch.testing.assert_close(traj.final.points, x, rtol=1e-12, atol=1e-12)


def test_bad_schedules():
    with pytest.raises(TypeError, match="non-empty list of fields"):
        LayerSchedule([])
    with pytest.raises(TypeError, match="layer 1 is a str"):
        LayerSchedule([_layers()[0], "layer"])
    other = Softmax.from_interaction(torch.eye(3), torch.eye(3))
    with pytest.raises(ValueError, match=r"one dimension d; received \[2, 3\]"):
        LayerSchedule([_layers()[0], other])
