r"""The architectures :func:`tpde.pretrained.load` knows: one documented entry per family.

An entry says, for one family of Hugging Face checkpoints, everything the general builder
(:mod:`tpde.pretrained._build`) needs and nothing it computes: which ``config.json`` keys it
reads (and their defaults), which keys it refuses unless they hold a value tpde implements,
the names of the weights (templates with ``{l}`` for the layer), which norm, placement,
feed-forward block and positions the layers use, and the facts the files do not carry. A
new family is one entry here (docs: ``ARCHITECTURES``), never a branch in the loader.

=============  ======================  =========  ==========  =====================================
family         model_type              norm       placement   attention, feed-forward, positions
=============  ======================  =========  ==========  =====================================
llama          llama, mistral          RMSNorm    pre         causal GQA + RoPE (half); SwiGLU;
                                                              Mistral's sliding window
qwen2          qwen2                   RMSNorm    pre         as llama, with Q/K/V biases
qwen3          qwen3                   RMSNorm    pre         as llama, per-head QK-RMSNorm
gpt2           gpt2                    LayerNorm  pre         causal MHA with biases, fused QKV in
                                                              transposed Conv1D weights; GELU-tanh
                                                              MLP; learned absolute positions
bert           bert, roberta           LayerNorm  post        bidirectional MHA with biases; GELU
                                                              MLP; learned positions (RoBERTa:
                                                              offset pad + 1) and token types,
                                                              then the embedding LayerNorm;
                                                              the masked-LM head, pooler and
                                                              sequence-classification head
                                                              where present
gpt_neox       gpt_neox                LayerNorm  pre,        fused QKV per head; partial RoPE
                                                  parallel    (rotary_pct); two norms; GELU MLP
phi            phi                     LayerNorm  pre,        partial RoPE; one norm; GELU-tanh
                                                  parallel    MLP; final LayerNorm; head bias;
                                                              qk_layernorm: per-head QK-LayerNorm
gptj           gptj                    LayerNorm  pre,        interleaved RoPE on rotary_dim; one
                                                  parallel    norm; no Q/K/V/O biases; head bias
albert         albert                  LayerNorm  post        as bert, ONE shared layer applied L
                                                              times (autonomous), or G groups of
                                                              k blocks (layer i: group ⌊i/(L/G)⌋);
                                                              embeddings of width E mapped to d;
                                                              MLM head, pooler, classifier
gemma2         gemma2                  RMSNorm    sandwich    GQA + RoPE, query_pre_attn_scalar,
                                                              score soft-cap; GeGLU (tanh); local/
                                                              global layers; √d embedding; final
                                                              logit soft-cap; gains 1 + w
gemma3         gemma3_text             RMSNorm    sandwich    as gemma2 without soft-caps, per-head
                                                              QK-RMSNorm, local RoPE base
olmo2          olmo2                   RMSNorm    output      as llama, QK-RMSNorm over the whole
                                                              projection
=============  ======================  =========  ==========  =====================================

Every layer is the field ``Normalized(attention, N₁) + Normalized(mlp, N₂)`` (MATH.md §8):
its Lie–Trotter step of size 1 with Euler sub-steps is the network's block. A parallel
block (``parallel``: GPT-NeoX, Phi, GPT-J) is ``Sum([Parallel([Normalized(attention, N₁),
Normalized(mlp, N₂)])])``, one part whose Euler step is x + Attn(N₁x) + F(N₂x) (N₂ = N₁
where the block has one norm).

Every decoder (all but bert and albert) reads the ``score`` head of its
``*ForSequenceClassification`` (``_SCORE_HEAD``: W_s N_out(x_L)_{n−1}, the last token, no
bias, no soft-cap); bert and albert read their classifiers on the pooled first token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ACTIVATIONS_HF", "ARCHITECTURES", "Architecture", "architecture_for"]

from tpde.pretrained._architecture import (
    _ALL_BIASES,
    _BERT_HONOURED,
    _BERT_KEYS,
    _BERT_MLM_HEADS,
    _BERT_NAMES,
    _ENCODER_BIASES,
    _GATED_BIASES,
    _GPT_KEYS,
    _LLAMA_KEYS,
    _LLAMA_NAMES,
    _NO_WINDOW_HONOURED,
    _ROPE_HONOURED,
    _SCORE_HEAD,
    ACTIVATIONS_HF,
    Architecture,
)
from tpde.pretrained.families_parallel import ALBERT, PARALLEL_BLOCKS
from tpde.pretrained.families_peri import PERI_LN

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture(
        family="llama",
        model_types=("llama", "mistral"),
        keys=_LLAMA_KEYS,
        honoured=_ROPE_HONOURED,
        names=_LLAMA_NAMES,
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "window": "sliding_window (Mistral): p_i − p_j < w"},
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="qwen2",
        model_types=("qwen2",),
        keys={**_LLAMA_KEYS, "window": ("sliding_window", None)},
        honoured=_NO_WINDOW_HONOURED,
        names=_LLAMA_NAMES,
        biases={**_GATED_BIASES, **dict.fromkeys("qkv", True), "o": False},
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "no_window": True},
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="qwen3",
        model_types=("qwen3",),
        keys=_LLAMA_KEYS,
        honoured=_NO_WINDOW_HONOURED,
        names={
            **_LLAMA_NAMES,
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "qk_norm": "per head, before RoPE", "no_window": True},
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="gpt2",
        model_types=("gpt2",),
        keys={
            **_GPT_KEYS,
            "tied": ("tie_word_embeddings", True),
        },
        honoured={
            "scale_attn_weights": (True,),
            "scale_attn_by_inverse_layer_idx": (False,),
            "add_cross_attention": (False,),
        },
        names={
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
        },
        biases={**_ALL_BIASES, "qkv": True},
        norm="layernorm",
        placement="pre",
        mlp="mlp",
        rotary=False,
        causal=True,
        conv1d=True,
        buffers=(".attn.bias", ".attn.masked_bias"),
        facts={"position_offset": 0, "fused_qkv": "c_attn = [W_q | W_k | W_v] (in, 3d)"},
        classifiers=_SCORE_HEAD,
    ),
    Architecture(
        family="bert",
        model_types=("bert", "roberta"),
        keys=_BERT_KEYS,
        honoured=_BERT_HONOURED,
        names=_BERT_NAMES,
        biases=_ENCODER_BIASES,
        prefixes=("", "bert.", "roberta."),
        ignored=("cls.", "lm_head.", "classifier.", "qa_outputs."),  # heads not read (facts)
        buffers=("embeddings.position_ids",),  # transformers 4's stored arange
        norm="layernorm",
        placement="post",
        mlp="mlp",
        rotary=False,
        causal=False,
        facts={
            # positions start after the padding index for these model types (RoBERTa's
            # create_position_ids_from_input_ids): offset pad_token_id + 1
            "pad_offset_types": ("roberta",),
            # BERT ties its masked-LM decoder to the embeddings when the config is silent
            "tied": True,
            "token_type": "type 0 unless token_types are given",
            "head": "the masked-LM head where the files hold it (mlm_heads), the pooler where "
            "they hold it, the sequence-classification head of a *ForSequenceClassification "
            "(BERT's on the pooled token; RoBERTa's with its own dense + tanh); other task "
            "heads (next-sentence, token classification, multiple choice, QA) are not read",
        },
        mlm_heads=_BERT_MLM_HEADS,
        pooler="pooler.dense",
        classifiers=(
            {"classifier": "classifier"},
            {"cls_dense": "classifier.dense", "classifier": "classifier.out_proj"},
        ),
    ),
)


ARCHITECTURES = (*ARCHITECTURES, *PARALLEL_BLOCKS, ALBERT, *PERI_LN)


@dataclass(frozen=True)
class GGUFArchitecture:
    """How a GGUF file of one ``general.architecture`` maps onto an :class:`Architecture`.

    The metadata keys ``<arch>.<key>`` become config.json keys (``keys``), the tensor names
    become the checkpoint's (``tensors``: GGUF name → Hugging Face name, ``{l}`` the layer),
    and the entry of ``model_type`` does the rest; what the file does not carry is the
    entry's defaults (its documented facts) or ``derived`` (config key ← another one).

    Attributes
    ----------
    model_type : str
    keys : dict
        GGUF metadata key (without the ``<arch>.`` prefix) → config.json key.
    tensors : dict
        GGUF tensor name (without ``.weight``) → Hugging Face name (without ``.weight``).
    derived : dict
        config.json key → the config.json key whose value it takes.
    equal : dict
        GGUF metadata key → the config.json key it must equal (checked, else refused).
        Any other ``<arch>.`` key of the file is refused, naming it (a RoPE scaling, …).
    stored_gain_offset : float
        llama.cpp's converter stores Gemma's norm gains as 1 + w: subtracted on reading
        (as transformers' GGUF loader does), the entry adding it back.
    """

    model_type: str
    keys: dict
    tensors: dict
    derived: dict = field(default_factory=dict)
    equal: dict = field(default_factory=dict)
    stored_gain_offset: float = 0.0


#: GGUF architectures read through an entry of :data:`ARCHITECTURES` (llama files have
#: their own reader, :mod:`tpde.pretrained.gguf_llama`). Gemma-3 files do not carry the
#: 5 local : 1 global pattern, the local RoPE base (10⁴), the activation (tanh GELU), the
#: √d embedding scale nor query_pre_attn_scalar: the gemma3 entry's defaults give the first
#: four, and query_pre_attn_scalar = head_dim (llama.cpp's rule for every Gemma-3 but 27B;
#: transformers' GGUF loader leaves its default 256, equal for the 256-wide heads of 270M).
GGUF_ARCHITECTURES: dict[str, GGUFArchitecture] = {
    "gemma3": GGUFArchitecture(
        model_type="gemma3_text",
        keys={
            "context_length": "max_position_embeddings",
            "embedding_length": "hidden_size",
            "block_count": "num_hidden_layers",
            "feed_forward_length": "intermediate_size",
            "attention.head_count": "num_attention_heads",
            "attention.head_count_kv": "num_key_value_heads",
            "attention.key_length": "head_dim",
            "attention.layer_norm_rms_epsilon": "rms_norm_eps",
            "rope.freq_base": "rope_theta",
            "attention.sliding_window": "sliding_window",
            "vocab_size": "vocab_size",
        },
        tensors={
            "token_embd": "model.embed_tokens",
            "output_norm": "model.norm",
            "output": "lm_head",
            "blk.{l}.attn_norm": "model.layers.{l}.input_layernorm",
            "blk.{l}.attn_q": "model.layers.{l}.self_attn.q_proj",
            "blk.{l}.attn_k": "model.layers.{l}.self_attn.k_proj",
            "blk.{l}.attn_v": "model.layers.{l}.self_attn.v_proj",
            "blk.{l}.attn_output": "model.layers.{l}.self_attn.o_proj",
            "blk.{l}.attn_q_norm": "model.layers.{l}.self_attn.q_norm",
            "blk.{l}.attn_k_norm": "model.layers.{l}.self_attn.k_norm",
            "blk.{l}.post_attention_norm": "model.layers.{l}.post_attention_layernorm",
            "blk.{l}.ffn_norm": "model.layers.{l}.pre_feedforward_layernorm",
            "blk.{l}.ffn_gate": "model.layers.{l}.mlp.gate_proj",
            "blk.{l}.ffn_up": "model.layers.{l}.mlp.up_proj",
            "blk.{l}.ffn_down": "model.layers.{l}.mlp.down_proj",
            "blk.{l}.post_ffw_norm": "model.layers.{l}.post_feedforward_layernorm",
        },
        derived={"query_pre_attn_scalar": "head_dim"},
        equal={"attention.value_length": "head_dim", "rope.dimension_count": "head_dim"},
        stored_gain_offset=1.0,
    ),
}


def architecture_for(model_type) -> Architecture:
    """The entry whose ``model_types`` holds ``model_type``, or a ValueError listing them."""
    for entry in ARCHITECTURES:
        if model_type in entry.model_types:
            return entry
    known = ", ".join(t for entry in ARCHITECTURES for t in entry.model_types)
    raise ValueError(
        f"config.json has model_type {model_type!r}, which tpde does not know; tpde reads "
        f"{known} (tpde.pretrained.architectures.ARCHITECTURES)."
    )
