"""Entries of the parallel-block families (GPT-NeoX/Pythia, Phi, GPT-J) and ALBERT, for
:data:`tpde.pretrained.architectures.ARCHITECTURES`."""

from __future__ import annotations

from tpde.pretrained._architecture import (
    _ALL_BIASES,
    _BERT_HONOURED,
    _BERT_KEYS,
    _ENCODER_BIASES,
    _GPT_KEYS,
    _SCORE_HEAD,
    REQUIRED,
    Architecture,
)

# ---------------------------------------------------------------------- parallel blocks
_NEOX = "gpt_neox.layers.{l}."
_PHI = "model.layers.{l}."
_GPTJ = "transformer.h.{l}."
_PARALLEL_HONOURED: dict = {}

_NEOX_KEYS = {
    **_BERT_KEYS,
    "norm_eps": ("layer_norm_eps", 1e-5),
    "rope_base": ("rotary_emb_base", 10000.0),
    "rotary": ("rotary_pct", 0.25),
    "activation": ("hidden_act", "gelu"),
    "tied": ("tie_word_embeddings", False),
}
del _NEOX_KEYS["type_vocab"], _NEOX_KEYS["pad"]

PARALLEL_BLOCKS: tuple[Architecture, ...] = (
    Architecture(
        family="gpt_neox",
        model_types=("gpt_neox",),
        keys=_NEOX_KEYS,
        honoured=_PARALLEL_HONOURED,
        names={
            "embed": "gpt_neox.embed_in",
            "final_norm": "gpt_neox.final_layer_norm",
            "head": "embed_out",
            "attn_norm": _NEOX + "input_layernorm",
            "qkv": _NEOX + "attention.query_key_value",
            "o": _NEOX + "attention.dense",
            "mlp_norm": _NEOX + "post_attention_layernorm",
            "fc1": _NEOX + "mlp.dense_h_to_4h",
            "fc2": _NEOX + "mlp.dense_4h_to_h",
        },
        biases={
            "qkv": ("attention_bias", True),
            "o": ("attention_bias", True),
            "fc1": True,
            "fc2": True,
        },
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        buffers=(".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq"),
        parallel="use_parallel_residual",
        facts={
            "rope_style": "half",
            "rotary": "fraction",
            "qkv_layout": "per_head",  # rows of head h: [q_h | k_h | v_h]
        },
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="phi",
        model_types=("phi",),
        keys={
            **_NEOX_KEYS,
            "kv_heads": ("num_key_value_heads", "=heads"),
            "rope_base": ("rope_theta", 10000.0),
            "rotary": ("partial_rotary_factor", 0.5),
            "activation": ("hidden_act", "gelu_new"),
        },
        honoured=_PARALLEL_HONOURED,
        names={
            "embed": "model.embed_tokens",
            "final_norm": "model.final_layernorm",
            "head": "lm_head",
            "attn_norm": _PHI + "input_layernorm",
            "q": _PHI + "self_attn.q_proj",
            "k": _PHI + "self_attn.k_proj",
            "v": _PHI + "self_attn.v_proj",
            "o": _PHI + "self_attn.dense",
            "q_norm": _PHI + "self_attn.q_layernorm",
            "k_norm": _PHI + "self_attn.k_layernorm",
            "fc1": _PHI + "mlp.fc1",
            "fc2": _PHI + "mlp.fc2",
        },
        biases={**_ALL_BIASES, "head": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        parallel=True,
        optional={"q_norm": "qk_layernorm", "k_norm": "qk_layernorm"},
        facts={
            "rope_style": "half",
            "rotary": "fraction",
            "norms": "one, shared",
            "qk_norm": "qk_layernorm: per-head LayerNorm (eps layer_norm_eps) before the rotary",
        },
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="gptj",
        model_types=("gptj",),
        keys={
            **_GPT_KEYS,
            "rotary": ("rotary_dim", None),
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
        facts={
            "rope_style": "interleaved",
            "rotary": "dims",  # rotary_dim coordinates of each head; all when null
            "rope_base": 10000.0,  # fixed in GPT-J's code, no config key
            "norms": "one, shared",
        },
        classifiers=_SCORE_HEAD,
    ),
)


# ---------------------------------------------------------------------- ALBERT
_ALBERT = "encoder.albert_layer_groups.{g}.albert_layers.{j}."

ALBERT = Architecture(
    family="albert",
    model_types=("albert",),
    keys={
        **_BERT_KEYS,
        "embedding_size": ("embedding_size", REQUIRED),
        "activation": ("hidden_act", "gelu_new"),
        "tied": ("tie_word_embeddings", True),
    },
    honoured=_BERT_HONOURED,
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
    biases={**_ENCODER_BIASES, "embed_map": True},
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
        "embedding": "x₀ = W_map · LN(E[id] + P[p] + T[type]) + b_map, E of width embedding_size",
        "layers": "G = num_hidden_groups groups of inner_group_num Post-LN blocks; layer i "
        "applies group int(i / (L / G)) (by default one shared layer, L times)",
        "heads": "pooler tanh(W x₀ + b); classifier on the pooled token "
        "(AlbertForSequenceClassification)",
    },
)
