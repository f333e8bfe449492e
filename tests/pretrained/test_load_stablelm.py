"""StableLM (one family file, tpde/pretrained/families/stablelm.py) against transformers:
partial RoPE (2 of 8 coordinates), Q/K/V biases, and the options qk_layernorm (a gain per
head) and use_parallel_residual (checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrained import family_checks as fc
from tests.pretrained.gguf_cases import SMALL
from tpde.fields import Parallel
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py).
GGUF_CASES = {
    "stablelm": (
        "StableLmConfig",
        {**SMALL, "use_qkv_bias": True},
        "StableLmForCausalLM",
        "stablelm",
    )
}

_SMALL = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32,
          "use_qkv_bias": True, "layer_norm_eps": 1e-3}  # fmt: skip
CASES = {
    "plain": _SMALL,
    "qk-parallel": {**_SMALL, "qk_layernorm": True, "use_parallel_residual": True,
                    "partial_rotary_factor": 0.5},
}  # fmt: skip


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    with fc.float64_oracle("stablelm"):
        model = fc.redrawn("StableLmConfig", CASES[request.param], "StableLmForCausalLM", 16)
        model.save_pretrained(folder)
        ids, out = fc.outputs(model)
    return request.param, folder, ids, out


def test_float64_equals_transformers(case):
    name, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "stablelm"
    layer, parallel = model.layers[0], name == "qk-parallel"
    assert isinstance(layer.field.parts[0], Parallel) == parallel
    assert (layer.mlp_norm is layer.attention_norm) == parallel
    assert layer.attention.position.dims == (4 if parallel else 2)
    if parallel:  # one norm per head, each its own gain
        assert len(layer.attention.q_norm) == 2 and len(layer.attention.k_norm) == 1
        assert fc._relative(layer.attention.q_norm[0].gamma, layer.attention.q_norm[1].gamma) > 0.1
    else:
        assert layer.attention.q_norm is None
    errors = fc.check(model, ids, out, 1e-12)
    print(f"stablelm {name} float64: max relative {max(errors.values()):.1e}")


def test_float32_within_1e5(case):
    name, folder, ids, out = case
    errors = fc.check(load(folder), ids, out, 1e-5)
    print(f"stablelm {name} float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    assert fc.split_error(folder, ids) < 1e-12


def test_a_missing_head_norm_is_named(case, tmp_path):
    """Each head's norm is its own tensor: a checkpoint without one is refused, naming it."""
    name, folder, _, _ = case
    if name == "plain":
        pytest.skip("no QK-norm")
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.self_attn.q_layernorm.norms.1.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "config.json").write_bytes((folder / "config.json").read_bytes())
    with pytest.raises(LoadError, match=r"'model.layers.1.self_attn.q_layernorm.norms.1.weight'"):
        load(tmp_path)


@pytest.mark.parametrize("key", ["use_parallel_residual", "qk_layernorm"])
def test_a_switch_must_be_a_bool(case, tmp_path, key):
    name, folder, _, _ = case
    if name != "plain":
        pytest.skip("one case suffices")
    raw = json.loads((folder / "config.json").read_text())
    raw[key] = "yes"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(LoadError, match=rf"{key} must be true or false; received 'yes'"):
        load(tmp_path)
