"""Gemma v1 (one family file, tpde/pretrained/families/gemma.py) against transformers: gains
1 + w, √d embedding, GeGLU-tanh, Q/K/V/O biases, head_dim ≠ d/H, the tied head
(checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrained import family_checks as fc
from tests.pretrained.gguf_cases import SMALL
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py):
#: head_dim 32 ≠ d/H.
GGUF_CASES = {
    "gemma": ("GemmaConfig", {**SMALL, "num_attention_heads": 2, "num_key_value_heads": 1,
                              "head_dim": 32}, "GemmaForCausalLM", "gemma"),
}  # fmt: skip

_SMALL = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "max_position_embeddings": 32, "attention_bias": True}  # fmt: skip


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gemma")
    with fc.float64_oracle("gemma"):
        model = fc.redrawn("GemmaConfig", _SMALL, "GemmaForCausalLM", 12)
        model.save_pretrained(folder)
        ids, out = fc.outputs(model)
    return folder, ids, out


def test_float64_equals_transformers(case):
    folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "gemma" and model.head is model.embeddings
    assert model.embedding.scale == 16**0.5
    errors = fc.check(model, ids, out, 1e-12)
    print(f"gemma float64: max relative {max(errors.values()):.1e}")


def test_float32_within_1e5(case):
    folder, ids, out = case
    errors = fc.check(load(folder), ids, out, 1e-5)
    print(f"gemma float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    folder, ids, _ = case
    assert fc.split_error(folder, ids) < 1e-12


def _with(folder, tmp_path, **changes):
    raw = json.loads((folder / "config.json").read_text())
    raw.update(changes)
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path


def test_legacy_gelu_is_the_tanh_form(case, tmp_path):
    """The official configs' hidden_act "gelu" means GELU-tanh (transformers converts it)."""
    folder, ids, out = case
    model = load(_with(folder, tmp_path, hidden_act="gelu"), dtype=torch.float64)
    assert "gelu-tanh" in repr(model.layers[0].mlp)
    assert max(fc.check(model, ids, out, 1e-12).values()) < 1e-12


def test_bidirectional_attention_is_refused(case, tmp_path):
    folder, _, _ = case
    with pytest.raises(LoadError, match="use_bidirectional_attention = True"):
        load(_with(folder, tmp_path, use_bidirectional_attention=True))
