"""Models with scaled RoPE against transformers, at positions past the original context.

As tests/pretrained/test_load.py: a tiny model with EVERY parameter redrawn (norm gains and
biases too), saved with ``save_pretrained``, loaded by tpde from the folder. The oracle is
transformers' own code with its RoPE in float64 (tests/pretrained/rope_oracle.py: its
``ROPE_INIT_FUNCTIONS``, ``dynamic_rope_update`` and rotary ``forward`` with the float32 casts
read as float64) and RMSNorm in float64 by its own equation (as in test_load.py). Each
sequence runs past the original context (C₀ for llama3, yarn, longrope; C/s for linear, whose
C = ``max_position_embeddings`` is the stretched context; C itself for dynamic NTK, which acts
only there); dynamic and longrope also at a length within it. Tolerance: 1e-12 relative on
every hidden state and the logits in float64 (measured: ≤ 1e-15), greedy tokens identical.
"""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest
import torch

from tests.pretrained import test_load, test_load_peri
from tests.pretrained.rope_oracle import float64_rope
from tpde.fields import DynamicNTK, LinearScaling, Llama3Scaling, LongRoPE, YaRN
from tpde.pretrained import load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

_BASE = {"vocab_size": 40, "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 24,
         "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip
_PHI = {**_BASE, "num_key_value_heads": 4, "partial_rotary_factor": 0.5}
_GEMMA3 = {**test_load_peri.FAMILIES["gemma3"][1], "max_position_embeddings": 128}


def _longrope(pairs: int) -> dict:
    g = torch.Generator().manual_seed(5)
    short, long = (1 + 3 * torch.rand(2, pairs, generator=g, dtype=torch.float64)).tolist()
    return {"rope_type": "longrope", "short_factor": short, "long_factor": long,
            "original_max_position_embeddings": 32, "rope_theta": 1e4}  # fmt: skip


#: name → (family module, config class, config, model class, tpde scaling class, lengths)
CASES = {
    "llama-llama3": ("llama", "LlamaConfig", {**_BASE, "attention_bias": True,
                     "max_position_embeddings": 256, "rope_parameters": {
                         "rope_type": "llama3", "factor": 3.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                         "rope_theta": 1e4}}, "LlamaForCausalLM", Llama3Scaling, (96,)),
    "qwen2-yarn": ("qwen2", "Qwen2Config", {**_BASE, "max_position_embeddings": 128,
                   "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 32,
                                       "rope_theta": 1e4}},
                   "Qwen2ForCausalLM", YaRN, (80,)),
    "qwen2-yarn-mscale": ("qwen2", "Qwen2Config", {**_BASE, "max_position_embeddings": 128,
                          "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 32,
                                              "beta_fast": 8.0, "beta_slow": 2.0,
                                              "mscale": 0.8, "mscale_all_dim": 1.3,
                                              "rope_theta": 1e4}},
                          "Qwen2ForCausalLM", YaRN, (80,)),
    "mistral-linear": ("mistral", "MistralConfig", {**_BASE, "max_position_embeddings": 128,
                       "rope_parameters": {"rope_type": "linear", "factor": 2.5,
                                           "rope_theta": 1e4}},
                       "MistralForCausalLM", LinearScaling, (80,)),
    "llama-dynamic": ("llama", "LlamaConfig", {**_BASE, "max_position_embeddings": 32,
                      "rope_parameters": {"rope_type": "dynamic", "factor": 2.0,
                                          "rope_theta": 1e4}},
                      "LlamaForCausalLM", DynamicNTK, (48, 20)),
    "llama-longrope": ("llama", "LlamaConfig", {**_BASE, "max_position_embeddings": 128,
                       "rope_parameters": _longrope(4)}, "LlamaForCausalLM", LongRoPE,
                       (48, 20)),
    "phi-yarn": ("phi", "PhiConfig", {**_PHI, "max_position_embeddings": 64,
                 "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 16,
                                     "rope_theta": 1e4}},
                 "PhiForCausalLM", YaRN, (40,)),
    "gemma3-linear": ("gemma3", "Gemma3TextConfig", {**_GEMMA3, "rope_scaling": {
                          "rope_type": "linear", "factor": 8.0}},
                      "Gemma3ForCausalLM", LinearScaling, (48,)),
    "gemma3-yarn-local-linear": ("gemma3", "Gemma3TextConfig", {**_GEMMA3, "rope_parameters": {
                                     "full_attention": {"rope_type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 16,
                                                        "rope_theta": 50.0},
                                     "sliding_attention": {"rope_type": "linear", "factor": 2.0,
                                                           "rope_theta": 7.0}}},
                                 "Gemma3ForCausalLM", YaRN, (48,)),
}  # fmt: skip


