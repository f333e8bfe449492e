"""config.json → the checked hyper-parameters of a checkpoint (:class:`ModelConfig`), read
by its architecture entry's ``keys``; a key that changes the computation and that tpde does
not implement is refused naming the key (:func:`read_hyper`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpde._validation import checked_integer, checked_positive
from tpde.fields import rope_scaling_from_config
from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained.families.base import ACTIVATIONS_HF, FAMILIES, REQUIRED, Family

__all__ = ["ModelConfig", "Naming", "family_for", "read_hyper", "read_keys"]


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a checkpoint, read from config.json by its entry's ``keys``.

    Attributes
    ----------
    model_type : str
    layers, hidden, heads, kv_heads, head_dim, mlp_hidden, vocab, context : int
    norm_eps : float
    rope_base : float or None (learned positions: None)
    activation : str (tpde's name) or None (SwiGLU: silu)
    window : int or None (sliding window)
    tied_embeddings : bool
    type_vocab : int or None
    position_offset : int
    rotary_dims : int or None
        The rotated width of each head (partial rotary); None: the whole head.
    parallel : bool
        Attention and MLP in one step (:class:`~tpde.fields.Parallel`).
    embedding_size : int or None
        E, the width of ALBERT's factorised embeddings (mapped to d); None: E = d.
    local_layers : tuple of bool, or None
        Which layers are local (sliding window ``window``, RoPE base ``rope_local_base``);
        None: every layer alike (the window, if any, on all of them).
    rope_local_base : float or None
    attention_scale : float or None
        The score scale (query_pre_attn_scalar^−½); None: 1/√head_dim.
    attn_softcap, logit_softcap : float or None
        Soft-caps c of the scores and of the logits (c·tanh(s/c)).
    embed_scale : float
        s of x = s·E[id] (√d for Gemma, else 1).
    groups : int or None
        G, ALBERT's ``num_hidden_groups`` (layer i applies group ⌊i/(L/G)⌋); None: one
        block per layer.
    group_blocks : int
        The blocks of a group, applied in order (ALBERT's ``inner_group_num``; else 1).
    labels : int or None
        The classes of a sequence-classification head (``id2label``); None: no such head.
    rope_scaling : tuple (global, local) of RopeScaling or None
        The RoPE scaling of the global and of the local layers (None: unscaled;
        :func:`tpde.fields.rope_scaling_from_config`).
    residual_scale : float
        r of x ← x + r·f(N x) on every sublayer (Granite's ``residual_multiplier``; else 1):
        the time step of each sublayer's Euler step, folded into its output weights.
    logit_scale : float
        The factor of the logits (Cohere's ``logit_scale``; Granite's 1/``logits_scaling``).
    clip_qkv : float or None
        c of the projections' clamp to [−c, c] (OLMo's ``clip_qkv``); None: no clip.
    experts, top_k : int or None
        E experts and the k a token is routed to (a mixture-of-experts MLP,
        :class:`~tpde.fields.MixtureOfExperts`); None: a dense MLP.
    normalize_top_k : bool
        Whether the k chosen probabilities are renormalised (Mixtral: always).
    shared_hidden : int or None
        The hidden width of the shared expert (Qwen2-MoE); None: none.
    """

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp_hidden: int
    vocab: int
    context: int
    norm_eps: float
    rope_base: float | None
    activation: str | None
    window: int | None
    tied_embeddings: bool
    type_vocab: int | None
    position_offset: int
    rotary_dims: int | None = None
    parallel: bool = False
    embedding_size: int | None = None
    local_layers: tuple[bool, ...] | None = None
    rope_local_base: float | None = None
    attention_scale: float | None = None
    attn_softcap: float | None = None
    logit_softcap: float | None = None
    embed_scale: float = 1.0
    groups: int | None = None
    group_blocks: int = 1
    labels: int | None = None
    rope_scaling: tuple = (None, None)
    residual_scale: float = 1.0
    logit_scale: float = 1.0
    clip_qkv: float | None = None
    experts: int | None = None
    top_k: int | None = None
    normalize_top_k: bool = True
    shared_hidden: int | None = None

    @property
    def score_scale(self) -> float:
        """The factor of the attention scores: ``attention_scale`` where the family sets it,
        else 1/√d_h."""
        return (
            1 / math.sqrt(self.head_dim) if self.attention_scale is None else self.attention_scale
        )

    @property
    def rms_eps(self) -> float:
        """ε of the norms (``norm_eps``; the name the GGUF llama reader gave it)."""
        return self.norm_eps

    @property
    def blocks(self) -> int:
        """The blocks the files store: G·(blocks of a group), or L."""
        return self.layers if self.groups is None else self.groups * self.group_blocks

    def layer_group(self, i: int) -> int:
        """The group that layer i applies: ⌊i/(L/G)⌋ (ALBERT's own expression), or i."""
        if self.groups is None:
            return i
        return int(i / (self.layers / self.groups))

    def layer_window(self, l: int) -> int | None:
        """The sliding window of layer l (None: it sees every earlier token)."""
        local = self.local_layers is None or self.local_layers[l]
        return self.window if local else None

    def layer_rope_base(self, l: int) -> float | None:
        """The RoPE base of layer l (its local base on a local layer)."""
        if self.local_layers is not None and self.local_layers[l]:
            return self.rope_local_base
        return self.rope_base

    def layer_rope_scaling(self, l: int):
        """The RoPE scaling of layer l (its local one on a local layer), or None."""
        local = self.local_layers is not None and self.local_layers[l]
        return self.rope_scaling[1] if local else self.rope_scaling[0]


