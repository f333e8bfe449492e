"""GPT-BigCode (SantaCoder, StarCoder 1): GPT-2's block (Pre-LayerNorm, biases everywhere,
GELU-tanh MLP, learned absolute positions, head tied by default) with multi-query attention
(``multi_query``, default true): one key/value head shared by all H query heads, the fused
``c_attn`` = [W_q; W_k; W_v] of H·d_h + 2·d_h rows; without it H key/value heads, ``c_attn``
stored head by head [q_h; k_h; v_h]. Linear weights stored (out, in) (nn.Linear, not
GPT-2's Conv1D). ``hidden_size``, ``num_hidden_layers``, … stand for ``n_embd``, ``n_layer``,
… as in GPT-2 (``GPTBigCodeConfig.attribute_map``)."""

from __future__ import annotations

import dataclasses

from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained.families.base import ALL_BIASES, SCORE_HEAD, Family, register
from tpde.pretrained.families.gpt2 import GPT_ALIASES, GPT_KEYS, GPT_NAMES

__all__ = ["GPT_BIGCODE"]


def _variant(raw: dict) -> Family:
    """Multi-query (one key/value head, [W_q; W_k; W_v]) or multi-head (per-head rows)."""
    multi = raw.get("multi_query", True)
    if not isinstance(multi, bool):
        raise LoadError(f"config.json: multi_query must be true or false; received {multi!r}.")
    if not multi:
        facts = {**GPT_BIGCODE.facts, "qkv_layout": "per_head"}
        return dataclasses.replace(GPT_BIGCODE, facts=facts, variant=None)
    keys = {**GPT_BIGCODE.keys, "kv_heads": (None, 1)}  # multi_query: one key/value head
    return dataclasses.replace(GPT_BIGCODE, keys=keys, variant=None)


GPT_BIGCODE = register(
    Family(
        family="gpt_bigcode",
        summary=(
            "as gpt2 (nn.Linear weights); multi_query: one key/value head, [W_q; W_k; W_v]; else "
            "fused per head"
        ),
        model_types=("gpt_bigcode",),
        keys={
            **GPT_KEYS,
            "activation": ("activation_function", "gelu_pytorch_tanh"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured={"scale_attn_weights": (True,), "add_cross_attention": (False,)},
        names=GPT_NAMES,
        biases={**ALL_BIASES, "qkv": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=False,
        causal=True,
        buffers=(".attn.bias", ".attn.masked_bias"),
        facts={
            "position_offset": 0,
            "fused_qkv": "multi_query: c_attn = [W_q; W_k; W_v] (H·d_h + 2·d_h rows), one "
            "key/value head; else head by head [q_h; k_h; v_h]",
        },
        reads=("multi_query",),  # read and checked by _variant
        aliases=GPT_ALIASES,
        irrelevant={
            **dict.fromkeys(
                ("attention_softmax_in_fp32", "scale_attention_softmax_in_fp32"),
                "the precision of the softmax (transformers' attention takes it in float32 "
                "whatever they say): rounding, not values",
            ),
            "num_key_value_heads": "written by GPTBigCodeConfig from multi_query (1 or n_head); "
            "its modeling code reads multi_query, as tpde does",
        },
        classifiers=SCORE_HEAD,
        variant=_variant,
    )
)
