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
                                                              the masked-LM head where present
gpt_neox       gpt_neox                LayerNorm  pre,        fused QKV per head; partial RoPE
                                                  parallel    (rotary_pct); two norms; GELU MLP
phi            phi                     LayerNorm  pre,        partial RoPE; one norm; GELU-tanh
                                                  parallel    MLP; final LayerNorm; head bias
gptj           gptj                    LayerNorm  pre,        interleaved RoPE on rotary_dim; one
                                                  parallel    norm; no Q/K/V/O biases; head bias
albert         albert                  LayerNorm  post        as bert, ONE shared layer applied L
                                                              times (autonomous); embeddings of
                                                              width E mapped to d; MLM head
=============  ======================  =========  ==========  =====================================

Every layer is the field ``Normalized(attention, N₁) + Normalized(mlp, N₂)`` (MATH.md §8):
its Lie–Trotter step of size 1 with Euler sub-steps is the network's block. A parallel
block (``parallel``: GPT-NeoX, Phi, GPT-J) is ``Sum([Parallel([Normalized(attention, N₁),
Normalized(mlp, N₂)])])``, one part whose Euler step is x + Attn(N₁x) + F(N₂x) (N₂ = N₁
where the block has one norm).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ACTIVATIONS_HF", "ARCHITECTURES", "Architecture", "architecture_for"]

#: Hugging Face activation names (``hidden_act``, ``activation_function``) → tpde's
#: :data:`~tpde.fields.feedforward.activations.ACTIVATIONS`. "gelu_fast" and "gelu_pytorch_tanh" are
#: the tanh form too (equal up to rounding).
ACTIVATIONS_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu-tanh",
    "gelu_fast": "gelu-tanh",
    "gelu_pytorch_tanh": "gelu-tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}

REQUIRED = object()  # a config key without a default


@dataclass(frozen=True)
class Architecture:
    """One family of checkpoints (module table).

    Attributes
    ----------
    family : str
    model_types : tuple of str
        The ``model_type`` values of config.json that this entry reads.
    keys : dict
        Canonical hyper-parameter → (config key, default). A default of ``REQUIRED`` makes
        the key required; a string default ``"=name"`` takes another hyper-parameter's
        value (``kv_heads`` defaults to ``heads``).
    honoured : dict
        Config key → the values tpde implements (a tuple); any other value is refused,
        naming the key. A key absent from the file is accepted.
    names : dict
        Role → weight name (``{l}``: the layer). Linear roles name a prefix (``.weight``
        and, where ``biases`` says, ``.bias``); norm roles a prefix too (``.bias`` for
        LayerNorm).
    biases : dict
        Linear role (and "head") → True, False, the config key (a bool) that says, or
        (config key, default) for a key that may be absent.
    prefixes : tuple of str
        Prefixes a checkpoint may put before every name (a task model's base model).
    ignored : tuple of str
        Name prefixes of tensors that play no part (a pooler, a classifier).
    buffers : tuple of str
        Name endings of stored buffers the model recomputes (GPT-2's causal mask).
    norm : "rmsnorm" or "layernorm"
    placement : "pre" or "post"
    mlp : "swiglu" or "mlp"
    rotary : bool
        RoPE on queries and keys (style ``facts["rope_style"]``, "half" by default; the
        rotated width from the ``rotary`` key, read as ``facts["rotary"]`` says: a
        "fraction" of the head dimension or a number of "dims"); otherwise learned absolute
        positions.
    causal : bool
    conv1d : bool
        Linear weights stored (in, out) (GPT-2's Conv1D), transposed on reading.
    facts : dict
        What the files do not say and the entry fixes (documentation, and read by the
        builder: ``position_offset``, ``tied``, ``rope_base`` where no key holds it,
        ``qkv_layout`` "per_head" for a fused QKV stored head by head …).
    parallel : bool or str
        Attention and MLP read the same tokens and are added in one step (a
        :class:`~tpde.fields.Parallel` block); a str names the boolean config key that says
        (GPT-NeoX's ``use_parallel_residual``, default True). Without an ``mlp_norm`` name
        the MLP reads the attention's norm (one shared norm).
    """

    family: str
    model_types: tuple[str, ...]
    keys: dict
    honoured: dict
    names: dict
    biases: dict
    norm: str
    placement: str
    mlp: str
    rotary: bool
    causal: bool
    prefixes: tuple[str, ...] = ("",)
    ignored: tuple[str, ...] = ()
    conv1d: bool = False
    buffers: tuple[str, ...] = ()
    facts: dict = field(default_factory=dict)
    parallel: bool | str = False
    shared_layer: bool = False
    mlm_heads: tuple = ()


