"""StarCoder2: a Pre-LayerNorm decoder (LayerNorms with biases), causal grouped-query
attention with RoPE ("rotate half") and biases (``use_bias``), a GELU-tanh MLP (``c_fc``,
``c_proj``, biased), a sliding window where ``sliding_window`` says, the head tied by
default.

GGUF: llama.cpp's ``starcoder2`` files (rotary rows not interleaved). llama.cpp's converter
writes no sliding window for them and llama.cpp attends over every position: such a file is
read so (full attention); one with ``starcoder2.attention.sliding_window``, which llama.cpp
does not read but a Hugging Face config would apply, is read as llama.cpp computes it (none,
warned where it cuts within the file's context) or, with ``load(…, gguf_window="file")``, on
every layer (:func:`tpde.pretrained._gguf.switched_off`)."""

from __future__ import annotations

from tpde.pretrained.families.base import SCORE_HEAD, WINDOW_NOT_READ, Family, GGUFMap, register
from tpde.pretrained.families.llama import LLAMA_KEYS

__all__ = ["STARCODER2"]

_LAYER = "model.layers.{l}."

STARCODER2 = register(
    Family(
        family="starcoder2",
        summary=("GQA + RoPE with biases (use_bias); GELU-tanh MLP; sliding window"),
        model_types=("starcoder2",),
        keys={
            **LLAMA_KEYS,
            "kv_heads": ("num_key_value_heads", 2),  # Starcoder2Config's default
            "window": ("sliding_window", None),
            "norm_eps": ("norm_epsilon", 1e-5),
            "activation": ("hidden_act", "gelu_pytorch_tanh"),
            "tied": ("tie_word_embeddings", True),
        },
        honoured={},
        names={
            "embed": "model.embed_tokens",
            "final_norm": "model.norm",
            "head": "lm_head",
            "attn_norm": _LAYER + "input_layernorm",
            "q": _LAYER + "self_attn.q_proj",
            "k": _LAYER + "self_attn.k_proj",
            "v": _LAYER + "self_attn.v_proj",
            "o": _LAYER + "self_attn.o_proj",
            "mlp_norm": _LAYER + "post_attention_layernorm",
            "fc1": _LAYER + "mlp.c_fc",
            "fc2": _LAYER + "mlp.c_proj",
        },
        biases=dict.fromkeys(("q", "k", "v", "o", "fc1", "fc2"), ("use_bias", True)),
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "window": "sliding_window: p_i − p_j < w"},
        classifiers=SCORE_HEAD,
        gguf=GGUFMap(
            architecture="starcoder2",
            model_type="starcoder2",
            switched_off=WINDOW_NOT_READ,
            notes=(
                "a window as llama.cpp computes it (not read; warned where it binds) or, with "
                '``gguf_window="file"``, on every layer'
            ),
        ),
    )
)