# ---------------------------------------------------------------------- config
def _lookup(raw: dict, key: str):
    """raw[key], with "a.b" reading a nested dict; a KeyError when absent."""
    value = raw
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def read_keys(entry: Family) -> set[str]:
    """Every top-level config.json key that :func:`read_hyper` and the builder read for the
    family ``entry`` (its ``keys``, ``honoured``, ``optional``, bias, parallel and window
    switch keys, its groups, aliases and ``reads``, and the keys every family of its kind
    reads): with ``entry.irrelevant`` and
    :data:`~tpde.pretrained.families.base.COMMON_IRRELEVANT`, the table a test holds against
    transformers' config classes."""
    out = {"model_type", "architectures", "id2label", "num_labels"}  # _groups_and_labels
    out |= {key for key, _ in entry.keys.values() if key is not None}  # None: a fixed value
    out |= {key.split(".")[0] for key in entry.honoured}
    out |= {flag if isinstance(flag, str) else flag[0] for flag in _bool_flags(entry)}
    out |= set(entry.layer_groups or ()) | set(entry.aliases) | set(entry.reads)
    if entry.rotary and "rope_base" in entry.keys:  # rope_scaling_from_config, _rope_parameters
        out |= {"rope_parameters", "rope_scaling"}
        if entry.keys.get("rope_local_base", (None, "=rope_base"))[1] == "=rope_base":
            out.add("original_max_position_embeddings")  # top-level, where one RoPE serves all
    if entry.window_pattern is not None:  # _local_layers
        out |= {"layer_types", "sliding_window_pattern"}
    return out


def _bool_flags(entry: Family) -> list:
    """The config keys the entry reads as booleans (biases, optional roles, parallel)."""
    flags = [f for f in entry.biases.values() if isinstance(f, str | tuple)]
    flags += list(entry.optional.values()) + [entry.window_switch] * bool(entry.window_switch)
    return flags + ([entry.parallel] if isinstance(entry.parallel, str | tuple) else [])


def _check_bools(raw: dict, entry: Family) -> None:
    """Every boolean key the entry reads is a JSON true or false where present (a string
    "false" is truthy; transformers 5 refuses it too)."""
    for flag in _bool_flags(entry):
        key = flag if isinstance(flag, str) else flag[0]
        if key in raw and not isinstance(raw[key], bool):
            raise LoadError(
                f"config.json: {key} must be true or false; received {raw[key]!r} (a "
                f"{type(raw[key]).__name__}). Write it as a JSON boolean."
            )


def _same(a, b) -> bool:
    """a == b of the same type (True is not 1, 0 is not False)."""
    return type(a) is type(b) and a == b


def _check_honoured(raw: dict, entry: Family) -> None:
    _check_bools(raw, entry)
    for key, allowed in entry.honoured.items():
        try:
            value = _lookup(raw, key)
        except KeyError:
            continue
        values = value if isinstance(value, list) and key == "layer_types" else [value]
        for item in values:
            if not any(_same(item, a) for a in allowed):
                raise LoadError(
                    f"config.json sets {key} = {value!r}, which changes the computation in a way "
                    f"tpde does not implement for {entry.family} models (it reads "
                    f"{' or '.join(map(repr, allowed))}); tpde refuses rather than ignore it."
                )


