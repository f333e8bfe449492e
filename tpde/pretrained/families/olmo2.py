"""OLMo-2: an output-norm decoder x ← x + N₂(f(x)) on each sublayer (no norm before it),
a QK-RMSNorm over the whole projection (H·d_h), otherwise as llama. GGUF: llama.cpp's
``olmo2`` files (rotary rows not interleaved); one with a sliding window that cuts within
the file's context is refused: llama.cpp's converter writes OLMo-3's as olmo2 and its
``load_hparams`` (LLM_ARCH_OLMO2) reads it as OLMo-3's pattern (``set_swa_pattern(4)``: 3
local : 1 global layers; later, ``llama_model_olmo2::load_arch_hparams`` in
``src/models/olmo2.cpp``, a period from ``attention.sliding_window_pattern``, default 4, and
the local layers' RoPE unscaled), which Hugging Face's Olmo2, and so this family, has no key
for (an OLMo-3 family would read it: one reading, llama.cpp's and Olmo3Config's)."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    GATED_BIASES,
    SCORE_HEAD,
    Family,
    GGUFMap,
    register,
)
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["OLMO2"]

OLMO2 = register(
    Family(
        family="olmo2",
        model_types=("olmo2",),
        keys={**LLAMA_KEYS, "norm_eps": ("rms_norm_eps", 1e-5)},
        honoured={**LLAMA_HONOURED, "clip_qkv": (None,)},
        names={
            **{k: v for k, v in LLAMA_NAMES.items() if k not in ("attn_norm", "mlp_norm")},
            "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
            "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="output",
        mlp="swiglu",
        rotary=True,
        causal=True,
        qk_norm_whole=True,
        facts={"rope_style": "half", "qk_norm": "RMSNorm over the whole projection"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="olmo2",
            model_type="olmo2",
            # llama_model::load_hparams, LLM_ARCH_OLMO2 (src/llama-model.cpp)
            unread={
                "attention.sliding_window": "reads as OLMo-3's pattern for olmo2 files (its "
                "load_hparams: a window > 0 found, swa_type STANDARD and set_swa_pattern(4): "
                "layers l with l mod 4 < 3 local, every 4th global)"
            },
        ),
    )
)
