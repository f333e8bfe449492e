"""Mistral: as llama (Pre-RMSNorm, GQA with RoPE "rotate half", SwiGLU) with a sliding
window (p_i − p_j < w) on every layer and no attention biases.

transformers' ``MistralConfig`` has no ``attention_bias``, ``mlp_bias`` nor
``pretraining_tp``, and its attention has no bias whatever config.json says: those keys play
no part here (tpde ignores them as transformers does). ``sliding_window`` defaults to 4096
when config.json lacks it (``MistralConfig``'s default); an explicit null is full attention.
GGUF: llama.cpp writes Mistral files as ``llama`` (read by the llama entry, without a window,
as llama.cpp computes them; a file holding ``llama.attention.sliding_window`` is read as this
family with ``load(…, gguf_window="file")``).
"""

from __future__ import annotations

from tpde.pretrained.families.base import SCORE_HEAD, Family, register
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["MISTRAL"]

MISTRAL = register(
    Family(
        family="mistral",
        summary=("as llama, sliding window, no biases"),
        model_types=("mistral",),
        keys={
            **LLAMA_KEYS,
            "kv_heads": ("num_key_value_heads", 8),  # MistralConfig's default
            "window": ("sliding_window", 4096),
        },
        honoured={"hidden_act": ("silu",)},
        names=LLAMA_NAMES,
        biases=dict.fromkeys(("q", "k", "v", "o", "gate", "up", "down"), False),
        irrelevant={
            "attention_bias": "not a MistralConfig key: transformers' Mistral attention has no "
            "bias whatever the file says",
            "mlp_bias": "not a MistralConfig key: the MLP has no bias",
            "pretraining_tp": "not a MistralConfig key (transformers ignores it)",
        },
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "window": "sliding_window: p_i − p_j < w (4096 if absent)"},
        classifiers=SCORE_HEAD,
    )
)