def family_for(model_type, where) -> Family:
    """The family whose ``model_types`` holds ``model_type``, or a LoadError naming
    ``where`` (the checkpoint) and the ``model_type`` and listing the known ones."""
    for entry in FAMILIES.values():
        if model_type in entry.model_types:
            return entry
    known = ", ".join(t for entry in FAMILIES.values() for t in entry.model_types)
    raise LoadError(
        f"{where}: config.json has model_type {model_type!r}, which tpde does not read; tpde "
        f"reads {known} (tpde.pretrained.ARCHITECTURES)."
    )


@dataclass(frozen=True)
class Naming:
    """How an error names a config key (``where``; None: ``config.json: <key>``) and
    introduces its value (``said``): a GGUF file names the metadata key."""

    where: object = None
    said: str = "received"

    def name(self, key: str) -> str:
        """How an error names config key ``key``."""
        return f"config.json: {key}" if self.where is None else self.where(key)

    def integer(self, value, key: str, *, low: int = 1) -> int:
        """``value`` as an int ≥ ``low``, else a LoadError naming ``key`` (named only then)."""
        try:
            return checked_integer(value, key, LoadError, low=low, said=self.said)
        except LoadError:
            return checked_integer(value, self.name(key), LoadError, low=low, said=self.said)

    def positive(self, value, key: str) -> float:
        """``value`` as a finite float > 0, else a LoadError naming ``key`` (named only then)."""
        try:
            return checked_positive(value, key, LoadError, said=self.said)
        except LoadError:
            return checked_positive(value, self.name(key), LoadError, said=self.said)


#: Hyper-parameters whose explicit null in config.json is derived, as transformers derives it
#: (``num_key_value_heads = num_attention_heads``, ``head_dim = hidden_size //
#: num_attention_heads``); absent, they take the family's default (its config class's).
_NULL_DERIVED = {"kv_heads": "=heads", "head_dim": "=hidden/heads"}


