"""Every registered softmax-form variant on every softmax engine, plain and masked.

The list comes from the variant registry (tpde.fields.registry): a new variant that
declares the capability "softmax_form" is tested here without touching this file.
"""

import pytest
import torch

from tests.conftest import keops_ok
from tpde.fields import Masked, registry
from tpde.measures import Empirical

F32, F64 = torch.float32, torch.float64
# float32: 1e-5 relative (SDPA and KeOps sum in another order); float64: rounding only.
TOLERANCE = {F32: 1e-5, F64: 1e-10}
SOFTMAX_FORM = [
    name
    for name in registry.variant_names(head=True)
    if registry.VARIANTS[name]
    .build(torch.eye(3), torch.eye(3), torch.eye(3))
    .supports("softmax_form")
]
ENGINES = ["chunked", "sdpa", pytest.param("keops", marks=[pytest.mark.keops])]


def test_the_registry_lists_the_softmax_form_variants():
    assert {"softmax", "l2", "cosine"} <= set(SOFTMAX_FORM)


def _draw(generator, dtype, n=120, d=3):
    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=F64).to(dtype)

    Q, K = draw(d, d) / 2, draw(d, d) / 2
    V = draw(d, d).requires_grad_(True)
    points = draw(n, d).requires_grad_(True)
    positions = torch.linspace(0, 1, n, dtype=dtype)
    return Q, K, V, points, positions


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", SOFTMAX_FORM)
def test_values_and_gradients_match_dense(name, dtype, engine, masked, generator):
    if engine == "keops" and not keops_ok():
        pytest.skip("KeOps cannot compile here")
    Q, K, V, points, positions = _draw(generator, dtype)
    field = registry.build(name, Q, K, V)
    if masked:
        field = Masked(field)
    results = {}
    for which in ("dense", engine):
        mu = Empirical(points, positions=positions if masked else None)
        out = field.velocity(mu, engine=which)
        grads = torch.autograd.grad(out.square().sum(), (points, V))
        results[which] = (out.detach(), grads)
    tol = TOLERANCE[dtype]
    assert _rel(results[engine][0], results["dense"][0]) < tol
    for g, ref in zip(results[engine][1], results["dense"][1], strict=True):
        assert _rel(g, ref) < 10 * tol
