"""ALBERT (one shared layer, factorised embeddings) and the BERT/RoBERTa masked-LM heads
against transformers.

As tests/pretrained/test_load.py: tiny models with every parameter redrawn, saved with
``save_pretrained`` and loaded by tpde; every hidden state (and the masked-LM logits where
the checkpoint has the head) within 1e-12 relative in float64 and 1e-5 in float32, the
greedy token identical at every position, the per-sublayer split summing to every layer's
update to 1e-12.
"""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.test_load import _relative
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N = 9
_SMALL = {"vocab_size": 40, "num_hidden_layers": 3, "max_position_embeddings": 32,
          "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4}  # fmt: skip
_ALBERT = {**_SMALL, "embedding_size": 8}

#: family → (config class, config, model class, pieces exercised, has a masked-LM head)
FAMILIES = {
    "albert": ("AlbertConfig", _ALBERT, "AlbertModel",
               "one shared Post-LN layer × 3, embeddings E = 8 mapped to d = 16", False),
    "albert-mlm": ("AlbertConfig", {**_ALBERT, "hidden_act": "relu"}, "AlbertForMaskedLM",
                   "masked-LM head d → E → V (tied decoder, bias), ReLU", True),
    "bert-mlm": ("BertConfig", {**_SMALL, "hidden_act": "gelu_new"}, "BertForMaskedLM",
                 "masked-LM head: dense, GELU-tanh, LayerNorm, tied decoder, bias", True),
    "roberta-mlm": ("RobertaConfig", {**_SMALL, "max_position_embeddings": 34,
                                      "hidden_act": "relu"}, "RobertaForMaskedLM",
                    "lm_head with the erf GELU whatever hidden_act says", True),
}  # fmt: skip


def _oracle(family: str):
    config_cls, kwargs, model_cls, _, _ = FAMILIES[family]
    torch.manual_seed(sum(map(ord, family)))
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request, tmp_path_factory):
    family = request.param
    model = _oracle(family)
    folder = tmp_path_factory.mktemp(family)
    model.save_pretrained(folder)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    return family, folder, ids, out


def _check(model, family: str, ids, out, tol: float) -> dict:
    states = model.hidden_states(model.embed(ids)[0])
    errors = {l: _relative(states[l].double(), h[0]) for l, h in enumerate(out.hidden_states)}
    assert len(out.hidden_states) == len(states)
    if FAMILIES[family][4]:
        logits = model.logits(states[-1])
        errors["logits"] = _relative(logits.double(), out.logits[0])
        assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))  # every position
    else:
        with pytest.raises(ValueError, match="has no language-model head"):
            model.logits(states[-1])
    assert max(errors.values()) < tol, errors
    return errors


def test_float64_equals_transformers(case):
    family, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == ("bert" if family == "roberta-mlm" else family.split("-")[0])
    _check(model, family, ids, out, 1e-12)


def test_float32_within_1e5(case):
    family, folder, ids, out = case
    _check(load(folder), family, ids, out, 1e-5)


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids)[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert split.shape == (3, 2, N, 16)
    update = states[1:] - states[:-1]
    assert float((split.sum(1) - update).norm() / update.norm()) < 1e-12


def test_albert_is_one_autonomous_field(case):
    family, folder, ids, _ = case
    if not family.startswith("albert"):
        pytest.skip("ALBERT only")
    model = load(folder, dtype=torch.float64)
    field = model.layers[0].field
    assert all(layer is model.layers[0] for layer in model.layers)
    assert all(model.schedule.piece(t) is field for t in (0.0, 1.5, 2.9))
    assert model.embeddings.shape == (40, 8) and model.config.hidden == 16
    # looping the one layer further is the same field: depth 4 is one more step of it
    mu = model.embed(ids)[0]
    x3 = model.hidden_states(mu)[-1]
    from tpde.flows import integrate

    x4 = integrate(field, mu.with_points(x3), 1.0, dt=1.0, method="lie-trotter").final.points
    with torch.no_grad():
        expected = _oracle(family)
        expected.config.num_hidden_layers = 4
        out = expected(ids[None], output_hidden_states=True).hidden_states[-1][0]
    assert _relative(x4, out) < 1e-12


def test_a_bad_mlm_head_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    _oracle("bert-mlm").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["cls.predictions.bias"] = torch.zeros(39, dtype=torch.float64)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadError, match=r"'cls.predictions.bias' has shape \(39,\).*\(40,\)"):
        load(tmp_path)
    del tensors["cls.predictions.bias"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadError, match=r"'cls.predictions.bias' is missing"):
        load(tmp_path)