def read_hyper(raw: dict, entry: Family, n: Naming = Naming()) -> ModelConfig:
    """The checked hyper-parameters of ``raw`` (config.json) for the family ``entry``; ``n``
    names the keys in errors (a GGUF file's metadata keys). A family with a ``variant``
    (Falcon's layouts, BLOOM's tensor-parallel keys) is read as the entry its variant gives
    for ``raw``, which checks the keys it reads."""
    if entry.variant is not None:
        entry = entry.variant(raw)
    said = {key: alias for alias, key in entry.aliases.items() if alias in raw}  # errors name it
    raw = {**raw, **{key: raw[alias] for key, alias in said.items()}}
    _check_honoured(raw, entry)  # and the boolean keys
    got, keys = {}, {}
    for name, (key, default) in entry.keys.items():
        keys[name] = said.get(key, key)
        derived = isinstance(default, str) and default.startswith("=")
        if key in raw and raw[key] is None and name in _NULL_DERIVED:
            got[name] = _NULL_DERIVED[name]
        elif key in raw and (raw[key] is not None or not (derived or default is REQUIRED)):
            got[name] = raw[key]  # an explicit null is None (Mistral's full attention)
        elif default is REQUIRED:
            raise LoadError(f"config.json has no {key!r}, which {entry.family} models need.")
        else:
            got[name] = default
    _rope_parameters(raw, got, keys)
    ints = ("layers", "hidden", "heads", "mlp_hidden", "vocab", "context")
    for name in ints:
        if not (isinstance(got[name], str) and got[name].startswith("=")):
            got[name] = n.integer(got[name], keys[name])
    got["kv_heads"] = got["heads"] if got["kv_heads"] == "=heads" else n.integer(
        got["kv_heads"], keys["kv_heads"])  # fmt: skip
    if got["head_dim"] == "=hidden/heads":
        if got["hidden"] % got["heads"]:
            raise LoadError(
                f"config.json: {keys['hidden']} = {got['hidden']} is not a multiple of "
                f"{keys['heads']} = {got['heads']} (and there is no head_dim)."
            )
        got["head_dim"] = got["hidden"] // got["heads"]
    head_dim = n.integer(got["head_dim"], keys["head_dim"])
    if got["heads"] % got["kv_heads"]:
        raise LoadError(
            f"config.json: {keys['heads']} = {got['heads']} is not a multiple of "
            f"{keys['kv_heads']} = {got['kv_heads']}."
        )
    mlp_hidden = 4 * got["hidden"] if got["mlp_hidden"] == "=4*hidden" else got["mlp_hidden"]
    activation = None
    if "activation" in got:
        name = got["activation"]
        if name not in ACTIVATIONS_HF:
            raise LoadError(
                f"config.json: {keys['activation']} = {name!r} is an activation tpde does not "
                f"implement (it reads {', '.join(ACTIVATIONS_HF)})."
            )
        activation = ACTIVATIONS_HF[entry.facts.get("activation_aliases", {}).get(name, name)]
    window = got.get("window")
    if window is not None:
        window = n.integer(window, keys["window"])
    switched = None if entry.window_switch is None else _switched(raw, entry, got, window, n)
    offset = 0
    pad_types = entry.facts.get("pad_offset_types", {})  # model_type → its default pad id
    if raw.get("model_type") in pad_types:
        pad = got["pad"] if keys["pad"] in raw else pad_types[raw["model_type"]]
        offset = n.integer(pad, keys["pad"], low=0) + 1
    context = got["context"] - offset
    if context < 1:
        raise LoadError(
            f"config.json: {keys['context']} = {got['context']} leaves no position after the "
            f"offset {offset}."
        )
    if "norm_eps" not in got:  # a family whose ε no key holds (OLMo: 1e-5)
        got["norm_eps"], keys["norm_eps"] = entry.facts["norm_eps"], "norm_eps (fixed)"
    if entry.rotary and "rope_base" not in got:
        got["rope_base"], keys["rope_base"] = entry.facts["rope_base"], "rope_base (fixed)"
    rope = n.positive(got["rope_base"], keys["rope_base"]) if entry.rotary else None
    tied = got.get("tied", entry.facts.get("tied", False))
    if not isinstance(tied, bool):
        raise LoadError(
            f"config.json: {keys.get('tied')} must be true or false; received {tied!r}."
        )
    extra = {**_peri_ln_hyper(raw, entry, got, keys, n), **_groups_and_labels(raw, entry, n)}
    extra.update(_multipliers(got, keys, entry, n))
    extra.update(_experts_hyper(entry, got, keys, n))
    if switched is not None:  # Qwen: the window, on the layers that slide (one RoPE for all)
        window, extra["local_layers"] = switched
        extra["rope_local_base"] = None if extra["local_layers"] is None else rope
    rotary_dims = _rotary_dims(raw, entry, got, keys, head_dim, n)
    if entry.rotary and "rope_base" in entry.keys:  # RoPE read from config.json (not GPT-J's)
        local = got.get("rope_local_base") not in (None, "=rope_base")  # Gemma-3: RoPE per type
        extra["rope_scaling"] = rope_scaling_from_config(
            raw, context=got["context"], dims=rotary_dims or head_dim, per_layer_type=local,
            error=LoadError,
        )  # fmt: skip
    return ModelConfig(
        **extra,
        model_type=str(raw.get("model_type")),
        layers=got["layers"],
        hidden=got["hidden"],
        heads=got["heads"],
        kv_heads=got["kv_heads"],
        head_dim=head_dim,
        mlp_hidden=mlp_hidden,
        vocab=got["vocab"],
        context=context,
        norm_eps=n.positive(got["norm_eps"], keys["norm_eps"]),
        rope_base=rope,
        activation=activation,
        window=window,
        tied_embeddings=tied,
        type_vocab=n.integer(got["type_vocab"], keys["type_vocab"])
        if "type_vocab" in got
        else None,
        position_offset=offset,
        rotary_dims=rotary_dims,
        parallel=_parallel(raw, entry),
        embedding_size=n.integer(got["embedding_size"], keys["embedding_size"])
        if "embedding_size" in got
        else None,
    )


# ---------------------------------------------------------------------- parallel blocks
def _rotary_dims(raw: dict, entry: Family, got: dict, keys: dict, head_dim: int, n: Naming):
    """The rotated width r of each head, or None for the whole head (module table)."""
    if not entry.rotary or "rotary" not in got:
        return None
    value, key = got["rotary"], keys["rotary"]
    if entry.facts["rotary"] == "fraction":
        params = raw.get("rope_parameters")
        if isinstance(params, dict) and "partial_rotary_factor" in params:
            value, key = params["partial_rotary_factor"], "rope_parameters.partial_rotary_factor"
        fraction = n.positive(value, key)
        if fraction > 1:
            raise LoadError(f"config.json: {key} must lie in (0, 1]; received {value!r}.")
        dims = int(head_dim * fraction)  # as transformers: int(head_dim * factor)
    else:
        dims = head_dim if value is None else n.integer(value, key)
    if dims % 2 or dims > head_dim:
        raise LoadError(
            f"config.json: {key} = {value!r} rotates {dims} coordinates of heads of dimension "
            f"{head_dim}; RoPE rotates an even number of them, at most the head dimension."
        )
    return None if dims == head_dim else dims


