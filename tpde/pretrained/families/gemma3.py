"""Gemma-3 (text): as Gemma-2 without the score soft-cap (its key read as transformers reads it:
not applied), with a per-head QK-RMSNorm (gains 1 + w)
before RoPE, 5 local : 1 global layers (``sliding_window_pattern`` 6) and a local RoPE base
(``rope_local_base_freq``, 10⁴; global 10⁶).

GGUF: llama.cpp's ``gemma3`` files. They do not carry the 5 : 1 pattern, the local RoPE
base, the activation (tanh GELU), the √d embedding scale nor query_pre_attn_scalar: this
entry's defaults give the first four, and query_pre_attn_scalar is llama.cpp's rule:
head_dim, d/H for the 62-layer 27B (:func:`~tpde.pretrained.families.gemma2.llamacpp_query_scalar`;
transformers' GGUF loader leaves its default 256, equal for the 256-wide heads of 270M).
The converter stores each norm gain as 1 + w. llama.cpp's ``load_hparams`` (LLM_ARCH_GEMMA3,
``src/llama-model.cpp``) requires ``attention.sliding_window`` (a file without it is refused,
named; later llama.cpp versions read its absence as every layer global, not Gemma-3) and reads
``rope.freq_base`` as optional with its general default 10⁴: a file without it is read so,
not with Gemma-3's 10⁶.
"""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.gemma2 import (
    GEMMA_HONOURED,
    GEMMA_KEYS,
    GEMMA_NAMES,
    llamacpp_query_scalar,
)

__all__ = ["GEMMA3"]

GEMMA3 = register(
    Family(
        family="gemma3",
        summary=("as gemma2 without soft-caps, per-head QK-RMSNorm, local RoPE base"),
        model_types=("gemma3_text",),
        keys={
            **{k: v for k, v in GEMMA_KEYS.items() if k != "attn_softcap"},
            "rope_base": ("rope_theta", 1_000_000.0),
            "rope_local_base": ("rope_local_base_freq", 10_000.0),
        },
        honoured=GEMMA_HONOURED,
        irrelevant={
            "attn_logit_softcapping": "Gemma3TextConfig stores it, but transformers' Gemma-3 "
            "attention applies no score soft-cap (nor does llama.cpp; Gemma-3 configs hold null)",
            "_sliding_window_pattern": "transformers' copy of sliding_window_pattern, written "
            "beside layer_types, which tpde reads",
        },
        names={
            **GEMMA_NAMES,
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="sandwich",
        mlp="swiglu",
        rotary=True,
        causal=True,
        gain_offset=1.0,
        embed_scale=True,
        window_pattern=6,
        facts={
            "rope_style": "half",
            "pattern": "5 local : 1 global (sliding_window_pattern)",
            "qk_norm": "per head, gains 1 + w, before RoPE",
        },
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="gemma3",
            model_type="gemma3_text",
            computed={"query_pre_attn_scalar": llamacpp_query_scalar(62)},
            stored_gain_offset=1.0,
            tokenizer="spm",
            # neither llama.cpp nor transformers' Gemma-3 applies a score soft-cap
            ignored=("attn_logit_softcapping",),
            # llama.cpp's load_hparams (LLM_ARCH_GEMMA3) requires the window; the RoPE base is
            # optional there, 10⁴ (llama_model::load_hparams' default), not Gemma-3's 10⁶
            required=("attention.sliding_window",),
            defaults={"rope.freq_base": 10_000.0},
            notes=(
                "norm gains stored 1 + w; window (5 local : 1 global), final soft-cap; RoPE base "
                "10⁴ where absent (llama.cpp's default, not Gemma-3's 10⁶)"
            ),
        ),
    )
)
