"""Qwen3: as llama, with a per-head QK-RMSNorm before the rotation; its sliding window as
Qwen2's (:mod:`~tpde.pretrained.families.qwen2`). GGUF: llama.cpp's ``qwen3`` files (rotary
rows not interleaved; a sliding window, which llama.cpp does not read for them, read as
Qwen2's)."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    GATED_BIASES,
    SCORE_HEAD,
    WINDOW_NOT_READ,
    Family,
    GGUFMap,
    register,
)
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES
from tpde.pretrained.families.qwen2 import QWEN_HONOURED, QWEN_WINDOW_KEYS

__all__ = ["QWEN3"]

QWEN3 = register(
    Family(
        family="qwen3",
        summary=("as llama, per-head QK-RMSNorm"),
        model_types=("qwen3",),
        keys={
            **LLAMA_KEYS,
            **QWEN_WINDOW_KEYS,
            "head_dim": ("head_dim", 128),  # Qwen3Config's default
        },
        honoured=QWEN_HONOURED,
        window_switch="use_sliding_window",
        names={
            **LLAMA_NAMES,
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "qk_norm": "per head, before RoPE"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="qwen3",
            model_type="qwen3",
            switched_off=WINDOW_NOT_READ,
            windowed={"use_sliding_window": True, "max_window_layers": 0},
            notes=(
                "a window as llama.cpp computes it (not read; warned where it binds) or, with "
                '``gguf_window="file"``, on every layer'
            ),
        ),
    )
)
