"""BLOOM: a Pre-LayerNorm decoder with ALiBi positions and no position embedding; the token
embeddings LayerNormed (``word_embeddings_layernorm``); causal multi-head attention with
biases, the fused QKV stored head by head ([q_h; k_h; v_h]); a GELU-tanh MLP of width 4d
with √(2/π) written 0.79788456 (BLOOM's ``bloom_gelu_forward``, activation
"gelu-tanh-bloom"); the head tied by default.

ALiBi (:class:`~tpde.fields.ALiBi`): head h's score of key j is q·k/√d_h + m_h p_j with the
paper's slopes m_h (2^{−8h/H} for H a power of two), the bias m_h p_j formed in float32
as BLOOM's ``build_alibi_tensor`` forms it (``ALiBi(rounding="float32")``: the exact slopes
differ from those by up to 1e-8 relative where H is not a power of two). The context is
``seq_length`` (the training length; 2048 where the file omits it): ALiBi has no position
table, but tpde refuses longer sequences as for every model.

``pretraining_tp`` T and ``slow_but_exact``: with T > 1 and ``slow_but_exact`` true,
transformers' BLOOM forms the attention's output map and the MLP's ``dense_4h_to_h`` as
Σ_t W[:, slice t] x[slice t] over T slices *without their biases* (``F.linear`` of the
weight slices only): another function, refused naming both keys. Otherwise (T = 1, or
``slow_but_exact`` false, as in every released BLOOM) they play no part. Older configs name
the width ``n_embed`` (where present it wins, as in ``BloomConfig``), and
``num_hidden_layers`` and ``num_attention_heads`` stand for ``n_layer`` and ``n_head``
(``BloomConfig.attribute_map``)."""

from __future__ import annotations

import dataclasses

from tpde._validation import checked_integer
from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained.families.base import ALL_BIASES, REQUIRED, SCORE_HEAD, Family, register

__all__ = ["BLOOM", "BLOOM_NAMES"]

_H = "transformer.h.{l}."

#: Role → weight name of BLOOM's layout (Falcon's, without the embedding LayerNorm).
BLOOM_NAMES = {
    "embed": "transformer.word_embeddings",
    "embed_norm": "transformer.word_embeddings_layernorm",
    "final_norm": "transformer.ln_f",
    "head": "lm_head",
    "attn_norm": _H + "input_layernorm",
    "qkv": _H + "self_attention.query_key_value",
    "o": _H + "self_attention.dense",
    "mlp_norm": _H + "post_attention_layernorm",
    "fc1": _H + "mlp.dense_h_to_4h",
    "fc2": _H + "mlp.dense_4h_to_h",
}


def _variant(raw: dict) -> Family:
    """The entry for ``raw``: BLOOM's, once ``pretraining_tp`` and ``slow_but_exact`` are
    checked (module notes); T > 1 with ``slow_but_exact`` is refused naming both."""
    tp = checked_integer(raw.get("pretraining_tp", 1), "config.json: pretraining_tp", LoadError)
    exact = raw.get("slow_but_exact", False)
    if not isinstance(exact, bool):
        raise LoadError(f"config.json: slow_but_exact must be true or false; received {exact!r}.")
    if tp > 1 and exact:
        raise LoadError(
            f"config.json: pretraining_tp = {tp} with slow_but_exact = true: transformers' "
            "BLOOM then sums the attention output and dense_4h_to_h over the slices without "
            "their biases, which tpde does not implement; set slow_but_exact to false (the "
            "released BLOOM checkpoints do)."
        )
    return dataclasses.replace(BLOOM, variant=None)


BLOOM = register(
    Family(
        family="bloom",
        summary=(
            "ALiBi (bias formed in float32), no position table; embedding LayerNorm; fused QKV "
            "per head; BLOOM's GELU-tanh"
        ),
        model_types=("bloom",),
        keys={
            "hidden": ("hidden_size", 64),
            "layers": ("n_layer", 2),
            "heads": ("n_head", 8),
            "kv_heads": ("n_head", 8),
            "head_dim": (None, "=hidden/heads"),
            "mlp_hidden": (None, "=4*hidden"),
            "vocab": ("vocab_size", REQUIRED),
            "context": ("seq_length", 2048),
            "norm_eps": ("layer_norm_epsilon", 1e-5),
            "activation": (None, "bloom_gelu"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured={"apply_residual_connection_post_layernorm": (False,)},
        names=BLOOM_NAMES,
        biases={**ALL_BIASES, "qkv": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=False,
        causal=True,
        alibi={"rounding": "float32"},
        facts={
            "qkv_layout": "per_head",  # rows of head h: [q_h | k_h | v_h]
            "alibi": "score q·k/√d_h + m_h p_j (the paper's slopes)",
        },
        reads=("pretraining_tp", "slow_but_exact"),  # checked by _variant
        aliases={
            "n_embed": "hidden_size",
            "num_hidden_layers": "n_layer",
            "num_attention_heads": "n_head",
        },
        classifiers=SCORE_HEAD,
        variant=_variant,
    )
)
