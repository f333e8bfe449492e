"""The general builder: an architecture entry + config.json + tensors → a Transformer.

Nothing here is specific to a family: every difference is a field of the entry
(:mod:`tpde.pretrained.architectures`). The order is fixed so that nothing is half-built:
the config is read and checked (every key by name), the expected tensor names and shapes
are derived from it and compared with the files' headers (missing, unexpected, wrong
shape: each named), and only then are tensors read and fields built.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from tpde.fields import (
    MLP,
    GroupedQueryAttention,
    LayerNorm,
    LayerSchedule,
    Normalized,
    Parallel,
    RMSNorm,
    RoPE,
    Sandwich,
    Sum,
    SwiGLU,
)
from tpde.pretrained._folder import LoadError
from tpde.pretrained.architectures import ACTIVATIONS_HF, REQUIRED, Architecture
from tpde.pretrained.transformer import Embedding, Layer, MaskedLMTransform, Transformer

__all__ = ["ModelConfig", "build", "expected_shapes", "read_hyper"]

_LINEAR = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2", "embed_map",
           "mlm_dense")  # fmt: skip
_NORMS = ("attn_norm", "mlp_norm", "final_norm", "embed_norm", "q_norm", "k_norm", "mlm_norm",
          "attn_post_norm", "mlp_post_norm")  # fmt: skip


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

    def layer_window(self, l: int) -> int | None:
        """The sliding window of layer l (None: it sees every earlier token)."""
        local = self.local_layers is None or self.local_layers[l]
        return self.window if local else None

    def layer_rope_base(self, l: int) -> float | None:
        """The RoPE base of layer l (its local base on a local layer)."""
        if self.local_layers is not None and self.local_layers[l]:
            return self.rope_local_base
        return self.rope_base


# ---------------------------------------------------------------------- config
def _lookup(raw: dict, key: str):
    """raw[key], with "a.b" reading a nested dict; a KeyError when absent."""
    value = raw
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def _check_honoured(raw: dict, entry: Architecture) -> None:
    for key, allowed in entry.honoured.items():
        try:
            value = _lookup(raw, key)
        except KeyError:
            continue
        values = value if isinstance(value, list) and key == "layer_types" else [value]
        for item in values:
            if item not in allowed:
                raise LoadError(
                    f"config.json sets {key} = {value!r}, which changes the computation in a way "
                    f"tpde does not implement for {entry.family} models (it reads "
                    f"{' or '.join(map(repr, allowed))}); tpde refuses rather than ignore it."
                )


def _integer(value, key: str, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LoadError(f"config.json: {key} must be an integer; received {value!r}.")
    if value < low:
        raise LoadError(f"config.json: {key} must be an integer >= {low}; received {value}.")
    return int(value)


def _positive(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LoadError(f"config.json: {key} must be a number; received {value!r}.")
    if not (math.isfinite(value) and value > 0):
        raise LoadError(f"config.json: {key} must be finite and > 0; received {value!r}.")
    return float(value)


def read_hyper(raw: dict, entry: Architecture) -> ModelConfig:
    """The checked hyper-parameters of ``raw`` (config.json) for the family ``entry``."""
    _check_honoured(raw, entry)
    got, keys = {}, {}
    for name, (key, default) in entry.keys.items():
        keys[name] = key
        if key in raw and raw[key] is not None:
            got[name] = raw[key]
        elif default is REQUIRED:
            raise LoadError(f"config.json has no {key!r}, which {entry.family} models need.")
        else:
            got[name] = default
    _rope_parameters(raw, got, keys)
    ints = ("layers", "hidden", "heads", "mlp_hidden", "vocab", "context")
    for name in ints:
        if not (isinstance(got[name], str) and got[name].startswith("=")):
            got[name] = _integer(got[name], keys[name])
    got["kv_heads"] = got["heads"] if got["kv_heads"] == "=heads" else _integer(
        got["kv_heads"], keys["kv_heads"])  # fmt: skip
    if got["head_dim"] == "=hidden/heads":
        if got["hidden"] % got["heads"]:
            raise LoadError(
                f"config.json: {keys['hidden']} = {got['hidden']} is not a multiple of "
                f"{keys['heads']} = {got['heads']} (and there is no head_dim)."
            )
        got["head_dim"] = got["hidden"] // got["heads"]
    head_dim = _integer(got["head_dim"], keys["head_dim"])
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
        activation = ACTIVATIONS_HF[name]
    window = got.get("window")
    if entry.facts.get("no_window"):
        window = None  # read only with use_sliding_window, which `honoured` refuses
    if window is not None:
        window = _integer(window, keys["window"])
    offset = 0
    if raw.get("model_type") in entry.facts.get("pad_offset_types", ()):
        offset = _integer(got["pad"], keys["pad"], low=0) + 1
    context = got["context"] - offset
    if context < 1:
        raise LoadError(
            f"config.json: {keys['context']} = {got['context']} leaves no position after the "
            f"offset {offset}."
        )
    if entry.rotary and "rope_base" not in got:
        got["rope_base"], keys["rope_base"] = entry.facts["rope_base"], "rope_base (fixed)"
    rope = _positive(got["rope_base"], keys["rope_base"]) if entry.rotary else None
    tied = got.get("tied", entry.facts.get("tied", False))
    if not isinstance(tied, bool):
        raise LoadError(
            f"config.json: {keys.get('tied')} must be true or false; received {tied!r}."
        )
    extra = _peri_ln_hyper(raw, entry, got, keys)
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
        norm_eps=_positive(got["norm_eps"], keys["norm_eps"]),
        rope_base=rope,
        activation=activation,
        window=window,
        tied_embeddings=tied,
        type_vocab=_integer(got["type_vocab"], keys["type_vocab"]) if "type_vocab" in got else None,
        position_offset=offset,
        rotary_dims=_rotary_dims(raw, entry, got, keys, head_dim),
        parallel=_parallel(raw, entry),
        embedding_size=_integer(got["embedding_size"], keys["embedding_size"])
        if "embedding_size" in got
        else None,
    )


# ---------------------------------------------------------------------- parallel blocks
def _rotary_dims(raw: dict, entry: Architecture, got: dict, keys: dict, head_dim: int):
    """The rotated width r of each head, or None for the whole head (module table)."""
    if not entry.rotary or "rotary" not in got:
        return None
    value, key = got["rotary"], keys["rotary"]
    if entry.facts["rotary"] == "fraction":
        params = raw.get("rope_parameters")
        if isinstance(params, dict) and "partial_rotary_factor" in params:
            value, key = params["partial_rotary_factor"], "rope_parameters.partial_rotary_factor"
        fraction = _positive(value, key)
        if fraction > 1:
            raise LoadError(f"config.json: {key} must lie in (0, 1]; received {value!r}.")
        dims = int(head_dim * fraction)  # as transformers: int(head_dim * factor)
    else:
        dims = head_dim if value is None else _integer(value, key)
    if dims % 2 or dims > head_dim:
        raise LoadError(
            f"config.json: {key} = {value!r} rotates {dims} coordinates of heads of dimension "
            f"{head_dim}; RoPE rotates an even number of them, at most the head dimension."
        )
    return None if dims == head_dim else dims


def _parallel(raw: dict, entry: Architecture) -> bool:
    """Whether attention and MLP are one step (``entry.parallel``, or its config key)."""
    if not isinstance(entry.parallel, str):
        return bool(entry.parallel)
    value = raw.get(entry.parallel, True)
    if not isinstance(value, bool):
        raise LoadError(f"config.json: {entry.parallel} must be true or false; received {value!r}.")
    return value


def _rope_parameters(raw: dict, got: dict, keys: dict) -> None:
    """The RoPE bases of transformers 5's ``rope_parameters``: one dict, or one per layer
    type (``full_attention``: the global base; ``sliding_attention``: the local one)."""
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


def _optional_positive(got: dict, keys: dict, name: str):
    value = got.get(name)
    return None if value is None else _positive(value, keys[name])


def _local_layers(raw: dict, entry: Architecture, layers: int) -> tuple[bool, ...] | None:
    """Which layers are local: config.json's ``layer_types``, else the entry's pattern
    (``sliding_window_pattern`` in the file overrides it): layer l global iff (l + 1) % p = 0."""
    if entry.window_pattern is None:
        return None
    kinds = raw.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != layers:
            raise LoadError(
                f"config.json: layer_types must list one type per layer ({layers}); received "
                f"{kinds!r}."
            )
        return tuple(kind == "sliding_attention" for kind in kinds)
    pattern = raw.get("sliding_window_pattern", entry.window_pattern)
    pattern = _integer(pattern, "sliding_window_pattern")
    return tuple(bool((l + 1) % pattern) for l in range(layers))


def _peri_ln_hyper(raw: dict, entry: Architecture, got: dict, keys: dict) -> dict:
    """The Peri-LN families' hyper-parameters (local/global layers, the query scalar, the
    soft-caps, the embedding scale); their defaults for every other family."""
    local = _local_layers(raw, entry, got["layers"])
    if local is not None and any(local) and got.get("window") is None:
        raise LoadError(
            f"config.json: {entry.family} has local layers but no sliding_window: tpde cannot "
            "tell how far back they look."
        )
    rope_local = got.get("rope_local_base")
    if rope_local == "=rope_base":
        rope_local = got["rope_base"]
    scalar = _optional_positive(got, keys, "query_scalar")
    return {
        "local_layers": local,
        "rope_local_base": None
        if rope_local is None
        else _positive(rope_local, keys["rope_local_base"]),
        "attention_scale": None if scalar is None else scalar**-0.5,
        "attn_softcap": _optional_positive(got, keys, "attn_softcap"),
        "logit_softcap": _optional_positive(got, keys, "logit_softcap"),
        "embed_scale": got["hidden"] ** 0.5 if entry.embed_scale else 1.0,
    }


# ---------------------------------------------------------------------- tensor names
def _bias(entry: Architecture, role: str, raw: dict) -> bool:
    flag = entry.biases.get(role, False)
    if isinstance(flag, tuple):  # (config key, default where the key is absent)
        return bool(raw.get(flag[0], flag[1]))
    return bool(raw.get(flag, False)) if isinstance(flag, str) else flag


def _role_shapes(cfg: ModelConfig, entry: Architecture) -> dict[str, tuple[int, ...]]:
    """The (out, in) weight shape of every linear role and the gain shape of every norm."""
    d, k, m = cfg.hidden, cfg.head_dim, cfg.mlp_hidden
    e = cfg.embedding_size or d  # ALBERT's factorised embeddings: E, mapped to d
    q, kv = cfg.heads * k, cfg.kv_heads * k
    qk = ((q,), (kv,)) if entry.qk_norm_whole else ((k,), (k,))
    return {
        "q": (q, d), "k": (kv, d), "v": (kv, d), "o": (d, q), "qkv": (q + 2 * kv, d),
        "gate": (m, d), "up": (m, d), "down": (d, m), "fc1": (m, d), "fc2": (d, m),
        "attn_norm": (d,), "mlp_norm": (d,), "final_norm": (d,), "embed_norm": (e,),
        "attn_post_norm": (d,), "mlp_post_norm": (d,), "q_norm": qk[0], "k_norm": qk[1],
        "embed": (cfg.vocab, e), "head": (cfg.vocab, e), "embed_map": (d, e),
        "positions": (cfg.context + cfg.position_offset, e),
        "token_types": (cfg.type_vocab or 0, e),
        "mlm_dense": (e, d), "mlm_norm": (e,), "mlm_bias": (cfg.vocab,),
    }  # fmt: skip


def expected_shapes(
    cfg: ModelConfig, entry: Architecture, raw: dict, prefix: str, found=None
) -> dict:
    """name → (role, layer or None, part, shape as stored) of every tensor the model reads
    (with the masked-LM head whose dense weight is among the ``found`` names)."""
    shapes, out = _role_shapes(cfg, entry), {}
    names = {role: prefix + template for role, template in entry.names.items()}
    head = mlm_head(entry, found or {})
    if head is not None:
        names.update({r: n for r, n in head.items() if r in ("mlm_dense", "mlm_norm", "head")})
        out[head["mlm_bias"]] = ("mlm_bias", None, "bias", shapes["mlm_bias"])
    for role, template in names.items():
        if role == "head" and cfg.tied_embeddings:
            continue
        per_layer = "{l}" in template
        for l in range(cfg.layers) if per_layer else [None]:
            base = template.format(l=l)
            shape = shapes[role]
            if role in _LINEAR:
                stored = shape[::-1] if entry.conv1d else shape
                out[f"{base}.weight"] = (role, l, "weight", stored)
                if _bias(entry, role, raw):
                    out[f"{base}.bias"] = (role, l, "bias", shape[:1])
            elif role in _NORMS:
                out[f"{base}.weight"] = (role, l, "weight", shape)
                if entry.norm == "layernorm":
                    out[f"{base}.bias"] = (role, l, "bias", shape)
            else:
                out[f"{base}.weight"] = (role, l, "weight", shape)
                if role == "head" and _bias(entry, role, raw):
                    out[f"{base}.bias"] = (role, l, "bias", shape[:1])
    return out


def mlm_head(entry: Architecture, found) -> dict | None:
    """The first of ``entry.mlm_heads`` whose dense weight is among the ``found`` names."""
    for head in entry.mlm_heads:
        if f"{head['mlm_dense']}.weight" in found:
            return head
    return None


def check_names(expected: dict, found: dict, entry: Architecture, prefix: str, where) -> None:
    """Raise naming the first missing, wrong-shaped or unexpected tensor."""
    for name, (_, _, _, shape) in expected.items():
        if name not in found:
            raise LoadError(f"{where}: the tensor {name!r} is missing (shape {shape} expected).")
        if tuple(found[name]) != tuple(shape):
            raise LoadError(
                f"{where}: the tensor {name!r} has shape {tuple(found[name])}; the config implies "
                f"{tuple(shape)}."
            )
    head = mlm_head(entry, found)
    tied_head = {prefix + entry.names.get("head", "?") + ".weight"}
    if head is not None:  # the decoder tied to the embeddings, its bias a copy of mlm_bias
        tied_head |= {head["head"] + ".weight", *head["ignored"]}
    for name in found:
        if name in expected or name.startswith(tuple(entry.ignored)) or name in tied_head:
            continue  # a tied head saved anyway is the embedding
        if name.endswith(tuple(entry.buffers)):
            continue  # a buffer the architecture recomputes (GPT-2's causal mask)
        raise LoadError(
            f"{where}: the tensor {name!r} (shape {tuple(found[name])}) is not one a "
            f"{entry.family} model reads: the checkpoint is of another architecture or "
            "variant than its config.json says."
        )


# ---------------------------------------------------------------------- fields
def _gather(expected: dict, tensors: dict, entry: Architecture) -> dict:
    """(role, layer) → {"weight": tensor (out, in), "bias": tensor or None}."""
    out = {}
    for name, (role, l, part, _) in expected.items():
        tensor = tensors[name]
        if part == "weight" and role in _LINEAR and entry.conv1d:
            tensor = tensor.T.contiguous()
        out.setdefault((role, l), {"weight": None, "bias": None})[part] = tensor
    return out


def _norm(w: dict | None, cfg: ModelConfig, entry: Architecture, placement: str):
    if w is None:
        return None
    if entry.norm == "rmsnorm":
        gain = w["weight"] + entry.gain_offset if entry.gain_offset else w["weight"]
        return RMSNorm(gain, cfg.norm_eps, placement=placement)
    return LayerNorm(w["weight"], w["bias"], cfg.norm_eps, placement=placement)


def _attention(p: dict, cfg: ModelConfig, entry: Architecture, l: int) -> GroupedQueryAttention:
    if "qkv" in p:
        p = {**p, **_split_qkv(p["qkv"], cfg, entry)}
    norms = {r: _norm(p.get(r), cfg, entry, "pre") for r in ("q_norm", "k_norm")}
    rope = None
    if entry.rotary:
        style = entry.facts.get("rope_style", "half")
        rope = RoPE(base=cfg.layer_rope_base(l), dims=cfg.rotary_dims, style=style)
    return GroupedQueryAttention(
        p["q"]["weight"], p["k"]["weight"], p["v"]["weight"], p["o"]["weight"],
        cfg.heads, cfg.kv_heads,
        scale=1 / math.sqrt(cfg.head_dim) if cfg.attention_scale is None else cfg.attention_scale,
        position=rope, causal=entry.causal, window=cfg.layer_window(l), bq=p["q"]["bias"],
        bk=p["k"]["bias"], bv=p["v"]["bias"], bo=p["o"]["bias"], q_norm=norms["q_norm"],
        k_norm=norms["k_norm"], softcap=cfg.attn_softcap,
    )  # fmt: skip


def _split_qkv(fused: dict, cfg: ModelConfig, entry: Architecture) -> dict:
    """Q, K, V of a fused projection: blocks [W_q; W_k; W_v] (GPT-2), or head by head
    [q_h; k_h; v_h] for h = 0 … H − 1 (``qkv_layout`` "per_head": GPT-NeoX)."""
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    w, b = fused["weight"], fused["bias"]
    if entry.facts.get("qkv_layout") == "per_head":  # heads == kv_heads (checked: no GQA)
        h, k = cfg.heads, cfg.head_dim
        ws = w.reshape(h, 3, k, -1).unbind(1)
        ws = [x.reshape(h * k, -1) for x in ws]
        bs = [x.reshape(h * k) for x in b.reshape(h, 3, k).unbind(1)] if b is not None else None
    else:
        ws = w.split((q, kv, kv), 0)
        bs = b.split((q, kv, kv), 0) if b is not None else None
    bs = (None,) * 3 if bs is None else bs
    return {r: {"weight": x, "bias": y} for r, x, y in zip("qkv", ws, bs, strict=True)}


def _mlp(p: dict, cfg: ModelConfig, entry: Architecture):
    if entry.mlp == "swiglu":
        return SwiGLU(p["gate"]["weight"], p["up"]["weight"], p["down"]["weight"],
                      activation=cfg.activation or "silu")  # fmt: skip
    return MLP(p["fc1"]["weight"], p["fc1"]["bias"], p["fc2"]["weight"], p["fc2"]["bias"],
               activation=cfg.activation)  # fmt: skip


def _layer(p: dict, cfg: ModelConfig, entry: Architecture, l: int) -> Layer:
    """Block l of its weights ``p`` (role → weight and bias)."""
    attention, mlp = _attention(p, cfg, entry, l), _mlp(p, cfg, entry)
    n1 = _layer_norm(p, "attn", cfg, entry)
    shared = entry.placement in ("pre", "post") and "mlp_norm" not in p  # one norm (Phi, GPT-J)
    n2 = n1 if shared else _layer_norm(p, "mlp", cfg, entry)
    parts = [Normalized(attention, n1), Normalized(mlp, n2)]
    field = Sum([Parallel(parts)]) if cfg.parallel else Sum(parts)
    return Layer(attention, mlp, n1, n2, field)


def _layer_norm(p: dict, sublayer: str, cfg: ModelConfig, entry: Architecture):
    """N of a sublayer ("attn" or "mlp"): its norm with the entry's placement, or for
    "sandwich"/"output" the :class:`Sandwich` of its input norm (if any) and output norm."""
    if entry.placement in ("pre", "post"):
        return _norm(p[f"{sublayer}_norm"], cfg, entry, entry.placement)
    before = _norm(p.get(f"{sublayer}_norm"), cfg, entry, "pre")
    return Sandwich(before, _norm(p[f"{sublayer}_post_norm"], cfg, entry, "pre"))


def _mlm_transform(g: dict, cfg: ModelConfig, entry: Architecture, head: dict):
    """The masked-LM head's transform LN(σ(W x + b)) (None without a head)."""
    if head is None:
        return None
    activation = (
        cfg.activation if head["activation"] is None else ACTIVATIONS_HF[head["activation"]]
    )
    return MaskedLMTransform(
        g["mlm_dense"]["weight"], g["mlm_dense"]["bias"], activation,
        _norm(g["mlm_norm"], cfg, entry, "pre"),
    )  # fmt: skip


