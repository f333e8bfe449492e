"""GGUF files of the llama, qwen2 and qwen3 families through the generic translator, each
equal to the Hugging Face folder of the same weights (a llama file's sliding window, which
llama.cpp does not read: test_gguf_windows).

Each family: the tiny transformers model of ``test_load`` (every parameter redrawn), its
weights rounded to float32 and saved as a folder, and written as a GGUF file the way
llama.cpp's converter writes it (gguf-py's ``GGUFWriter``; tensor names from gguf-py's
``TensorNameMap``, the rows of llama's ``attn_q``/``attn_k`` interleaved per head). Both are
loaded in float64: the F32 file holds the folder's values exactly, so every hidden state and
the logits agree to rounding (≤ 1e-12 relative); an F16 file agrees to its rounding (the
tiny widths, 16 and 24, fill no 32-wide block of llama.cpp's quantised types; the quantised
path is the real Gemma-3 and SmolLM2 files' and test_gguf_gemma3's Q8_0). No Mistral here: llama.cpp
reads no sliding window from a llama file; its two readings are test_gguf_windows'.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.pretrained.test_load import _oracle, _relative
from tpde.pretrained import load

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

#: family of test_load → (GGUF architecture, rotary rows interleaved by the converter)
CASES = {
    "llama": ("llama", True),
    "qwen2": ("qwen2", False),
    "qwen3": ("qwen3", False),
}


def _interleave(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute of a q or k weight (or bias)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_gguf(path, model, architecture: str, interleaved: bool, half=False) -> None:
    """``model`` (a transformers decoder) as a GGUF file of ``architecture`` (matrices F16
    with ``half``, else everything F32)."""
    cfg = model.config
    arch = {name: a for a, name in gguf.MODEL_ARCH_NAMES.items()}[architecture]
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    heads = {"q_proj": cfg.num_attention_heads, "k_proj": cfg.num_key_value_heads}
    for name, tensor in model.state_dict().items():
        stem, part = name.rsplit(".", 1)
        array = tensor.detach().float().numpy()
        if interleaved and stem.rsplit(".", 1)[-1] in heads:
            array = _interleave(array, heads[stem.rsplit(".", 1)[-1]])
        stored = f"{names.get_name(stem)}.{part}"
        writer.add_tensor(stored, array.astype(np.float16) if half and array.ndim == 2 else array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory):
    """(family, folder, F32 GGUF file, F16 GGUF file) of the same float32 weights."""
    family = request.param
    architecture, interleaved = CASES[family]
    model = _oracle(family).float()
    base = tmp_path_factory.mktemp(f"gguf-{family}")
    model.save_pretrained(base / "folder")
    write_gguf(base / "f32.gguf", model, architecture, interleaved)
    write_gguf(base / "f16.gguf", model, architecture, interleaved, half=True)
    return family, base / "folder", base / "f32.gguf", base / "f16.gguf"


def _outputs(model, ids):
    states = model.hidden_states(model.embed(ids)[0])
    return states, model.logits(states[-1])


def test_f32_file_equals_its_folder_in_float64(pair):
    family, folder, file, _ = pair
    ids = torch.arange(3, 12)
    folder_model = load(folder, dtype=torch.float64)
    file_model = load(file, dtype=torch.float64)
    assert file_model.architecture == folder_model.architecture
    assert file_model.config.window == folder_model.config.window
    states, logits = _outputs(file_model, ids)
    expected_states, expected_logits = _outputs(folder_model, ids)
    for l in range(len(states)):
        assert _relative(states[l], expected_states[l]) < 1e-12, (family, l)
    assert _relative(logits, expected_logits) < 1e-12
    assert torch.equal(logits.argmax(-1), expected_logits.argmax(-1))


def test_f16_file_is_its_folder_to_rounding(pair):
    _, folder, _, file = pair
    ids = torch.arange(3, 12)
    _, logits = _outputs(load(file, dtype=torch.float64), ids)
    _, expected = _outputs(load(folder, dtype=torch.float64), ids)
    assert _relative(logits, expected) < 1e-2


@pytest.mark.parametrize("architecture", ["llama", "qwen2", "qwen3", "gemma3"])
def test_absent_kv_head_count_and_key_length_are_llama_cpps_defaults(architecture):
    """A file without ``head_count_kv`` or ``key_length`` has H_kv = H and d_h = d/H
    (llama.cpp's llama_model_loader defaults), not the config class's defaults that an absent
    config.json key takes (Qwen3's 32 KV heads of 128 dimensions, Gemma's 4 of 256). The file
    holds what the architecture requires beside them (gemma3: its window, which llama.cpp
    requires; without it tpde refuses the file, GGUFMap.required)."""
    from tpde.pretrained._config import read_hyper
    from tpde.pretrained._gguf import gguf_config
    from tpde.pretrained.families import FAMILIES

    family = next(f for f in FAMILIES.values() if f.gguf and f.gguf.architecture == architecture)
    metadata = {f"{architecture}.{key}": value for key, value in (
        ("block_count", 2), ("context_length", 32), ("embedding_length", 48),
        ("feed_forward_length", 64), ("attention.head_count", 6), ("vocab_size", 40))}  # fmt: skip
    required = {"attention.sliding_window": 4}
    metadata.update({f"{architecture}.{key}": required[key] for key in family.gguf.required})
    raw, _ = gguf_config(metadata, {"output.weight"}, family)
    config = read_hyper(raw, family)
    assert (config.heads, config.kv_heads, config.head_dim) == (6, 6, 8)
    if architecture == "gemma3":  # the score scale 1/√d_h (query_pre_attn_scalar = d_h)
        assert config.attention_scale == 8**-0.5


@pytest.mark.parametrize(
    ("architecture", "layers", "scalar"),
    [("gemma2", 2, 16), ("gemma2", 46, 12), ("gemma3", 2, 16), ("gemma3", 62, 12),
     ("gemma3", 46, 16)],
)  # fmt: skip
def test_gemma_query_scalar_is_llama_cpps_rule(architecture, layers, scalar):
    """A Gemma file carries no query_pre_attn_scalar: llama.cpp scales scores by 1/√head_dim,
    by 1/√(d/H) for the 27B model, recognised by its layer count (Gemma-2: 46, Gemma-3: 62;
    the other's count is not it) — the GGUF map's ``computed`` function. Here
    head_dim 16 ≠ d/H = 48/4 = 12, so the two readings differ."""
    from tpde.pretrained._config import read_hyper
    from tpde.pretrained._gguf import gguf_config
    from tpde.pretrained.families import FAMILIES

    family = next(f for f in FAMILIES.values() if f.gguf and f.gguf.architecture == architecture)
    metadata = {f"{architecture}.{key}": value for key, value in (
        ("block_count", layers), ("context_length", 32), ("embedding_length", 48),
        ("feed_forward_length", 64), ("attention.head_count", 4), ("vocab_size", 40),
        ("attention.key_length", 16), ("attention.value_length", 16),
        ("attention.sliding_window", 4))}  # fmt: skip
    raw, _ = gguf_config(metadata, {"output.weight"}, family)
    assert raw["query_pre_attn_scalar"] == scalar
    assert read_hyper(raw, family).attention_scale == scalar**-0.5


def test_a_gguf_map_refuses_a_computed_value_that_is_not_a_function():
    """``GGUFMap.computed`` holds functions of the config read so far; anything else (a rule
    spelled as a string, a constant) is refused when the map is built, naming the map and
    the key, not when a file is loaded."""
    from tpde.pretrained.families import GGUFMap

    with pytest.raises(
        ValueError,
        match=r"the GGUF map of 'gemma2' computes 'query_pre_attn_scalar' by 'hidden/heads', "
        r"which is not a function; give a function of the config\.json",
    ):
        GGUFMap("gemma2", "gemma2", computed={"query_pre_attn_scalar": "hidden/heads"})
