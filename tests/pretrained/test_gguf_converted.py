"""GGUF files of every family llama.cpp writes and tpde reads, as llama.cpp's converter
writes them, each equal to the Hugging Face folder of the same weights — in F32, F16 and the
quantised Q8_0 and Q4_0 — and to transformers' own GGUF loader where it reads the
architecture.

Each family: a tiny transformers model with EVERY parameter redrawn (Gemma's norm weights
on a 2⁻¹⁰ grid, so that the converter's stored 1 + w is exact in float32), written by the
test oracle :mod:`tests.pretrained.gguf_convert` (llama.cpp's ``convert_hf_to_gguf.py``
conventions per architecture). The folder beside it holds the values the file holds:
each matrix quantised and dequantised by gguf-py in the file's layout and put back in the
checkpoint's. Both are loaded in float64; a hidden state or the logits of the file then
differ from the folder's only by rounding: ≤ 1e-12 relative (measured: ≤ 2e-16 for every
family and type), greedy tokens identical. Widths are multiples of 32 so that every matrix
fills the quantised types' 32-wide blocks.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tests.pretrained.gguf_convert import convert
from tests.pretrained.test_load import _relative
from tpde.pretrained import load

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N = 9
_SMALL = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 32,
          "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
          "num_key_value_heads": 2}  # fmt: skip
_GEMMA = {**_SMALL, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256,
          "query_pre_attn_scalar": 256, "sliding_window": 3}  # fmt: skip
_NEOX = {**_SMALL, "num_attention_heads": 4}
del _NEOX["num_key_value_heads"]

#: case → (config class, config, model class)
CASES = {
    "llama": ("LlamaConfig", {**_SMALL, "attention_bias": True,
                              "tie_word_embeddings": False}, "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", _SMALL, "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", {**_SMALL, "head_dim": 16}, "Qwen3ForCausalLM"),
    "gemma2": ("Gemma2Config", _GEMMA, "Gemma2ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", {**_GEMMA, "num_hidden_layers": 3}, "Gemma3ForCausalLM"),
    "olmo2": ("Olmo2Config", {**_SMALL, "tie_word_embeddings": False}, "Olmo2ForCausalLM"),
    "phi": ("PhiConfig", {**_NEOX, "intermediate_size": 128, "partial_rotary_factor": 0.5},
            "PhiForCausalLM"),
    "gpt2": ("GPT2Config", {"vocab_size": 40, "n_layer": 2, "n_positions": 32, "n_embd": 32,
                            "n_head": 4}, "GPT2LMHeadModel"),
    "starcoder2": ("Starcoder2Config", {**_SMALL, "sliding_window": None},
                   "Starcoder2ForCausalLM"),
    "gpt_neox": ("GPTNeoXConfig", {**_NEOX, "rotary_pct": 0.5}, "GPTNeoXForCausalLM"),
    "gpt_neox-sequential": ("GPTNeoXConfig", {**_NEOX, "rotary_pct": 0.25,
                                              "use_parallel_residual": False},
                            "GPTNeoXForCausalLM"),
}  # fmt: skip
QTYPES = ("F32", "F16", "Q8_0", "Q4_0")


def tiny(case: str):
    """The transformers model of ``case``, float32, every parameter redrawn."""
    config_cls, kwargs, model_cls = CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    config = getattr(transformers, config_cls)(**kwargs)
    config._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.5)
            if "gemma" in case and name.endswith("norm.weight"):
                parameter.copy_(torch.round(parameter * 1024) / 1024)
    return model


def write_pair(case: str, base, qtype: str = "F32", **options):
    """(folder, file) of the same weights: the file as llama.cpp's converter writes the
    tiny model of ``case`` in ``qtype``, the folder the values it holds."""
    model = tiny(case)
    held = convert(model, base / f"{qtype}.gguf", qtype, **options)
    folder_model = copy.deepcopy(model)
    missing, unexpected = folder_model.load_state_dict(held, strict=False)
    assert not unexpected and all(n.endswith("lm_head.weight") for n in missing), missing
    folder_model.save_pretrained(base / qtype)
    return base / qtype, base / f"{qtype}.gguf"


def outputs(model, ids):
    states = model.hidden_states(model.embed(ids)[0])
    return states, model.logits(states[-1])


def errors(file_model, folder_model, ids) -> dict:
    states, logits = outputs(file_model, ids)
    expected_states, expected_logits = outputs(folder_model, ids)
    out = {l: _relative(states[l], expected_states[l]) for l in range(len(states))}
    out["logits"] = _relative(logits, expected_logits)
    assert torch.equal(logits.argmax(-1), expected_logits.argmax(-1))
    return out


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_file_equals_the_folder_of_its_values(case, qtype, tmp_path):
    folder, file = write_pair(case, tmp_path, qtype)
    folder_model = load(folder, dtype=torch.float64)
    file_model = load(file, dtype=torch.float64)
    assert file_model.architecture == folder_model.architecture
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = errors(file_model, folder_model, ids)
    assert max(measured.values()) < 1e-12, measured
