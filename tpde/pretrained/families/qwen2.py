"""Qwen2: as llama, with biases on Q, K, V (none on O); with ``use_sliding_window: true``, a
sliding window on the layers from ``max_window_layers`` on (or as ``layer_types`` says), as
transformers' Qwen2 (none of them: every layer global). GGUF: llama.cpp's ``qwen2`` files
(rotary rows as the checkpoint's: the converter does not interleave them; a sliding window,
which llama.cpp does not read for them, read as llama.cpp computes it — none, warned where it
cuts within the file's context — or, with ``load(…, gguf_window="file")``, on every layer:
``use_sliding_window`` true, ``max_window_layers`` 0;
:func:`tpde.pretrained._gguf.switched_off`)."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    GATED_BIASES,
    SCORE_HEAD,
    WINDOW_NOT_READ,
    Family,
    GGUFMap,
    register,
)
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["QWEN2", "QWEN_HONOURED", "QWEN_WINDOW_KEYS"]

#: Config values of the Qwen families that tpde implements (any other is refused).
QWEN_HONOURED = {**LLAMA_HONOURED, "layer_types": ("full_attention", "sliding_attention")}

#: The Qwen families' sliding-window keys and Qwen2Config's (and Qwen3Config's) defaults:
#: the window (4096), read where use_sliding_window is true, on the layers from
#: max_window_layers (28) on; their KV heads (32).
QWEN_WINDOW_KEYS = {
    "kv_heads": ("num_key_value_heads", 32),
    "window": ("sliding_window", 4096),
    "window_from": ("max_window_layers", 28),
}

QWEN2 = register(
    Family(
        family="qwen2",
        summary=(
            "as llama, with Q/K/V biases; use_sliding_window: the window on layers ≥ "
            "max_window_layers"
        ),
        model_types=("qwen2",),
        keys={**LLAMA_KEYS, **QWEN_WINDOW_KEYS},
        honoured=QWEN_HONOURED,
        window_switch="use_sliding_window",
        names=LLAMA_NAMES,
        biases={**GATED_BIASES, **dict.fromkeys("qkv", True), "o": False},
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="qwen2",
            model_type="qwen2",
            switched_off=WINDOW_NOT_READ,
            windowed={"use_sliding_window": True, "max_window_layers": 0},
            notes=(
                "a window as llama.cpp computes it (not read; warned where it binds) or, with "
                '``gguf_window="file"``, on every layer'
            ),
        ),
    )
)
