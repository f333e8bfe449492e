"""Bad folders as a new user has them (issue 34, "Bad input"): each a LoadError naming the
path and the key or tensor, or the result transformers gives on the same folder.

The oracle is transformers reading the same (edited) folder, in float64 with its RoPE tables
and RMSNorm re-evaluated in float64 (``test_load._exact_float64``): tolerances 1e-12
relative, as every family's test (float64 rounding through two layers).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.pretrained.test_load import FAMILIES as TEST_FAMILIES
from tests.pretrained.test_load import _check, _exact_float64, _oracle, _relative
from tpde.measures import Empirical
from tpde.pretrained import LoadError, load, read_checkpoint

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

IDS = torch.arange(3, 12)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """test_load's tiny Llama (every parameter redrawn, head untied), saved."""
    path = tmp_path_factory.mktemp("llama")
    _oracle("llama").save_pretrained(path)
    return path


def _copy(folder, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def _rewrite(path, edit, file="model.safetensors"):
    tensors = safetensors_torch.load_file(path / file)
    edit(tensors)
    safetensors_torch.save_file(tensors, path / file)


def _transformers(path):
    """transformers' model of the folder (float64, exact RoPE and RMSNorm) and its outputs."""
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    _exact_float64(model)
    with torch.no_grad():
        return model, model(IDS[None], output_hidden_states=True)


# ---------------------------------------------------------------------- the head
def test_a_stored_head_is_read_though_the_config_says_tied(tmp_path, folder):
    """transformers keeps a stored lm_head that differs from the embedding (it ties only
    equal ones): so does tpde (before: the embedding, logits 1.3 relative apart)."""
    copy = _copy(folder, tmp_path)
    _edit_config(copy, tie_word_embeddings=True)
    reference, out = _transformers(copy)
    stored = safetensors_torch.load_file(copy / "model.safetensors")["lm_head.weight"]
    assert torch.equal(reference.lm_head.weight, stored.double())  # the oracle keeps it
    model = load(copy, dtype=torch.float64)
    assert torch.equal(model.head, stored.double())
    assert _check(model, "llama", IDS, out, 1e-12)["logits"] < 1e-12


# ---------------------------------------------------------------------- tensors
@pytest.mark.parametrize(
    "dtype, stored", [(torch.int8, "I8"), (torch.int64, "I64"), (torch.bool, "BOOL")]
)
def test_integer_or_boolean_weights_are_refused_by_name(tmp_path, folder, dtype, stored):
    copy = _copy(folder, tmp_path)
    name = "model.layers.1.mlp.up_proj.weight"
    _rewrite(copy, lambda t: t.update({name: t[name].to(dtype)}))
    match = rf"{copy}.*the tensor '{name}' is stored as {stored}; tpde reads weights stored as"
    with pytest.raises(LoadError, match=match):
        load(copy)


@pytest.mark.parametrize("where", ["model.layers.{l}.self_attn", "model"])
def test_stored_rotary_inv_freq_buffers_are_ignored_as_transformers_does(tmp_path, folder, where):
    """Checkpoints of transformers ≤ 4.30 store RoPE's θ_i per layer (or once): transformers
    ignores them, and so does tpde (before: refused as "another architecture")."""
    copy = _copy(folder, tmp_path)
    theta = torch.tensor([1.0, 0.01])

    def add(tensors):
        for l in range(2):
            tensors[f"{where.format(l=l)}.rotary_emb.inv_freq"] = theta.clone()

    _rewrite(copy, add)
    _, out = _transformers(copy)
    _check(load(copy, dtype=torch.float64), "llama", IDS, out, 1e-12)


def test_a_shape_that_contradicts_the_config_names_both(tmp_path, folder):
    copy = _copy(folder, tmp_path)
    _edit_config(copy, intermediate_size=32)
    match = r"'model.layers.0.mlp.gate_proj.weight' has shape \(24, 16\); the config implies \(32"
    with pytest.raises(LoadError, match=rf"{copy}: the tensor {match}"):
        load(copy)


# ---------------------------------------------------------------------- files
def test_truncated_or_corrupt_safetensors_name_the_file(tmp_path, folder):
    copy = _copy(folder, tmp_path)
    path = copy / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-100])  # the header intact, the last tensor cut
    with pytest.raises(LoadError, match=rf"{path} is not a readable safetensors file.*"
                       r"not fully covered"):  # fmt: skip
        load(copy)
    path.write_bytes(data[:8] + b"x" * 12 + data[20:])  # the JSON header broken
    with pytest.raises(LoadError, match=rf"{path} is not a readable safetensors file.*JSON"):
        load(copy)


