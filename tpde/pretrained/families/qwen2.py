"""Qwen2: as llama, with biases on Q, K, V (none on O); every layer global (a config with
``use_sliding_window: true`` is refused). GGUF: llama.cpp's ``qwen2`` files (rotary rows as
the checkpoint's: the converter does not interleave them)."""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["NO_WINDOW_HONOURED", "NO_WINDOW_IRRELEVANT", "QWEN2"]

#: Config values of the Qwen families that keep every layer global (no sliding window).
NO_WINDOW_HONOURED = {
    **LLAMA_HONOURED,
    "use_sliding_window": (False,),
    "layer_types": ("full_attention",),
}

#: What the Qwen families' keys of a sliding window do when use_sliding_window is false.
NO_WINDOW_IRRELEVANT = {
    "max_window_layers": "read by transformers only with use_sliding_window, which tpde refuses",
}

QWEN2 = register(
    Family(
        family="qwen2",
        model_types=("qwen2",),
        keys={**LLAMA_KEYS, "window": ("sliding_window", None)},
        honoured=NO_WINDOW_HONOURED,
        irrelevant=NO_WINDOW_IRRELEVANT,
        names=LLAMA_NAMES,
        biases={**GATED_BIASES, **dict.fromkeys("qkv", True), "o": False},
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "no_window": True},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(architecture="qwen2", model_type="qwen2"),
    )
)
