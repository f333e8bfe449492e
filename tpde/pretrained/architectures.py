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
                                                              then the embedding LayerNorm
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
its Lie–Trotter step of size 1 with Euler sub-steps is the network's block.
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
        Linear role → True, False, or the config key (a bool) that says.
    prefixes : tuple of str
        Prefixes a checkpoint may put before every name (a task model's base model).
    ignored : tuple of str
        Name prefixes of tensors that play no part (a pooler, a classifier).
    buffers : tuple of str
        Name endings of stored buffers the model recomputes (GPT-2's causal mask).
    norm : "rmsnorm" or "layernorm"
    placement : "pre", "post", "sandwich" or "output"
        "sandwich": x ← x + N₂(f(N₁x)) on each sublayer (roles ``attn_norm``,
        ``attn_post_norm``, ``mlp_norm``, ``mlp_post_norm``); "output": x ← x + N₂(f(x))
        (roles ``attn_post_norm``, ``mlp_post_norm``) — :class:`~tpde.fields.Sandwich`.
    mlp : "swiglu" (gated; its σ the ``activation`` key, silu by default) or "mlp"
    rotary : bool
        RoPE on queries and keys ("half" style); otherwise learned absolute positions.
    causal : bool
    conv1d : bool
        Linear weights stored (in, out) (GPT-2's Conv1D), transposed on reading.
    facts : dict
        What the files do not say and the entry fixes (documentation, and read by the
        builder: ``position_offset``, ``tied`` …).
    gain_offset, embed_scale, qk_norm_whole, window_pattern
        The Peri-LN families' pieces (comments at the fields).
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
    # -- Peri-LN / output-norm families (Gemma-2/3, OLMo-2) ------------------------------
    #: A norm's gain is ``gain_offset + w`` of the stored w (Gemma stores γ − 1: offset 1).
    gain_offset: float = 0.0
    #: Tokens embedded as √d·E[id] (Gemma).
    embed_scale: bool = False
    #: QK-norm over the whole projection (H·d_h; OLMo-2) instead of per head (d_h).
    qk_norm_whole: bool = False
    #: Local (sliding-window) and global layers: every ``window_pattern``-th layer global,
    #: the others local (``layer_types`` in config.json overrides it); None: all alike.
    window_pattern: int | None = None


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

_ALL_BIASES = dict.fromkeys(("q", "k", "v", "o", "fc1", "fc2"), True)

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
            "head": "none (the encoder's hidden states; a task head is not read)",
        },
    ),
)


# ---------------------------------------------------------------------- Peri-LN / output norm
# Gemma-2, Gemma-3 (text) and OLMo-2: a norm after each sublayer (and, for Gemma, one
# before it too). Every piece is a field or an option of one (MATH.md §7, §8):
#   Sandwich(N₁, N₂)             x ← x + N₂(f(N₁x))        (tpde.fields.Sandwich)
#   GQA(scale=s**-0.5)           query_pre_attn_scalar s
#   GQA(softcap=c)               scores c·tanh(s/c)        (Gemma-2: 50)
#   GQA(q_norm, k_norm)          per head (Gemma-3) or over the projection (OLMo-2)
#   SwiGLU(activation=gelu-tanh) GeGLU
#   Transformer(logit_cap=c)     logits c·tanh(z/c)        (Gemma-2: 30)
# Facts the files do not carry: Gemma-2 alternates local/global (pattern 2: layers 0, 2, …
# local), Gemma-3 has 5 local : 1 global (pattern 6, ``sliding_window_pattern``), Gemma-3's
# local RoPE base defaults to 10⁴ (``rope_local_base_freq``) and its global one to 10⁶.

_GEMMA_KEYS = {
    **_LLAMA_KEYS,
    "activation": ("hidden_activation", "gelu_pytorch_tanh"),
    "query_scalar": ("query_pre_attn_scalar", REQUIRED),
    "attn_softcap": ("attn_logit_softcapping", None),
    "logit_softcap": ("final_logit_softcapping", None),
    "tied": ("tie_word_embeddings", True),
}

_GATED_BIASES = {
    **dict.fromkeys("qkvo", "attention_bias"),
    "gate": False,
    "up": False,
    "down": False,
}

_GEMMA_NAMES = {
    **_LLAMA_NAMES,
    "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
    "mlp_norm": "model.layers.{l}.pre_feedforward_layernorm",
    "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
}

_GEMMA_HONOURED = {
    "rope_scaling": (None,),
    "rope_parameters.rope_type": ("default",),
    "rope_parameters.full_attention.rope_type": ("default",),
    "rope_parameters.sliding_attention.rope_type": ("default",),
    "layer_types": ("sliding_attention", "full_attention"),
    "use_bidirectional_attention": (None, False),
}

_PERI_LN: tuple[Architecture, ...] = (
    Architecture(
        family="gemma2",
        model_types=("gemma2",),
        keys={**_GEMMA_KEYS, "rope_local_base": ("rope_local_base_freq", "=rope_base")},
        honoured=_GEMMA_HONOURED,
        names=_GEMMA_NAMES,
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="sandwich",
        mlp="swiglu",
        rotary=True,
        causal=True,
        gain_offset=1.0,
        embed_scale=True,
        window_pattern=2,
        facts={"rope_style": "half", "pattern": "local, global, local, … (layer_types)"},
    ),
    Architecture(
        family="gemma3",
        model_types=("gemma3_text",),
        keys={
            **_GEMMA_KEYS,
            "rope_base": ("rope_theta", 1_000_000.0),
            "rope_local_base": ("rope_local_base_freq", 10_000.0),
        },
        honoured=_GEMMA_HONOURED,
        names={
            **_GEMMA_NAMES,
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="sandwich",
        mlp="swiglu",
        rotary=True,
        causal=True,
        gain_offset=1.0,
        embed_scale=True,
        window_pattern=6,
        facts={
            "rope_style": "half",
            "pattern": "5 local : 1 global (sliding_window_pattern)",
            "qk_norm": "per head, gains 1 + w, before RoPE",
        },
    ),
    Architecture(
        family="olmo2",
        model_types=("olmo2",),
        keys=_LLAMA_KEYS,
        honoured={**_ROPE_HONOURED, "clip_qkv": (None,)},
        names={
            **{k: v for k, v in _LLAMA_NAMES.items() if k not in ("attn_norm", "mlp_norm")},
            "attn_post_norm": "model.layers.{l}.post_attention_layernorm",
            "mlp_post_norm": "model.layers.{l}.post_feedforward_layernorm",
            "q_norm": "model.layers.{l}.self_attn.q_norm",
            "k_norm": "model.layers.{l}.self_attn.k_norm",
        },
        biases=_GATED_BIASES,
        norm="rmsnorm",
        placement="output",
        mlp="swiglu",
        rotary=True,
        causal=True,
        qk_norm_whole=True,
        facts={"rope_style": "half", "qk_norm": "RMSNorm over the whole projection"},
    ),
)

ARCHITECTURES = ARCHITECTURES + _PERI_LN


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
