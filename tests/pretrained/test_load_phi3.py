"""Phi-3 (one family file, tpde/pretrained/families/phi3.py) against transformers: fused
qkv_proj and gate_up_proj, LongRoPE past the original context (long factors) and within it
(short ones) on a partial rotary, a sliding window (checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tests.pretrained import family_checks as fc
from tests.pretrained.gguf_cases import SMALL
from tpde.fields import LongRoPE
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py).
GGUF_CASES = {
    "phi3": (
        "Phi3Config",
        {**SMALL, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0},
        "Phi3ForCausalLM",
        "phi3",
    ),
}

_SMALL = {"vocab_size": 40, "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
          "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip


def _longrope(pairs: int) -> dict:
    g = torch.Generator().manual_seed(3)
    short, long = (1 + 3 * torch.rand(2, pairs, generator=g, dtype=torch.float64)).tolist()
    return {"rope_type": "longrope", "short_factor": short, "long_factor": long,
            "rope_theta": 1e4, "partial_rotary_factor": 0.5}  # fmt: skip


#: case → (config, lengths): every case fused; "longrope" rotates 4 of 8 coordinates.
CASES = {
    "plain": ({**_SMALL, "sliding_window": None}, (fc.N,)),
    "window": ({**_SMALL, "sliding_window": 3}, (fc.N,)),
    "longrope": ({**_SMALL, "original_max_position_embeddings": 16,
                  "rope_parameters": _longrope(2)}, (40, fc.N)),
}  # fmt: skip


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    kwargs, lengths = CASES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    with fc.float64_oracle("phi3"):
        model = fc.redrawn("Phi3Config", json.loads(json.dumps(kwargs)), "Phi3ForCausalLM", 11)
        model.save_pretrained(folder)
        runs = []
        for n in lengths:  # a fresh rotary state per length (LongRoPE keeps its choice)
            model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
            runs.append(fc.outputs(model, n))
    return request.param, folder, runs


def test_float64_equals_transformers(case):
    name, folder, runs = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "phi3"
    for ids, out in runs:
        errors = fc.check(model, ids, out, 1e-12)
        print(f"phi3 {name} n={len(ids)} float64: max relative {max(errors.values()):.1e}")
    rope = model.layers[0].attention.position
    assert isinstance(rope.scaling, LongRoPE) == (name == "longrope")
    assert model.layers[0].attention.window == (3 if name == "window" else None)
    if name != "plain":  # the piece matters: without it the model is another one
        for layer in model.layers:
            layer.attention.window = None
            layer.attention.position = dataclasses.replace(rope, scaling=None)
        assert fc.logits_error(model, *runs[0]) > 1e-4


def test_float32_within_1e5(case):
    name, folder, runs = case
    model = load(folder)
    for ids, out in runs:
        errors = fc.check(model, ids, out, 1e-5)
        print(f"phi3 {name} n={len(ids)} float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    _, folder, runs = case
    assert fc.split_error(folder, runs[-1][0]) < 1e-12


def test_fused_gate_up_is_gate_then_up(case):
    """gate_up_proj's first m rows are the gate (σ applied), the last m the up map."""
    _, folder, _ = case
    model = load(folder, dtype=torch.float64)
    from safetensors.torch import load_file

    fused = load_file(folder / "model.safetensors")["model.layers.0.mlp.gate_up_proj.weight"]
    mlp = model.layers[0].mlp
    torch.testing.assert_close(mlp.params.at(0.0, fused)[0], fused[:24], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["su", "yarn"])
def test_older_rope_names_are_refused(case, tmp_path, kind):
    """transformers reads "su" and "yarn" as LongRoPE on Phi-3 (not as YaRN): refused, named."""
    _, folder, _ = case
    raw = json.loads((folder / "config.json").read_text())
    raw["rope_scaling"] = {"type": kind, "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(LoadError, match=rf"rope_scaling.type = '{kind}'.*phi3"):
        load(tmp_path)