def _parallel(raw: dict, entry: Family) -> bool:
    """Whether attention and MLP are one step (``entry.parallel``, or its config key)."""
    if not isinstance(entry.parallel, str | tuple):
        return bool(entry.parallel)
    key, default = (entry.parallel, True) if isinstance(entry.parallel, str) else entry.parallel
    return raw.get(key, default)  # a bool: _check_bools read it first


def _multipliers(got: dict, keys: dict, entry: Family, n: Naming) -> dict:
    """The scales a family reads from its own keys (Granite's multipliers, Cohere's logit
    scale, OLMo's clip), overriding :class:`ModelConfig`'s defaults: ``embed_scale``,
    ``attention_scale``, ``residual_scale``, ``logit_scale`` (its inverse where the family's
    ``facts["logit_scale"]`` is "divide": logits / s) and ``clip_qkv`` (None: no clip)."""
    out = {}
    for name in ("embed_scale", "attention_scale", "residual_scale", "logit_scale"):
        if name in got:
            out[name] = n.positive(got[name], keys[name])
    if entry.facts.get("logit_scale") == "divide" and "logit_scale" in out:
        out["logit_scale"] = 1.0 / out["logit_scale"]
    if got.get("clip_qkv") is not None:
        out["clip_qkv"] = n.positive(got["clip_qkv"], keys["clip_qkv"])
    return out


def _rope_parameters(raw: dict, got: dict, keys: dict) -> None:
    """The one reader of a config's RoPE keys beyond ``rope_theta`` (their refusals are the
    families' ``honoured`` entries): the RoPE bases of transformers 5's ``rope_parameters``,
    one dict, or one per layer type (``full_attention``: the global base;
    ``sliding_attention``: the local one)."""
    params = raw.get("rope_parameters")
    if not isinstance(params, dict):
        return
    if "rope_theta" in params:
        got["rope_base"] = params["rope_theta"]
        keys["rope_base"] = "rope_parameters.rope_theta"
    for name, kind in (("rope_base", "full_attention"), ("rope_local_base", "sliding_attention")):
        if isinstance(params.get(kind), dict) and "rope_theta" in params[kind]:
            got[name] = params[kind]["rope_theta"]
            keys[name] = f"rope_parameters.{kind}.rope_theta"


def _switched(raw: dict, entry: Family, got: dict, window, n: Naming):
    """Qwen's sliding window, as transformers' ``Qwen2Config.__post_init__``: w =
    ``sliding_window`` where ``use_sliding_window`` (the entry's ``window_switch``) is true,
    else none; layer l slides where ``layer_types`` says ``sliding_attention``, or, without
    ``layer_types``, where w is set and l ≥ ``max_window_layers``. Returns (w, local_layers),
    (None, None) where no layer slides: full attention, whatever the other keys say."""
    if not raw.get(entry.window_switch, False):
        window = None
    layers = got["layers"]
    local = _layer_types(raw, layers)
    if local is None:
        first = n.integer(got["window_from"], entry.keys["window_from"][0], low=0)
        local = tuple(window is not None and l >= first for l in range(layers))
    if not any(local):
        return None, None
    if window is None:
        raise LoadError(
            f"config.json: layer_types makes layers {[l for l, s in enumerate(local) if s]} "
            f"slide, but {entry.window_switch} is not true (transformers then has no "
            f"sliding_window for them); set {entry.window_switch} and sliding_window, or make "
            "them full_attention."
        )
    return window, local


def _layer_types(raw: dict, layers: int) -> tuple[bool, ...] | None:
    """config.json's ``layer_types`` as a flag per layer (True: ``sliding_attention``), or
    None where the file has none."""
    kinds = raw.get("layer_types")
    if kinds is None:
        return None
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise LoadError(
            f"config.json: layer_types must list one type per layer ({layers}); received {kinds!r}."
        )
    return tuple(kind == "sliding_attention" for kind in kinds)


def _optional_positive(got: dict, keys: dict, name: str, n: Naming):
    value = got.get(name)
    return None if value is None else n.positive(value, keys[name])


