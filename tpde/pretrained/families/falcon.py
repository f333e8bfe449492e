"""Falcon: a Pre-LayerNorm decoder, GELU MLP (``ffn_hidden_size``, 4d by default), biases as
``bias`` says, the head tied by default; its config picks one of these layouts (transformers'
``FalconAttention`` and ``FalconDecoderLayer``):

- ``new_decoder_architecture`` (Falcon-40B/180B): grouped-query attention with
  ``num_kv_heads`` key/value heads, the fused QKV stored group by group ([q_{g,1} … q_{g,G};
  k_g; v_g]); a parallel block x + Attn(N₁x) + F(N₂x) with two norms ``ln_attn``, ``ln_mlp``
  (one, ``input_layernorm``, when ``num_ln_in_parallel_attn`` is 1);
- ``multi_query`` (Falcon-7B): one key/value head, [W_q; W_k; W_v]; a parallel block with one
  norm (``parallel_attn``, default) or a sequential Pre-LN block;
- neither: H key/value heads stored head by head ([q_h; k_h; v_h]).

Positions: RoPE ("rotate half", ``rope_theta``), or with ``alibi`` ALiBi added before the
score scaling, (q·k + m_h p_j)/√d_h: slopes m_h/√d_h (transformers rounds m_h p_j to
bfloat16, exact for H a power of two and positions below 256). Older configs name the width
``n_embed`` (where present it wins, as in ``FalconConfig``).

GGUF: llama.cpp's ``falcon`` files. llama.cpp reads one model of them: a parallel block
x + Attn(N_a x) + F(N_m x) with N_a = ``attn_norm_2`` (``ln_attn``) where the file holds it,
else the one norm ``attn_norm``; H_kv = ``head_count_kv`` key/value heads; RoPE over whole
heads (base 10⁴ where the file has no rope.freq_base: the converter writes none); no biases.
Its converter rewrote every layout's fused QKV as the blocks [W_q; W_k; W_v]
(``tensor_data_layout`` "jploski", the one value read) from config.json's ``num_kv_heads``
(1 where it has none: Falcon-7B's multi-query). So a file is read as the grouped layout
(``new_decoder_architecture``, ``num_kv_heads`` = H_kv, two norms with ``attn_norm_2``, else
one), the QKV re-interleaved group by group — for Falcon-7B's multi-query and the per-head
layout the same computation as their own. What llama.cpp has not: ALiBi (the files carry no
flag of it; Falcon-RW's carry biases, refused by their names), a sequential block
(``post_attention_layernorm`` has no falcon name in llama.cpp's table: its converter stops,
and a file holding such a tensor is refused as unexpected). llama.cpp evaluates GELU in its
tanh form; tpde, as for every family, the family's exact GELU."""

from __future__ import annotations

import dataclasses

from tpde._validation import checked_integer
from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained.families.base import REQUIRED, SCORE_HEAD, Family, GGUFMap, register
from tpde.pretrained.families.bloom import BLOOM_NAMES

__all__ = ["FALCON"]

_H = "transformer.h.{l}."
#: Falcon's ALiBi: (q·k + m_h p_j)/√d_h, m_h p_j formed in bfloat16 (``build_alibi_tensor``).
_ALIBI = {"rounding": "bfloat16", "scaled": True}


def _flag(raw: dict, key: str, default: bool) -> bool:
    value = raw.get(key, default)
    value = default if value is None else value
    if not isinstance(value, bool):
        raise LoadError(f"config.json: {key} must be true or false; received {value!r}.")
    return value


def _count(raw: dict, key: str) -> int | None:
    """config.json's ``key``, an integer ≥ 1 or null (absent: null), else a LoadError naming
    it — checked in every layout, as transformers' ``FalconConfig`` types it."""
    value = raw.get(key)
    return None if value is None else checked_integer(value, f"config.json: {key}", LoadError)


