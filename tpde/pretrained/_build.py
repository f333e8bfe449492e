"""The general builder: an architecture entry + config.json + tensors → a Transformer.

Nothing here is specific to a family: every difference is a field of the entry
(:mod:`tpde.pretrained.families`). The order is fixed so that nothing is half-built:
the config is read and checked (every key by name), the expected tensor names and shapes
are derived from it and compared with the files' headers (missing, unexpected, wrong
shape: each named), and only then are tensors read and fields built.
"""

from __future__ import annotations

import math

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
from tpde.pretrained._checkpoint import LoadError
from tpde.pretrained._config import ModelConfig, read_hyper
from tpde.pretrained.families.base import ACTIVATIONS_HF, Family
from tpde.pretrained.transformer import (
    Embedding,
    Layer,
    LayerGroup,
    MaskedLMTransform,
    Pooler,
    SequenceClassifier,
    Transformer,
)

__all__ = ["ATTENTION_ROLES", "ModelConfig", "build", "expected_shapes", "read_hyper"]

_LINEAR = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2", "embed_map",
           "mlm_dense", "pooler", "cls_dense", "classifier")  # fmt: skip
#: The linear roles of a Conv1D checkpoint stored (in, out): the blocks' (GPT-2's task heads,
#: ``score``, are nn.Linear, stored (out, in)).
_CONV1D = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2")
#: The roles an attention sublayer reads (:func:`_attention`): what a block's structure needs.
ATTENTION_ROLES = ("q", "k", "v", "o", "qkv", "q_norm", "k_norm")
_NORMS = ("attn_norm", "mlp_norm", "final_norm", "embed_norm", "q_norm", "k_norm", "mlm_norm",
          "attn_post_norm", "mlp_post_norm")  # fmt: skip


# ---------------------------------------------------------------------- tensor names
def _bias(entry: Family, role: str, raw: dict) -> bool:
    flag = entry.biases.get(role, False)
    if isinstance(flag, tuple):  # (config key, default where the key is absent)
        return bool(raw.get(flag[0], flag[1]))
    return bool(raw.get(flag, False)) if isinstance(flag, str) else flag


def _present(entry: Family, role: str, raw: dict) -> bool:
    """Whether the files hold ``role``: always, or as its ``optional`` config key says
    (a bool, checked by :func:`read_hyper`)."""
    key = entry.optional.get(role)
    return True if key is None else raw.get(key, False)


def _role_shapes(cfg: ModelConfig, entry: Family) -> dict[str, tuple[int, ...]]:
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
        "pooler": (d, d), "cls_dense": (d, d), "classifier": (cfg.labels or 0, d),
    }  # fmt: skip


