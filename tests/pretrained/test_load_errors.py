"""tpde.pretrained.load on bad input: each a clear error at load or at the call."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tpde.fields import GroupedQueryAttention, RMSNorm
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny Llama checkpoint (no tokenizer)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=12,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


def _copy(folder, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(folder, target)
    return target


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_no_config_no_weights_nothing(tmp_path, folder):
    with pytest.raises(FileNotFoundError, match="no model folder or GGUF file at"):
        load(tmp_path / "absent")
    with pytest.raises(LoadError, match=r"has no config.json"):
        load(tmp_path)
    copy = _copy(folder, tmp_path)
    (copy / "model.safetensors").unlink()
    with pytest.raises(LoadError, match=r"has no \*\.safetensors: no weights to read"):
        load(copy)
    (copy / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(LoadError, match="tpde reads safetensors only"):
        load(copy)
    with pytest.raises(TypeError, match="path must be a str or a Path"):
        load(3)


@pytest.mark.parametrize("model_type", ["mamba", "t5", "rwkv", "deepseek_v3"])
def test_unknown_model_type_lists_the_known_ones(tmp_path, folder, model_type):
    """A family tpde does not read is a LoadError naming the folder and the model_type."""
    copy = _copy(folder, tmp_path)
    _edit_config(copy, model_type=model_type)
    known = r"tpde reads .*llama, .*mistral, .*qwen2"
    match = rf"{copy}: config.json has model_type '{model_type}'.*{known}"
    with pytest.raises(LoadError, match=match):
        load(copy)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn"}},
         r"rope_parameters\.original_max_position_embeddings is missing, and 'yarn'"),
        ({"rope_scaling": {"type": "linear", "factor": 0.0}},
         r"rope_scaling\.factor must be finite and > 0; received 0\.0"),
        ({"rope_parameters": "oops"}, r"rope_parameters must be a dict .*received 'oops'"),
        ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "su"}},
         r"rope_parameters\.rope_type = 'su' is a RoPE scaling tpde does not implement"),
        ({"hidden_act": "gelu"}, r"sets hidden_act = 'gelu'"),
        ({"mlp_bias": True}, r"sets mlp_bias = True"),
        ({"rms_norm_eps": float("nan")}, r"rms_norm_eps must be finite and > 0; received nan"),
        ({"num_hidden_layers": -1}, r"num_hidden_layers must be an integer >= 1; received -1"),
        ({"num_attention_heads": "4"}, r"num_attention_heads must be an integer; received '4'"),
        ({"num_key_value_heads": 3}, r"num_attention_heads = 4 is not a multiple of "
                                     r"num_key_value_heads = 3"),
    ],
)  # fmt: skip
def test_config_keys_tpde_cannot_honour_are_named(tmp_path, folder, change, match):
    copy = _copy(folder, tmp_path)
    _edit_config(copy, **change)
    with pytest.raises(LoadError, match=match):
        load(copy)


def _rewrite(path, edit):
    tensors = safetensors_torch.load_file(path / "model.safetensors")
    edit(tensors)
    safetensors_torch.save_file(tensors, path / "model.safetensors")


def test_tensors_missing_unexpected_or_of_the_wrong_shape(tmp_path, folder):
    copy = _copy(folder, tmp_path)
    name = "model.layers.1.mlp.up_proj.weight"
    _rewrite(copy, lambda t: t.pop(name))
    with pytest.raises(LoadError, match=rf"the tensor '{name}' is missing \(shape \(24, 16\)"):
        load(copy)
    copy = _copy(folder, tmp_path / "b")
    _rewrite(copy, lambda t: t.update({name: torch.zeros(16, 24)}))
    with pytest.raises(LoadError, match=r"has shape \(16, 24\); the config implies \(24, 16\)"):
        load(copy)
    copy = _copy(folder, tmp_path / "c")
    _rewrite(copy, lambda t: t.update({"model.layers.0.extra.weight": torch.zeros(3)}))
    with pytest.raises(LoadError, match=r"'model.layers.0.extra.weight' \(shape \(3,\)\) is not"):
        load(copy)
    copy = _copy(folder, tmp_path / "d")
    _rewrite(copy, lambda t: t["model.norm.weight"].fill_(float("nan")))
    with pytest.raises(LoadError, match=r"'model.norm.weight' holds NaN or infinite values"):
        load(copy)


def test_truncated_or_corrupt_safetensors(tmp_path, folder):
    copy = _copy(folder, tmp_path)
    data = (copy / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(LoadError, match=r"model.safetensors is not a readable safetensors file"):
        load(copy)
    (copy / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(LoadError, match="not a readable safetensors file"):
        load(copy)


def test_missing_shard(tmp_path):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=12,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path, max_shard_size="5KB")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(LoadError, match=rf"lists the shard\(s\) {shard.name}, which are not"):
        load(tmp_path)


def test_without_tokenizer_embed_needs_ids_and_context_is_enforced(folder):
    model = load(folder)
    assert model.tokenizer is None
    with pytest.raises(ValueError, match=r"loaded without a tokenizer.*pass token ids"):
        model.embed("a sentence")
    mu = model.embed(torch.arange(5))[0]
    assert mu.points.shape == (5, 16)
    with pytest.raises(ValueError, match=r"a sequence of 13 tokens is longer than the model's "
                       r"context length \(12 tokens\)"):  # fmt: skip
        model.embed(torch.arange(13))
    with pytest.raises(ValueError, match=r"token ids must lie in 0 … 39.*from 0 to 40"):
        model.embed(torch.tensor([0, 40]))
    with pytest.raises(TypeError, match=r"token ids must be integers; received dtype torch.float"):
        model.embed(torch.tensor([1.0]))
    with pytest.raises(TypeError, match="mu must be an Empirical"):
        model.split(mu.points)


def test_an_encoder_without_head_says_so(tmp_path):
    config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=4, max_position_embeddings=12,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(tmp_path)
    model = load(tmp_path)
    states = model.hidden_states(model.embed(torch.arange(4))[0])
    with pytest.raises(ValueError, match="this bert checkpoint has no language-model head"):
        model.logits(states[-1])


def test_float16_on_the_cpu_is_refused(folder):
    with pytest.raises(TypeError, match=r"dtype torch.float16 was requested on the CPU"):
        load(folder, dtype=torch.float16)
    with pytest.raises(ValueError, match="device must be a torch device"):
        load(folder, device="gpu!")


def test_qk_norm_option_is_checked():
    W = torch.randn(8, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match="q_norm must be an RMSNorm or LayerNorm scheme object"):
        GroupedQueryAttention(W, W, W, W, 2, 2, q_norm="rmsnorm")
    with pytest.raises(ValueError, match=r"k_norm gain must have size d_h = 4 \(per head\) or 8"):
        GroupedQueryAttention(W, W, W, W, 2, 2, k_norm=RMSNorm(torch.ones(5)))
    with pytest.raises(TypeError, match="placement='pre'"):
        GroupedQueryAttention(W, W, W, W, 2, 2, q_norm=RMSNorm(torch.ones(4), placement="post"))