def test_a_truncated_shard_is_refused_before_any_tensor_is_read(tmp_path, monkeypatch):
    """Nothing half-built: every shard's header is checked before the first tensor is read."""
    from tpde.pretrained import _folder

    _oracle("llama").save_pretrained(tmp_path, max_shard_size="5KB")
    last = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    last.write_bytes(last.read_bytes()[:-4])
    reads = []
    monkeypatch.setattr(_folder, "read_tensors", lambda *a: reads.append(a))
    with pytest.raises(LoadError, match=rf"{last} is not a readable safetensors file"):
        load(tmp_path)
    assert reads == []


@pytest.mark.parametrize(
    "weight_map, match",
    [
        (["model.norm.weight"], r"weight_map must be a non-empty JSON object .*received list"),
        ({"model.norm.weight": 3}, r"weight_map\['model.norm.weight'\] must name a "
                                   r"\*\.safetensors shard file; received 3"),
        ({}, r"weight_map must be a non-empty JSON object"),
        ("model.safetensors", r"weight_map must be .*received str"),
    ],
)  # fmt: skip
def test_a_weight_map_that_is_not_names_to_shards(tmp_path, weight_map, match):
    _oracle("llama").save_pretrained(tmp_path, max_shard_size="5KB")
    index = tmp_path / "model.safetensors.index.json"
    content = json.loads(index.read_text())
    if isinstance(weight_map, dict) and weight_map:
        weight_map = {**content["weight_map"], **weight_map}
    index.write_text(json.dumps({**content, "weight_map": weight_map}))
    with pytest.raises(LoadError, match=rf"{index}: {match}"):
        load(tmp_path)


# ---------------------------------------------------------------------- config values
@pytest.mark.parametrize(
    "change, match",
    [
        ({"attention_bias": "false"}, r"attention_bias must be true or false; received 'false' "
                                      r"\(a str\)"),
        ({"attention_bias": 0}, r"attention_bias must be true or false; received 0 \(a int\)"),
        ({"attention_bias": None}, r"attention_bias must be true or false; received None"),
        ({"mlp_bias": 0}, r"sets mlp_bias = 0, which changes the computation"),
        ({"pretraining_tp": True}, r"sets pretraining_tp = True, which changes the computation"),
        ({"rope_parameters": "oops"}, r"rope_parameters must be a dict .*received 'oops'"),
        ({"rope_scaling": [2.0]}, r"rope_scaling must be a dict .*received \[2\.0\]"),
        ({"rope_scaling": {"rope_type": "linear", "factor": -1.0}},
         r"rope_scaling\.factor must be finite and > 0; received -1\.0"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 0}},
         r"rope_scaling\.factor must be finite and > 0; received 0"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0}},
         r"rope_scaling\.original_max_position_embeddings is missing, and 'llama3'"),
        ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 1.0],
                           "long_factor": [1.0, 1.0]}},
         r"original_max_position_embeddings is missing, and 'longrope'"),
        ({"num_attention_heads": None}, r"has no 'num_attention_heads', which llama models"),
    ],
)  # fmt: skip
def test_config_values_of_the_wrong_type_or_range_are_named(tmp_path, folder, change, match):
    """A string "false" is truthy (before: read as a bias, then blamed on a missing tensor);
    0 and True are not the bool and int the key holds (transformers 5 refuses them too)."""
    copy = _copy(folder, tmp_path)
    _edit_config(copy, **change)
    with pytest.raises(LoadError, match=rf"{copy}: config.json.*{match}"):
        load(copy)


def test_a_llama_sliding_window_is_ignored_as_transformers_does(tmp_path, folder):
    """LlamaConfig has no sliding window: transformers attends to every earlier token
    whatever the file says (before: tpde windowed, hidden states 54 % off)."""
    copy = _copy(folder, tmp_path)
    _edit_config(copy, sliding_window=3)
    _, out = _transformers(copy)
    model = load(copy, dtype=torch.float64)
    assert model.config.window is None
    _check(model, "llama", IDS, out, 1e-12)


def _mistral(tmp_path, **changes):
    model = _oracle("mistral")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key, value in changes.items():
        if value is ...:
            config.pop(key)
        else:
            config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("value, window", [(..., 4096), (None, None), (3, 3)])
def test_mistral_window_absent_null_or_set(tmp_path, value, window):
    """Absent: MistralConfig's default 4096; null: full attention; each as transformers."""
    path = _mistral(tmp_path, sliding_window=value)
    cfg, _ = read_checkpoint(path, dtype=torch.float64)
    assert cfg.window == window
    reference = transformers.AutoConfig.from_pretrained(path)
    assert reference.sliding_window == window
    _, out = _transformers(path)
    _check(load(path, dtype=torch.float64), "mistral", IDS, out, 1e-12)


