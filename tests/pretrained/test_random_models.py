"""tpde.pretrained.random_checkpoint: a genuine tiny checkpoint of every registered family.

The oracle (transformers, tests only): each folder loads in transformers' Auto class of its
kind (``AutoModelForCausalLM`` for a causal family, ``AutoModel`` for an encoder, as the
family tests use them) with no tensor missing, unexpected or mismatched, and gives the hidden
states and the logits (encoders: the pooled first token) that tpde's load of the same folder
gives, in float64. transformers' float32 pieces (RoPE tables, RMSNorm and the parameter-free or
bias-free LayerNorms, Gemma's √d scale, the eager softmax, the MoE routers' softmax) are
re-evaluated in float64 by :mod:`tests.pretrained.family_checks`,
:mod:`tests.pretrained.family_oracle` and GPT-J's table by ``test_load_parallel``: the
same patches as the family tests.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json

import pytest
import torch

from tests.pretrained import rope_oracle
from tests.pretrained.family_checks import _float64_norms
from tests.pretrained.family_oracle import TOL64, float64_router, relative
from tests.pretrained.test_load_parallel import _gptj_float64
from tests.pretrained.test_load_peri import _softmax_in_float64
from tpde.pretrained import ARCHITECTURES, load, random_checkpoint, random_config, random_model
from tpde.pretrained.families import FAMILIES
from tpde.pretrained.random_models import SIZES

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N = 7  # tokens: longer than the window 3


def _casts(cls) -> bool:
    """Whether the rotary class computes in float32 (GPT-J's takes its tables as given)."""
    source = inspect.getsource(cls)
    return any(old in source for old, _ in rope_oracle.CASTS)


@contextlib.contextmanager
def _float64(model_type: str, monkeypatch):
    """transformers' RoPE (Cohere's rotation too), eager softmax and routers in float64 while
    the model is built and run (the family tests' patches)."""
    auto = transformers.models.auto.modeling_auto
    name = (
        auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
        or auto.MODEL_MAPPING_NAMES[model_type]
    )
    module = importlib.import_module(getattr(transformers, name).__module__)
    rotary = [v for k, v in vars(module).items() if k.endswith("RotaryEmbedding")
              and _casts(v)]  # fmt: skip
    for k, v in vars(module).items():
        if k.endswith("TopKRouter"):
            float64_router(monkeypatch, v)
    if model_type == "cohere":  # Cohere rotates in float32 (q.float(), k.float())
        rotate = rope_oracle.in_float64(module.apply_rotary_pos_emb)
        monkeypatch.setattr(module, "apply_rotary_pos_emb", rotate)
    with rope_oracle.float64_rope(*rotary), _softmax_in_float64():
        yield


def _oracle(folder, entry, ids, monkeypatch):
    """transformers' output for the folder: hidden states, and the logits (a causal family)
    or the pooled first token (an encoder)."""
    auto = transformers.AutoModelForCausalLM if entry.causal else transformers.AutoModel
    # eager attention (Gemma-2's score soft-cap is there only); GPT-J's eager casts q, k to
    # float32, its sdpa does not
    attention = "sdpa" if entry.family == "gptj" else "eager"
    with _float64(entry.model_types[0], monkeypatch):
        model, info = auto.from_pretrained(
            folder, dtype=torch.float64, attn_implementation=attention, output_loading_info=True
        )
        assert not any(info.values()), info  # every tensor read, none left at its init
        if entry.mlp == "moe":
            model.set_experts_implementation("eager")  # the grouped kernel takes no float64
        _float64_norms(model.eval())
        _gptj_float64(model)  # GPT-J's sinusoid table (no-op for the others)
        with torch.no_grad():
            return model(ids[None], output_hidden_states=True)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_random_checkpoint_equals_transformers(family, tmp_path, monkeypatch):
    """≤ 1e-12 relative in float64 (family_oracle.TOL64: rounding ~1e-16 per operation through
    two layers, three orders of margin) on every hidden state and the logits."""
    entry = FAMILIES[family]
    random_checkpoint(family, tmp_path, seed=3, dtype=torch.float64)
    ids = torch.randint(0, SIZES["vocab"], (N,), generator=torch.Generator().manual_seed(1))
    out = _oracle(tmp_path, entry, ids, monkeypatch)
    mine = load(tmp_path, dtype=torch.float64)
    assert mine.architecture == family
    ours = mine.hidden_states(mine.embed(ids)[0])
    layers = len(mine.layers)
    # transformers' states: one per layer, or (ALBERT) one per block of a layer's group
    stride, rest = divmod(len(out.hidden_states) - 1, layers)
    assert rest == 0 and stride == (2 if family == "albert" else 1)
    errors = {}
    for l in range(layers + 1):
        state = ours[l]
        if l == layers and mine.final_norm is not None:  # transformers' last is final-normed
            state = mine.final_norm.norm(state)
        errors[l] = relative(state, out.hidden_states[l * stride][0])
    if entry.causal:
        errors["logits"] = relative(mine.logits(ours[-1]), out.logits[0])
    else:
        errors["pooled"] = relative(mine.pooled(ours[-1]), out.pooler_output[0])
    assert max(errors.values()) < TOL64, errors
    print(f"{family}: largest relative error {max(errors.values()):.1e}")  # shown with -s


def test_every_parameter_is_drawn_and_the_options_are_on(tmp_path):
    """No tensor at transformers' default init (gains 1, biases 0): each one's values
    spread; the family's switches are on (biases, parallel block, QK-norm, window)."""
    from safetensors.torch import load_file

    random_checkpoint("stablelm", tmp_path, seed=0)
    tensors = load_file(tmp_path / "model.safetensors")
    assert all(t.std() > 0.05 for t in tensors.values() if t.numel() > 1)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["use_parallel_residual"] and raw["use_qkv_bias"] and raw["qk_layernorm"]
    assert {
        "model.layers.1.self_attn.q_proj.bias",
        "model.layers.1.self_attn.q_layernorm.norms.3.weight",
    } <= set(tensors)
    assert load(tmp_path).layer(0).attention.q_norm is not None
    assert random_config("qwen2")["use_sliding_window"] is True
    falcon = random_config("falcon")
    assert falcon["new_decoder_architecture"] and falcon["num_kv_heads"] == 2


def test_seed_and_sizes(tmp_path):
    a = random_model("llama", seed=1)
    b = random_model("llama", seed=1)
    c = random_model("llama", seed=2, sizes={"hidden": 32, "layers": 3})
    assert torch.equal(a.embedding.tokens, b.embedding.tokens)
    assert not torch.equal(a.embedding.tokens, c.embedding.tokens[:, :16])
    assert (c.config.hidden, c.config.layers, c.config.kv_heads) == (32, 3, 2)
    # The RoPE base of the sizes reaches a family that declares its own rope_parameters.
    based = random_config("llama", sizes={"rope_base": 500.0})
    assert based["rope_parameters"]["rope_theta"] == based["rope_theta"] == 500.0
    assert random_model("llama", sizes={"rope_base": 500.0}).config.rope_base == 500.0
    assert a.embedding.tokens.dtype == torch.float64 and len(ARCHITECTURES) == len(FAMILIES)
    path = random_checkpoint("gpt2", tmp_path / "new", dtype=torch.float32)
    assert load(path).config.hidden == SIZES["hidden"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"family": "lama"}, ValueError,
         r"family must be one of the registered families \(bert, .*llama.*\); received 'lama'"),
        ({"family": 3}, ValueError, "received 3"),
        ({"sizes": {"width": 8}}, ValueError,
         r"sizes names 'width', which are not hyper-parameters .*; use layers, hidden"),
        ({"spread": 0}, ValueError, "spread must be a number > 0; received 0"),
        ({"seed": 2.9}, ValueError, r"seed must be an int; received 2\.9"),
        ({"seed": True}, ValueError, "seed must be an int; received True"),
        ({"dtype": torch.int64}, TypeError, "int64"),
    ],
)  # fmt: skip
def test_bad_input(tmp_path, kwargs, error, message):
    kwargs = {"family": "llama", **kwargs}
    with pytest.raises(error, match=message):
        random_checkpoint(kwargs.pop("family"), tmp_path, **kwargs)
