"""GPT-J: a parallel block with one shared LayerNorm, interleaved RoPE on ``rotary_dim``
coordinates of each head (base 10⁴, fixed in GPT-J's code), no Q/K/V/O biases, a biased
head."""

from __future__ import annotations

from tpde.pretrained.families.base import SCORE_HEAD, Family, register
from tpde.pretrained.families.gpt2 import GPT_ALIASES, GPT_KEYS

__all__ = ["GPTJ"]

_GPTJ = "transformer.h.{l}."

GPTJ = register(
    Family(
        family="gptj",
        summary=("interleaved RoPE on rotary_dim; one norm; no Q/K/V/O biases; head bias"),
        model_types=("gptj",),
        keys={
            **GPT_KEYS,
            "rotary": ("rotary_dim", 64),
            "tied": ("tie_word_embeddings", False),
        },
        honoured={},
        names={
            "embed": "transformer.wte",
            "final_norm": "transformer.ln_f",
            "head": "lm_head",
            "attn_norm": _GPTJ + "ln_1",
            "q": _GPTJ + "attn.q_proj",
            "k": _GPTJ + "attn.k_proj",
            "v": _GPTJ + "attn.v_proj",
            "o": _GPTJ + "attn.out_proj",
            "fc1": _GPTJ + "mlp.fc_in",
            "fc2": _GPTJ + "mlp.fc_out",
        },
        biases={"fc1": True, "fc2": True, "head": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        buffers=(".attn.bias", ".attn.masked_bias"),
        parallel=True,
        aliases=GPT_ALIASES,
        facts={
            "rope_style": "interleaved",
            "rotary": "dims",  # rotary_dim coordinates of each head; all when null
            "rope_base": 10000.0,  # fixed in GPT-J's code, no config key
            "norms": "one, shared",
        },
        classifiers=SCORE_HEAD,
    )
)
