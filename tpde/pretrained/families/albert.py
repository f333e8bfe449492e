"""ALBERT: as BERT, ONE shared Post-LN layer applied L times (an autonomous field), or G
groups of k blocks (layer i applies group ⌊i/(L/G)⌋); embeddings of width E mapped to d;
the masked-LM head, pooler and classifier (Lan et al., arXiv:1909.11942)."""

from __future__ import annotations

from tpde.pretrained.families.base import ENCODER_BIASES, REQUIRED, Family, register
from tpde.pretrained.families.bert import BERT_HONOURED, BERT_KEYS

__all__ = ["ALBERT"]

_ALBERT = "encoder.albert_layer_groups.{g}.albert_layers.{j}."

ALBERT = register(
    Family(
        family="albert",
        summary=(
            "as bert, ONE shared layer applied L times (autonomous), or G groups of k blocks "
            "(layer i: group ⌊i/(L/G)⌋); embeddings of width E mapped to d; MLM head, pooler, "
            "classifier"
        ),
        model_types=("albert",),
        keys={
            **BERT_KEYS,
            "embedding_size": ("embedding_size", REQUIRED),
            "activation": ("hidden_act", "gelu_new"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured=BERT_HONOURED,
        names={
            "embed": "embeddings.word_embeddings",
            "positions": "embeddings.position_embeddings",
            "token_types": "embeddings.token_type_embeddings",
            "embed_norm": "embeddings.LayerNorm",
            "embed_map": "encoder.embedding_hidden_mapping_in",
            "q": _ALBERT + "attention.query",
            "k": _ALBERT + "attention.key",
            "v": _ALBERT + "attention.value",
            "o": _ALBERT + "attention.dense",
            "attn_norm": _ALBERT + "attention.LayerNorm",
            "fc1": _ALBERT + "ffn",
            "fc2": _ALBERT + "ffn_output",
            "mlp_norm": _ALBERT + "full_layer_layer_norm",
        },
        biases={**ENCODER_BIASES, "embed_map": True},
        prefixes=("", "albert."),
        ignored=("sop_classifier.", "classifier.", "qa_outputs."),
        buffers=("embeddings.position_ids",),
        norm="layernorm",
        placement="post",
        mlp="mlp",
        rotary=False,
        causal=False,
        layer_groups=("num_hidden_groups", "inner_group_num"),
        pooler="pooler",
        classifiers=({"classifier": "classifier"},),
        mlm_heads=(
            {
                "mlm_dense": "predictions.dense",
                "mlm_norm": "predictions.LayerNorm",
                "mlm_bias": "predictions.bias",
                "head": "predictions.decoder",
                "ignored": ("predictions.decoder.bias",),
                "activation": None,
            },
        ),
        facts={
            "position_offset": 0,
            "embedding": "x₀ = W_map · LN(E[id] + P[p] + T[type]) + b_map, E of width "
            "embedding_size",
            "layers": "G = num_hidden_groups groups of inner_group_num Post-LN blocks; layer i "
            "applies group int(i / (L / G)) (by default one shared layer, L times)",
            "heads": "pooler tanh(W x₀ + b); classifier on the pooled token "
            "(AlbertForSequenceClassification)",
        },
    )
)
