"""GPT-2: Pre-LayerNorm decoder, causal multi-head attention with biases, the fused QKV in
transposed Conv1D weights (``c_attn`` = [W_q | W_k | W_v], stored (in, 3d)), GELU-tanh MLP,
learned absolute positions, head tied to the embeddings by default. GGUF: llama.cpp's
``gpt2`` files, whose converter stored the Conv1D weights transposed, (out, in): transposed
back on reading."""

from __future__ import annotations

from tpde.pretrained.families.base import (
    ALL_BIASES,
    REQUIRED,
    SCORE_HEAD,
    Family,
    GGUFMap,
    register,
)

__all__ = ["GPT2", "GPT_ALIASES", "GPT_KEYS", "GPT_NAMES"]

#: Role → weight name of GPT-2's layout (GPT-BigCode keeps it, with nn.Linear weights).
GPT_NAMES = {
    "embed": "transformer.wte",
    "positions": "transformer.wpe",
    "final_norm": "transformer.ln_f",
    "head": "lm_head",
    "attn_norm": "transformer.h.{l}.ln_1",
    "qkv": "transformer.h.{l}.attn.c_attn",
    "o": "transformer.h.{l}.attn.c_proj",
    "mlp_norm": "transformer.h.{l}.ln_2",
    "fc1": "transformer.h.{l}.mlp.c_fc",
    "fc2": "transformer.h.{l}.mlp.c_proj",
}

#: GPT-2's config keys, which GPT-J shares (GPT-J adds rotary_dim and unties the head).
GPT_KEYS = {
    "hidden": ("n_embd", REQUIRED),
    "layers": ("n_layer", REQUIRED),
    "heads": ("n_head", REQUIRED),
    "kv_heads": ("n_head", REQUIRED),
    "head_dim": (None, "=hidden/heads"),  # transformers: always d/H (no head_dim key)
    "mlp_hidden": ("n_inner", "=4*hidden"),
    "vocab": ("vocab_size", REQUIRED),
    "context": ("n_positions", REQUIRED),
    "norm_eps": ("layer_norm_epsilon", 1e-5),
    "activation": ("activation_function", "gelu_new"),
}

#: transformers' attribute_map of GPT-2 and GPT-J: these names, where config.json holds
#: them, set the keys they stand for.
GPT_ALIASES = {
    "hidden_size": "n_embd",
    "max_position_embeddings": "n_positions",
    "num_attention_heads": "n_head",
    "num_hidden_layers": "n_layer",
}

GPT2 = register(
    Family(
        family="gpt2",
        summary=(
            "causal MHA with biases, fused QKV in transposed Conv1D weights; GELU-tanh MLP; "
            "learned absolute positions"
        ),
        model_types=("gpt2",),
        keys={**GPT_KEYS, "tied": ("tie_word_embeddings", True)},
        honoured={
            "scale_attn_weights": (True,),
            "scale_attn_by_inverse_layer_idx": (False,),
            "add_cross_attention": (False,),
        },
        names=GPT_NAMES,
        biases={**ALL_BIASES, "qkv": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=False,
        causal=True,
        conv1d=True,
        aliases=GPT_ALIASES,
        irrelevant={
            "reorder_and_upcast_attn": "the scores computed in float32 (their precision, not "
            "their values)",
            **dict.fromkeys(
                (
                    "summary_type",
                    "summary_use_proj",
                    "summary_activation",
                    "summary_proj_to_labels",
                ),
                "GPT2DoubleHeadsModel's multiple-choice head, which tpde does not read",
            ),
        },
        buffers=(".attn.bias", ".attn.masked_bias"),
        facts={"position_offset": 0, "fused_qkv": "c_attn = [W_q | W_k | W_v] (in, 3d)"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="gpt2",
            model_type="gpt2",
            transposed=True,
            notes=("Conv1D weights transposed back to (in, out)"),
        ),
    )
)
