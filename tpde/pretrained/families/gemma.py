"""Gemma (v1): a Pre-RMSNorm decoder like llama with GeGLU (``hidden_act``, GELU-tanh; the
legacy value "gelu" of the official configs means the tanh form, as transformers reads it),
tokens embedded as √d·E[id], norm gains stored as γ − 1 (γ = 1 + w), ``head_dim`` 256 and
16 KV heads unless the config says (``GemmaConfig``'s defaults), the head tied by default."""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, register
from tpde.pretrained.families.gemma2 import GEMMA_HONOURED
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["GEMMA"]

GEMMA = register(
    Family(
        family="gemma",
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
    )
)
