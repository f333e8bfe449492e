"""The :class:`Architecture` record of :mod:`tpde.pretrained.architectures` and the
config keys and weight names its families share."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ACTIVATIONS_HF", "REQUIRED", "Architecture"]

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
    placement : "pre", "post", "sandwich" or "output"
        "sandwich": x ← x + N₂(f(N₁x)) on each sublayer (roles ``attn_norm``,
        ``attn_post_norm``, ``mlp_norm``, ``mlp_post_norm``); "output": x ← x + N₂(f(x))
        (roles ``attn_post_norm``, ``mlp_post_norm``) — :class:`~tpde.fields.Sandwich`.
    mlp : "swiglu" (gated; its σ the ``activation`` key, silu by default) or "mlp"
    rotary : bool
        RoPE on queries and keys (style ``facts["rope_style"]``, "half" by default; the
        rotated width from the ``rotary`` key, read as ``facts["rotary"]`` says: a
        "fraction" of the head dimension or a number of "dims"); otherwise learned absolute
        positions.
    causal : bool
    conv1d : bool
        The blocks' linear weights stored (in, out) (GPT-2's Conv1D), transposed on
        reading; its task heads (``score``) are nn.Linear, stored (out, in).
    facts : dict
        What the files do not say and the entry fixes (documentation, and read by the
        builder: ``position_offset``, ``tied``, ``rope_base`` where no key holds it,
        ``qkv_layout`` "per_head" for a fused QKV stored head by head …).
    parallel : bool or str
        Attention and MLP read the same tokens and are added in one step (a
        :class:`~tpde.fields.Parallel` block); a str names the boolean config key that says
        (GPT-NeoX's ``use_parallel_residual``, default True). Without an ``mlp_norm`` name
        the MLP reads the attention's norm (one shared norm).
    gain_offset, embed_scale, qk_norm_whole, window_pattern
        The Peri-LN families' pieces (comments at the fields).
    optional : dict
        Role → the boolean config key (default false) under which the files hold it
        (Phi's ``qk_layernorm``: roles ``q_norm``, ``k_norm``); absent otherwise.
    layer_groups : (str, str) or None
        ALBERT's weight sharing: the config keys of G (groups) and of the blocks a group
        holds; the block templates name group ``{g}`` and block ``{j}``, and layer i
        applies group ⌊i/(L/G)⌋, its blocks in order. None: one block per layer (``{l}``).
    pooler : str or None
        The pooler's dense layer (under the base model's prefix; read where the files hold
        it): p = tanh(W x₀ + b) of the first token (:class:`~tpde.pretrained.Pooler`).
    classifiers : tuple of dict
        Sequence-classification heads, read when config.json's ``architectures`` names a
        ``*ForSequenceClassification`` model: the first whose ``classifier`` weight the
        files hold. Roles ``classifier`` (labels × d, on the pooled first token) and, for
        a head with its own dense + tanh (RoBERTa), ``cls_dense``; ``"token": "last"``: on
        the last token of the final-normed states instead (the decoders' ``score``; such a
        model has no language-model head).
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
    mlm_heads: tuple = ()
    optional: dict = field(default_factory=dict)
    layer_groups: tuple[str, str] | None = None
    pooler: str | None = None
    classifiers: tuple = ()
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

#: GPT-2's config keys, which GPT-J shares (GPT-J adds rotary_dim and unties the head).
_GPT_KEYS = {
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

#: The decoders' *ForSequenceClassification head (transformers' GenericForSequenceClassification
#: and GPT-2's and GPT-NeoX's own classes): ``score`` (no bias, beside the base model's
#: prefix) on the last token of the final-normed states, no soft-cap (Gemma-2's
#: final_logit_softcapping caps the language-model logits only), no language-model head.
_SCORE_HEAD = ({"classifier": "score", "token": "last"},)

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

#: The gated (SwiGLU/GeGLU) families' biases: Q, K, V, O as ``attention_bias`` says, none
#: on the MLP.
_GATED_BIASES = {
    **dict.fromkeys("qkvo", "attention_bias"),
    "gate": False,
    "up": False,
    "down": False,
}
#: Config values of the Qwen families that keep every layer global (no sliding window).
_NO_WINDOW_HONOURED = {
    **_ROPE_HONOURED,
    "use_sliding_window": (False,),
    "layer_types": ("full_attention",),
}
_ALL_BIASES = dict.fromkeys(("q", "k", "v", "o", "fc1", "fc2", "mlm_dense"), True)
#: BERT's and ALBERT's: every linear map biased, the pooler and classification heads too.
_ENCODER_BIASES = {**_ALL_BIASES, "pooler": True, "cls_dense": True, "classifier": True}

#: Every family tpde reads, in the order of the module table.
