"""OLMo v1 (one family file, tpde/pretrained/families/olmo.py) against transformers:
parameter-free LayerNorms, clip_qkv (a clip that bites: 31–56 % of the projections'
coordinates reach it), Q/K/V/O biases (checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrained import family_checks as fc
from tpde.fields import LayerNorm
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

_SMALL = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
          "attention_bias": True, "pad_token_id": 0, "eos_token_id": 0}  # fmt: skip
CASES = {"plain": _SMALL, "clip": {**_SMALL, "clip_qkv": 1.5}}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    with fc.float64_oracle("olmo"):
        model = fc.redrawn("OlmoConfig", CASES[request.param], "OlmoForCausalLM", 13)
        model.save_pretrained(folder)
        ids, out = fc.outputs(model)
    return request.param, folder, ids, out


def test_float64_equals_transformers(case):
    name, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "olmo"
    norm = model.layers[0].attention_norm
    assert isinstance(norm, LayerNorm) and norm.gamma is None and norm.bias is None
    assert norm.eps == 1e-5 and model.final_norm.gamma is None
    errors = fc.check(model, ids, out, 1e-12)
    print(f"olmo {name} float64: max relative {max(errors.values()):.1e}")
    assert model.layers[0].attention.clip == (1.5 if name == "clip" else None)
    if name == "clip":  # the clip matters: without it the model is another one
        for layer in model.layers:
            layer.attention.clip = None
        assert fc.logits_error(model, ids, out) > 1e-3


def test_float32_within_1e5(case):
    name, folder, ids, out = case
    errors = fc.check(load(folder), ids, out, 1e-5)
    print(f"olmo {name} float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    assert fc.split_error(folder, ids) < 1e-12


@pytest.mark.parametrize("value", [-1.0, 0.0, "1"])
def test_clip_must_be_a_positive_number(case, tmp_path, value):
    name, folder, _, _ = case
    if name != "clip":
        pytest.skip("one case suffices")
    raw = json.loads((folder / "config.json").read_text())
    raw["clip_qkv"] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(LoadError, match=r"clip_qkv must be"):
        load(tmp_path)
