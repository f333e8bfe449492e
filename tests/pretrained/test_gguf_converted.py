"""GGUF files of every family llama.cpp writes and tpde reads, as llama.cpp's converter
writes them, each equal to the Hugging Face folder of the same weights — in F32, F16 and the
quantised Q8_0 and Q4_0 — and to transformers' own GGUF loader where it reads the
architecture.

Each family: a tiny transformers model with EVERY parameter redrawn (Gemma's norm weights
on a 2⁻¹⁰ grid, so that the converter's stored 1 + w is exact in float32), written by the
test oracle :mod:`tests.pretrained.gguf_convert` (llama.cpp's ``convert_hf_to_gguf.py``
conventions per architecture). The folder beside it holds the values the file holds: each
matrix quantised and dequantised by gguf-py in the file's layout and put back in the
checkpoint's, the norm epsilon rounded to float32 as the file stores it. Both are loaded in
float64; a hidden state or the logits of the file then differ from the folder's only by
rounding: ≤ 1e-12 relative (measured: 0, bit-identical, for every family and type), greedy
tokens identical. Widths are multiples of 32 so that every matrix fills the quantised
types' 32-wide blocks.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.pretrained.gguf_convert import ARCHITECTURES, convert, phi3_attention_factor
from tests.pretrained.test_load import _relative
from tpde.pretrained import load
from tpde.pretrained.families.base import FAMILIES

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
_PHI3 = {**_SMALL, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
_FALCON = {"vocab_size": 40, "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
           "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip


def _longrope(pairs: int) -> dict:
    """LongRoPE on half of each head: factors in [1, 4) (C₀ = 4: the 9 tokens take the long)."""
    g = torch.Generator().manual_seed(5)
    short, long = (1 + 3 * torch.rand(2, pairs, generator=g, dtype=torch.float64)).tolist()
    return {"rope_type": "longrope", "short_factor": short, "long_factor": long,
            "rope_theta": 1e4, "partial_rotary_factor": 0.5}  # fmt: skip


#: case → (config class, config, model class)
CASES = {
    "llama": ("LlamaConfig", {**_SMALL, "attention_bias": True,
                              "tie_word_embeddings": False}, "LlamaForCausalLM"),
    "llama-tied": ("LlamaConfig", {**_SMALL, "tie_word_embeddings": True}, "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", _SMALL, "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", {**_SMALL, "head_dim": 128}, "Qwen3ForCausalLM"),
    "gemma": ("GemmaConfig", {**_SMALL, "num_attention_heads": 2, "num_key_value_heads": 1,
                              "head_dim": 32}, "GemmaForCausalLM"),  # head_dim ≠ d/H
    "gemma2": ("Gemma2Config", _GEMMA, "Gemma2ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", {**_GEMMA, "num_hidden_layers": 3}, "Gemma3ForCausalLM"),
    "olmo2": ("Olmo2Config", {**_SMALL, "tie_word_embeddings": False}, "Olmo2ForCausalLM"),
    "phi": ("PhiConfig", {**_NEOX, "intermediate_size": 128, "partial_rotary_factor": 0.5},
            "PhiForCausalLM"),
    "gpt2": ("GPT2Config", {"vocab_size": 40, "n_layer": 2, "n_positions": 1024, "n_embd": 32,
                            "n_head": 4}, "GPT2LMHeadModel"),
    "starcoder2": ("Starcoder2Config", {**_SMALL, "sliding_window": None},
                   "Starcoder2ForCausalLM"),
    "gpt_neox": ("GPTNeoXConfig", {**_NEOX, "rotary_pct": 0.5}, "GPTNeoXForCausalLM"),
    "gpt_neox-sequential": ("GPTNeoXConfig", {**_NEOX, "rotary_pct": 0.25,
                                              "use_parallel_residual": False},
                            "GPTNeoXForCausalLM"),
    "phi3": ("Phi3Config", _PHI3, "Phi3ForCausalLM"),
    "phi3-longrope": ("Phi3Config", {**_PHI3, "original_max_position_embeddings": 4,
                                     "rope_parameters": _longrope(2)}, "Phi3ForCausalLM"),
    "stablelm": ("StableLmConfig", {**_SMALL, "use_qkv_bias": True}, "StableLmForCausalLM"),
    "stablelm-qk-parallel": ("StableLmConfig", {**_SMALL, "qk_layernorm": True,
                                                "use_parallel_residual": True,
                                                "partial_rotary_factor": 0.5},
                             "StableLmForCausalLM"),
    "falcon": ("FalconConfig", _FALCON, "FalconForCausalLM"),  # multi-query (Falcon-7B)
    "falcon-grouped": ("FalconConfig", {**_FALCON, "new_decoder_architecture": True,
                                        "num_kv_heads": 2}, "FalconForCausalLM"),
    "falcon-grouped-one-norm": ("FalconConfig", {**_FALCON, "new_decoder_architecture": True,
                                                 "num_kv_heads": 2,
                                                 "num_ln_in_parallel_attn": 1},
                                "FalconForCausalLM"),
    "falcon-per-head": ("FalconConfig", {**_FALCON, "multi_query": False}, "FalconForCausalLM"),
}  # fmt: skip
QTYPES = ("F32", "F16", "Q8_0", "Q4_0")
_EPS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")


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
    if qtype != "F32":  # the embedding (40 × 32) is stored rounded
        embed = next(n for n in held if n.endswith(("embed_tokens.weight", "wte.weight",
                                                    "embed_in.weight",
                                                    "word_embeddings.weight")))  # fmt: skip
        assert not torch.equal(held[embed], model.state_dict()[embed])
    for key in _EPS:  # the file holds float32 numbers: the folder the same
        if hasattr(folder_model.config, key):
            value = np.float32(getattr(folder_model.config, key))
            setattr(folder_model.config, key, float(value))
    params = getattr(folder_model.config, "rope_parameters", None) or {}
    if params.get("rope_type") == "longrope":  # the file holds float32 factors and α
        for key in ("short_factor", "long_factor"):
            params[key] = np.float32(params[key]).tolist()
        alpha = phi3_attention_factor(folder_model.config.to_dict())
        params["attention_factor"] = float(np.float32(alpha))
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


#: The cases compared with transformers' GGUF loader: every case but "llama" (transformers
#: reads no attention bias of a llama file; "llama-tied" has none). The loader reads a
#: GPT-2's context_length as n_ctx (so that n_positions keeps its default 1024, the tiny
#: GPT-2's), a Qwen3's head dimension not at all (its default 128, the tiny model's), nor a
#: Gemma-2's soft-caps and query_pre_attn_scalar (its defaults 50, 30 and 256 are the tiny
#: model's), nor a Phi-3's rope.dimension_count or LongRoPE factors (so "phi3" rotates whole
#: heads and "phi3-longrope" is the folder's alone), nor a StableLM's rope.dimension_count or
#: QK-norms (its default rotates a quarter of each head, the tiny "stablelm"'s;
#: "stablelm-qk-parallel" is the folder's alone), nor a Falcon's layout (it builds every falcon
#: file as multi-query Falcon-7B, the tiny "falcon": the other layouts are the folder's alone).
#: Architectures it does not read (transformers 5: gemma, olmo2, phi2, gptneox) are skipped, naming
#: the reason: their folder is their one oracle.
HF_CASES = [case for case in CASES if case not in (
    "llama", "phi3-longrope", "stablelm-qk-parallel", "falcon-grouped", "falcon-grouped-one-norm",
    "falcon-per-head")]  # fmt: skip
#: (file type, dtype of both models, relative tolerance): float64 to rounding (measured
#: ≤ 8.5e-16); float32, both sides' own float32 arithmetic (RMSNorm, RoPE tables, softmax
#: ordered differently), a few float32 ulps through two layers (measured ≤ 4.5e-7): 1e-5.
HF_TYPES = [("F32", torch.float64, 1e-12), ("Q8_0", torch.float64, 1e-12),
            ("Q8_0", torch.float32, 1e-5)]  # fmt: skip


def _transformers_reads(case: str) -> None:
    """Skip unless transformers' GGUF loader reads the architecture of ``case``."""
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    arch = ARCHITECTURES[getattr(transformers, CASES[case][0]).model_type]
    if arch not in getattr(hf_gguf, "GGUF_SUPPORTED_ARCHITECTURES", ()):
        pytest.skip(
            f"transformers {transformers.__version__}'s GGUF loader does not read "
            f"{arch!r} files (its GGUF_SUPPORTED_ARCHITECTURES); the folder is the oracle"
        )


