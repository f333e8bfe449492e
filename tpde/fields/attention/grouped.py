r"""Grouped-query causal attention with positions: the attention block of a decoder."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections import Counter

import torch
from torch.autograd import forward_ad

from tpde._engines import softmax_average, softmax_weights
from tpde._validation import check_positive, check_real
from tpde.fields.attention.masked import query_positions, velocity_at_positions
from tpde.fields.attention.positions import positional_encoding
from tpde.fields.base import Field, GaussianNotPreserved
from tpde.fields.calls import check_own, own_tokens
from tpde.fields.forms import key_log_weights, key_positions
from tpde.fields.params import Weights, linear
from tpde.measures import Empirical, Gaussian, Grid, Measure

__all__ = ["GroupedQueryAttention"]


class GroupedQueryAttention(Field):
    r"""Multi-head attention whose H query heads share H_kv key/value heads (GQA), with positions.

    Γ[μ](x_i) = W_o concat_h ( Σ_j w_j e^{s^h_ij} v_{g(h), j} / Σ_j w_j e^{s^h_ij} ),

    s^h_ij = cap(scale · ⟨R(p_i) q_{h,i}, R(p_j) k_{g(h),j}⟩) + b^h_j,
    q_{h,i} = N_q(C(W_q^h x_i + b_q^h)),  k_{g,j} = N_k(C(W_k^g x_j + b_k^g)),
    v_{g,j} = C(W_v^g x_j + b_v^g),  g(h) = ⌊h·H_kv/H⌋,

    with C(y) = clamp(y, −c_qkv, c_qkv) the optional clip of the projections (identity
    without it; OLMo's ``clip_qkv``), N_q, N_k the optional QK-norms (identity without
    them), cap(s) = c·tanh(s/c) the
    optional score soft-cap (identity without it; Gemma-2), R the rotation of
    :class:`~tpde.fields.RoPE` (identity without it), b^h_j the key bias of
    :class:`~tpde.fields.ALiBi` (+m_h p_j; zero without it), w_j the weights of the
    :class:`~tpde.measures.Empirical` μ (entering as log-weights, so uniform weights
    cancel), and sums over the keys with p_j ≤ p_i (``causal``, ties included as in
    :class:`Masked`) and p_i − p_j < w (``window``) (MATH.md §8). The attention block of a
    Llama-type decoder (Llama, SmolLM2, Mistral; Qwen with the biases).

    Parameters
    ----------
    Wq : tensor (..., H·d_h, d) or callable ``t -> tensor``
        Query weights; rows h·d_h … (h + 1)·d_h − 1 are head h (the layout of
        ``q_proj.weight`` in Hugging Face transformers). Fixes d and d_h = rows/H.
    Wk, Wv : tensor (..., H_kv·d_h, d) or callable
        Key and value weights, rows grouped by key/value head the same way.
    Wo : tensor (..., d, H·d_h) or callable
        Output weights (``o_proj.weight``), acting on the heads concatenated in order.
    heads : int
        Number H of query heads.
    kv_heads : int
        Number H_kv of key/value heads, a divisor of H: H_kv = H is multi-head attention,
        H_kv = 1 multi-query attention. Query head h reads key/value head
        ⌊h / (H/H_kv)⌋ (Hugging Face's ``repeat_kv``).
    scale : float, optional
        Score scale; default 1/√d_h.
    position : PositionalEncoding, str or None
        :class:`~tpde.fields.RoPE`, :class:`~tpde.fields.ALiBi`, a name of
        :data:`~tpde.fields.attention.positions.POSITIONAL_ENCODINGS` (built with its defaults) or
        None (no positional encoding).
    causal : bool
        Keys at positions p_j ≤ p_i only (default True, a decoder).
    window : float, optional
        Sliding window w > 0 (Mistral): with ``causal``, keys with p_i − p_j < w only; on
        integer positions (w ≥ 1) the query and its w − 1 predecessors. In the units of the
        positions: a model's window w over p = 0 … n − 1 is the window (w − ½)/(n − 1) over
        the mean-field positions s = p/(n − 1) (any value in ((w − 1)/(n − 1), w/(n − 1)]
        gives the same mask; the midpoint keeps rounding away from the boundary).
    bq, bk, bv : tensor (..., H·d_h), (..., H_kv·d_h), (..., H_kv·d_h) or callable, optional
        Query, key and value biases (Qwen). With RoPE the key bias does not cancel (it is
        rotated with the key).
    bo : tensor (..., d) or callable, optional
        Output bias.
    q_norm, k_norm : RMSNorm or LayerNorm scheme object, optional
        QK-norm: the queries q = N_q(W_q x + b_q) and keys k = N_k(W_k x + b_k), normalised
        before the rotation (:meth:`~tpde.fields.RMSNorm.norm`). A gain γ of size d_h
        normalises each head on its own (Qwen3, Gemma-3: per-head QK-RMSNorm); a gain of
        size H·d_h (H_kv·d_h for keys) normalises the whole projection (OLMo-2). Without a
        gain: per head. A tuple of H norms (H_kv for keys), each with a gain of size d_h
        and all of one class and ε: head h normalised by its own norm (per-head gains:
        StableLM's ``qk_layernorm``, Cohere's ``use_qk_norm``).
    softcap : float > 0, optional
        Score soft-cap c (Gemma-2's ``attn_logit_softcapping``): every scaled score s
        becomes c·tanh(s/c) ∈ (−c, c) before the key bias and the mask. Capped attention
        runs on the dense engine whatever ``engine`` says (the engines take dot-product
        scores only): O(n·m) memory per head.
    clip : float > 0, optional
        c_qkv: every coordinate of the query, key and value projections (biases included)
        clamped to [−c_qkv, c_qkv] before the QK-norms and the rotation (OLMo's
        ``clip_qkv``). A Lipschitz, piecewise-linear map: the field stays continuous in the
        tokens, its derivative jumps where a coordinate reaches ±c_qkv.

    Notes
    -----
    Tokens are the particles of ``Empirical(points, positions=p)``: integer positions
    p = 0 … n − 1 for a pretrained model, s = p/(n − 1) ∈ [0, 1] for a mean-field reading
    (the causal mask is the same; RoPE and ALiBi are not: :mod:`tpde.fields.attention.positions`
    says how they relate). Positions never move; a flow carries them with the particles.
    Causal attention, RoPE and ALiBi need them and raise without them; a field with none of
    the three runs on any Empirical and on grids.

    Engines: every softmax engine ("dense", "chunked", "sdpa", "keops", "auto") through
    :func:`tpde._engines.softmax_average`. The G = H/H_kv query heads of a group are batch
    elements against their shared keys and values, broadcast over the group (views; SDPA and
    matrix products copy them, H·m·d_h numbers, as ``repeat_kv`` does: SDPA's own
    ``enable_gqa`` measured no faster on the CPU, 0.53 against 0.57 ms at n = 128 and 57.7
    against 54.5 ms at n = 1024, SmolLM2's heads). Causal masks (ties included) and windows
    run on every engine as the primitive documents; a causal sequence at increasing
    positions is one ``is_causal`` SDPA call. At SmolLM2-135M's size (float32, one thread)
    the field takes 1.0–1.1× the time of the block written in plain torch
    (``benchmarks/fields.py --variants gqa``).

    There is no Gaussian closure (positions, and a Gaussian carries none).

    References: Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models
    from Multi-Head Checkpoints", EMNLP 2023 (arXiv:2305.13245); Touvron et al., "Llama 2",
    arXiv:2307.09288 (2023).
    """

    def __init__(
        self,
        Wq,
        Wk,
        Wv,
        Wo,
        heads: int,
        kv_heads: int,
        *,
        scale=None,
        position=None,
        causal: bool = True,
        window=None,
        bq=None,
        bk=None,
        bv=None,
        bo=None,
        q_norm=None,
        k_norm=None,
        softcap=None,
        clip=None,
    ):
        self.heads, self.kv_heads = _check_heads(heads, kv_heads)
        self.params, self.head_dim = _weights(
            (Wq, Wk, Wv, Wo, bq, bk, bv, bo), self.heads, self.kv_heads
        )
        self.dim = self.params.sizes["d"]
        self.scale = (
            1.0 / math.sqrt(self.head_dim) if scale is None else check_positive(scale, "scale")
        )
        self.position = positional_encoding(position)
        if self.position is not None:
            self.position.check(self.head_dim, self.heads)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be True or False; received {causal!r}.")
        self.causal = causal
        self.window = _check_window(window, causal)
        self.q_norm = _check_qk_norm(q_norm, "q_norm", self.head_dim, self.heads)
        self.k_norm = _check_qk_norm(k_norm, "k_norm", self.head_dim, self.kv_heads)
        self.softcap = None if softcap is None else check_positive(softcap, "softcap")
        self.clip = None if clip is None else check_positive(clip, "clip")

    @property
    def needs_positions(self) -> bool:
        """Whether the tokens need positions: causal, or a positional encoding."""
        return self.causal or self.position is not None

    # ------------------------------------------------------------------ particles
    def velocity(
        self,
        mu: Measure,
        x=None,
        *,
        positions=None,
        t: float = 0.0,
        engine: str = "auto",
        info=None,
    ):
        """Γ[μ](x): at μ's own tokens, or at points ``x`` (m, d) with ``positions`` (m,).

        See :meth:`Field.velocity`; ``positions`` are the positions of the evaluation points,
        required with ``x`` when the field needs positions (:attr:`needs_positions`).
        """
        return velocity_at_positions(
            self, mu, x, positions, engine, self._why_positions(), self._velocity, t=t,
            info=info, uses=self.needs_positions,
        )  # fmt: skip

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        own = check_own(own, x, mu)
        if positions is None and self.needs_positions:  # x must be μ's tokens (own_tokens)
            own_tokens(x, mu, self._why_positions(), own)
        at = mu.positions if positions is None else positions
        return self._velocity(t, mu, x, at, engine)

    def _velocity(self, t, mu: Empirical, x, query_positions, engine):
        Wq, Wk, Wv, Wo, bq, bk, bv, bo = self.params.at(t, x)
        q, k, v, bias, mask = self._grouped(mu, x, query_positions, Wq, Wk, Wv, bq, bk, bv)
        if self.softcap is None:
            out = softmax_average(q, k, v, bias, engine, **mask)
        else:
            out = softmax_weights(q, k, bias, softcap=self.softcap, **mask) @ v
        out = out.flatten(-4, -3).transpose(-3, -2).flatten(-2)  # (..., n, H·d_h)
        return linear(out, Wo, bo)

    def _grouped(self, mu: Empirical, x, query_positions, Wq, Wk, Wv, bq, bk, bv):
        """(q, k, v, key bias, mask) of the softmax averages of Γ[μ](x), the G = H/H_kv query
        heads of a group a batch dimension: q (..., H_kv, G, n, d_h) scaled and rotated, k and
        v (..., H_kv, G, m, d_h) broadcast views over the group, over the m keys with mass."""
        G, dh = self.heads // self.kv_heads, self.head_dim
        points, log_w = key_log_weights(mu)
        keys_at = key_positions(mu)
        c = self.clip
        q = _normed_heads(_clipped(linear(x, Wq, bq), c), self.q_norm, dh)  # (..., H, n, d_h)
        k = _normed_heads(_clipped(linear(points, Wk, bk), c), self.k_norm, dh)  # H_kv heads
        v = _heads(_clipped(linear(points, Wv, bv), c), dh)
        bias = log_w
        if self.position is not None:
            rotations = {}
            if self.position.reads_length:  # one L for queries and keys: scores stay relative
                rotations["length"] = _length(query_positions, keys_at)
            q = self.position.rotate(q, query_positions, **rotations)
            k = self.position.rotate(k, keys_at, **rotations)
            extra = self.position.key_bias(keys_at, self.heads)
            if extra is not None:
                bias = (log_w + extra.to(log_w.dtype)).unflatten(0, (self.kv_heads, G))
        q = (self.scale * q).unflatten(-3, (self.kv_heads, G))  # (..., H_kv, G, n, d_h)
        mask = {}
        if self.causal:
            mask = {"query_positions": query_positions, "key_positions": keys_at}
            if self.window is not None:
                mask["window"] = self.window
        # the G query heads of a group share its key/value head: broadcast views
        k, v = (kv.unsqueeze(-3).expand(*q.shape[:-2], *kv.shape[-2:]) for kv in (k, v))
        return q, k, v, bias, mask

    # ------------------------------------------------------------------ probabilities
    def probabilities(self, mu: Measure, x=None, *, positions=None, t: float = 0.0):
        r"""The attention probabilities P^h_ij of Γ[μ](x), so that (class equation)

            Γ[μ](x_i) = W_o concat_h ( Σ_j P^h_ij v_{g(h), j} ) + b_o,
            P^h_ij = w_j e^{s^h_ij} / Σ_l w_l e^{s^h_il}  (0 for a key the mask hides),

        computed as the field computes its velocity (scale, RoPE/ALiBi, causal mask, window,
        head groups, weights) and softmaxed densely (:func:`tpde._engines.softmax_weights`).

        Parameters
        ----------
        mu : Empirical (a Grid is read through its cell masses, as by :meth:`velocity`)
            The keys: μ's N tokens, with positions when :attr:`needs_positions`.
        x : tensor (n, d), optional
            The queries; default μ's own tokens (n = N).
        positions : tensor (n,), optional
            The positions of ``x`` (required with x when the field needs positions).
        t : float
            Depth-time, for time-dependent parameters.

        Returns
        -------
        tensor (..., H, n, N)
            Row i of head h over μ's tokens j: rows sum to 1; a key of zero mass, or hidden
            by the causal mask or the window, has probability 0. Dense: n·N numbers per head.
        """
        t = check_real(t, "t")
        self.check_measure(mu)
        if isinstance(mu, Gaussian):
            raise TypeError(
                "attention probabilities are between tokens, and a Gaussian has none: sample "
                "particles, Empirical(g.sample(n)), and ask them."
            )
        if isinstance(mu, Grid):
            x = mu.centres() if x is None else x
            mu = mu.to_empirical()
        x = None if x is None else self.check_points(x, mu)
        at = query_positions(positions, x, self._why_positions(), self.needs_positions)
        x, at = (mu.points, mu.positions) if x is None else (x, at)
        Wq, Wk, Wv, _, bq, bk, bv, _ = self.params.at(t, x)
        q, k, _, bias, mask = self._grouped(mu, x, at, Wq, Wk, Wv, bq, bk, bv)
        weights = softmax_weights(q, k, bias, softcap=self.softcap, **mask)
        weights = weights.flatten(-4, -3)  # (..., H, n, m)
        if weights.shape[-1] == mu.n:
            return weights
        kept = (mu.weights > 0).nonzero()[:, 0]  # zero-mass keys: columns of zeros
        return weights.new_zeros(*weights.shape[:-1], mu.n).index_copy(-1, kept, weights)

    # ------------------------------------------------------------------ checks
    def _why_positions(self) -> str:
        if self.causal:
            return "causal attention"
        return f"{type(self.position).__name__} positional encoding"

    def check_measure(self, mu) -> None:
        super().check_measure(mu)
        if not self.needs_positions:
            return
        if isinstance(mu, Gaussian):
            raise GaussianNotPreserved(
                f"{self._why_positions()} needs token positions, and a Gaussian carries none: "
                "there is no Gaussian closure. Sample particles with positions instead, "
                "Empirical(g.sample(n), positions=torch.arange(n))."
            )
        if isinstance(mu, Grid):
            raise ValueError(
                f"{self._why_positions()} needs token positions, and a Grid carries none: "
                "integrate particles with positions, Empirical(points, positions=p)."
            )
        if isinstance(mu, Empirical) and mu.positions is None:
            raise ValueError(
                f"{self._why_positions()} needs token positions, but this Empirical has none: "
                "build it with Empirical(points, positions=p), p of shape (n,) (integer "
                "positions torch.arange(n) for a model's sequence)."
            )

    def __repr__(self) -> str:
        extra = f", position={self.position!r}" if self.position is not None else ""
        extra += f", window={self.window:g}" if self.window is not None else ""
        extra += f", softcap={self.softcap:g}" if self.softcap is not None else ""
        extra += ", qk_norm" if self.q_norm is not None or self.k_norm is not None else ""
        extra += f", clip={self.clip:g}" if self.clip is not None else ""
        return (
            f"GroupedQueryAttention(d={self.dim}, heads={self.heads}, kv_heads={self.kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}{extra})"
        )


# ---------------------------------------------------------------------- helpers
def _weights(given, heads: int, kv_heads: int) -> tuple[Weights, int]:
    """The checked weights and the head dimension d_h: Wq fixes H·d_h and d, the other
    weights must chain with it (:class:`~tpde.fields.feedforward.base.Weights`), and the key/value
    rows must be H_kv·d_h."""
    specs = {
        "Wq": ("H·d_h", "d"),
        "Wk": ("H_kv·d_h", "d"),
        "Wv": ("H_kv·d_h", "d"),
        "Wo": ("d", "H·d_h"),
        "bq": ("H·d_h",),
        "bk": ("H_kv·d_h",),
        "bv": ("H_kv·d_h",),
        "bo": ("d",),
    }
    values = dict(zip(specs, given, strict=True))
    _vote_head_dim(values, heads, kv_heads)
    params = Weights("GroupedQueryAttention", specs, values, optional=("bq", "bk", "bv", "bo"))
    rows, kv_rows, d = params.sizes["H·d_h"], params.sizes["H_kv·d_h"], params.sizes["d"]
    query_shape, key_shape = params._source["H·d_h"][1], params._source["H_kv·d_h"][1]
    if rows % heads:
        raise ValueError(
            f"GroupedQueryAttention: Wq must have H·d_h rows, a multiple of H = {heads} query "
            f"heads; received Wq of shape {query_shape}."
        )
    head_dim = rows // heads
    if kv_rows != kv_heads * head_dim:
        raise ValueError(
            f"GroupedQueryAttention: Wk must have shape (..., {kv_heads * head_dim}, {d}) = "
            f"(..., H_kv·d_h, d) to fit Wq of shape {query_shape} (H = {heads} query heads of "
            f"d_h = {head_dim}, H_kv = {kv_heads}); received Wk of shape {key_shape}."
        )
    return params, head_dim


# weight -> (axis carrying heads·d_h, whether the heads are the query heads H, else H_kv)
_HEAD_AXES = {"Wq": (-2, True), "Wo": (-1, True), "bq": (-1, True), "Wk": (-2, False),
              "Wv": (-2, False), "bk": (-1, False), "bv": (-1, False)}  # fmt: skip


def _vote_head_dim(values: dict, heads: int, kv_heads: int) -> None:
    """Blame the weight whose head axis disagrees with the head dimension d_h that most
    weights give (Wq and Wo: H·d_h; Wk and Wv: H_kv·d_h), before the generic chain check
    (which cannot tell a wrong Wq from a wrong Wo: two weights, one size each)."""
    sizes = {
        name: (values[name].shape[axis], heads if query else kv_heads)
        for name, (axis, query) in _HEAD_AXES.items()
        if isinstance(values[name], torch.Tensor) and values[name].ndim >= -axis
    }
    votes = Counter(size / count for size, count in sizes.values())
    if len(votes) < 2:
        return
    (head_dim, top), (_, second) = votes.most_common(2)
    if top == second or head_dim != int(head_dim):
        return  # no majority: the generic check names every holder
    d = Counter(
        values[n].shape[a] for n, a in (("Wq", -1), ("Wk", -1), ("Wv", -1), ("Wo", -2))
        if isinstance(values[n], torch.Tensor) and values[n].ndim >= 2
    ).most_common(1)[0][0]  # fmt: skip
    for name, (size, count) in sizes.items():
        if size != head_dim * count:
            agree = ", ".join(n for n, (z, c) in sizes.items() if z == head_dim * c)
            rows = int(head_dim) * count
            shape = {"Wo": (d, rows), "bq": (rows,), "bk": (rows,), "bv": (rows,)}
            kind = f"H·d_h (H = {heads})" if count == heads else f"H_kv·d_h (H_kv = {kv_heads})"
            raise ValueError(
                f"GroupedQueryAttention: {name} has shape {tuple(values[name].shape)}, but "
                f"{agree} give the head dimension d_h = {int(head_dim)}: {name} must have "
                f"shape (..., {', '.join(map(str, shape.get(name, (rows, d))))}), with "
                f"{rows} = {kind} along its axis {_HEAD_AXES[name][0]}, not {size}."
            )


def _heads(x, head_dim: int):
    """(..., n, H·d_h) → (..., H, n, d_h), head h from columns h·d_h … (h + 1)·d_h − 1."""
    return x.unflatten(-1, (-1, head_dim)).transpose(-3, -2)


def _clipped(y, clip):
    """clamp(y, −c, c) (y itself without a clip)."""
    return y if clip is None else y.clamp(-clip, clip)


def _normed_heads(y, norm, head_dim: int):
    """The heads (..., H, n, d_h) of a projection y (..., n, H·d_h), QK-normed first over the
    whole projection (a gain of size H·d_h) or then per head (a gain of size d_h, or none;
    a tuple of H norms: head h by the h-th, :func:`_per_head`)."""
    if norm is None:
        return _heads(y, head_dim)
    if isinstance(norm, tuple):
        return _per_head(norm, _heads(y, head_dim))
    if norm.gamma is not None and norm.gamma.shape[-1] != head_dim:
        return _heads(norm.norm(y), head_dim)
    return norm.norm(_heads(y, head_dim))


def _per_head(norms: tuple, heads: torch.Tensor) -> torch.Tensor:
    """Head h of ``heads`` (..., H, n, d_h) normalised by ``norms[h]``: the norm without its
    gain (all share class and ε), then head h's gain γ_h (and bias β_h), stacked (H, 1, d_h)
    (:func:`_head_gains`)."""
    plain, gains, biases = _head_gains(norms, heads)
    out = plain.norm(heads) * gains
    return out if biases is None else out + biases


#: id(norms) → (norms, their gains and biases, key, (plain norm, gains, biases), the
#: versions of the last two) of :func:`_head_gains`: at most :data:`_HEAD_GAINS_COUNT`
#: tuples of per-head norms (two a layer), the oldest dropped.
_HEAD_GAINS: dict = {}
_HEAD_GAINS_COUNT = 256


def _head_gains(norms: tuple, like: torch.Tensor) -> tuple:
    """(the norm without its gain, the gains (H, 1, d_h), the biases (H, 1, d_h) or None) of
    per-head norms in ``like``'s dtype and device: remembered per tuple of norms (frozen
    schemes) while no gain or bias is edited in place (their version counters) nor made to
    require grad; built afresh in autograd (a gain that requires grad, a forward-mode level)
    and inference mode (where tensors have no version counter)."""
    if torch.is_inference_mode_enabled() or forward_ad._current_level >= 0:
        return _build_head_gains(norms, like)
    held = _HEAD_GAINS.get(id(norms))
    if held is None or held[0] is not norms:
        tensors = [t for n in norms for t in (n.gamma, getattr(n, "bias", None)) if t is not None]
    else:
        tensors = held[1]
    try:  # (version, requires grad) of every gain and bias: one pass
        state = [(t._version, t.requires_grad) for t in tensors]
    except RuntimeError:  # an inference tensor: no version counter
        return _build_head_gains(norms, like)
    key = (like.dtype, like.device, like.shape[-1], state)
    if held is not None and held[0] is norms and held[2] == key:
        built = held[3]
        if built[1]._version == held[4] and (built[2] is None or built[2]._version == held[5]):
            return built
    built = _build_head_gains(norms, like)
    if any(grad for _, grad in state):
        return built
    _HEAD_GAINS.pop(id(norms), None)
    while len(_HEAD_GAINS) >= _HEAD_GAINS_COUNT:
        _HEAD_GAINS.pop(next(iter(_HEAD_GAINS)))
    biases = None if built[2] is None else built[2]._version
    _HEAD_GAINS[id(norms)] = (norms, tensors, key, built, built[1]._version, biases)
    return built


def _build_head_gains(norms: tuple, like: torch.Tensor) -> tuple:
    """:func:`_head_gains`, computed."""
    plain = dataclasses.replace(norms[0], gamma=None, **_no_bias(norms[0]))
    ones = torch.ones(like.shape[-1], dtype=like.dtype, device=like.device)
    gains = torch.stack([ones if n.gamma is None else n.gamma.to(like) for n in norms])
    biases = None
    if any(getattr(n, "bias", None) is not None for n in norms):
        zero = torch.zeros_like(ones)
        biases = torch.stack([zero if n.bias is None else n.bias.to(like) for n in norms])
        biases = biases[:, None]
    return plain, gains.unsqueeze(-2), biases


def _no_bias(norm) -> dict:
    return {"bias": None} if hasattr(norm, "bias") else {}


def _check_qk_norm(norm, name: str, head_dim: int, heads: int):
    """A QK-norm: None, a pre-placed RMSNorm/LayerNorm whose gain has size d_h or H·d_h, or a
    tuple of ``heads`` such norms with gains of size d_h, one class and one ε (per-head gains)."""
    from tpde.fields.norms.schemes import LayerNorm, RMSNorm

    if norm is None:
        return None
    if isinstance(norm, tuple | list):
        return _check_head_norms(tuple(norm), name, head_dim, heads)
    if not isinstance(norm, RMSNorm | LayerNorm) or norm.placement != "pre":
        raise TypeError(
            f"GroupedQueryAttention: {name} must be an RMSNorm or LayerNorm scheme object with "
            f"placement='pre' (e.g. RMSNorm(gamma, eps)); received {norm!r}."
        )
    for gain in (norm.gamma, getattr(norm, "bias", None)):
        if gain is not None and gain.shape[-1] not in (head_dim, heads * head_dim):
            raise ValueError(
                f"GroupedQueryAttention: the {name} gain must have size d_h = {head_dim} (per "
                f"head) or {heads * head_dim} (the whole projection); received shape "
                f"{tuple(gain.shape)}."
            )
    return norm


def _check_head_norms(norms: tuple, name: str, head_dim: int, heads: int) -> tuple:
    """One norm per head: ``heads`` of them, each checked, gains of size d_h, one class, one ε."""
    if len(norms) != heads:
        raise ValueError(
            f"GroupedQueryAttention: {name} as a tuple holds one norm per head, {heads} of them; "
            f"received {len(norms)}."
        )
    for norm in norms:
        if isinstance(norm, tuple | list):
            raise TypeError(f"GroupedQueryAttention: {name} holds one norm per head, not nested "
                            f"sequences; received {norm!r} in it.")  # fmt: skip
        _check_qk_norm(norm, name, head_dim, heads)
        for gain in (norm.gamma, getattr(norm, "bias", None)):
            if gain is not None and gain.shape != (head_dim,):
                raise ValueError(
                    f"GroupedQueryAttention: each per-head {name} gain must have shape "
                    f"({head_dim},) (d_h); received {tuple(gain.shape)}."
                )
    kinds = {(type(n), n.eps) for n in norms}
    if len(kinds) > 1:
        raise ValueError(
            f"GroupedQueryAttention: the per-head {name} norms must share one class and one eps; "
            f"received {sorted((k.__name__, e) for k, e in kinds)}."
        )
    return norms


def _check_heads(heads, kv_heads) -> tuple[int, int]:
    for value, name in ((heads, "heads"), (kv_heads, "kv_heads")):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer; received {value!r}.")
    heads, kv_heads = int(heads), int(kv_heads)  # numpy integers from a configuration too
    if heads % kv_heads:
        raise ValueError(
            f"heads = {heads} is not a multiple of kv_heads = {kv_heads}: each key/value head "
            "serves the same number H/H_kv of query heads. Pass kv_heads dividing heads."
        )
    return heads, kv_heads


def _check_window(window, causal: bool):
    if window is None:
        return None
    if not causal:
        raise ValueError(
            "a sliding window limits how far back a query looks, so it needs causal=True; "
            f"received window={window!r} with causal=False."
        )
    value = check_real(window, "window")  # a number: "2" and True are refused
    if not value > 0:
        raise ValueError(
            f"window must be > 0, in the units of the positions (w ≥ 1 on integer positions: "
            f"the query and its w − 1 predecessors; w/(n − 1) on s = p/(n − 1)); received "
            f"window={window!r}."
        )
    return value


def _length(query_positions: torch.Tensor, key_positions: torch.Tensor) -> float:
    """L = 1 + the largest position of the queries and keys (a sequence's length at integer
    positions 0 … L − 1), which length-dependent RoPE scalings read."""
    return float(torch.maximum(query_positions.max(), key_positions.max())) + 1.0