def _rotary_class(family: str):
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    return next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding"))


def _oracle(name: str, folder):
    """transformers' outputs at each length of the case, and its model saved to ``folder``."""
    family, config_cls, kwargs, model_cls, _, lengths = CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    with float64_rope(_rotary_class(family)), test_load_peri._softmax_in_float64():
        config = getattr(transformers, config_cls)(**json.loads(json.dumps(kwargs)))
        config._attn_implementation = "eager"
        model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.normal_(0.0, 0.5)
        norms = test_load_peri if family == "gemma3" else test_load
        norms._exact_float64(model)
        for module in model.modules():  # back to transformers' own (float64) RoPE forward
            if "forward" in vars(module) and type(module).__name__.endswith("RotaryEmbedding"):
                del module.forward
        model.save_pretrained(folder)
        outputs = {}
        for n in lengths:  # a fresh rotary state per length (dynamic keeps its largest)
            model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
            ids = torch.randint(3, 40, (n,), generator=torch.Generator().manual_seed(n))
            with torch.no_grad():
                outputs[n] = ids, model(ids[None], output_hidden_states=True)
    return outputs


def _case(name: str, tmp_path_factory):
    folder = tmp_path_factory.mktemp(name)
    return name, folder, _oracle(name, folder)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    return _case(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return _case("gemma3-linear", tmp_path_factory)


def _errors(model, ids, out) -> dict:
    states = model.hidden_states(model.embed(ids)[0])
    last = len(out.hidden_states) - 1
    errors = {}
    for l, expected in enumerate(out.hidden_states):
        mine = states[l] if l < last else model.final_norm.norm(states[l])
        errors[l] = test_load._relative(mine, expected[0])
    logits = model.logits(states[-1])
    errors["logits"] = test_load._relative(logits, out.logits[0])
    assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))  # greedy, every position
    return errors


def test_float64_equals_transformers_past_the_original_context(case):
    name, folder, outputs = case
    model = load(folder, dtype=torch.float64)
    for n, (ids, out) in outputs.items():
        errors = _errors(model, ids, out)
        print(f"{name} n={n}: max relative {max(errors.values()):.2e}")
        assert max(errors.values()) < 1e-12, (n, errors)


def test_layers_carry_the_scaling(case):
    """The configured scaling on every layer; Gemma-3's local layers unscaled, own base."""
    name, folder, _ = case
    expected = CASES[name][4]
    positions = [layer.attention.position for layer in load(folder).layers]
    if name == "gemma3-linear":
        assert [p.scaling for p in positions] == [None, None, LinearScaling(8.0)]
        assert [p.base for p in positions] == [7.0, 7.0, 50.0]
    elif name == "gemma3-yarn-local-linear":
        assert [type(p.scaling) for p in positions] == [LinearScaling, LinearScaling, YaRN]
        assert [p.base for p in positions] == [7.0, 7.0, 50.0]
    else:
        assert all(type(p.scaling) is expected for p in positions)


def test_gemma3_config_of_transformers_4(gemma3, tmp_path):
    """Real Gemma-3 ≥ 4B checkpoints say ``rope_scaling`` beside ``rope_theta`` and
    ``rope_local_base_freq`` (no rope_parameters): the same model."""
    _, folder, outputs = gemma3
    raw = json.loads((folder / "config.json").read_text())
    del raw["rope_parameters"]
    raw.update(rope_scaling={"rope_type": "linear", "factor": 8.0}, rope_theta=50.0,
               rope_local_base_freq=7.0)  # fmt: skip
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    model = load(tmp_path, dtype=torch.float64)
    ((ids, out),) = outputs.values()
    assert max(_errors(model, ids, out).values()) < 1e-12


def test_float32_within_1e5(case):
    _, folder, outputs = case
    model = load(folder)
    for ids, out in outputs.values():
        assert max(_errors(model, ids, out).values()) < 1e-5


def test_without_the_scaling_the_model_differs(case):
    """The oracle is not vacuous: the same model with its RoPE unscaled is far from it at the
    first (longest) length."""
    _, folder, outputs = case
    model = load(folder, dtype=torch.float64)
    for layer in model.layers:
        layer.attention.position = dataclasses.replace(layer.attention.position, scaling=None)
    ids, out = next(iter(outputs.values()))
    logits = model.logits(model.hidden_states(model.embed(ids)[0])[-1])
    assert test_load._relative(logits, out.logits[0]) > 1e-4
