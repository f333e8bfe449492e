"""GPT-NeoX (Pythia): a parallel block x ← x + Attn(N₁x) + F(N₂x) with two norms
(``use_parallel_residual``, default true), fused QKV stored head by head ([q_h | k_h | v_h]),
partial RoPE (``rotary_pct``), GELU MLP.

GGUF: llama.cpp's ``gptneox`` files, whose converter rewrote the fused QKV as the blocks
[W_q; W_k; W_v] (re-interleaved head by head on reading) and whose ``rope.dimension_count``
is the rotated width (rotary_pct = it / head dimension). They carry no RoPE base: llama.cpp's
default 10⁴, GPT-NeoX's."""

from __future__ import annotations

from tpde.pretrained.families.base import SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.bert import BERT_KEYS

__all__ = ["GPT_NEOX", "NEOX_KEYS"]

_NEOX = "gpt_neox.layers.{l}."

#: GPT-NeoX's config keys, which Phi starts from.
NEOX_KEYS = {
    **BERT_KEYS,
    # read: transformers sizes RoPE by a head_dim key (its projections by d/H); another value
    # than d/H makes tpde's weight shapes differ, so such a checkpoint is refused by shape
    "head_dim": ("head_dim", "=hidden/heads"),
    "norm_eps": ("layer_norm_eps", 1e-5),
    "rope_base": ("rotary_emb_base", 10000.0),
    "rotary": ("rotary_pct", 0.25),
    "activation": ("hidden_act", "gelu"),
    "tied": ("tie_word_embeddings", False),
}
del NEOX_KEYS["type_vocab"], NEOX_KEYS["pad"]

GPT_NEOX = register(
    Family(
        family="gpt_neox",
        summary=("fused QKV per head; partial RoPE (rotary_pct); two norms; GELU MLP"),
        model_types=("gpt_neox",),
        keys=NEOX_KEYS,
        honoured={},
        names={
            "embed": "gpt_neox.embed_in",
            "final_norm": "gpt_neox.final_layer_norm",
            "head": "embed_out",
            "attn_norm": _NEOX + "input_layernorm",
            "qkv": _NEOX + "attention.query_key_value",
            "o": _NEOX + "attention.dense",
            "mlp_norm": _NEOX + "post_attention_layernorm",
            "fc1": _NEOX + "mlp.dense_h_to_4h",
            "fc2": _NEOX + "mlp.dense_4h_to_h",
        },
        biases={
            "qkv": ("attention_bias", True),
            "o": ("attention_bias", True),
            "fc1": True,
            "fc2": True,
        },
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        buffers=(".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq"),
        parallel="use_parallel_residual",
        irrelevant={"is_decoder": "GPTNeoXConfig's flag that GPT-NeoX's code never reads: causal"},
        facts={
            "rope_style": "half",
            "rotary": "fraction",
            "qkv_layout": "per_head",  # rows of head h: [q_h | k_h | v_h]
        },
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="gptneox",
            model_type="gpt_neox",
            keys={"use_parallel_residual": "use_parallel_residual"},
            rotary_fraction="rotary_pct",
            qkv_blocks=True,
            notes=("fused QKV re-interleaved head by head; ``use_parallel_residual``"),
        ),
    )
)
