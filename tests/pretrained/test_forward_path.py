"""A loaded model's forward on the fixed-step path (tpde.flows.fixed) against the loop.

``model.hidden_states`` (Lie–Trotter, Euler sub-steps, h = 1: the network) is one unbatched
state at fixed steps without events, which :func:`tpde.flows.integrate` steps on its
fixed-step path. For every registered family's tiny model (tpde.pretrained.random_checkpoint:
every parameter redrawn, d = 16, 2 layers), in float64 and float32, the hidden states and the logits
of that path and of the one stepping loop (the path switched off) are equal bit for bit
(``torch.equal``: the same calls in the same order; no tolerance). A model whose
arithmetic overflows stops both paths with the same status, time, states and warning.
The oracle tests (tests/pretrained/test_load*.py) compare either path with transformers.
"""

import warnings

import numpy as np
import pytest
import torch

from tests.flows.test_fixed import both
from tpde.flows import fixed
from tpde.pretrained import load, random_checkpoint
from tpde.pretrained.families import FAMILIES

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N = 9  # tokens


def tiny(family: str):
    """A transformers llama of 2 layers, float32, every parameter redrawn (the overflow
    case edits one of its weights before saving)."""
    assert family == "llama"
    torch.manual_seed(sum(map(ord, family)))
    config = transformers.LlamaConfig(
        vocab_size=40, num_hidden_layers=2, max_position_embeddings=32, hidden_size=16,
        intermediate_size=24, num_attention_heads=4, num_key_value_heads=2,
        attention_bias=True,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model.eval()


def _forward(model, ids, fast: bool, monkeypatch):
    """(hidden states, logits) on the fixed-step path (fast) or the loop."""
    taken = []
    run = fixed.FixedSteps.run

    def spy(self, *a, **k):
        taken.append(True)
        return run(self, *a, **k)

    with monkeypatch.context() as patch:
        patch.setattr(fixed.FixedSteps, "run", spy)
        if not fast:
            patch.setattr(fixed, "applies", lambda *a: False)
        states = model.hidden_states(model.embed(ids)[0])
    assert bool(taken) == fast
    # encoders drawn without a masked-LM head: their last hidden states stand for the logits
    return states, states[-1] if model.head is None else model.logits(states[-1])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_forward_is_the_same_on_both_paths(family, tmp_path, monkeypatch):
    # every registered family, drawn by tpde (random_checkpoint: every switch on, every
    # parameter redrawn; transformers reads the same folder: test_random_models)
    random_checkpoint(family, tmp_path, seed=sum(map(ord, family)), dtype=torch.float64)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    for dtype in (torch.float64, torch.float32):
        model = load(tmp_path, dtype=dtype)
        with torch.no_grad():
            states, logits = _forward(model, ids, True, monkeypatch)
            states_loop, logits_loop = _forward(model, ids, False, monkeypatch)
        assert states.shape == (3, N, 16) and states.dtype == dtype
        assert torch.equal(states, states_loop) and torch.equal(logits, logits_loop)


@pytest.mark.parametrize(("method", "layer"), [("lie-trotter", 1), ("rk4", 0)])
def test_an_overflowing_model_stops_the_same_way(method, layer, tmp_path, monkeypatch):
    # float32 down projection of 3e38: the MLP's output overflows. Lie–Trotter (no
    # derivative before a step): "blow_up" after layer 1's step, the state at t = 1 kept;
    # rk4 (the whole layer as one field) reads the velocity first: not finite at t0 = 0,
    # "blow_up" there with a warning.
    reference = tiny("llama")
    with torch.no_grad():
        reference.model.layers[layer].mlp.down_proj.weight.fill_(3e38)
    reference.save_pretrained(tmp_path)
    model = load(tmp_path)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    mu = model.embed(ids)[0]
    with torch.no_grad():
        traj, said = both(monkeypatch, model.schedule, mu, 2.0, dt=1.0, method=method,
                          save=3, events=())  # fmt: skip
    assert traj.status == "blow_up" and float(traj.event_time) == layer
    assert np.isfinite(traj.final.points.numpy()).all()
    if method == "rk4":
        assert len(said) == 1 and "velocity at the initial state is not finite" in said[0]
        assert torch.equal(traj.final.points, mu.points)
    else:
        assert not said and traj.times.tolist() == [0.0, 1.0]
    with warnings.catch_warnings():  # the stack would be short: a clear error instead
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(FloatingPointError, match=rf"the flow stopped at depth {layer} of "
                           r"2 with status 'blow_up'.*Load the model in float64"):  # fmt: skip
            model.hidden_states(mu)
