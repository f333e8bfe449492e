"""Phi-3 (and Phi-3.5, Phi-4-mini): a Pre-RMSNorm decoder like llama whose Q, K, V are one
fused projection ``qkv_proj`` (blocks [W_q; W_k; W_v]) and whose SwiGLU gate and up maps are
one ``gate_up_proj`` (the first m rows the gate, the last m the up map), with LongRoPE
(``rope_type`` "longrope": short factors up to ``original_max_position_embeddings``, long
ones beyond), partial rotary (``partial_rotary_factor``) and a sliding window where
``sliding_window`` says (p_i − p_j < w; transformers' ``Phi3Attention`` and mask read it, as
Mistral's: Phi-3-mini-4k sets 2047). A config's older RoPE names "su" and "yarn", which
transformers reads as LongRoPE on Phi-3, are refused (rename them "longrope").

GGUF: llama.cpp's ``phi3`` files (the fused ``attn_qkv`` and ``ffn_up`` = [W_gate; W_up] as the
folder stores them; rotary rows not interleaved), whose ``rope.dimension_count`` is the rotated
width (partial_rotary_factor = it / head dimension), ``rope.scaling.original_context_length``
C₀ and LongRoPE's factors two tensors with α in ``rope.scaling.attn_factor``
(:mod:`tpde.pretrained._gguf_rope`).

The window of a phi3 file has two readings. llama.cpp's converter (``Phi3MiniModel.
set_gguf_parameters``) writes the checkpoint's ``sliding_window`` (0 for none) as
``phi3.attention.sliding_window``; llama.cpp reads it and turns it off (``load_hparams``,
LLM_ARCH_PHI3: "Phi SWA is currently disabled", n_swa = 0; PR 13676, 2025 — before it, it
applied the window on every layer, PR 8931 of 2024 defaulting a file without the key to 2047
for the 4k models), and transformers' GGUF loader does not map it (its Phi3Config
keeps ``sliding_window`` None). A window that binds within the file's context (Phi-3-mini-4k's
2047 of 4096) is therefore read as llama.cpp computes it, without a window, with a warning;
:func:`~tpde.pretrained.load`'s ``gguf_window="file"`` applies it as the checkpoint's
config.json does (:func:`tpde.pretrained._gguf.switched_off`). 0 and a window ≥ the context
(Phi-3.5-mini's 262144 of 131072) read as none without a warning.
"""

from __future__ import annotations

from tpde.pretrained.families.base import SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.llama import LLAMA_KEYS

__all__ = ["PHI3"]

_LAYER = "model.layers.{l}."
#: The RoPE types Phi-3 reads as written ("su" and "yarn" transformers turns into longrope).
_ROPE_TYPES = ("default", "longrope")

PHI3 = register(
    Family(
        family="phi3",
        summary=("as llama with fused QKV and gate_up; LongRoPE; sliding window"),
        model_types=("phi3",),
        keys={
            **LLAMA_KEYS,
            "norm_eps": ("rms_norm_eps", 1e-5),
            "activation": ("hidden_act", "silu"),
            "rotary": ("partial_rotary_factor", 1.0),
            "window": ("sliding_window", None),  # Phi3Config's default: full attention
        },
        honoured={
            f"{where}.{key}": _ROPE_TYPES
            for where in ("rope_scaling", "rope_parameters")
            for key in ("rope_type", "type")
        },
        names={
            "embed": "model.embed_tokens",
            "final_norm": "model.norm",
            "head": "lm_head",
            "attn_norm": _LAYER + "input_layernorm",
            "qkv": _LAYER + "self_attn.qkv_proj",
            "o": _LAYER + "self_attn.o_proj",
            "mlp_norm": _LAYER + "post_attention_layernorm",
            "gate_up": _LAYER + "mlp.gate_up_proj",
            "down": _LAYER + "mlp.down_proj",
        },
        biases={},
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={
            "rope_style": "half",
            "rotary": "fraction",
            "qkv": "fused [W_q; W_k; W_v]; gate_up fused [W_gate; W_up]",
            "window": "sliding_window: p_i − p_j < w",
        },
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="phi3",
            model_type="phi3",
            keys={"rope.scaling.original_context_length": "original_max_position_embeddings"},
            rotary_fraction="partial_rotary_factor",
            rope_factors=True,
            switched_off={
                "attention.sliding_window": "turns off for {arch} files (its load_hparams: "
                "'Phi SWA is currently disabled', llama.cpp PR 13676)"
            },
            notes=(
                "partial RoPE from ``rope.dimension_count``; LongRoPE's factor tensors and "
                "``rope.scaling.attn_factor``; the window as llama.cpp computes it (off; warned "
                'where it binds within the context) or, with ``gguf_window="file"``, applied as '
                "the checkpoint does"
            ),
        ),
    )
)