def transformers_model(directory, file, dtype, case: str, **options):
    """transformers' model of the GGUF ``file`` in ``directory`` (``from_pretrained(…,
    gguf_file=…)``; ``options`` to it, e.g. a ``config``), in ``dtype``; in float64 its
    RMSNorm, RoPE and embedding scale evaluated in float64 as in test_load_peri."""
    from tests.pretrained.test_load import _exact_float64 as plain_float64
    from tests.pretrained.test_load_peri import _exact_float64 as peri_float64

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=file.name, dtype=dtype, attn_implementation="eager", **options
    ).eval()
    if dtype == torch.float64:
        (peri_float64 if "gemma" in case else plain_float64)(hf)
    return hf


def transformers_errors(model, hf, ids) -> dict:
    """Layer (and "logits") → the relative difference of tpde's ``model`` from transformers'
    ``hf`` on token ids ``ids`` (transformers' softmax in float64 where its dtype is)."""
    from tests.pretrained.test_load_peri import _softmax_in_float64

    with torch.no_grad(), _softmax_in_float64():
        out = hf(ids[None], output_hidden_states=True)
    states, logits = outputs(model, ids)
    states = [*states[:-1], model.final_norm.norm(states[-1])]  # transformers' last is normed
    measured = {l: _relative(s, out.hidden_states[l][0]) for l, s in enumerate(states)}
    measured["logits"] = _relative(logits, out.logits[0])
    measured["argmax"] = torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))
    return measured


