"""OLMo (v1): a Pre-LayerNorm decoder like llama whose LayerNorms have no parameters
(γ = 1, b = 0, ε = 1e-5 fixed: no config key holds it), with ``clip_qkv`` c clamping every
coordinate of the query, key and value projections to [−c, c] before the rotation
(:class:`~tpde.fields.GroupedQueryAttention`'s ``clip``)."""

from __future__ import annotations

from tpde.pretrained.families.base import GATED_BIASES, SCORE_HEAD, Family, register
from tpde.pretrained.families.llama import LLAMA_KEYS, LLAMA_NAMES

__all__ = ["OLMO"]

OLMO = register(
    Family(
        family="olmo",
        summary=("as llama; parameter-free LayerNorm (γ = 1, b = 0); clip_qkv"),
        model_types=("olmo",),
        keys={
            **{k: v for k, v in LLAMA_KEYS.items() if k != "norm_eps"},
            "activation": ("hidden_act", "silu"),
            "clip_qkv": ("clip_qkv", None),
        },
        honoured={},
        names=LLAMA_NAMES,
        biases=GATED_BIASES,
        norm="layernorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        norm_parts={"*": ()},
        facts={
            "rope_style": "half",
            "norm_eps": 1e-5,
            "norms": "LayerNorm without parameters (γ = 1, b = 0), ε = 1e-5",
        },
        classifiers=SCORE_HEAD,
    )
)
