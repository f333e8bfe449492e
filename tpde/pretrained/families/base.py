"""The family record and the registry: one :class:`Family` per family of checkpoints,
registered by its own module of :mod:`tpde.pretrained.families` when that is imported.

A family says, for one family of checkpoints, everything the general builder
(:mod:`tpde.pretrained._build`) needs and nothing it computes: which ``config.json`` keys it
reads (and their defaults), which keys it refuses unless they hold a value tpde implements,
the names of the weights (templates with ``{l}`` for the layer), which norm, placement,
feed-forward block and positions the layers use, the facts the files do not carry, and how
a GGUF file of the family maps onto all that (:class:`GGUFMap`). :data:`FAMILIES` (family
name → entry), :data:`ARCHITECTURES` (the entries in order), the error that lists the known
``model_type`` values and the documentation all derive from the registered entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "ACTIVATIONS_HF",
    "ARCHITECTURES",
    "COMMON_IRRELEVANT",
    "FAMILIES",
    "REQUIRED",
    "ROUTER_TRAINING",
    "WINDOW_NOT_READ",
    "Architecture",
    "Family",
    "GGUFMap",
    "register",
]

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
    "bloom_gelu": "gelu-tanh-bloom",  # BLOOM's tanh GELU with √(2/π) written 0.79788456
}

REQUIRED = object()  # a config key without a default


@dataclass(frozen=True)
class GGUFMap:
    """How a GGUF file of one ``general.architecture`` maps onto its :class:`Family`.

    The file's ``<arch>.<key>`` metadata become config.json keys through the one table of
    llama.cpp's standard keys (:data:`tpde.pretrained._gguf.STANDARD_KEYS`: key → the
    family's hyper-parameter, whose config key the family's ``keys`` name), the tensor names
    through gguf-py's ``TensorNameMap`` for the architecture; the entry adds what differs.

    Attributes
    ----------
    architecture : str
        ``general.architecture`` of the files (llama.cpp's name).
    model_type : str
        The config.json ``model_type`` the file stands for.
    keys : dict
        Further GGUF metadata keys (without the ``<arch>.`` prefix) → config.json key.
    equal : dict
        Further GGUF metadata keys → the hyper-parameter (an attribute of the config record,
        :class:`~tpde.pretrained._config.ModelConfig`) they must equal (checked, else
        refused), beyond :data:`tpde.pretrained._gguf.STANDARD_EQUAL`. Any other ``<arch>.``
        key of the file is refused, naming it (a RoPE scaling, an expert count, …).
    stored_gain_offset : float
        llama.cpp's converter stores Gemma's norm gains as 1 + w: subtracted on reading (as
        transformers' GGUF loader does), the family adding it back.
    permuted : dict
        Role → the hyper-parameter (of the config record) counting its heads, for the rotary
        weights whose rows llama.cpp's converter interleaved (llama: ``{"q": "heads", "k":
        "kv_heads"}``); un-permuted on reading
        (:func:`tpde._io.gguf_layouts.unpermute_rotary_rows`).
    tokenizer : "bpe" or "spm"
        How the file's ``tokenizer.ggml.*`` vocabulary becomes a tokenizer: GPT-2 byte-level
        BPE or Gemma's SentencePiece BPE
        (:mod:`tpde._io.gguf_tokenizer`).
    computed : dict
        config.json key → a function of the config.json read so far giving its value (None:
        left absent), for a fact the file does not carry that llama.cpp derives from the
        others (Gemma's query_pre_attn_scalar,
        :func:`~tpde.pretrained.families.gemma2.llamacpp_query_scalar`; OLMo-2's files read
        as OLMo-3: their layer types and local RoPE). The function is the family's code, so
        a file of such a family enters the family's module (``tools/module_walk.py``
        counts it); a value that is not callable is refused when the map is built.
    rotary_fraction : str or None
        The config.json key of the rotated fraction of a head (Phi's
        ``partial_rotary_factor``, GPT-NeoX's ``rotary_pct``), which takes
        ``rope.dimension_count`` / head dimension; None: the file rotates whole heads.
    transposed : bool
        The family's checkpoints store the blocks' linear weights (in, out) (GPT-2's
        Conv1D); llama.cpp's converter wrote them (out, in): transposed back on reading.
    qkv_blocks : bool
        The folder stores the fused QKV head by head ([q_h; k_h; v_h], GPT-NeoX) or group by
        group ([q_{g,1} … q_{g,r}; k_g; v_g], Falcon); llama.cpp's converter wrote it as the
        blocks [W_q; W_k; W_v]: re-interleaved on reading
        (:func:`tpde._io.gguf_layouts.interleave_qkv`).
    stacked : dict
        Role → the checkpoint name (``{l}`` the layer) the converter gave the one (H, d_h)
        tensor into which it stacked the role's per-head tensors (StableLM's QK-norm gains,
        ``norms.{h}``): split into them on reading.
    flags : dict
        config.json key → (a tensor name of the file, the value where the file holds it, the
        value where not): what llama.cpp decides by the tensors alone (StableLM's
        ``qk_layernorm``; Falcon's second norm, ``num_ln_in_parallel_attn``).
    fixed : dict
        config.json key → the value every file of the architecture has in llama.cpp's model of
        it (Falcon: the grouped layout, a parallel block, RoPE, no biases); a file whose
        tensors say otherwise is refused by their names.
    literal : dict
        Further metadata keys (without the prefix) → the one value tpde reads them at (Falcon's
        ``tensor_data_layout`` "jploski", the converter's QKV layout); any other refused.
    rope_freqs : bool
        A ``rope_freqs.weight`` tensor (llama.cpp's per-pair divisors f_m of the RoPE
        frequencies, θ'_m = θ_m/f_m, which its converter computes from Llama-3's schedule)
        is read as that scaling; without it such a tensor is refused as unexpected.
    rope_factors : bool
        ``rope_factors_long.weight`` and ``rope_factors_short.weight`` (Phi-3's LongRoPE
        factors, with ``rope.scaling.attn_factor``) are read as a "longrope" scaling
        (:mod:`tpde.pretrained._gguf_rope`); without it such tensors are refused as
        unexpected.
    ignored : tuple of str
        Keys (without the prefix) that no reading applies: llama.cpp does not read them for
        the architecture and the family's Hugging Face model does not use them (the family's
        ``irrelevant``): accepted and unused (Gemma-3's ``attn_logit_softcapping``).
    required : tuple of str
        Keys (without the prefix) a file must hold: llama.cpp's ``load_hparams`` reads them
        without a default (Gemma-3's ``attention.sliding_window``; ``ml.get_key`` without
        ``false`` in ``llama_model::load_hparams``, ``src/llama-model.cpp``), so a file lacking
        one is refused, naming it.
    defaults : dict
        Keys (without the prefix) llama.cpp reads as optional → the value it takes where the
        file lacks one (its ``load_hparams``; ``llama_hparams``' initial values in
        ``src/llama-hparams.h``): a file without the key is read with that value, whatever the
        family's own default (Gemma-2: window 4096, soft-caps 50 and 30; Gemma-3: RoPE base 10⁴
        where its config class says 10⁶).
    switched_off : dict
        Standard keys (without the prefix) of a window a Hugging Face config applies and
        llama.cpp computes without → what llama.cpp does with it, the warning's words after
        "llama.cpp" (``{arch}``: the architecture). Phi-3's ``attention.sliding_window`` it
        reads and turns off (``load_hparams``, LLM_ARCH_PHI3: "Phi SWA is currently
        disabled", n_swa = 0; llama.cpp PR 13676); that of llama (Mistral's files), qwen2,
        qwen3 and starcoder2 files it does not read (:data:`WINDOW_NOT_READ`; their
        ``load_hparams`` cases read no window and leave swa_type NONE). A file whose value
        binds within its context has two readings: it is read as llama.cpp computes it (no
        window) with a warning, unless :func:`~tpde.pretrained.load`'s ``gguf_window``
        chooses ("llama.cpp": the same, no warning; "file": the value applied on every layer,
        as a checkpoint's config.json that carries it does, with ``windowed``).
    windowed : dict
        config.json values the "file" reading of a ``switched_off`` window sets beside it:
        llama's ``model_type`` "mistral" (transformers' Llama has no window; Mistral's applies
        it on every layer), Qwen's ``use_sliding_window`` true and ``max_window_layers`` 0
        (every layer: llama.cpp's converter writes no window, nor any layer rule, for Qwen
        files, and a file's other keys are refused by name). In a map without
        ``switched_off`` (olmo2): the values of every file holding a window w > 0 (its
        ``attention.sliding_window``, read into ``sliding_window``; 0: none), which
        llama.cpp reads as another model — olmo2's ``model_type`` "olmo3": its
        ``load_hparams`` (LLM_ARCH_OLMO2) reads such a file as OLMo-3's local and global
        layers (``set_swa_pattern(4)``), which the olmo3 family reads.
    notes : str
        What the translator undoes or reads beyond llama.cpp's common keys for these files,
        in a line or two of reStructuredText prose (the documentation's table of GGUF
        architectures, ``docs/api/pretrained.rst``, is built from every map's ``notes``).
        Empty: nothing beyond them, and the table says so ("nothing beyond the common keys").
    """

    architecture: str
    model_type: str
    keys: dict = field(default_factory=dict)
    equal: dict = field(default_factory=dict)
    stored_gain_offset: float = 0.0
    permuted: dict = field(default_factory=dict)
    tokenizer: str = "bpe"
    computed: dict = field(default_factory=dict)
    rotary_fraction: str | None = None
    transposed: bool = False
    qkv_blocks: bool = False
    stacked: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    fixed: dict = field(default_factory=dict)
    literal: dict = field(default_factory=dict)
    rope_freqs: bool = False
    rope_factors: bool = False
    ignored: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    defaults: dict = field(default_factory=dict)
    switched_off: dict = field(default_factory=dict)
    windowed: dict = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self):
        """A ``computed`` value that is not a function refused (named), when the map is built."""
        for key, rule in self.computed.items():
            if not callable(rule):
                raise ValueError(
                    f"the GGUF map of {self.architecture!r} computes {key!r} by {rule!r}, which "
                    "is not a function; give a function of the config.json read so far "
                    "(GGUFMap.computed)."
                )


#: What llama.cpp does with ``attention.sliding_window`` of llama, qwen2, qwen3 and
#: starcoder2 files (the GGUF map's ``switched_off``): nothing — ``llama_model::load_hparams``
#: (``src/llama-model.cpp``), cases LLM_ARCH_LLAMA, LLM_ARCH_QWEN2, LLM_ARCH_QWEN3 and
#: LLM_ARCH_STARCODER2, reads no window and leaves ``hparams.swa_type`` LLAMA_SWA_TYPE_NONE,
#: so their graphs attend over every position; so do the later ``llama_model_<arch>::
#: load_arch_hparams`` (``src/models/{llama,qwen2,qwen3,starcoder2}.cpp``), whose graphs build
#: the plain ``build_attn_inp_kv`` (no sliding-window mask).
WINDOW_NOT_READ = {
    "attention.sliding_window": "does not read for {arch} files (its load_hparams reads no "
    "window for them: it attends over every position)"
}


@dataclass(frozen=True)
class Family:
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
    irrelevant : dict
        Config key → why it plays no part in the computation, for the family's keys beyond
        :data:`COMMON_IRRELEVANT` (which every family shares). With the keys the family reads
        (:func:`tpde.pretrained._config.read_keys`) they cover every key of transformers'
        config class for each of its ``model_types`` (the test's oracle).
    reads : tuple of str
        Config keys the family's own code reads beyond those its other fields name (a
        builder branch of its own, or its ``variant``: Falcon's layout keys, BLOOM's
        ``pretraining_tp``), each checked where it is read: listed by
        :func:`~tpde.pretrained._config.read_keys`, so the key-table test holds them too.
    aliases : dict
        Config key → the key of ``keys`` it stands for (transformers' ``attribute_map``:
        GPT-2's ``hidden_size`` is ``n_embd``); where present it wins, as in transformers.
    buffers : tuple of str
        Name endings of stored buffers the model recomputes (GPT-2's causal mask).
    norm : "rmsnorm" or "layernorm"
    placement : "pre", "post", "sandwich" or "output"
        "sandwich": x ← x + N₂(f(N₁x)) on each sublayer (roles ``attn_norm``,
        ``attn_post_norm``, ``mlp_norm``, ``mlp_post_norm``); "output": x ← x + N₂(f(x))
        (roles ``attn_post_norm``, ``mlp_post_norm``) — :class:`~tpde.fields.Sandwich`.
    mlp : "swiglu" (gated; its σ the ``activation`` key, silu by default), "mlp" or "moe"
        "moe": a routed mixture of gated experts
        (:class:`~tpde.fields.MixtureOfExperts`): roles ``router`` (E × d), ``expert_gate``,
        ``expert_up``, ``expert_down`` (templates with ``{e}``, the expert), and where the
        ``shared_hidden`` key is set ``shared_gate``, ``shared_up``, ``shared_down``,
        ``shared_router`` (1 × d: Qwen2-MoE's sigmoid gate of the shared expert).
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
    parallel : bool, str or (str, bool)
        Attention and MLP read the same tokens and are added in one step (a
        :class:`~tpde.fields.Parallel` block); a str names the boolean config key that says
        (GPT-NeoX's ``use_parallel_residual``, default True), a pair (key, default) one
        with another default (StableLM's, False). Without an ``mlp_norm`` name (or
        tensor, see ``optional``) the MLP reads the attention's norm (one shared norm).
    gain_offset, embed_scale, qk_norm_whole, window_pattern
        The Peri-LN families' pieces (comments at the fields).
    optional : dict
        Role → the boolean config key (default false) under which the files hold it
        (Phi's ``qk_layernorm``: roles ``q_norm``, ``k_norm``); absent otherwise. A pair
        (key, value): held when the key (default false) equals the value (StableLM's
        ``post_attention_layernorm``: ``("use_parallel_residual", False)``).
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
    irrelevant: dict = field(default_factory=dict)
    reads: tuple[str, ...] = ()
    aliases: dict = field(default_factory=dict)
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
    #: The boolean config key that turns the sliding window on (Qwen's
    #: ``use_sliding_window``): the window ``window`` then on layers l ≥ ``window_from``
    #: (``max_window_layers``) or as ``layer_types`` says; off, every layer global.
    window_switch: str | None = None
    #: How a GGUF file of the family is read (None: tpde reads no GGUF file of it).
    gguf: GGUFMap | None = None
    # -- norms without some tensors, per-head QK-norm gains (OLMo, Cohere, StableLM) --------
    #: Norm role (or "*", every norm) → the tensors it stores, replacing the default
    #: (RMSNorm: weight; LayerNorm: weight and bias): () a parameter-free norm (OLMo's
    #: LayerNorm, γ = 1, b = 0), ("weight",) a LayerNorm without bias (Cohere's).
    norm_parts: dict = field(default_factory=dict)
    #: QK-norms with a gain per head (:class:`~tpde.fields.GroupedQueryAttention` with a
    #: tuple of norms): stored as one (H, d_h) tensor (Cohere), or as H tensors (d_h,) of a
    #: name template with ``{h}`` (StableLM's ``norms.{h}``).
    qk_norm_heads: bool = False
    # -- ALiBi, variants, mixture-of-experts ---------------------------------------------
    #: ALiBi positions (:class:`~tpde.fields.ALiBi`, the paper's slopes m_h for H heads), as
    #: the family's code forms them: ``{"rounding": "float32"}`` (BLOOM: score
    #: q·k/√d_h + m_h p_j, the bias formed in float32), ``{"rounding": "bfloat16",
    #: "scaled": True}`` (Falcon: (q·k + m_h p_j)/√d_h, the bias formed in bfloat16). None:
    #: no ALiBi.
    alibi: dict | None = None
    #: A family whose config selects among layouts (Falcon's three attention layouts, its
    #: ALiBi or RoPE): config.json → the entry for that config (``dataclasses.replace`` of
    #: this one), raising LoadError for a combination tpde does not read; applied by
    #: :func:`~tpde.pretrained._config.read_hyper` (and the loader, which needs its names), its
    #: keys declared in ``reads``. None: one layout.
    variant: Callable | None = None
    #: config.json values a random checkpoint of the family sets beyond the generic ones
    #: (:func:`tpde.pretrained.random_checkpoint`: the tiny sizes, every boolean switch on):
    #: a layout its ``reads`` keys select (Falcon's grouped attention), a variant of its RoPE
    #: (Llama's llama3 scaling). Empty: the generic ones.
    random_config: dict = field(default_factory=dict)
    #: The family's attention, feed-forward and positions, beyond what ``norm``,
    #: ``norm_parts``, ``placement`` and ``parallel`` say, in a line or two of
    #: reStructuredText prose: its row of the documentation's table of families
    #: (``docs/api/pretrained.rst``, built from every entry).
    summary: str = ""


#: Config keys that play no part in any family's computation, and why: a family's
#: ``irrelevant`` adds its own. A key a family reads is read whatever this table says
#: (RoBERTa's ``pad_token_id`` sets its position offset).
COMMON_IRRELEVANT = {
    **dict.fromkeys(
        ("_name_or_path", "transformers_version", "dtype", "torch_dtype"),
        "provenance and storage dtype; load's dtype argument sets the computation's",
    ),
    **dict.fromkeys(
        ("output_attentions", "output_hidden_states", "return_dict", "use_cache"),
        "what transformers' forward returns or caches, not the values it computes",
    ),
    **dict.fromkeys(
        ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id"),
        "tokenizer ids: which tokens a text holds, not how tokens are computed",
    ),
    "initializer_range": "initialisation of untrained weights; every weight is read",
    "chunk_size_feed_forward": "the feed-forward applied in chunks of tokens: the same values",
    "problem_type": "the training loss of a classification head",
    "label2id": "class names (id2label, which is read, gives their number)",
    "is_encoder_decoder": "transformers' generation utilities; the model class decides",
    **dict.fromkeys(
        (
            "attention_dropout",
            "attention_probs_dropout_prob",
            "hidden_dropout",
            "hidden_dropout_prob",
            "classifier_dropout",
            "classifier_dropout_prob",
            "attn_pdrop",
            "embd_pdrop",
            "resid_pdrop",
            "embedding_dropout",
            "residual_dropout",
            "summary_first_dropout",
            "summary_last_dropout",
        ),
        "training-only dropout: the identity at evaluation",
    ),
}

#: The mixture-of-experts families' training-only router keys (Mixtral, Qwen2-MoE).
ROUTER_TRAINING = {
    **dict.fromkeys(
        ("output_router_logits", "router_aux_loss_coef"),
        "the load-balancing loss of training (router logits returned for it), not the values",
    ),
    "router_jitter_noise": "multiplicative noise on the router's input in training only "
    "(transformers: `if self.training and jitter_noise > 0`)",
}

#: The entry's old name (``tpde.pretrained.architectures.Architecture``).
Architecture = Family

#: Family name → its entry, in the order the modules registered them.
FAMILIES: dict[str, Family] = {}

#: Every registered entry, in order (kept equal to ``FAMILIES.values()`` by :func:`register`).
ARCHITECTURES: list[Family] = []


def register(entry: Family) -> Family:
    """Add ``entry`` to :data:`FAMILIES`; returns it. A second family of the same name or
    claiming a ``model_type`` or GGUF architecture already claimed is refused, naming both."""
    if not isinstance(entry, Family):
        raise TypeError(f"register takes a Family; received {type(entry).__name__}.")
    for other in FAMILIES.values():
        clash = set(entry.model_types) & set(other.model_types)
        if other.family == entry.family or clash:
            raise ValueError(
                f"the family {entry.family!r} claims {sorted(clash) or entry.family!r}, "
                f"which the family {other.family!r} already holds."
            )
        if entry.gguf and other.gguf and entry.gguf.architecture == other.gguf.architecture:
            raise ValueError(
                f"the families {other.family!r} and {entry.family!r} both read GGUF files of "
                f"architecture {entry.gguf.architecture!r}."
            )
    FAMILIES[entry.family] = entry
    ARCHITECTURES.append(entry)
    return entry


# ---------------------------------------------------------------------- pieces families share
#: The decoders' *ForSequenceClassification head (transformers' GenericForSequenceClassification
#: and GPT-2's and GPT-NeoX's own classes): ``score`` (no bias, beside the base model's
#: prefix) on the last token of the final-normed states, no soft-cap (Gemma-2's
#: final_logit_softcapping caps the language-model logits only), no language-model head.
SCORE_HEAD = ({"classifier": "score", "token": "last"},)

#: The gated (SwiGLU/GeGLU) families' biases: Q, K, V, O as ``attention_bias`` says, none
#: on the MLP.
GATED_BIASES = {
    **dict.fromkeys("qkvo", "attention_bias"),
    "gate": False,
    "up": False,
    "down": False,
}
#: Every linear map biased (GPT-2, BERT, …).
ALL_BIASES = dict.fromkeys(("q", "k", "v", "o", "fc1", "fc2", "mlm_dense"), True)
#: BERT's and ALBERT's: every linear map biased, the pooler and classification heads too.
ENCODER_BIASES = {**ALL_BIASES, "pooler": True, "cls_dense": True, "classifier": True}