def _local_layers(raw: dict, entry: Family, layers: int, n: Naming) -> tuple[bool, ...] | None:
    """Which layers are local: config.json's ``layer_types``, else the entry's pattern
    (``sliding_window_pattern`` in the file overrides it): layer l global iff (l + 1) % p = 0."""
    if entry.window_pattern is None:
        return None
    local = _layer_types(raw, layers)
    if local is not None:
        return local
    pattern = raw.get("sliding_window_pattern", entry.window_pattern)
    pattern = n.integer(pattern, "sliding_window_pattern")
    return tuple(bool((l + 1) % pattern) for l in range(layers))


def _peri_ln_hyper(raw: dict, entry: Family, got: dict, keys: dict, n: Naming) -> dict:
    """The Peri-LN families' hyper-parameters (local/global layers, the query scalar, the
    soft-caps, the embedding scale); their defaults for every other family."""
    local = _local_layers(raw, entry, got["layers"], n)
    if local is not None and any(local) and got.get("window") is None:
        raise LoadError(
            f"config.json: {entry.family} has local layers but no sliding_window: tpde cannot "
            "tell how far back they look."
        )
    rope_local = got.get("rope_local_base")
    if rope_local == "=rope_base":
        rope_local = got["rope_base"]
    scalar = _optional_positive(got, keys, "query_scalar", n)
    return {
        "local_layers": local,
        "rope_local_base": None
        if "rope_local_base" not in got
        else n.positive(rope_local, keys["rope_local_base"]),
        "attention_scale": None if scalar is None else scalar**-0.5,
        "attn_softcap": _optional_positive(got, keys, "attn_softcap", n),
        "logit_softcap": _optional_positive(got, keys, "logit_softcap", n),
        "embed_scale": got["hidden"] ** 0.5 if entry.embed_scale else 1.0,
    }


# ---------------------------------------------------------------------- mixture of experts
def _experts_hyper(entry: Family, got: dict, keys: dict, n: Naming) -> dict:
    """E, k, the renormalisation and the shared expert's width of a mixture-of-experts
    family (``mlp`` "moe"); top-k > E refused naming both keys."""
    if entry.mlp != "moe":
        return {}
    experts, top_k = (
        n.integer(got["experts"], keys["experts"]),
        n.integer(got["top_k"], keys["top_k"]),
    )
    if top_k > experts:
        raise LoadError(
            f"config.json: {keys['top_k']} = {top_k} experts per token exceeds "
            f"{keys['experts']} = {experts} experts: a token cannot be routed to more experts "
            "than the layer has."
        )
    normalize = got.get("normalize_top_k", True)
    if not isinstance(normalize, bool):
        raise LoadError(
            f"config.json: {keys['normalize_top_k']} must be true or false; received {normalize!r}."
        )
    shared = got.get("shared_hidden")
    return {
        "experts": experts,
        "top_k": top_k,
        "normalize_top_k": normalize,
        "shared_hidden": None if shared is None else n.integer(shared, keys["shared_hidden"]),
    }


# ---------------------------------------------------------------------- ALBERT, task heads
def _groups_and_labels(raw: dict, entry: Family, n: Naming) -> dict:
    """ALBERT's groups (G, blocks of a group) and the classes of a sequence-classification
    head (config.json's ``architectures`` names a ``*ForSequenceClassification``)."""
    out = {}
    if entry.layer_groups is not None:
        for name, key in zip(("groups", "group_blocks"), entry.layer_groups, strict=True):
            out[name] = n.integer(raw.get(key, 1), key)
    names = raw.get("architectures") or ()
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise LoadError(f"config.json: architectures must list class names; received {names!r}.")
    classifying = [n for n in names if n.endswith("ForSequenceClassification")]
    if classifying and not entry.classifiers:
        readers = sorted(a.family for a in FAMILIES.values() if a.classifiers)
        raise LoadError(
            f"config.json: architectures names {classifying[0]}, a sequence-classification "
            f"head tpde does not read for {entry.family} models (it reads the heads of "
            f"{', '.join(readers)}); load a checkpoint of the base or language model."
        )
    if classifying:
        labels = raw.get("id2label")
        if labels is None:
            out["labels"] = n.integer(raw.get("num_labels", 2), "num_labels")
        elif not isinstance(labels, dict) or not labels:
            raise LoadError(
                f"config.json: id2label must map each class index to its name (a non-empty "
                f"dict); received {labels!r}."
            )
        else:
            out["labels"] = len(labels)
    return out
