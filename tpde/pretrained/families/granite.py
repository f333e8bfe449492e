r"""Granite (IBM Granite 3): a llama decoder with four multipliers, read as time-scales and
temperatures of the token flow (MATH.md §8):

======================  ====================================  =============================
config key              where                                 reading
======================  ====================================  =============================
embedding_multiplier m  x₀ = m·E[id]                          initial scale; with Pre-RMS
                                                              norms (scale-invariant up to
                                                              ε) the flow from m·x₀ with
                                                              step r is m × the flow from
                                                              x₀ with step r/m: the layers'
                                                              effective time step is r/m
residual_multiplier r   x ← x + r·f(N x) on each sublayer     the time step of each Euler
                                                              step (r folded into the
                                                              output weights: the field
                                                              r·f∘N, stepped with h = 1)
attention_multiplier β  scores β·⟨q, k⟩ (not 1/√d_h)          the inverse temperature of the
                                                              attention softmax, which sets
                                                              how fast tokens cluster
logits_scaling s        logits z/s                            the temperature of the
                                                              next-token distribution
======================  ====================================  =============================

(Granite-3.0-2B: m = 12, r = 0.22, β = 1/128, s = 8.) ``mlp_bias`` is refused (the SwiGLU
field has no biases; no released Granite sets it).
"""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, register
from tpde.pretrained.families.llama import LLAMA_HONOURED, LLAMA_KEYS, LLAMA_NAMES

__all__ = ["GRANITE"]

GRANITE = register(
    Family(
        family="granite",
        summary=(
            "as llama; embedding, residual, attention and logit multipliers (the residual one: a "
            "time-scale)"
        ),
        model_types=("granite",),
        keys={
            **LLAMA_KEYS,
            "embed_scale": ("embedding_multiplier", 1.0),
            "residual_scale": ("residual_multiplier", 1.0),
            "attention_scale": ("attention_multiplier", 1.0),
            "logit_scale": ("logits_scaling", 1.0),
        },
        honoured=LLAMA_HONOURED,
        names=LLAMA_NAMES,
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "logit_scale": "divide"},
        classifiers=SCORE_HEAD,
    )
)
