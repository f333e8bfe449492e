"""Gemma-2: a sandwich (real Peri-LN) decoder x ← x + N₂(f(N₁x)) on each sublayer, GQA +
RoPE with the score scale query_pre_attn_scalar^−½ and a score soft-cap, GeGLU (tanh),
local (sliding-window) and global layers alternating, √d embedding, a final-logit
soft-cap, norm gains stored as γ − 1 (γ = 1 + w).

Every piece is a field or an option of one (MATH.md §7, §8):

=============================  ==========================  ==========================
piece                          equation                    where
=============================  ==========================  ==========================
``Sandwich(N₁, N₂)``           x ← x + N₂(f(N₁x))          tpde.fields.Sandwich
``GQA(scale=s**-0.5)``         query_pre_attn_scalar s
``GQA(softcap=c)``             scores c·tanh(s/c)          Gemma-2: 50
``SwiGLU(activation=gelu-tanh)``  GeGLU
``Transformer(logit_cap=c)``   logits c·tanh(z/c)          Gemma-2: 30
=============================  ==========================  ==========================

Facts the files do not carry: Gemma-2 alternates local/global (pattern 2: layers 0, 2, …
local).

GGUF: llama.cpp's ``gemma2`` files, norm gains stored as 1 + w, the head tied. They carry the
soft-caps and the window, which llama.cpp reads as optional (``llama_model::load_hparams``,
LLM_ARCH_GEMMA2): a file without one takes llama.cpp's default (window 4096, soft-caps 50 and
30, ``llama_hparams``' initial values), Gemma-2's too. They carry neither the RoPE base
(llama.cpp's default 10⁴, Gemma-2's) nor query_pre_attn_scalar: llama.cpp scales scores by
1/√head_dim, by 1/√(d/H) for the 46-layer model (27B, whose query_pre_attn_scalar is
d/H = 144) — :func:`llamacpp_query_scalar`, as Gemma-3's entry (62 layers for its 27B).
"""

from __future__ import annotations

from tpde.pretrained.families.base import (
    GATED_BIASES,
    REQUIRED,
    SCORE_HEAD,
    Family,
    GGUFMap,
    register,
)
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["GEMMA2", "GEMMA_HONOURED", "GEMMA_KEYS", "GEMMA_NAMES", "llamacpp_query_scalar"]


def llamacpp_query_scalar(layers_27b: int):
    """llama.cpp's query_pre_attn_scalar of a Gemma GGUF file, which does not carry it, as a
    function of the config.json read so far (the GGUF map's ``computed``): d/H for the 27B
    model (recognised, as llama.cpp does, by its ``layers_27b`` layers) or where the head
    dimension is not known (None where d or H is not an integer: read_hyper names it), else
    the head dimension as read. A file whose d or H is not an integer but whose head dimension
    is takes the head dimension (llama.cpp's n_embd_head_k; before branch walk4: none)."""

    def rule(raw: dict):
        def whole(value):
            return isinstance(value, int) and not isinstance(value, bool)

        hidden, heads, head_dim = (
            raw.get(k) for k in ("hidden_size", "num_attention_heads", "head_dim")
        )
        if raw.get("num_hidden_layers") == layers_27b or head_dim is None:
            return hidden // heads if whole(hidden) and whole(heads) and heads > 0 else None
        return head_dim

    return rule


#: The Gemma families' config keys (Gemma-3 changes the RoPE bases).
GEMMA_KEYS = {
    **LLAMA_KEYS,
    "kv_heads": ("num_key_value_heads", 4),  # Gemma2Config's and Gemma3TextConfig's defaults
    "head_dim": ("head_dim", 256),
    "window": ("sliding_window", 4096),
    "activation": ("hidden_activation", "gelu_pytorch_tanh"),
    "query_scalar": ("query_pre_attn_scalar", REQUIRED),
    "attn_softcap": ("attn_logit_softcapping", None),
    "logit_softcap": ("final_logit_softcapping", None),
    "tied": ("tie_word_embeddings", True),
}

#: The Gemma families' weight names: a norm before and after each sublayer.
GEMMA_NAMES = {
    **LLAMA_NAMES,
    "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
    "mlp_norm": "model.layers.{l}.pre_feedforward_layernorm",
    "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
}

GEMMA_HONOURED = {
    "layer_types": ("sliding_attention", "full_attention"),
    "use_bidirectional_attention": (None, False),
}

GEMMA2 = register(
    Family(
        family="gemma2",
        summary=(
            "GQA + RoPE, query_pre_attn_scalar, score soft-cap; GeGLU (tanh); local/global "
            "layers; √d embedding; final logit soft-cap; gains 1 + w"
        ),
        model_types=("gemma2",),
        keys={
            **GEMMA_KEYS,
            # one RoPE base on every layer: transformers' Gemma-2 reads no rope_local_base_freq
            "rope_local_base": (None, "=rope_base"),
            "attn_softcap": ("attn_logit_softcapping", 50.0),
            "logit_softcap": ("final_logit_softcapping", 30.0),
        },
        honoured=GEMMA_HONOURED,
        names=GEMMA_NAMES,
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="sandwich",
        mlp="swiglu",
        rotary=True,
        causal=True,
        gain_offset=1.0,
        embed_scale=True,
        window_pattern=2,
        facts={"rope_style": "half", "pattern": "local, global, local, … (layer_types)"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="gemma2",
            model_type="gemma2",
            computed={"query_pre_attn_scalar": llamacpp_query_scalar(46)},
            stored_gain_offset=1.0,
            tokenizer="spm",
            # llama.cpp's defaults (load_hparams, LLM_ARCH_GEMMA2: n_swa = 4096 and the two
            # soft-caps read optional; llama_hparams: 50 and 30), as Gemma2Config's
            defaults={
                "attention.sliding_window": 4096,
                "attn_logit_softcapping": 50.0,
                "final_logit_softcapping": 30.0,
            },
            notes=(
                "norm gains stored 1 + w; soft-caps, window (1 local : 1 global), each "
                "llama.cpp's default (50, 30, 4096) where absent; query_pre_attn_scalar as "
                "llama.cpp derives it"
            ),
        ),
    )
)
