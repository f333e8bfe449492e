"""BLOOM: a Pre-LayerNorm decoder with ALiBi positions and no position embedding; the token
embeddings LayerNormed (``word_embeddings_layernorm``); causal multi-head attention with
biases, the fused QKV stored head by head ([q_h; k_h; v_h]); a GELU-tanh MLP of width 4d
with √(2/π) written 0.79788456 (BLOOM's ``bloom_gelu_forward``, activation
"gelu-tanh-bloom"); the head tied by default.

ALiBi (:class:`~tpde.fields.ALiBi`): head h's score of key j is q·k/√d_h + m_h p_j with the
paper's slopes m_h (2^{−8h/H} for H a power of two), the bias m_h p_j formed in float32
as BLOOM's ``build_alibi_tensor`` forms it (``ALiBi(rounding="float32")``: the exact slopes
differ from those by up to 1e-8 relative where H is not a power of two). The context is
``seq_length`` (the training length; 2048 where the file omits it): ALiBi has no position
table, but tpde refuses longer sequences as for every model."""

from __future__ import annotations

import dataclasses

from tpde.pretrained.families.base import ALL_BIASES, REQUIRED, SCORE_HEAD, Family, register

__all__ = ["BLOOM"]

_H = "transformer.h.{l}."


def _variant(raw: dict) -> Family:
    """Older BLOOM configs name the width ``n_embed`` (transformers reads it so)."""
    if "hidden_size" in raw or "n_embed" not in raw:
        return dataclasses.replace(BLOOM, variant=None)
    return dataclasses.replace(
        BLOOM, keys={**BLOOM.keys, "hidden": ("n_embed", REQUIRED)}, variant=None
    )


BLOOM = register(
    Family(
        family="bloom",
        model_types=("bloom",),
        keys={
            "hidden": ("hidden_size", 64),
            "layers": ("n_layer", 2),
            "heads": ("n_head", 8),
            "kv_heads": ("n_head", 8),
            "head_dim": (None, "=hidden/heads"),
            "mlp_hidden": (None, "=4*hidden"),
            "vocab": ("vocab_size", REQUIRED),
            "context": ("seq_length", 2048),
            "norm_eps": ("layer_norm_epsilon", 1e-5),
            "activation": (None, "bloom_gelu"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured={"apply_residual_connection_post_layernorm": (False,)},
        names={
            "embed": "transformer.word_embeddings",
            "embed_norm": "transformer.word_embeddings_layernorm",
            "final_norm": "transformer.ln_f",
            "head": "lm_head",
            "attn_norm": _H + "input_layernorm",
            "qkv": _H + "self_attention.query_key_value",
            "o": _H + "self_attention.dense",
            "mlp_norm": _H + "post_attention_layernorm",
            "fc1": _H + "mlp.dense_h_to_4h",
            "fc2": _H + "mlp.dense_4h_to_h",
        },
        biases={**ALL_BIASES, "qkv": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=False,
        causal=True,
        alibi={"rounding": "float32"},
        facts={
            "qkv_layout": "per_head",  # rows of head h: [q_h | k_h | v_h]
            "alibi": "score q·k/√d_h + m_h p_j (the paper's slopes)",
            "pretraining_tp": "slow_but_exact splits the same products: no effect",
        },
        classifiers=SCORE_HEAD,
        variant=_variant,
    )
)