_ROPE_HONOURED = {
    "rope_scaling": (None,),  # transformers 4: a dict for scaled RoPE variants
    "rope_parameters.rope_type": ("default",),  # transformers 5
    "pretraining_tp": (1,),
    "mlp_bias": (False,),
    "hidden_act": ("silu",),
}

_LLAMA_KEYS = {
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
    "window": ("sliding_window", None),
}

_LLAMA_NAMES = {
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

_BERT_NAMES = {
    "embed": "embeddings.word_embeddings",
    "positions": "embeddings.position_embeddings",
    "token_types": "embeddings.token_type_embeddings",
    "embed_norm": "embeddings.LayerNorm",
    "q": "encoder.layer.{l}.attention.self.query",
    "k": "encoder.layer.{l}.attention.self.key",
    "v": "encoder.layer.{l}.attention.self.value",
    "o": "encoder.layer.{l}.attention.output.dense",
    "attn_norm": "encoder.layer.{l}.attention.output.LayerNorm",
    "fc1": "encoder.layer.{l}.intermediate.dense",
    "fc2": "encoder.layer.{l}.output.dense",
    "mlp_norm": "encoder.layer.{l}.output.LayerNorm",
}

_BERT_KEYS = {
    "hidden": ("hidden_size", REQUIRED),
    "layers": ("num_hidden_layers", REQUIRED),
    "heads": ("num_attention_heads", REQUIRED),
    "kv_heads": ("num_attention_heads", REQUIRED),
    "head_dim": ("head_dim", "=hidden/heads"),
    "mlp_hidden": ("intermediate_size", REQUIRED),
    "vocab": ("vocab_size", REQUIRED),
    "context": ("max_position_embeddings", REQUIRED),
    "norm_eps": ("layer_norm_eps", 1e-12),
    "activation": ("hidden_act", "gelu"),
    "type_vocab": ("type_vocab_size", 2),
    "pad": ("pad_token_id", 0),
}

_BERT_HONOURED = {
    "position_embedding_type": ("absolute",),
    "is_decoder": (False,),
    "add_cross_attention": (False,),
}

#: BertForMaskedLM's and RobertaForMaskedLM's heads (RoBERTa's σ is the erf GELU whatever
#: hidden_act says: ``gelu`` in RobertaLMHead).
_BERT_MLM_HEADS = (
    {
        "mlm_dense": "cls.predictions.transform.dense",
        "mlm_norm": "cls.predictions.transform.LayerNorm",
        "mlm_bias": "cls.predictions.bias",
        "head": "cls.predictions.decoder",
        "ignored": ("cls.predictions.decoder.bias",),
        "activation": None,
    },
    {
        "mlm_dense": "lm_head.dense",
        "mlm_norm": "lm_head.layer_norm",
        "mlm_bias": "lm_head.bias",
        "head": "lm_head.decoder",
        "ignored": ("lm_head.decoder.bias",),
        "activation": "gelu",
    },
)

_ALL_BIASES = dict.fromkeys(("q", "k", "v", "o", "fc1", "fc2", "mlm_dense"), True)

#: Every family tpde reads, in the order of the module table.
ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture(
        family="llama",
        model_types=("llama", "mistral"),
        keys=_LLAMA_KEYS,
        honoured=_ROPE_HONOURED,
        names=_LLAMA_NAMES,
        biases={
            **dict.fromkeys("qkvo", "attention_bias"),
            "gate": False,
            "up": False,
            "down": False,
        },
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "window": "sliding_window (Mistral): p_i − p_j < w"},
    ),
    Architecture(
        family="qwen2",
        model_types=("qwen2",),
        keys={**_LLAMA_KEYS, "window": ("sliding_window", None)},
        honoured={
            **_ROPE_HONOURED,
            "use_sliding_window": (False,),
            "layer_types": ("full_attention",),
        },
        names=_LLAMA_NAMES,
        biases={
            "q": True,
            "k": True,
            "v": True,
            "o": False,
            "gate": False,
            "up": False,
            "down": False,
        },
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "no_window": True},
    ),
    Architecture(
        family="qwen3",
        model_types=("qwen3",),
        keys=_LLAMA_KEYS,
        honoured={
            **_ROPE_HONOURED,
            "use_sliding_window": (False,),
            "layer_types": ("full_attention",),
        },
        names={
            **_LLAMA_NAMES,
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases={
            **dict.fromkeys("qkvo", "attention_bias"),
            "gate": False,
            "up": False,
            "down": False,
        },
        norm="rmsnorm",
        placement="pre",
        mlp="swiglu",
        rotary=True,
        causal=True,
        facts={"rope_style": "half", "qk_norm": "per head, before RoPE", "no_window": True},
    ),
    Architecture(
        family="gpt2",
        model_types=("gpt2",),
        keys={
            "hidden": ("n_embd", REQUIRED),
            "layers": ("n_layer", REQUIRED),
            "heads": ("n_head", REQUIRED),
            "kv_heads": ("n_head", REQUIRED),
            "head_dim": ("head_dim", "=hidden/heads"),
            "mlp_hidden": ("n_inner", "=4*hidden"),
            "vocab": ("vocab_size", REQUIRED),
            "context": ("n_positions", REQUIRED),
            "norm_eps": ("layer_norm_epsilon", 1e-5),
            "activation": ("activation_function", "gelu_new"),
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
    ),
    Architecture(
        family="bert",
        model_types=("bert", "roberta"),
        keys=_BERT_KEYS,
        honoured=_BERT_HONOURED,
        names=_BERT_NAMES,
        biases=_ALL_BIASES,
        prefixes=("", "bert.", "roberta."),
        ignored=(
            "pooler.",
            "bert.pooler.",
            "roberta.pooler.",
            "cls.",
            "lm_head.",
            "classifier.",
        ),
        buffers=("embeddings.position_ids",),  # transformers 4's stored arange
        norm="layernorm",
        placement="post",
        mlp="mlp",
        rotary=False,
        causal=False,
        facts={
            "position_offset": {"bert": 0, "roberta": "pad_token_id + 1"},
            "token_type": "type 0 unless token_types are given",
            "head": "the masked-LM head where the files hold it (mlm_heads); a task head "
            "(pooler, classifier, next-sentence) is not read",
        },
        mlm_heads=_BERT_MLM_HEADS,
    ),
)

# ---------------------------------------------------------------------- parallel blocks
_NEOX = "gpt_neox.layers.{l}."
_PHI = "model.layers.{l}."
_GPTJ = "transformer.h.{l}."
_PARALLEL_HONOURED = {
    "rope_scaling": (None,),
    "rope_parameters.rope_type": ("default",),
}

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
        honoured={**_PARALLEL_HONOURED, "qk_layernorm": (False,)},
        names={
            "embed": "model.embed_tokens",
            "final_norm": "model.final_layernorm",
            "head": "lm_head",
            "attn_norm": _PHI + "input_layernorm",
            "q": _PHI + "self_attn.q_proj",
            "k": _PHI + "self_attn.k_proj",
            "v": _PHI + "self_attn.v_proj",
            "o": _PHI + "self_attn.dense",
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
        facts={"rope_style": "half", "rotary": "fraction", "norms": "one, shared"},
    ),
    Architecture(
        family="gptj",
        model_types=("gptj",),
        keys={
            "hidden": ("n_embd", REQUIRED),
            "layers": ("n_layer", REQUIRED),
            "heads": ("n_head", REQUIRED),
            "kv_heads": ("n_head", REQUIRED),
            "head_dim": ("head_dim", "=hidden/heads"),
            "mlp_hidden": ("n_inner", "=4*hidden"),
            "vocab": ("vocab_size", REQUIRED),
            "context": ("n_positions", REQUIRED),
            "norm_eps": ("layer_norm_epsilon", 1e-5),
            "rotary": ("rotary_dim", None),
            "activation": ("activation_function", "gelu_new"),
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
    ),
)

ARCHITECTURES = (*ARCHITECTURES, *PARALLEL_BLOCKS)

# ---------------------------------------------------------------------- ALBERT
_ALBERT = "encoder.albert_layer_groups.0.albert_layers.0."

ALBERT = Architecture(
    family="albert",
    model_types=("albert",),
    keys={
        **_BERT_KEYS,
        "embedding_size": ("embedding_size", REQUIRED),
        "activation": ("hidden_act", "gelu_new"),
        "tied": ("tie_word_embeddings", True),
    },
    honoured={**_BERT_HONOURED, "num_hidden_groups": (1,), "inner_group_num": (1,)},
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
    biases={**_ALL_BIASES, "embed_map": True},
    prefixes=("", "albert."),
    ignored=("pooler.", "albert.pooler.", "sop_classifier.", "classifier."),
    buffers=("embeddings.position_ids",),
    norm="layernorm",
    placement="post",
    mlp="mlp",
    rotary=False,
    causal=False,
    shared_layer=True,
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
        "layers": "one shared layer (num_hidden_groups = inner_group_num = 1), L times",
    },
)

ARCHITECTURES = (*ARCHITECTURES, ALBERT)


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
