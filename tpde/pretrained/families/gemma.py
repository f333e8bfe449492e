"""Gemma (v1): a Pre-RMSNorm decoder like llama with GeGLU (``hidden_act``, GELU-tanh; the
legacy value "gelu" of the official configs means the tanh form, as transformers reads it),
tokens embedded as √d·E[id], norm gains stored as γ − 1 (γ = 1 + w), ``head_dim`` 256 and
16 KV heads unless the config says (``GemmaConfig``'s defaults), the head tied by default.

GGUF: llama.cpp's ``gemma`` files (``GemmaModel`` of its converter: the common keys with
``key_length`` the head dimension, norm gains stored as 1 + w, the head tied — ``lm_head``
skipped, llama.cpp's model always reuses ``token_embd``; no RoPE base, which llama.cpp's
``load_hparams`` reads as optional with its default 10⁴, Gemma's ``rope_theta``). llama.cpp's
graph (``llm_build_gemma``) is this family's: √d embedding, RMSNorm, RoPE (NEOX: half), scores
scaled by 1/√head_dim, GELU-tanh GeGLU.
"""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.gemma2 import GEMMA_HONOURED
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["GEMMA"]

GEMMA = register(
    Family(
        family="gemma",
        summary=("as llama; GeGLU (legacy gelu read as GELU-tanh); √d embedding; gains 1 + w"),
        model_types=("gemma",),
        keys={
            **LLAMA_KEYS,
            "kv_heads": ("num_key_value_heads", 16),  # GemmaConfig's default
            "head_dim": ("head_dim", 256),
            "activation": ("hidden_act", "gelu_pytorch_tanh"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured={"use_bidirectional_attention": GEMMA_HONOURED["use_bidirectional_attention"]},
        names=LLAMA_NAMES,
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        gain_offset=1.0,
        embed_scale=True,
        facts={"rope_style": "half", "activation_aliases": {"gelu": "gelu_pytorch_tanh"}},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="gemma",
            model_type="gemma",
            stored_gain_offset=1.0,
            tokenizer="spm",
            defaults={"rope.freq_base": 10_000.0},  # llama_model::load_hparams' default,
            notes=(
                "norm gains stored 1 + w; RoPE base 10⁴ where absent (llama.cpp's default; its "
                "converter writes none)"
            ),
        ),
    )
)
