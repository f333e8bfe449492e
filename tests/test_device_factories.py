"""Every tensor tpde creates takes the device of its inputs: no factory call without one.

A ``torch.zeros(...)``/``torch.eye(...)``/``torch.tensor(...)`` without ``device=`` lands on
the CPU whatever the inputs' device, and breaks a run on a GPU far from its cause. This test
reads the source of ``tpde/`` and lists every call of a tensor factory without a ``device``
keyword (``*_like`` factories and ``Tensor.new_*`` inherit the device and are fine).
"""

import ast
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1] / "tpde"
FACTORIES = {
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "eye", "arange", "linspace",
    "logspace", "rand", "randn", "randint", "randperm", "tril_indices", "triu_indices",
}  # fmt: skip


def _factory_calls_without_device(source: str):
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id == "torch"):
            continue
        keywords = {k.arg for k in node.keywords}  # None: a **mapping, which may hold it
        if node.func.attr in FACTORIES and not keywords & {"device", None}:
            yield node.lineno, node.func.attr


def test_no_tensor_factory_without_a_device():
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}: torch.{name}(...) without device="
        for path in sorted(ROOT.rglob("*.py"))
        for line, name in _factory_calls_without_device(path.read_text())
    ]
    assert not offenders, "\n".join(offenders)


def test_the_checker_finds_a_factory_without_a_device():
    bad = "import torch\nx = torch.zeros(3)\ny = torch.eye(2, device=x.device)\n"
    assert list(_factory_calls_without_device(bad)) == [(2, "zeros")]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize(
    "device", [pytest.param(d, marks=[pytest.mark.gpu] if d == "cuda" else []) for d in DEVICES]
)
def test_flows_metrics_and_energies_stay_on_the_device(device):
    # One small run of each route on the device: everything tpde returns lives there.
    from tpde.fields import Sinkhorn, Softmax
    from tpde.flows import integrate, jko_step
    from tpde.measures import Empirical, Gaussian, Grid
    from tpde.metrics import bures_wasserstein, twisted_w2

    f64 = {"dtype": torch.float64, "device": device}
    A = -torch.eye(2, **f64)
    field = Softmax.from_interaction(A, torch.eye(2, **f64))
    g0 = Gaussian(torch.zeros(2, **f64), torch.eye(2, **f64))
    cloud = Empirical(torch.randn(40, 2, generator=torch.Generator().manual_seed(0)).to(**f64))
    for mu in (g0, cloud, Grid.from_gaussian(g0, 16, -5.0, 5.0).to(device=device)):
        traj = integrate(field, mu, 0.2, dt=0.05)
        assert traj.final.mean().device.type == device
        assert traj.times.device.type == device
    # The stiff method: its Jacobian, closed form (softmax) and autograd (Sinkhorn), and LU.
    for gaussian_field in (field, Sinkhorn(A, torch.eye(2, **f64), -torch.eye(2, **f64), 1.0)):
        traj = integrate(gaussian_field, g0, 0.2, method="rodas4")
        assert traj.final.cov().device.type == device and traj.status == "completed"
    step = jko_step(cloud, field, 0.05, geometry="twisted")
    assert step.measure.points.device.type == device
    assert field.energy(g0).device.type == device
    sinkhorn = Sinkhorn(A, torch.eye(2, **f64), -torch.eye(2, **f64), scale=1.0)
    assert sinkhorn.velocity(cloud).device.type == device
    assert bures_wasserstein(g0, g0).device.type == device
    assert twisted_w2(g0, g0, M=torch.eye(2, **f64)).device.type == device