def _variant(raw: dict) -> Family:
    """The entry for one of the layouts (module notes); a combination transformers cannot
    run is refused naming its keys."""
    new, multi = _flag(raw, "new_decoder_architecture", False), _flag(raw, "multi_query", True)
    parallel, alibi = _flag(raw, "parallel_attn", True), _flag(raw, "alibi", False)
    norms, kv = _count(raw, "num_ln_in_parallel_attn"), _count(raw, "num_kv_heads")
    norms = 2 if norms is None and new else norms
    keys, names, facts = dict(FALCON.keys), dict(FALCON.names), dict(FALCON.facts)
    if new and not parallel:
        raise LoadError(
            "config.json: new_decoder_architecture = true with parallel_attn = false: "
            "transformers' Falcon has no norm for that block (it fails); tpde refuses it."
        )
    if parallel and (norms not in (None, 1, 2) or (norms == 2 and not new)):
        raise LoadError(
            f"config.json: num_ln_in_parallel_attn = {norms!r} with new_decoder_architecture = "
            f"{str(new).lower()}: transformers' Falcon reads 2 (ln_attn, ln_mlp) with the new "
            "architecture and 1 (input_layernorm) otherwise."
        )
    if new:
        keys["kv_heads"], facts["qkv_layout"] = ("num_kv_heads", "=heads"), "per_group"
    elif multi:
        keys["kv_heads"] = (None, 1)
    else:
        if kv is not None and kv != raw.get("num_attention_heads"):
            raise LoadError(
                f"config.json: num_kv_heads = {kv!r} differs from num_attention_heads = "
                f"{raw.get('num_attention_heads')!r} without new_decoder_architecture or "
                "multi_query: that fused QKV holds one key/value head per query head."
            )
        facts["qkv_layout"] = "per_head"
    if parallel and norms == 2:
        names["attn_norm"], names["mlp_norm"] = _H + "ln_attn", _H + "ln_mlp"
    elif parallel:
        del names["mlp_norm"]  # one norm, shared
    positions = {"rotary": not alibi, "alibi": _ALIBI if alibi else None}
    return dataclasses.replace(
        FALCON, keys=keys, names=names, facts=facts, parallel=parallel, variant=None, **positions
    )


FALCON = register(
    Family(
        family="falcon",
        summary=(
            "grouped (new_decoder_architecture), multi-query or per-head fused QKV; one or two "
            "norms; RoPE, or ALiBi (bfloat16, before the 1/√d_h scale); parallel or sequential "
            "blocks (parallel_attn)"
        ),
        model_types=("falcon",),
        keys={
            "hidden": ("hidden_size", REQUIRED),
            "layers": ("num_hidden_layers", REQUIRED),
            "heads": ("num_attention_heads", REQUIRED),
            "kv_heads": ("num_attention_heads", REQUIRED),
            "head_dim": (None, "=hidden/heads"),
            "mlp_hidden": ("ffn_hidden_size", "=4*hidden"),
            "vocab": ("vocab_size", REQUIRED),
            "context": ("max_position_embeddings", 2048),
            "norm_eps": ("layer_norm_epsilon", 1e-5),
            "rope_base": ("rope_theta", 10000.0),
            "activation": ("activation", "gelu"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured={},
        names={r: t for r, t in BLOOM_NAMES.items() if r != "embed_norm"},
        biases=dict.fromkeys(("qkv", "o", "fc1", "fc2"), ("bias", False)),
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "layouts": "new_decoder_architecture, multi_query, neither"},
        reads=(  # read and checked by _variant, in every layout
            "new_decoder_architecture",
            "multi_query",
            "parallel_attn",
            "alibi",
            "num_kv_heads",
            "num_ln_in_parallel_attn",
        ),
        aliases={"n_embed": "hidden_size"},  # older configs; where present it wins
        irrelevant={
            "num_key_value_heads": "written by FalconConfig from the layout keys (num_kv_heads, "
            "or 1 with multi_query); its modeling code reads those, as tpde does",
        },
        classifiers=SCORE_HEAD,
        variant=_variant,
        # the grouped layout (GQA, two norms, per-group fused QKV): the richest of the three
        random_config={"new_decoder_architecture": True},
        gguf=GGUFMap(
            architecture="falcon",
            model_type="falcon",
            keys={"attention.head_count_kv": "num_kv_heads"},
            qkv_blocks=True,
            fixed=dict(new_decoder_architecture=True, parallel_attn=True, alibi=False, bias=False),
            flags={"num_ln_in_parallel_attn": ("blk.0.attn_norm_2.weight", 2, 1)},
            literal={"tensor_data_layout": "jploski"},
            notes=(
                "every layout read as llama.cpp's one: the grouped layout, H_kv from "
                "``head_count_kv``, the fused QKV re-interleaved group by group, two norms where "
                "``attn_norm_2`` is held; no biases, no ALiBi"
            ),
        ),
    )
)