@pytest.mark.parametrize(
    "qtype, dtype, tolerance", HF_TYPES, ids=[f"{q}-{str(d)[6:]}" for q, d, _ in HF_TYPES]
)
@pytest.mark.parametrize("case", HF_CASES)
def test_file_equals_transformers_gguf_loader(case, qtype, dtype, tolerance, tmp_path):
    """tpde's model of the file against transformers' model of the same file
    (``from_pretrained(…, gguf_file=…)``), both in ``dtype`` (in float64 transformers'
    RMSNorm, RoPE, embedding scale and softmax evaluated in float64 as in test_load_peri):
    every hidden state and the logits within ``tolerance`` relative (:data:`HF_TYPES`),
    greedy tokens identical."""
    _transformers_reads(case)
    _, file = write_pair(case, tmp_path, qtype, vocabulary=True)
    hf = transformers_model(tmp_path, file, dtype, case)
    if "falcon" in case:  # its loader maps no layer_norm_epsilon of a falcon file (its
        for module in hf.modules():  # default 1e-5): the file's float32 value, as tpde reads
            if isinstance(module, torch.nn.LayerNorm):  # it (else 5.9e-13 apart)
                module.eps = float(np.float32(hf.config.layer_norm_epsilon))
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = transformers_errors(load(file, dtype=dtype), hf, ids)
    assert measured.pop("argmax")
    assert max(measured.values()) < tolerance, measured


def test_every_gguf_map_is_a_case_here_and_listed_in_the_docs():
    """The architectures tpde reads (the families' GGUF maps) are exactly those the oracle
    writes, those of the cases above, and those README.md and docs/api/pretrained.rst list."""
    registered = {entry.gguf.architecture for entry in FAMILIES.values() if entry.gguf}
    assert set(ARCHITECTURES.values()) == registered
    cases = {ARCHITECTURES[getattr(transformers, c[0]).model_type] for c in CASES.values()}
    assert cases == registered
    root = Path(__file__).parents[2]
    readme = (root / "README.md").read_text()
    sentence = readme[readme.index("`general.architecture` is one of") :].split("in any type")[0]
    assert set(re.findall(r"`(\w+)`", sentence)) - {"general"} == registered
    rst = (root / "docs" / "api" / "pretrained.rst").read_text()
    assert set(re.findall(r"^``(\w+)``  ", rst, flags=re.MULTILINE)) == registered
