"""Phi (1, 1.5, 2): a parallel block with one shared LayerNorm, partial RoPE
(``partial_rotary_factor``), GELU-tanh MLP, final LayerNorm, a biased head;
``qk_layernorm``: per-head QK-LayerNorm before the rotation.

GGUF: llama.cpp's ``phi2`` files (separate Q, K, V; rotary rows not interleaved), whose
``rope.dimension_count`` is the rotated width (partial_rotary_factor = it / head dimension).
They carry no RoPE base: llama.cpp's default 10⁴, Phi's. llama.cpp has no QK-LayerNorm for
phi2 (a file with ``attn_q_norm`` is refused as unexpected)."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    ALL_BIASES,
    SCORE_HEAD,
    Family,
    GGUFMap,
    register,
)
from tpde.pretrained.families.gpt_neox import NEOX_KEYS

__all__ = ["PHI"]

_PHI = "model.layers.{l}."

PHI = register(
    Family(
        family="phi",
        summary=(
            "partial RoPE; one norm; GELU-tanh MLP; final LayerNorm; head bias; qk_layernorm: "
            "per-head QK-LayerNorm"
        ),
        model_types=("phi",),
        keys={
            **NEOX_KEYS,
            "kv_heads": ("num_key_value_heads", "=heads"),
            "rope_base": ("rope_theta", 10000.0),
            "rotary": ("partial_rotary_factor", 0.5),
            "activation": ("hidden_act", "gelu_new"),
        },
        honoured={},
        names={
            "embed": "model.embed_tokens",
            "final_norm": "model.final_layernorm",
            "head": "lm_head",
            "attn_norm": _PHI + "input_layernorm",
            "q": _PHI + "self_attn.q_proj",
            "k": _PHI + "self_attn.k_proj",
            "v": _PHI + "self_attn.v_proj",
            "o": _PHI + "self_attn.dense",
            "q_norm": _PHI + "self_attn.q_layernorm",
            "k_norm": _PHI + "self_attn.k_layernorm",
            "fc1": _PHI + "mlp.fc1",
            "fc2": _PHI + "mlp.fc2",
        },
        biases={**ALL_BIASES, "head": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        parallel=True,
        optional={"q_norm": "qk_layernorm", "k_norm": "qk_layernorm"},
        facts={
            "rope_style": "half",
            "rotary": "fraction",
            "norms": "one, shared",
            "qk_norm": "qk_layernorm: per-head LayerNorm (eps layer_norm_eps) before the rotary",
        },
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="phi2",
            model_type="phi",
            rotary_fraction="partial_rotary_factor",
            notes=("partial RoPE from ``rope.dimension_count``"),
        ),
    )
)