def expected_shapes(cfg: ModelConfig, entry: Family, raw: dict, prefix: str, found=None) -> dict:
    """name → (role, block or None, part, shape as stored) of every tensor the model reads
    (with the masked-LM head whose dense weight is among the ``found`` names, and the task
    heads of :func:`task_heads`). Block b of a per-block template is ``{l}`` = b, or for
    ALBERT's groups ``{g}`` = ⌊b/k⌋ and ``{j}`` = b mod k (k blocks a group)."""
    shapes, out = _role_shapes(cfg, entry), {}
    names = {r: prefix + t for r, t in entry.names.items() if _present(entry, r, raw)}
    head = mlm_head(entry, found or {})
    if head is not None:
        names.update({r: n for r, n in head.items() if r in ("mlm_dense", "mlm_norm", "head")})
        out[head["mlm_bias"]] = ("mlm_bias", None, "bias", shapes["mlm_bias"])
    names.update(task_heads(cfg, entry, prefix, found or {}))
    k, blocks = cfg.group_blocks, range(cfg.blocks)
    for role, template in names.items():
        if role == "head" and (cfg.tied_embeddings or cfg.labels is not None):
            continue  # tied, or a classification model: no language-model head
        per_layer = "{l}" in template or "{g}" in template
        for l in blocks if per_layer else [None]:
            base = template.format(l=l, g=l // k, j=l % k) if per_layer else template
            shape = shapes[role]
            if role in _LINEAR:
                stored = shape[::-1] if entry.conv1d and role in _CONV1D else shape
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


def mlm_head(entry: Family, found) -> dict | None:
    """The first of ``entry.mlm_heads`` whose dense weight is among the ``found`` names."""
    for head in entry.mlm_heads:
        if f"{head['mlm_dense']}.weight" in found:
            return head
    return None


def task_heads(cfg: ModelConfig, entry: Family, prefix: str, found) -> dict:
    """Role → name of the task heads read: the sequence-classification head where the config
    asks for one (``cfg.labels``; the first of ``entry.classifiers`` whose weight is
    ``found``), and the pooler where the files hold it or that head reads it."""
    out, head = {}, {}
    if cfg.labels is not None:
        head = next((h for h in entry.classifiers if f"{h['classifier']}.weight" in found),
                    entry.classifiers[0])  # fmt: skip
        out = {r: n for r, n in head.items() if r in ("classifier", "cls_dense")}
    pooled = bool(out) and "cls_dense" not in out and head.get("token") != "last"
    if entry.pooler is not None and (pooled or f"{prefix}{entry.pooler}.weight" in found):
        out = {**out, "pooler": prefix + entry.pooler}
    return out


def check_names(expected: dict, found: dict, entry: Family, prefix: str, where) -> None:
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
def _gather(expected: dict, tensors: dict, entry: Family) -> dict:
    """(role, layer) → {"weight": tensor (out, in), "bias": tensor or None}."""
    out = {}
    for name, (role, l, part, _) in expected.items():
        tensor = tensors[name]
        if part == "weight" and role in _CONV1D and entry.conv1d:
            tensor = tensor.T.contiguous()
        out.setdefault((role, l), {"weight": None, "bias": None})[part] = tensor
    return out


def _norm(w: dict | None, cfg: ModelConfig, entry: Family, placement: str):
    if w is None:
        return None
    if entry.norm == "rmsnorm":
        gain = w["weight"] + entry.gain_offset if entry.gain_offset else w["weight"]
        return RMSNorm(gain, cfg.norm_eps, placement=placement)
    return LayerNorm(w["weight"], w["bias"], cfg.norm_eps, placement=placement)


def _attention(p: dict, cfg: ModelConfig, entry: Family, l: int) -> GroupedQueryAttention:
    if "qkv" in p:
        p = {**p, **_split_qkv(p["qkv"], cfg, entry)}
    norms = {r: _norm(p.get(r), cfg, entry, "pre") for r in ("q_norm", "k_norm")}
    rope = None
    if entry.rotary:
        style = entry.facts.get("rope_style", "half")
        rope = RoPE(
            base=cfg.layer_rope_base(l), dims=cfg.rotary_dims, style=style,
            scaling=cfg.layer_rope_scaling(l),
        )  # fmt: skip
    return GroupedQueryAttention(
        p["q"]["weight"], p["k"]["weight"], p["v"]["weight"], p["o"]["weight"],
        cfg.heads, cfg.kv_heads,
        scale=1 / math.sqrt(cfg.head_dim) if cfg.attention_scale is None else cfg.attention_scale,
        position=rope, causal=entry.causal, window=cfg.layer_window(l), bq=p["q"]["bias"],
        bk=p["k"]["bias"], bv=p["v"]["bias"], bo=p["o"]["bias"], q_norm=norms["q_norm"],
        k_norm=norms["k_norm"], softcap=cfg.attn_softcap,
    )  # fmt: skip


def _split_qkv(fused: dict, cfg: ModelConfig, entry: Family) -> dict:
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


def _mlp(p: dict, cfg: ModelConfig, entry: Family):
    if entry.mlp == "swiglu":
        return SwiGLU(p["gate"]["weight"], p["up"]["weight"], p["down"]["weight"],
                      activation=cfg.activation or "silu")  # fmt: skip
    return MLP(p["fc1"]["weight"], p["fc1"]["bias"], p["fc2"]["weight"], p["fc2"]["bias"],
               activation=cfg.activation)  # fmt: skip


def _layer(p: dict, cfg: ModelConfig, entry: Family, l: int) -> Layer:
    """Block l of its weights ``p`` (role → weight and bias)."""
    attention, mlp = _attention(p, cfg, entry, l), _mlp(p, cfg, entry)
    n1 = _layer_norm(p, "attn", cfg, entry)
    shared = entry.placement in ("pre", "post") and "mlp_norm" not in p  # one norm (Phi, GPT-J)
    n2 = n1 if shared else _layer_norm(p, "mlp", cfg, entry)
    parts = [Normalized(attention, n1), Normalized(mlp, n2)]
    field = Sum([Parallel(parts)]) if cfg.parallel else Sum(parts)
    return Layer(attention, mlp, n1, n2, field)


def _layer_norm(p: dict, sublayer: str, cfg: ModelConfig, entry: Family):
    """N of a sublayer ("attn" or "mlp"): its norm with the entry's placement, or for
    "sandwich"/"output" the :class:`Sandwich` of its input norm (if any) and output norm."""
    if entry.placement in ("pre", "post"):
        return _norm(p[f"{sublayer}_norm"], cfg, entry, entry.placement)
    before = _norm(p.get(f"{sublayer}_norm"), cfg, entry, "pre")
    return Sandwich(before, _norm(p[f"{sublayer}_post_norm"], cfg, entry, "pre"))


def _mlm_transform(g: dict, cfg: ModelConfig, entry: Family, head: dict):
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


def build(cfg, entry: Family, expected: dict, tensors: dict, tokenizer) -> Transformer:
    """The Transformer of checked tensors (names and shapes as ``expected``)."""
    w = _gather(expected, tensors, entry)
    blocks = [
        _layer({r: v for (r, block), v in w.items() if block == b}, cfg, entry, b)
        for b in range(cfg.blocks)
    ]
    layers = _layers(blocks, cfg)
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
    if ("head" in entry.names or mlm is not None) and cfg.labels is None:
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
        pooler=Pooler(g["pooler"]["weight"], g["pooler"]["bias"]) if "pooler" in g else None,
        classifier=_classifier(g, entry, expected),
    )


def _layers(blocks: list, cfg: ModelConfig) -> list:
    """The L layers of the stored blocks: block l, or (ALBERT) group ⌊l/(L/G)⌋ — one
    :class:`Layer` object, or a :class:`LayerGroup` of its k blocks in order — so that a
    group shared by several layers is one field object, repeated (an autonomous piece)."""
    if cfg.groups is None:
        return blocks
    k = cfg.group_blocks
    groups = [blocks[g * k : (g + 1) * k] for g in range(cfg.groups)]
    groups = [members[0] if k == 1 else LayerGroup.of(members) for members in groups]
    return [groups[cfg.layer_group(i)] for i in range(cfg.layers)]


def _classifier(g: dict, entry: Family, expected: dict):
    """The sequence-classification head of the gathered weights (None without one)."""
    if "classifier" not in g:
        return None
    head = next(h for h in entry.classifiers if f"{h['classifier']}.weight" in expected)
    dense = g.get("cls_dense")
    own = None if dense is None else Pooler(dense["weight"], dense["bias"])
    token = head.get("token", "first")
    return SequenceClassifier(g["classifier"]["weight"], g["classifier"]["bias"], own, token)
