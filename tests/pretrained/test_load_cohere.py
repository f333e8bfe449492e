"""Cohere (one family file, tpde/pretrained/families/cohere.py) against transformers: the
parallel block with one LayerNorm without bias, interleaved RoPE, logit_scale, Q/K/V/O
biases, and use_qk_norm's per-head gains (checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrained import family_checks as fc
from tpde.fields import Parallel
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

_SMALL = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
          "attention_bias": True, "logit_scale": 0.3, "layer_norm_eps": 1e-3,
          "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
CASES = {"plain": _SMALL, "qk_norm": {**_SMALL, "use_qk_norm": True}}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    with fc.float64_oracle("cohere"):
        model = fc.redrawn("CohereConfig", CASES[request.param], "CohereForCausalLM", 15)
        model.save_pretrained(folder)
        ids, out = fc.outputs(model)
    return request.param, folder, ids, out


def test_float64_equals_transformers(case):
    name, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "cohere" and model.logit_scale == 0.3
    layer = model.layers[0]
    assert isinstance(layer.field.parts[0], Parallel) and layer.mlp_norm is layer.attention_norm
    assert layer.attention_norm.bias is None and layer.attention.position.style == "interleaved"
    q_norm = layer.attention.q_norm
    assert (q_norm is None) == (name == "plain")
    if q_norm is not None:  # one norm per head, each its own gain
        assert len(q_norm) == 4 and len(layer.attention.k_norm) == 2
        assert fc._relative(q_norm[0].gamma, q_norm[1].gamma) > 0.1
    errors = fc.check(model, ids, out, 1e-12)
    print(f"cohere {name} float64: max relative {max(errors.values()):.1e}")


def test_float32_within_1e5(case):
    name, folder, ids, out = case
    errors = fc.check(load(folder), ids, out, 1e-5)
    print(f"cohere {name} float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    assert fc.split_error(folder, ids) < 1e-12


@pytest.mark.parametrize(("key", "value", "match"), [
    ("logit_scale", 0.0, r"logit_scale must be .*> 0"),
    ("use_qk_norm", "true", r"use_qk_norm must be true or false; received 'true'"),
])  # fmt: skip
def test_bad_values_are_named(case, tmp_path, key, value, match):
    name, folder, _, _ = case
    if name != "plain":
        pytest.skip("one case suffices")
    raw = json.loads((folder / "config.json").read_text())
    raw[key] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(LoadError, match=match):
        load(tmp_path)
