r"""The heads of an attention field in the affine form of MATH.md §12.

A softmax head h with queries q = W_Q x + b_q, keys k = W_K y + b_k, values W_V y + b_v
and output W_O reads, modulo terms in x alone (they cancel in the softmax),

    score(x, y) = yᵀA x + aᵀy,     A = c W_Kᵀ W_Q (d × d, rank ≤ k),   a = c W_Kᵀ b_q,
    Γ_h[μ](x) = V ȳ(x) + u,          V = W_O W_V (rank ≤ k),           u = W_O b_v,

ȳ(x) the softmax average of the keys. A field's output bias b_O is added once to the sum
of its heads. :func:`attention_heads` reads these from every field that is a sum of softmax
(or Sinkhorn) heads: :class:`~tpde.fields.Softmax`, :class:`~tpde.fields.Sinkhorn`,
:class:`~tpde.fields.Masked` of a softmax head, :class:`~tpde.fields.MultiHead` of those,
and :class:`~tpde.fields.GroupedQueryAttention` (query head h reads key/value head
g(h) = ⌊h·H_kv/H⌋; its block of W_O maps the head back to R^d). What a head carries beyond
the affine form (a rotary encoding, a causal mask, QK-norms, a soft-cap, ALiBi, a window)
is recorded with it: :mod:`~tpde.fields.gradient_flow.nearest` says which of these break the
gradient structure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde._validation import check_real
from tpde.fields.base import Field
from tpde.fields.params import evaluate_parameter
from tpde.metrics.mobility import NotAGradientFlow

__all__ = ["AttentionHead", "AttentionHeads", "attention_heads"]

#: The structure each non-softmax head lacks (the message of :func:`attention_heads`).
LACKS = {
    "Sigmoid": "a normalisation: sigmoid attention has no partition function Z, so its "
    "velocity is not M∇log Z (no softmax weights that sum to one)",
    "Linear": "an exponential kernel: linear attention's scores enter linearly, with no "
    "partition function Z and no weights that sum to one",
    "Hardmax": "a smooth partition function: hardmax's argmax has no log Z to differentiate "
    "(it is the β → ∞ limit of softmax; study softmax at a finite β)",
    "Exponential": "a normalisation: unnormalised exponential attention is Z-weighted, not "
    "M∇log Z (MATH.md §7 treats it on the sphere)",
}


@dataclass(frozen=True, eq=False)
class AttentionHead:
    r"""One head in the affine form (module notes), float64 on the CPU.

    The weights are read once, detached, into float64 on the CPU: the closed forms of
    :mod:`~tpde.fields.gradient_flow.projection` are small dense problems (d × k factors),
    and the structured field moves its parameters to the tokens' device and dtype when it
    is evaluated.

    Attributes
    ----------
    Wq, Wk : (k, d) query and key weights.
    bq, bk : (k,) or None, query and key biases.
    scale : float, c.
    Wo : (d, k_v) the output block W_O, or the whole value map V (d, d) when ``Wv`` is None.
    u : (d,), W_O b_v: the value bias's constant drift (zeros without one).
    kind : "softmax" or "sinkhorn".
    rope : :class:`~tpde.fields.RoPE` or None, the rotary encoding of queries and keys.
    causal : bool, keys at positions p_j ≤ p_i only.
    extras : tuple of str, nonlinear or positional pieces of the score besides RoPE
        ("QK-norm", "soft-cap", "ALiBi", "sliding window", "position bias",
        "attention sink").
    source : the single-head field it was read from (Softmax, Sinkhorn), or None (a head
        of a GroupedQueryAttention): a Sinkhorn head's ε and solver options.
    Wv : (k_v, d) the value weights W_V, or None (``Wo`` is then V itself): V = W_O W_V is
        kept as its two factors (rank ≤ k_v), never formed by the projection.
    """

    Wq: torch.Tensor
    Wk: torch.Tensor
    bq: torch.Tensor | None
    bk: torch.Tensor | None
    scale: float
    Wo: torch.Tensor
    u: torch.Tensor
    kind: str = "softmax"
    rope: object = None
    causal: bool = False
    extras: tuple[str, ...] = ()
    source: Field | None = None
    Wv: torch.Tensor | None = None

    @property
    def V(self) -> torch.Tensor:
        """V = W_O W_V (d, d): the value map into R^d (formed on request)."""
        return self.Wo if self.Wv is None else self.Wo @ self.Wv

    @property
    def A(self) -> torch.Tensor:
        """A = c W_Kᵀ W_Q (d, d): the score of query x on key y is yᵀAx."""
        return self.scale * self.Wk.mT @ self.Wq

    @property
    def a(self) -> torch.Tensor:
        """a = c W_Kᵀ b_q (d,): the key weight aᵀy of a query bias (zeros without one)."""
        if self.bq is None:
            return self.u.new_zeros(self.Wq.shape[-1])
        return self.scale * self.Wk.mT @ self.bq

    @property
    def dim(self) -> int:
        return self.Wq.shape[-1]


@dataclass(frozen=True, eq=False)
class AttentionHeads:
    """The heads of a field and its output bias: Γ = Σ_h Γ_h + b_O.

    Attributes
    ----------
    heads : tuple of :class:`AttentionHead`.
    bias : (d,) output bias b_O (zeros without one).
    field : the field they were read from.
    """

    heads: tuple[AttentionHead, ...]
    bias: torch.Tensor
    field: Field

    def __len__(self) -> int:
        return len(self.heads)


def attention_heads(field, t: float = 0.0) -> AttentionHeads:
    """The heads of an attention field at depth-time t, in the affine form (module notes).

    Parameters
    ----------
    field : Softmax, Sinkhorn, Masked(Softmax), MultiHead of those, or GroupedQueryAttention.
    t : float, depth-time of time-dependent parameters.

    Raises
    ------
    NotAGradientFlow
        A head that is not a softmax or Sinkhorn head (sigmoid, linear, hardmax, …), naming
        the structure it lacks; batched parameters.
    TypeError
        Not a tpde field.
    """
    if not isinstance(field, Field):
        raise TypeError(
            f"attention_heads reads a tpde attention field; received {type(field).__name__}."
        )
    heads, bias = _read(field, check_real(t, "t"))
    d = field.dim
    like = heads[0].u
    total = like.new_zeros(d) if bias is None else bias
    return AttentionHeads(tuple(heads), total, field)


def _f64(tensor: torch.Tensor | None) -> torch.Tensor | None:
    if tensor is None:
        return None
    return tensor.detach().to(dtype=torch.float64, device="cpu")


def _unbatched(field, *tensors) -> None:
    for tensor in tensors:
        if tensor is not None and tensor.ndim > 2:
            raise NotAGradientFlow(
                f"{type(field).__name__} has batched parameters (a tensor of shape "
                f"{tuple(tensor.shape)}): the structure is read one parameter set at a time; "
                "build the field of one element."
            )


def _read(field, t: float) -> tuple[list[AttentionHead], torch.Tensor | None]:
    """(heads, output bias or None) of ``field``."""
    # the attention package imports this one's energies: its classes are looked up at call time
    from tpde.fields.attention import (
        GroupedQueryAttention,
        Masked,
        MultiHead,
        Sinkhorn,
        Softmax,
    )

    if isinstance(field, Softmax | Sinkhorn):
        return [_single(field, t)], None
    if isinstance(field, Masked):
        (head,), _ = _read(field.field, t)  # Masked wraps one softmax-form field
        extras = head.extras + (("position bias",) if field.position_bias is not None else ())
        extras = extras + (("attention sink",) if field.sink_mass else ())
        return [_replace(head, causal=True, extras=extras)], None
    if isinstance(field, MultiHead):
        return _multihead(field, t)
    if isinstance(field, GroupedQueryAttention):
        return _grouped(field, t)
    name = type(field).__name__
    lacks = LACKS.get(name)
    if lacks is not None:
        raise NotAGradientFlow(
            f"{name} attention is not a gradient flow of the Transformer-PDE form: it lacks "
            f"{lacks}. The structure (MATH.md §5, §12) needs softmax or Sinkhorn heads."
        )
    raise NotAGradientFlow(
        f"{name} is not read as softmax or Sinkhorn heads: nearest_gradient_field takes "
        "Softmax, Sinkhorn, Masked(Softmax), MultiHead of those and GroupedQueryAttention "
        "(pass the attention sublayer itself, not a Normalized or Sum wrapper)."
    )


def _replace(head: AttentionHead, **changes) -> AttentionHead:
    values = {name: getattr(head, name) for name in head.__dataclass_fields__}
    return AttentionHead(**{**values, **changes})


def _single(field, t: float) -> AttentionHead:
    from tpde.fields.attention import Sinkhorn

    p = field.params.at(t, like=torch.empty((), dtype=torch.float64, device="cpu"))
    Q, K, V, bq, bk, bv = (_f64(w) for w in (p.Q, p.K, p.V, p.bq, p.bk, p.bv))
    _unbatched(field, Q, K, V)
    u = bv if bv is not None else V.new_zeros(V.shape[-1])
    kind = "sinkhorn" if isinstance(field, Sinkhorn) else "softmax"
    return AttentionHead(Q, K, bq, bk, p.scale, V, u, kind, source=field)


def _multihead(field, t: float):
    W = evaluate_parameter(field.W, "W", t)  # (H, d, d), checked by MultiHead
    _unbatched(field, None if W is None else W[0])
    heads = []
    for h, part in enumerate(field.heads):
        inner, bias = _read(part, t)
        if len(inner) != 1 or bias is not None:
            raise NotAGradientFlow(
                f"MultiHead's head {h} ({type(part).__name__}) is not a single head."
            )
        head = inner[0]
        if W is not None:  # head h contributes W_hᵀ Γ_h
            Wt = _f64(W[h]).mT
            head = _replace(head, Wo=Wt @ head.Wo, u=Wt @ head.u)
        heads.append(head)
    bias = evaluate_parameter(field.bias, "bias", t)
    return heads, _f64(bias)


def _grouped(field, t: float):
    from tpde.fields.attention import RoPE

    like = torch.empty((), dtype=torch.float64, device="cpu")
    Wq, Wk, Wv, Wo, bq, bk, bv, bo = (_f64(w) for w in field.params.at(t, like))
    _unbatched(field, Wq, Wk, Wv, Wo)
    H, Hkv, dh = field.heads, field.kv_heads, field.head_dim
    extras = []
    if field.q_norm is not None or field.k_norm is not None:
        extras.append("QK-norm")
    if field.softcap is not None:
        extras.append("soft-cap")
    if field.clip is not None:
        extras.append("QKV clip")
    if field.window is not None:
        extras.append("sliding window")
    rope = field.position if isinstance(field.position, RoPE) else None
    if field.position is not None and rope is None:
        extras.append(type(field.position).__name__)
    heads = []
    for h in range(H):
        g = h // (H // Hkv)
        rows, kv = slice(h * dh, (h + 1) * dh), slice(g * dh, (g + 1) * dh)
        out = Wo[:, rows]
        value_bias = out @ bv[kv] if bv is not None else Wo.new_zeros(Wo.shape[0])
        heads.append(
            AttentionHead(
                Wq[rows], Wk[kv], None if bq is None else bq[rows],
                None if bk is None else bk[kv], field.scale, out, value_bias,
                rope=rope, causal=field.causal, extras=tuple(extras), Wv=Wv[kv],
            )
        )  # fmt: skip
    return heads, bo
