"""Entries of the Peri-LN and output-norm families (Gemma-2, Gemma-3, OLMo-2), for
:data:`tpde.pretrained.architectures.ARCHITECTURES`."""

from __future__ import annotations

from tpde.pretrained._architecture import (
    _GATED_BIASES,
    _LLAMA_KEYS,
    _LLAMA_NAMES,
    _ROPE_HONOURED,
    _SCORE_HEAD,
    REQUIRED,
    Architecture,
)

# ---------------------------------------------------------------------- Peri-LN / output norm
# Gemma-2, Gemma-3 (text) and OLMo-2: a norm after each sublayer (and, for Gemma, one
# before it too). Every piece is a field or an option of one (MATH.md §7, §8):
#   Sandwich(N₁, N₂)             x ← x + N₂(f(N₁x))        (tpde.fields.Sandwich)
#   GQA(scale=s**-0.5)           query_pre_attn_scalar s
#   GQA(softcap=c)               scores c·tanh(s/c)        (Gemma-2: 50)
#   GQA(q_norm, k_norm)          per head (Gemma-3) or over the projection (OLMo-2)
#   SwiGLU(activation=gelu-tanh) GeGLU
#   Transformer(logit_cap=c)     logits c·tanh(z/c)        (Gemma-2: 30)
# Facts the files do not carry: Gemma-2 alternates local/global (pattern 2: layers 0, 2, …
# local), Gemma-3 has 5 local : 1 global (pattern 6, ``sliding_window_pattern``), Gemma-3's
# local RoPE base defaults to 10⁴ (``rope_local_base_freq``) and its global one to 10⁶.

_GEMMA_KEYS = {
    **_LLAMA_KEYS,
    "activation": ("hidden_activation", "gelu_pytorch_tanh"),
    "query_scalar": ("query_pre_attn_scalar", REQUIRED),
    "attn_softcap": ("attn_logit_softcapping", None),
    "logit_softcap": ("final_logit_softcapping", None),
    "tied": ("tie_word_embeddings", True),
}

_GEMMA_NAMES = {
    **_LLAMA_NAMES,
    "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
    "mlp_norm": "model.layers.{l}.pre_feedforward_layernorm",
    "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
}

_GEMMA_HONOURED = {
    "layer_types": ("sliding_attention", "full_attention"),
    "use_bidirectional_attention": (None, False),
}

PERI_LN: tuple[Architecture, ...] = (
    Architecture(
        family="gemma2",
        model_types=("gemma2",),
        keys={**_GEMMA_KEYS, "rope_local_base": ("rope_local_base_freq", "=rope_base")},
        honoured=_GEMMA_HONOURED,
        names=_GEMMA_NAMES,
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="sandwich",
        mlp="swiglu",
        rotary=True,
        causal=True,
        gain_offset=1.0,
        embed_scale=True,
        window_pattern=2,
        facts={"rope_style": "half", "pattern": "local, global, local, … (layer_types)"},
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="gemma3",
        model_types=("gemma3_text",),
        keys={
            **_GEMMA_KEYS,
            "rope_base": ("rope_theta", 1_000_000.0),
            "rope_local_base": ("rope_local_base_freq", 10_000.0),
        },
        honoured=_GEMMA_HONOURED,
        names={
            **_GEMMA_NAMES,
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=_GATED_BIASES,
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
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="olmo2",
        model_types=("olmo2",),
        keys=_LLAMA_KEYS,
        honoured={**_ROPE_HONOURED, "clip_qkv": (None,)},
        names={
            **{k: v for k, v in _LLAMA_NAMES.items() if k not in ("attn_norm", "mlp_norm")},
            "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
            "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="output",
        mlp="swiglu",
        rotary=True,
        causal=True,
        qk_norm_whole=True,
        facts={"rope_style": "half", "qk_norm": "RMSNorm over the whole projection"},
        classifiers=_SCORE_HEAD,
    ),
)
