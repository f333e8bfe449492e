"""StableLM (StableLM-3B-4E1T, StableLM-2): a Pre-LayerNorm decoder (LayerNorms with
biases) with partial RoPE ("rotate half" on the first ``partial_rotary_factor``·d_h
coordinates of each head, 1/4 by default), a SwiGLU MLP, Q/K/V biases where
``use_qkv_bias`` says; ``qk_layernorm``: a LayerNorm without bias per head on queries and
keys before the rotation, one gain per head (stored as ``norms.{h}``);
``use_parallel_residual``: a parallel block whose MLP reads the attention's norm (no
``post_attention_layernorm``). 32 KV heads where config.json lacks the key
(``StableLmConfig``'s default, whatever the heads).

GGUF: llama.cpp's ``stablelm`` files (rotary rows not interleaved), whose
``rope.dimension_count`` is the rotated width (partial_rotary_factor = it / head dimension)
and whose converter stacked each layer's per-head QK-norm gains into one (H, d_h) tensor
``attn_q_norm`` (``attn_k_norm``: H_kv rows), split on reading. As llama.cpp, the file's tensors
say whether the QK-norms are there (``qk_layernorm``) and Q, K, V have biases; its
``use_parallel_residual`` says whether the MLP reads the attention's norm (a file whose
``ffn_norm`` contradicts it is refused by the tensor's name). They carry no RoPE base:
llama.cpp's default 10⁴, StableLM's."""

from __future__ import annotations

from tpde.pretrained.families.base import SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["STABLELM"]

_ATTENTION = "model.layers.{l}.self_attn."

STABLELM = register(
    Family(
        family="stablelm",
        summary=("partial RoPE; per-head QK-LayerNorm gains; optional parallel residual"),
        model_types=("stablelm",),
        keys={
            **LLAMA_KEYS,
            "kv_heads": ("num_key_value_heads", 32),  # StableLmConfig's default
            "norm_eps": ("layer_norm_eps", 1e-5),
            "activation": ("hidden_act", "silu"),
            "rotary": ("partial_rotary_factor", 0.25),
        },
        honoured={},
        names={
            **LLAMA_NAMES,
            "q_norm": _ATTENTION + "q_layernorm.norms.{h}",
            "k_norm": _ATTENTION + "k_layernorm.norms.{h}",
        },
        biases={
            **dict.fromkeys("qkv", ("use_qkv_bias", False)),
            **dict.fromkeys(("o", "gate", "up", "down"), False),
        },
        norm="layernorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        parallel=("use_parallel_residual", False),
        optional={
            "q_norm": "qk_layernorm",
            "k_norm": "qk_layernorm",
            "mlp_norm": ("use_parallel_residual", False),
        },
        norm_parts={"q_norm": ("weight",), "k_norm": ("weight",)},
        qk_norm_heads=True,
        facts={
            "rope_style": "half",
            "rotary": "fraction",
            "qk_norm": "qk_layernorm: per-head LayerNorm without bias, a gain per head",
            "norms": "use_parallel_residual: one, shared",
        },
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="stablelm",
            model_type="stablelm",
            keys={"use_parallel_residual": "use_parallel_residual"},
            rotary_fraction="partial_rotary_factor",
            stacked={"q_norm": _ATTENTION + "q_layernorm", "k_norm": _ATTENTION + "k_layernorm"},
            flags={"qk_layernorm": ("blk.0.attn_q_norm.weight", True, False)},
            notes=(
                "partial RoPE from ``rope.dimension_count``; the stacked (H, d_h) QK-norm gains "
                "split per head; QK-norms and Q/K/V biases by the tensors; "
                "``use_parallel_residual``"
            ),
        ),
    )
)
