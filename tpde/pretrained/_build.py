"""The general builder: an architecture entry + config.json + tensors → a Transformer.

Nothing here is specific to a family: every difference is a field of the entry
(:mod:`tpde.pretrained.families`). The order is fixed so that nothing is half-built:
the config is read and checked (every key by name), the expected tensor names and shapes
are derived from it and compared with the files' headers (missing, unexpected, wrong
shape: each named), and only then are tensors read and fields built.
"""

from __future__ import annotations

from tpde.fields import (
    MLP,
    ALiBi,
    GroupedQueryAttention,
    LayerNorm,
    LayerSchedule,
    MixtureOfExperts,
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
           "mlm_dense", "pooler", "cls_dense", "classifier", "gate_up", "router", "expert_gate",
           "expert_up", "expert_down", "shared_gate", "shared_up", "shared_down",
           "shared_router")  # fmt: skip
#: The linear roles of a Conv1D checkpoint stored (in, out): the blocks' (GPT-2's task heads,
#: ``score``, are nn.Linear, stored (out, in)).
_CONV1D = ("q", "k", "v", "o", "qkv", "gate", "up", "down", "fc1", "fc2")
#: RoPE's frequencies θ_i, stored by older transformers (4.30 and before) as buffers; ignored,
#: as transformers ignores them: the layers compute θ_i from the config.
_ROTARY = ("rotary_emb.inv_freq",)
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
    (a bool, checked by :func:`read_hyper`; a pair (key, value): when the key equals it)."""
    key = entry.optional.get(role)
    if isinstance(key, tuple):
        return raw.get(key[0], False) == key[1]
    return True if key is None else raw.get(key, False)


def _norm_parts(entry: Family, role: str) -> tuple[str, ...]:
    """The tensors norm ``role`` stores: ``entry.norm_parts`` (the role's, else "*"'s), else
    weight (RMSNorm) or weight and bias (LayerNorm)."""
    default = ("weight", "bias") if entry.norm == "layernorm" else ("weight",)
    return entry.norm_parts.get(role, entry.norm_parts.get("*", default))


def _role_shapes(cfg: ModelConfig, entry: Family) -> dict[str, tuple[int, ...]]:
    """The (out, in) weight shape of every linear role and the gain shape of every norm."""
    d, k, m = cfg.hidden, cfg.head_dim, cfg.mlp_hidden
    e = cfg.embedding_size or d  # ALBERT's factorised embeddings: E, mapped to d
    q, kv = cfg.heads * k, cfg.kv_heads * k
    qk = ((q,), (kv,)) if entry.qk_norm_whole else ((k,), (k,))
    if entry.qk_norm_heads and "{h}" not in entry.names.get("q_norm", "{h}"):
        qk = ((cfg.heads, k), (cfg.kv_heads, k))  # one gain per head, stored (H, d_h)
    return {
        "q": (q, d), "k": (kv, d), "v": (kv, d), "o": (d, q), "qkv": (q + 2 * kv, d),
        "gate": (m, d), "up": (m, d), "down": (d, m), "fc1": (m, d), "fc2": (d, m),
        "gate_up": (2 * m, d),
        "attn_norm": (d,), "mlp_norm": (d,), "final_norm": (d,), "embed_norm": (e,),
        "attn_post_norm": (d,), "mlp_post_norm": (d,), "q_norm": qk[0], "k_norm": qk[1],
        "embed": (cfg.vocab, e), "head": (cfg.vocab, e), "embed_map": (d, e),
        "positions": (cfg.context + cfg.position_offset, e),
        "token_types": (cfg.type_vocab or 0, e),
        "mlm_dense": (e, d), "mlm_norm": (e,), "mlm_bias": (cfg.vocab,),
        "pooler": (d, d), "cls_dense": (d, d), "classifier": (cfg.labels or 0, d),
        "router": (cfg.experts or 0, d), "expert_gate": (m, d), "expert_up": (m, d),
        "expert_down": (d, m), "shared_gate": (cfg.shared_hidden or 0, d),
        "shared_up": (cfg.shared_hidden or 0, d), "shared_down": (d, cfg.shared_hidden or 0),
        "shared_router": (1, d),
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
        tied = cfg.tied_embeddings and f"{template}.weight" not in (found or {})
        if role == "head" and (tied or cfg.labels is not None):
            continue  # tied and not stored, or a classification model: no language-model head
        per_layer = "{l}" in template or "{g}" in template
        for l, e in _instances(template, blocks if per_layer else [None], cfg):
            base = template.format(l=l, g=l // k, j=l % k, e=e, h="{h}") if per_layer else template
            shape, role_e = shapes[role], role if e is None else f"{role}/{e}"
            if role in _LINEAR:
                stored = shape[::-1] if entry.conv1d and role in _CONV1D else shape
                out[f"{base}.weight"] = (role_e, l, "weight", stored)
                if _bias(entry, role, raw):
                    out[f"{base}.bias"] = (role_e, l, "bias", shape[:1])
            elif role in _NORMS:
                heads = {"q_norm": cfg.heads, "k_norm": cfg.kv_heads}.get(role, 0)
                for h in range(heads) if "{h}" in base else [None]:  # one tensor per head
                    at = base if h is None else base.replace("{h}", str(h))
                    for part in _norm_parts(entry, role):
                        out[f"{at}.{part}"] = (role, l, part if h is None else f"{part}.{h}", shape)
            else:
                out[f"{base}.weight"] = (role, l, "weight", shape)
                if role == "head" and _bias(entry, role, raw):
                    out[f"{base}.bias"] = (role, l, "bias", shape[:1])
    return out


def _instances(template: str, blocks, cfg: ModelConfig):
    """(block, expert) pairs of a template: expert e = 0 … E − 1 where it names ``{e}``."""
    experts = range(cfg.experts or 0) if "{e}" in template else [None]
    return [(l, e) for l in blocks for e in experts]


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
        if name.endswith(tuple(entry.buffers)) or (entry.rotary and name.endswith(_ROTARY)):
            continue  # a buffer the architecture recomputes (GPT-2's causal mask, RoPE's θ_i)
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


#: The weights of a parameter-free norm (γ = 1, b = 0: OLMo's LayerNorm).
_FREE = {"weight": None, "bias": None}


def _norm(w: dict | None, cfg: ModelConfig, entry: Family, placement: str):
    if w is None:
        return None
    if entry.norm == "rmsnorm":
        gain = w["weight"] + entry.gain_offset if entry.gain_offset else w["weight"]
        return RMSNorm(gain, cfg.norm_eps, placement=placement)
    return LayerNorm(w["weight"], w["bias"], cfg.norm_eps, placement=placement)


def _qk_norm(w: dict | None, cfg: ModelConfig, entry: Family, heads: int):
    """A QK-norm, or with ``entry.qk_norm_heads`` a tuple of one norm per head (its gain and
    bias a row of the stored (H, d_h) tensor, or the h-th of the per-head tensors)."""
    if w is None or not entry.qk_norm_heads:
        return _norm(w, cfg, entry, "pre")

    def rows(part):
        if w.get(part) is not None:
            return list(w[part].unbind(0))
        return [w.get(f"{part}.{h}") for h in range(heads)]

    pairs = zip(rows("weight"), rows("bias"), strict=True)
    return tuple(_norm({"weight": g, "bias": b}, cfg, entry, "pre") for g, b in pairs)


def _attention(p: dict, cfg: ModelConfig, entry: Family, l: int) -> GroupedQueryAttention:
    if "qkv" in p:
        p = {**p, **_split_qkv(p["qkv"], cfg, entry)}
    norms = {
        "q_norm": _qk_norm(p.get("q_norm"), cfg, entry, cfg.heads),
        "k_norm": _qk_norm(p.get("k_norm"), cfg, entry, cfg.kv_heads),
    }
    if entry.rotary:
        style = entry.facts.get("rope_style", "half")
        rope = RoPE(
            base=cfg.layer_rope_base(l), dims=cfg.rotary_dims, style=style,
            scaling=cfg.layer_rope_scaling(l),
        )  # fmt: skip
    else:
        rope = _alibi(cfg, entry)
    return GroupedQueryAttention(
        p["q"]["weight"], p["k"]["weight"], p["v"]["weight"], p["o"]["weight"],
        cfg.heads, cfg.kv_heads,
        scale=cfg.score_scale,
        position=rope, causal=entry.causal, window=cfg.layer_window(l), bq=p["q"]["bias"],
        bk=p["k"]["bias"], bv=p["v"]["bias"], bo=p["o"]["bias"], q_norm=norms["q_norm"],
        k_norm=norms["k_norm"], softcap=cfg.attn_softcap, clip=cfg.clip_qkv,
    )  # fmt: skip


def _alibi(cfg: ModelConfig, entry: Family) -> ALiBi | None:
    """The ALiBi of ``entry.alibi``: the paper's slopes for the H heads, the bias formed in
    the family's ``rounding`` dtype, times the score scale where it is ``scaled`` (added
    before the scaling)."""
    if entry.alibi is None:
        return None
    scale = cfg.score_scale if entry.alibi.get("scaled") else 1.0
    return ALiBi(rounding=entry.alibi.get("rounding"), scale=scale)


def _split_qkv(fused: dict, cfg: ModelConfig, entry: Family) -> dict:
    """Q, K, V of a fused projection: blocks [W_q; W_k; W_v] (GPT-2), head by head
    [q_h; k_h; v_h] for h = 0 … H − 1 (``qkv_layout`` "per_head": GPT-NeoX), or group by
    group [q_{g,1} … q_{g,G}; k_g; v_g] for the H_kv key/value heads g (``qkv_layout``
    "per_group": Falcon's new decoder architecture)."""
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    w, b = fused["weight"], fused["bias"]
    if entry.facts.get("qkv_layout") in ("per_group", "per_head"):  # per head: g = H
        g, k = cfg.kv_heads, cfg.head_dim
        ws = w.reshape(g, -1, k, w.shape[-1]).split((cfg.heads // g, 1, 1), 1)
        ws = [x.reshape(-1, w.shape[-1]) for x in ws]
        bs = None if b is None else [x.reshape(-1) for x in b.reshape(g, -1, k).split(
            (cfg.heads // g, 1, 1), 1)]  # fmt: skip
    else:
        ws = w.split((q, kv, kv), 0)
        bs = b.split((q, kv, kv), 0) if b is not None else None
    bs = (None,) * 3 if bs is None else bs
    return {r: {"weight": x, "bias": y} for r, x, y in zip("qkv", ws, bs, strict=True)}


def _mlp(p: dict, cfg: ModelConfig, entry: Family):
    if "gate_up" in p:  # fused [W_gate; W_up] (Phi-3): the first m rows gate, the last m up
        gate, up = p["gate_up"]["weight"].chunk(2, 0)
        p = {**p, "gate": {"weight": gate}, "up": {"weight": up}}
    if entry.mlp == "moe":
        return _experts(p, cfg)
    if entry.mlp == "swiglu":
        return SwiGLU(p["gate"]["weight"], p["up"]["weight"], p["down"]["weight"],
                      activation=cfg.activation or "silu")  # fmt: skip
    return MLP(p["fc1"]["weight"], p["fc1"]["bias"], p["fc2"]["weight"], p["fc2"]["bias"],
               activation=cfg.activation)  # fmt: skip


def _experts(p: dict, cfg: ModelConfig) -> MixtureOfExperts:
    """The routed MLP of block weights ``p``: E gated experts (SwiGLU), the shared one."""
    sigma = cfg.activation or "silu"
    experts = [
        SwiGLU(*(p[f"expert_{r}/{e}"]["weight"] for r in ("gate", "up", "down")), activation=sigma)
        for e in range(cfg.experts)
    ]
    shared = gate = None
    if "shared_gate" in p:
        shared = SwiGLU(*(p[f"shared_{r}"]["weight"] for r in ("gate", "up", "down")),
                        activation=sigma)  # fmt: skip
        gate = p["shared_router"]["weight"] if "shared_router" in p else None
    return MixtureOfExperts(
        p["router"]["weight"], experts, cfg.top_k, normalize=cfg.normalize_top_k,
        shared=shared, shared_gate=gate,
    )  # fmt: skip


def _prepared(p: dict, cfg: ModelConfig, entry: Family) -> dict:
    """A block's weights ``p`` as its sublayers read them: parameter-free norms filled in,
    the residual scale folded into the output maps (:func:`_scaled_outputs`)."""
    if _norm_parts(entry, "attn_norm") == ():  # parameter-free norms: no tensors stored
        p = {**{r: _FREE for r in ("attn_norm", "mlp_norm") if r in entry.names}, **p}
    if cfg.residual_scale != 1.0:
        p = _scaled_outputs(p, cfg.residual_scale)
    return p


def block_attention(p: dict, cfg: ModelConfig, entry: Family, l: int) -> GroupedQueryAttention:
    """The attention field of block l from its weights ``p`` alone, as :func:`build` makes
    it (the streamed structure scores read one block at a time through this)."""
    return _attention(_prepared(p, cfg, entry), cfg, entry, l)


def _layer(p: dict, cfg: ModelConfig, entry: Family, l: int) -> Layer:
    """Block l of its weights ``p`` (role → weight and bias)."""
    p = _prepared(p, cfg, entry)
    attention, mlp = _attention(p, cfg, entry, l), _mlp(p, cfg, entry)
    n1 = _layer_norm(p, "attn", cfg, entry)
    shared = entry.placement in ("pre", "post") and "mlp_norm" not in p  # one norm (Phi, GPT-J)
    n2 = n1 if shared else _layer_norm(p, "mlp", cfg, entry)
    parts = [Normalized(attention, n1), Normalized(mlp, n2)]
    field = Sum([Parallel(parts)]) if cfg.parallel else Sum(parts)
    return Layer(attention, mlp, n1, n2, field)


def _scaled_outputs(p: dict, r: float) -> dict:
    """``p`` with r folded into the sublayers' output maps (W_o, b_o; W_down or W_fc2, b_fc2):
    the field r·f(N x), whose Euler step of size 1 is x + r·f(N x) (Granite's
    ``residual_multiplier``: a time step), exact up to one rounding per weight. Right for the
    "pre" and "post" placements (r inside the norm that ends a "post" step)."""
    out = dict(p)
    for role in ("o", "down", "fc2"):
        if role in p:
            out[role] = {k: None if v is None else r * v for k, v in p[role].items()}
    return out


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
    if _norm_parts(entry, "final_norm") == () and "final_norm" in entry.names:
        g["final_norm"] = _FREE
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
        # a head stored though the config says tied is read, as transformers keeps it
        stored = g.get("head")
        head = embedding.tokens if stored is None else stored["weight"]
        head_bias = None if stored is None else stored["bias"]
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
        logit_scale=cfg.logit_scale,
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
