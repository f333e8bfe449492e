"""Cohere (Command-R): a parallel block — attention and SwiGLU MLP read one shared
LayerNorm without bias (γ only) and are added in one step —, interleaved RoPE (pairs
(2i, 2i + 1), as GPT-J), logits times ``logit_scale``, the head tied by default;
``use_qk_norm``: per-head LayerNorms without bias on queries and keys before the rotation,
one gain per head (stored (H, d_h) and (H_kv, d_h)). RoPE base 5·10⁵ where config.json
lacks it (``CohereConfig``'s default)."""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, register
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["COHERE"]

COHERE = register(
    Family(
        family="cohere",
        summary=("interleaved RoPE; LayerNorm without bias; per-head QK-norm gains; logit_scale"),
        model_types=("cohere",),
        keys={
            **LLAMA_KEYS,
            "norm_eps": ("layer_norm_eps", 1e-5),
            "rope_base": ("rope_theta", 500000.0),  # CohereConfig's default_theta
            "activation": ("hidden_act", "silu"),
            "tied": ("tie_word_embeddings", True),
            "logit_scale": ("logit_scale", 0.0625),
        },
        honoured={"hidden_act": LLAMA_HONOURED["hidden_act"]},
        names={
            **{k: v for k, v in LLAMA_NAMES.items() if k != "mlp_norm"},
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=GATED_BIASES,
        norm="layernorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        parallel=True,
        optional={"q_norm": "use_qk_norm", "k_norm": "use_qk_norm"},
        norm_parts={"*": ("weight",)},
        qk_norm_heads=True,
        facts={
            "rope_style": "interleaved",
            "norms": "one LayerNorm without bias, shared by attention and MLP",
            "qk_norm": "use_qk_norm: per-head LayerNorm without bias, a gain per head",
        },
        classifiers=SCORE_HEAD,
    )
)
