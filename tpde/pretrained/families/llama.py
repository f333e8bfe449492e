"""Llama: Pre-RMSNorm decoders, causal grouped-query attention with RoPE ("rotate half"),
SwiGLU MLP, full attention (a ``sliding_window`` key, which transformers' Llama ignores, is
ignored here too: :mod:`~tpde.pretrained.families.mistral` reads it).

The config keys and weight names here are the ones the other gated decoders start from
(Mistral, Qwen2/3, Gemma-2/3, OLMo-2 import them; those with a sliding window add its
key). GGUF: llama.cpp's ``llama`` files (Mistral's too), whose ``attn_q``/``attn_k`` rows
(weights and biases) the converter interleaved per head (un-permuted on reading); a Llama-3
file's ``rope_freqs.weight`` (the converter's form of the "llama3" RoPE scaling) is read as
its per-pair frequency divisors. llama.cpp reads no sliding window of a llama file (it
attends over every position; its converter writes none, Mistral's included): a file with
``llama.attention.sliding_window`` that cuts within its context has two readings, read as
llama.cpp computes it (warned) or, with ``load(…, gguf_window="file")``, as a Mistral
checkpoint with that window (the GGUF map's ``windowed``;
:func:`tpde.pretrained._gguf.switched_off`); 0, or one of at least ``context_length``, is
none.
"""

from __future__ import annotations

from tpde.pretrained.families.base import (
    GATED_BIASES,
    REQUIRED,
    SCORE_HEAD,
    WINDOW_NOT_READ,
    Family,
    GGUFMap,
    register,
)

__all__ = ["LLAMA", "LLAMA_HONOURED", "LLAMA_IRRELEVANT", "LLAMA_KEYS", "LLAMA_NAMES"]

#: Config values of the llama-like families that tpde implements (any other is refused).
LLAMA_HONOURED = {
    "pretraining_tp": (1,),
    "mlp_bias": (False,),
    "hidden_act": ("silu",),
}

#: Config keys of the llama-like families that play no part (beyond COMMON_IRRELEVANT).
LLAMA_IRRELEVANT = {
    "sliding_window": "not a LlamaConfig key: transformers' Llama attends to every earlier "
    "token whatever the file says (full attention, as here)",
}

#: Canonical hyper-parameter → (config.json key, default) of the llama-like decoders.
LLAMA_KEYS = {
    "hidden": ("hidden_size", REQUIRED),
    "layers": ("num_hidden_layers", REQUIRED),
    "heads": ("num_attention_heads", REQUIRED),
    "kv_heads": ("num_key_value_heads", "=heads"),
    "head_dim": ("head_dim", "=hidden/heads"),
    "mlp_hidden": ("intermediate_size", REQUIRED),
    "vocab": ("vocab_size", REQUIRED),
    "context": ("max_position_embeddings", REQUIRED),
    "norm_eps": ("rms_norm_eps", 1e-6),
    "rope_base": ("rope_theta", 10000.0),
    "tied": ("tie_word_embeddings", False),
}

#: Role → weight name of the llama-like decoders (``{l}``: the layer).
LLAMA_NAMES = {
    "embed": "model.embed_tokens",
    "final_norm": "model.norm",
    "head": "lm_head",
    "attn_norm": "model.layers.{l}.input_layernorm",
    "q": "model.layers.{l}.self_attn.q_proj",
    "k": "model.layers.{l}.self_attn.k_proj",
    "v": "model.layers.{l}.self_attn.v_proj",
    "o": "model.layers.{l}.self_attn.o_proj",
    "mlp_norm": "model.layers.{l}.post_attention_layernorm",
    "gate": "model.layers.{l}.mlp.gate_proj",
    "up": "model.layers.{l}.mlp.up_proj",
    "down": "model.layers.{l}.mlp.down_proj",
}

LLAMA = register(
    Family(
        family="llama",
        summary=("causal GQA + RoPE (half); SwiGLU"),
        model_types=("llama",),
        keys=LLAMA_KEYS,
        honoured=LLAMA_HONOURED,
        names=LLAMA_NAMES,
        biases=GATED_BIASES,
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        irrelevant=LLAMA_IRRELEVANT,
        facts={"rope_style": "half"},
        classifiers=SCORE_HEAD,
        # Llama-3.1's RoPE scaling (tpde.fields.rope_scaling_from_config), its window of
        # original positions below a test's tokens so that both bands and the blend count
        random_config={
            "rope_parameters": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8,
            },
        },
        gguf=GGUFMap(
            architecture="llama",
            model_type="llama",
            permuted={"q": "heads", "k": "kv_heads"},
            rope_freqs=True,
            switched_off=WINDOW_NOT_READ,
            windowed={"model_type": "mistral"},
            notes=(
                "``attn_q``/``attn_k`` rows un-permuted; Mistral's files (llama.cpp writes them "
                "as llama, without a window); a Llama-3 ``rope_freqs.weight`` read as its "
                "per-pair RoPE divisors; a window as llama.cpp computes it (not read; warned "
                'where it binds) or, with ``gguf_window="file"``, as Mistral\'s'
            ),
        ),
    )
)