def test_mistral_attention_bias_is_not_a_mistral_key(tmp_path):
    """MistralConfig has no attention_bias: transformers builds no bias whatever it says."""
    path = _mistral(tmp_path, attention_bias=True)
    reference, out = _transformers(path)
    assert reference.model.layers[0].self_attn.q_proj.bias is None
    _check(load(path, dtype=torch.float64), "mistral", IDS, out, 1e-12)


# ---------------------------------------------------------------------- positions
def test_positions_beyond_max_position_embeddings(folder):
    """embed refuses a sequence longer than C = max_position_embeddings (32 here); the layers
    themselves rotate any position, as transformers' do (RoPE extrapolated): a measure of
    36 tokens built by hand gives transformers' hidden states at every layer."""
    model = load(folder, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"a sequence of 33 tokens is longer than the model's "
                       r"context length \(32 tokens\)"):  # fmt: skip
        model.embed(torch.arange(33))
    ids = torch.arange(36) % 37 + 3
    reference, _ = _transformers(folder)
    with torch.no_grad():
        out = reference(ids[None], output_hidden_states=True)
    mu = Empirical(model.embedding(ids), positions=torch.arange(36))
    states = model.hidden_states(mu)
    assert _relative(states[1], out.hidden_states[1][0]) < 1e-12
    last = model.final_norm.norm(states[2])  # transformers' last state is final-normed
    assert _relative(last, out.hidden_states[2][0]) < 1e-12


# ---------------------------------------------------------------------- Qwen's sliding window
def _qwen(tmp_path, name="qwen2", **changes):
    """test_load's tiny Qwen2 (2 layers, every parameter redrawn) with config ``changes``,
    saved, and transformers' model of the saved folder and its outputs (its default attention:
    eager's softmax is float32)."""
    config_cls, kwargs, model_cls, _, _ = TEST_FAMILIES[name]
    torch.manual_seed(5)
    config = getattr(transformers, config_cls)(**{**kwargs, **changes})
    model = getattr(transformers, model_cls)(config).to(torch.float64)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    model.save_pretrained(tmp_path)
    return _transformers(tmp_path)


@pytest.mark.parametrize("name", ["qwen2", "qwen3"])
@pytest.mark.parametrize(
    ("first", "slides"), [(2, (False, False)), (5, (False, False)), (1, (False, True))]
)
def test_qwen_use_sliding_window_slides_the_layers_max_window_layers_says(
    tmp_path, name, first, slides
):
    """use_sliding_window with max_window_layers ≥ L slides no layer (full attention, as
    transformers; before: refused); with max_window_layers = 1 layer 1 sees the 3 last
    positions (p_i − p_j < 3), as transformers' (before: refused)."""
    reference, out = _qwen(
        tmp_path, name, use_sliding_window=True, sliding_window=3, max_window_layers=first
    )
    assert tuple(t == "sliding_attention" for t in reference.config.layer_types) == slides
    model = load(tmp_path, dtype=torch.float64)
    assert model.config.layer_window(0) is None
    assert model.config.layer_window(1) == (3 if slides[1] else None)
    _check(model, name, IDS, out, 1e-12)


def test_qwen_sliding_layer_types_without_the_switch_are_refused(tmp_path):
    """layer_types naming a sliding layer while use_sliding_window is false: transformers has
    no window for it (its sliding mask then fails); tpde refuses, naming both keys."""
    _qwen(tmp_path)
    _edit_config(tmp_path, layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(LoadError, match=r"layer_types makes layers \[1\] slide, but "
                       r"use_sliding_window is not true"):  # fmt: skip
        load(tmp_path)
    _edit_config(tmp_path, layer_types=["full_attention", "chunked_attention"])
    with pytest.raises(LoadError, match=r"sets layer_types = .*'chunked_attention'"):
        load(tmp_path)


def test_learned_positions_end_at_the_table(tmp_path):
    """GPT-2's learned positions: embed and the embedding itself refuse n > C, naming both
    (before: torch's bare IndexError from the embedding)."""
    _oracle("gpt2").save_pretrained(tmp_path)
    model = load(tmp_path, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"a sequence of 33 tokens is longer than the model's "
                       r"context length \(32 tokens\)"):  # fmt: skip
        model.embed(torch.arange(33))
    with pytest.raises(ValueError, match=r"33 tokens, but the learned position table holds 32 "
                       r"positions \(max_position_embeddings\)"):  # fmt: skip
        model.embedding(torch.arange(33))
    assert model.embedding(torch.arange(32)).shape == (32, 16)