def build(cfg, entry: Architecture, expected: dict, tensors: dict, tokenizer) -> Transformer:
    """The Transformer of checked tensors (names and shapes as ``expected``)."""
    w = _gather(expected, tensors, entry)
    if entry.shared_layer:  # ALBERT: one layer object, applied L times (an autonomous flow)
        shared = _layer({r: v for (r, layer), v in w.items() if r in _LAYER_ROLES}, cfg, entry, 0)
        layers = [shared] * cfg.layers
    else:
        layers = [
            _layer({r: v for (r, layer), v in w.items() if layer == l}, cfg, entry, l)
            for l in range(cfg.layers)
        ]
    g = {role: value for (role, layer), value in w.items() if layer is None}
    embedding = Embedding(
        tokens=g["embed"]["weight"],
        positions=g["positions"]["weight"] if "positions" in g else None,
        scale=cfg.embed_scale,
        offset=cfg.position_offset,
        token_types=g["token_types"]["weight"] if "token_types" in g else None,
        norm=_norm(g.get("embed_norm"), cfg, entry, "pre"),
        projection=(g["embed_map"]["weight"], g["embed_map"]["bias"]) if "embed_map" in g else None,
    )
    head = head_bias = None
    mlm = next((h for h in entry.mlm_heads if h["mlm_bias"] in expected), None)
    if "head" in entry.names or mlm is not None:
        head = embedding.tokens if cfg.tied_embeddings else g["head"]["weight"]
        head_bias = None if cfg.tied_embeddings else g["head"]["bias"]
        if mlm is not None:
            head_bias = g["mlm_bias"]["bias"]
    return Transformer(
        config=cfg,
        layers=tuple(layers),
        schedule=LayerSchedule([layer.field for layer in layers]),
        embedding=embedding,
        final_norm=_norm(g.get("final_norm"), cfg, entry, "pre"),
        head=head,
        tokenizer=tokenizer,
        architecture=entry.family,
        head_bias=head_bias,
        head_transform=_mlm_transform(g, cfg, entry, mlm),
        logit_cap=cfg.logit_softcap,
    )


#: The roles of a block's own weights (a shared layer's are stored once, without {l}).
_LAYER_ROLES = frozenset(
    {"q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2", "attn_norm", "mlp_norm",
     "q_norm", "k_norm"}
)  # fmt: skip
