r"""Positional encodings of attention scores: rotary embeddings (RoPE) and linear biases (ALiBi).

A positional encoding changes the score of query i on key j through the tokens' positions
p_i, p_j (``Empirical(points, positions=p)``; positions never move). It may rotate queries
and keys (:meth:`PositionalEncoding.rotate`) and add a bias per key and head
(:meth:`PositionalEncoding.key_bias`): every softmax engine expresses both, since a rotated
query is a query and a key bias is the primitive's ``key_bias``
(:func:`tpde._engines.softmax_average`).

Integer positions and the mean-field positions s ∈ [0, 1]. A model's tokens sit at integer
positions p = 0 … n − 1; the mean-field reading of a sequence puts them at s = p/(n − 1)
(MATH.md §8). The causal mask depends only on the order, so it is the same for p and s; RoPE
and ALiBi depend on the values: the model's RoPE (frequencies θ_m at positions p) is RoPE with
frequencies θ_m·(n − 1) at positions s, and its ALiBi (slopes m_h at p) is ALiBi with slopes
m_h·(n − 1) at s. Pass the positions the model was trained with (integers for a pretrained
model).

A new encoding is one frozen class deriving from :class:`PositionalEncoding` plus one entry of
:data:`POSITIONAL_ENCODINGS` (docs/EXTENDING.md, "A positional encoding").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from tpde._memo import TensorMemo, canonical
from tpde._validation import check_choice, check_positive, check_positive_int
from tpde.fields.attention.rope_scaling import RopeScaling

__all__ = ["POSITIONAL_ENCODINGS", "ALiBi", "PositionalEncoding", "RoPE", "positional_encoding"]


class PositionalEncoding:
    """Base of the positional encodings: the identity (no rotation, no bias).

    A subclass overrides what it changes:

    - ``check(head_dim, heads)``: raise ValueError if it cannot act on heads of this size;
    - ``rotate(x, positions, length=None)``: queries or keys (..., H, n, d_h) at positions (n,)
      → same shape (``length``: the sequence length L, where ``reads_length``);
    - ``key_bias(positions, heads)``: a score bias (H, m) added to key j of head h, or None.
    """

    # Its name in POSITIONAL_ENCODINGS (position="rope" builds it with its defaults); not a
    # documented attribute, so that the docs' cross-references to `name` stay unambiguous.
    name: ClassVar[str] = ""

    def check(self, head_dim: int, heads: int) -> None:
        """Raise ValueError if the encoding cannot act on H heads of dimension d_h."""

    @property
    def reads_length(self) -> bool:
        """Whether :meth:`rotate` reads the sequence length L (a length-dependent RoPE scaling):
        then the attention passes the same L, one plus the largest position of its queries and
        keys, to both rotations (default: False)."""
        return False

    def rotate(
        self, x: torch.Tensor, positions: torch.Tensor, length: float | None = None
    ) -> torch.Tensor:
        """Queries or keys x (..., H, n, d_h) at positions (n,), transformed (default: as is)."""
        return x

    def key_bias(self, positions: torch.Tensor, heads: int) -> torch.Tensor | None:
        """Score bias (H, m) of the keys at ``positions`` (m,), or None (default)."""
        return None


@dataclass(frozen=True)
class RoPE(PositionalEncoding):
    r"""Rotary position embedding: queries and keys rotated by angles p·θ_m.

    Coordinate pair m (m = 0 … r/2 − 1) of every query and key of a token at position p is
    rotated by the angle p·θ_m, θ_m = base^{−2m/r}, r the rotated width (the head dimension
    d_h by default). Rotations compose, R(p)ᵀR(p′) = R(p′ − p), so the score
    ⟨R(p_i)q, R(p_j)k⟩ = ⟨q, R(p_j − p_i)k⟩ depends on the relative position only (MATH.md §8).

    Parameters
    ----------
    base : float
        Frequency base (10000 in Llama and RoFormer; SmolLM2 and Llama 3 use larger ones).
    dims : int, optional
        Rotated width r (even, ≤ d_h): the first r coordinates of each head are rotated, the
        others left alone ("partial rotary", GPT-NeoX's ``rotary_pct``). Default: all, r = d_h.
    style : {"half", "interleaved"}
        Which coordinates form pair m. "half": (m, m + r/2), the "rotate half" layout of
        Llama, GPT-NeoX and Hugging Face transformers (``rotate_half``,
        ``apply_rotary_pos_emb`` in ``modeling_llama.py``); "interleaved": (2m, 2m + 1), the
        original RoFormer and GPT-J layout. The two differ by a fixed permutation of the
        head coordinates (of Q's and K's rows), so a checkpoint must be read in its own.
    scaling : RopeScaling, optional
        A frequency schedule for contexts past the trained one
        (:mod:`tpde.fields.attention.rope_scaling`: LinearScaling, DynamicNTK, Llama3Scaling,
        YaRN, LongRoPE): θ_m becomes its θ'_m, and cos, sin are multiplied by its attention
        factor α. Dynamic NTK and LongRoPE depend on the sequence length L (``reads_length``).
        Default None: RoPE as trained.

    Notes
    -----
    In pair (a, b) the rotation is (a, b) ↦ (a cos φ − b sin φ, b cos φ + a sin φ), φ = p·θ_m;
    the angles are formed in float64 and their cosines and sines cast to the tokens' dtype
    (Hugging Face forms them in float32). With mean-field positions s = p/(n − 1) ∈ [0, 1],
    the angle s·θ_m is (θ_m/(n − 1))·p: a model's RoPE (θ_m at integer positions p) is RoPE
    with every θ_m multiplied by n − 1 at positions s.

    Reference: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding",
    arXiv:2104.09864 (2021).
    """

    base: float = 10000.0
    dims: int | None = None
    style: str = "half"
    scaling: RopeScaling | None = None

    name: ClassVar[str] = "rope"

    def __post_init__(self):
        object.__setattr__(self, "base", check_positive(self.base, "RoPE base"))
        if self.dims is not None:
            dims = check_positive_int(self.dims, "RoPE dims")
            if dims % 2:
                raise ValueError(
                    f"RoPE rotates pairs of coordinates, so dims must be even; received "
                    f"dims={dims}."
                )
            object.__setattr__(self, "dims", dims)
        check_choice(self.style, "RoPE style", ("half", "interleaved"))
        if self.scaling is not None and not isinstance(self.scaling, RopeScaling):
            raise TypeError(
                f"RoPE scaling must be None or a RopeScaling (LinearScaling(8.0), YaRN(4.0, "
                f"32768), …; tpde.fields.attention.rope_scaling); received {self.scaling!r}."
            )

    @property
    def reads_length(self) -> bool:
        return self.scaling is not None and self.scaling.reads_length

    def check(self, head_dim: int, heads: int) -> None:
        if self.dims is None and head_dim % 2:
            raise ValueError(
                f"RoPE rotates pairs of coordinates, but the head dimension d_h = {head_dim} "
                "is odd; use an even head dimension, or rotate an even part of it with "
                f"RoPE(dims=...) (dims ≤ {head_dim})."
            )
        if self.dims is not None and self.dims > head_dim:
            raise ValueError(
                f"RoPE dims = {self.dims} exceeds the head dimension d_h = {head_dim}; pass "
                f"dims ≤ {head_dim}."
            )
        if self.scaling is not None:
            self.scaling.check(self.dims or head_dim)

    def _table(self, positions: torch.Tensor, head_dim: int, dtype, length) -> tuple:
        """The tables of :func:`_cos_sin`, remembered for the last positions tensor (a flow's
        positions never change, and queries and keys share them): recomputed when the tensor,
        its version counter (in-place edits), the head dimension, the dtype or L change;
        equal RoPEs (a model's layers) share the last table (:func:`_shared_cos_sin`), and
        new positions of the same bits as earlier ones read their table
        (:func:`tpde._memo.canonical`: a forward pass builds its positions afresh). Positions
        that require grad get their tables afresh, never remembered (a remembered table would
        carry a graph a first backward pass has freed)."""
        if positions.requires_grad:
            return _cos_sin(self, positions, head_dim, dtype, length)
        cached = self.__dict__.get("_cached")
        if cached is not None and cached[2] is positions and cached[3] == positions._version:
            key = cached[0]  # the tensor asked last time (the queries', now the keys')
            if key[0]._version == key[1] and key[2:] == (head_dim, dtype, length):
                return cached[1]
        asked, positions = positions, canonical(positions, "positions")
        key = (positions, positions._version, head_dim, dtype, length)
        if cached is None or cached[0][0] is not positions or cached[0][1:] != key[1:]:
            cached = (key, _shared_cos_sin(self, key))
        cached = (*cached[:2], asked, asked._version)
        object.__setattr__(self, "_cached", cached)  # not a field: no effect on ==, hash
        return cached[1]

    def frequencies(self, head_dim: int, device=None, length: float | None = None) -> torch.Tensor:
        """θ_m = base^{−2m/r}, m = 0 … r/2 − 1, in float64 (r = dims or d_h); with a scaling its
        θ'_m at sequence length L = ``length`` (None: L at most the context)."""
        r = self.dims or head_dim
        if self.scaling is not None:
            return self.scaling.frequencies(self.base, r, length, device)
        return self.base ** (-torch.arange(0, r, 2, dtype=torch.float64, device=device) / r)

    def rotate(
        self, x: torch.Tensor, positions: torch.Tensor, length: float | None = None
    ) -> torch.Tensor:
        """Queries or keys x (..., H, n, d_h) at positions (n,), rotated. ``length``: L, for a
        scaling that reads it (default: one plus the largest of ``positions``)."""
        r = self.dims or x.shape[-1]
        if not self.reads_length:
            length = None
        elif length is None:
            length = float(positions.max()) + 1.0
        cos, sin = self._table(positions, x.shape[-1], x.dtype, length)
        part = x if r == x.shape[-1] else x[..., :r]
        if self.style == "half":  # partner of a is b, of b is a: a half turn of the pairs
            partner = part.roll(r // 2, dims=-1)
        else:
            partner = part.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
        rotated = part * cos + partner * sin
        return rotated if r == x.shape[-1] else torch.cat([rotated, x[..., r:]], dim=-1)


@dataclass(frozen=True)
class ALiBi(PositionalEncoding):
    r"""Attention with linear biases: score − m_h (p_i − p_j) in head h.

    Head h (h = 1 … H) penalises a key by its distance to the query with slope m_h > 0. The
    term −m_h p_i is the same for every key of query i and cancels in the softmax, so ALiBi
    is the key bias +m_h p_j (as BLOOM computes it): it runs on every softmax engine through
    the primitive's key bias, with no mask of its own. The linear penalty is the causal form
    of the paper (keys at p_j ≤ p_i); with ``causal=False`` the same bias applies to all keys.

    Parameters
    ----------
    slopes : sequence of H positive floats, optional
        The slopes m_h. Default: the paper's geometric sequence, m_h = 2^{−8h/H} for H a
        power of two; otherwise the paper's rule for other H (its code, ``get_slopes``, and
        BLOOM's ``build_alibi_tensor``): the slopes of the power of two P below H, then every
        other slope of 2P, the first H − P of them.

    rounding : {None, "float32", "bfloat16"}
        Form the bias as a checkpoint's code does: the slopes rounded to float32 (the
        paper's rule computed as ``torch.pow`` of a float32 base, as BLOOM's and Falcon's
        ``build_alibi_tensor``), then to this dtype, the positions cast to it and the
        product m_h·p_j rounded to it ("float32": BLOOM; "bfloat16": Falcon). Default None:
        exact, in the positions' dtype.
    scale : float, default 1
        c of the bias c·m_h p_j: Falcon adds the bias before scaling the scores by 1/√d_h
        (c = 1/√d_h, applied after the rounding).

    Notes
    -----
    With mean-field positions s = p/(n − 1), the penalty m_h(s_i − s_j) is
    (m_h/(n − 1))(p_i − p_j): a model's ALiBi (slopes m_h at integer positions) is ALiBi with
    slopes m_h·(n − 1) at positions s. The key bias m_h p_j grows with the position; in
    float32 its rounding (≈ 6e-8·m_h p_j) stays below 1e-3 for m_h p_j ≤ 10⁴.

    Reference: Press, Smith, Lewis, "Train Short, Test Long: Attention with Linear Biases
    Enables Input Length Extrapolation", ICLR 2022 (arXiv:2108.12409).
    """

    slopes: tuple[float, ...] | None = None
    rounding: str | None = None
    scale: float = 1.0

    name: ClassVar[str] = "alibi"

    def __post_init__(self):
        if self.rounding is not None:
            check_choice(self.rounding, "ALiBi rounding", tuple(_ROUNDINGS))
        object.__setattr__(self, "scale", check_positive(self.scale, "ALiBi scale"))
        if self.slopes is None:
            return
        try:
            table = torch.as_tensor(self.slopes, dtype=torch.float64, device="cpu")
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"ALiBi slopes must be a sequence of numbers, one per head; received "
                f"{self.slopes!r}."
            ) from None
        if table.ndim > 1:
            raise ValueError(
                f"ALiBi takes one slope per head (a flat sequence); received a table of shape "
                f"{tuple(table.shape)}."
            )
        values = table.reshape(-1).tolist()  # a few numbers of the configuration
        if not values or not all(math.isfinite(m) and m > 0 for m in values):
            raise ValueError(
                f"ALiBi slopes must be a non-empty sequence of finite positive numbers, one per "
                f"head; received {self.slopes!r}."
            )
        object.__setattr__(self, "slopes", tuple(values))

    def check(self, head_dim: int, heads: int) -> None:
        if self.slopes is not None and len(self.slopes) != heads:
            raise ValueError(
                f"ALiBi has {len(self.slopes)} slopes but the attention has H = {heads} query "
                "heads; pass one slope per head, or slopes=None for the paper's."
            )

    def head_slopes(self, heads: int) -> tuple[float, ...]:
        """The slopes m_1 … m_H (the given ones, or the paper's for H heads)."""
        if self.slopes is not None:
            return self.slopes
        return tuple(_paper_slopes(heads))

    def key_bias(self, positions: torch.Tensor, heads: int) -> torch.Tensor:
        """The key bias c·m_h p_j: shape (H, m), in the positions' dtype. Remembered for
        the last positions of equal ALiBis and H (:mod:`tpde._memo`: a forward's layers,
        and the next forward's new positions of the same bits, reuse one table)."""
        memo = _BIAS_MEMOS.get((self, heads))
        if memo is None:
            if len(_BIAS_MEMOS) >= _BIAS_MEMO_COUNT:
                _BIAS_MEMOS.pop(next(iter(_BIAS_MEMOS)))
            memo = _BIAS_MEMOS[(self, heads)] = TensorMemo(
                lambda p, alibi=self, h=heads: alibi._key_bias(p, h), "positions"
            )
        return memo(positions)

    def _key_bias(self, positions: torch.Tensor, heads: int) -> torch.Tensor:
        if self.rounding is None:
            slopes = torch.tensor(
                self.head_slopes(heads), dtype=positions.dtype, device=positions.device
            )
            bias = slopes.unsqueeze(-1) * positions  # (H, m): +m_h p_j
        else:
            low = _ROUNDINGS[self.rounding]
            slopes = _float32_slopes(self.slopes, heads).to(device=positions.device, dtype=low)
            bias = (slopes.unsqueeze(-1) * positions.to(low)).to(positions.dtype)
        return bias if self.scale == 1.0 else bias * self.scale


#: (ALiBi, H) → the memo of its key bias (equal ALiBis share one: a model's layers each
#: hold their own, equal ALiBi); at most :data:`_BIAS_MEMO_COUNT`, the oldest dropped.
_BIAS_MEMOS: dict = {}
_BIAS_MEMO_COUNT = 8

#: The last tables of :func:`_shared_cos_sin`: ((RoPE, positions, version, d_h, dtype, L),
#: tables), or None.
_LAST_TABLE: list = [None]


def _shared_cos_sin(rope: RoPE, key: tuple) -> tuple:
    """The tables of :func:`_cos_sin` for ``key`` = (positions, version, d_h, dtype, L),
    shared by equal RoPEs (a model's layers each hold their own, equal RoPE: one table per
    forward pass instead of one per layer); recomputed when the RoPE (by ==), the positions
    tensor, its version counter, d_h, the dtype or L differ from the last call's."""
    last = _LAST_TABLE[0]
    if last is not None:
        (other, positions, *rest), tables = last
        if positions is key[0] and tuple(rest) == key[1:] and (other is rope or other == rope):
            return tables
    positions, _, head_dim, dtype, length = key
    tables = _cos_sin(rope, positions, head_dim, dtype, length)
    _LAST_TABLE[0] = ((rope, *key), tables)
    return tables


def _cos_sin(rope: RoPE, positions: torch.Tensor, head_dim: int, dtype, length=None) -> tuple:
    """(n, r) tables C, S with rotate(x) = x·C + partner(x)·S: in pair (a, b) at angle φ,
    C = α(cos φ, cos φ) and S = α(−sin φ, sin φ), laid out as the pairs are (α: the scaling's
    attention factor, else 1)."""
    theta = rope.frequencies(head_dim, positions.device, length)
    angles = positions.to(torch.float64).unsqueeze(-1) * theta  # (n, r/2)
    cos, sin = angles.cos(), angles.sin()
    if rope.scaling is not None and rope.scaling.attention_scaling != 1.0:
        alpha = rope.scaling.attention_scaling
        cos, sin = alpha * cos, alpha * sin
    if rope.style == "half":
        C, S = torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)
    else:
        C = torch.stack([cos, cos], dim=-1).flatten(-2)
        S = torch.stack([-sin, sin], dim=-1).flatten(-2)
    return C.to(dtype), S.to(dtype)


#: ALiBi's ``rounding`` names → the dtype a checkpoint's code forms the bias in.
_ROUNDINGS = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _float32_slopes(slopes, heads: int) -> torch.Tensor:
    """The slopes in float32 as BLOOM's and Falcon's code computes them: given ones rounded,
    the paper's as torch.pow of a float32 base 2^{−8/P} over h = 1 … P (then the odd powers
    of 2^{−8/(2P)} for the H − P others), P the power of two ≤ H. On the CPU (a table the
    caller moves to its tokens' device)."""
    cpu = torch.device("cpu")
    if slopes is not None:
        return torch.tensor(slopes, dtype=torch.float64, device=cpu).to(torch.float32)
    power = 2 ** math.floor(math.log2(heads))
    base = torch.tensor(2.0 ** (-8.0 / power), dtype=torch.float32, device=cpu)
    out = torch.pow(base, torch.arange(1, power + 1, dtype=torch.int32, device=cpu))
    if power < heads:
        finer = torch.tensor(2.0 ** (-8.0 / (2 * power)), dtype=torch.float32, device=cpu)
        odd = torch.arange(1, 1 + 2 * min(power, heads - power), 2, dtype=torch.int32, device=cpu)
        out = torch.cat([out, torch.pow(finer, odd)])
    return out


def _paper_slopes(heads: int) -> list[float]:
    """Press et al.'s slopes: 2^{−8h/P} for P = H a power of two, interleaved otherwise."""
    power = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * h / power) for h in range(1, power + 1)]
    if power < heads:
        finer = [2.0 ** (-8.0 * h / (2 * power)) for h in range(1, 2 * power + 1)]
        slopes += finer[0::2][: heads - power]
    return slopes


#: name → class of every positional encoding; ``position="rope"`` builds ``RoPE()``.
POSITIONAL_ENCODINGS: dict[str, type[PositionalEncoding]] = {"rope": RoPE, "alibi": ALiBi}


def positional_encoding(position) -> PositionalEncoding | None:
    """``position`` as an encoding: None, an instance, or a name of the table (defaults)."""
    if position is None or isinstance(position, PositionalEncoding):
        return position
    if isinstance(position, str) and position in POSITIONAL_ENCODINGS:
        return POSITIONAL_ENCODINGS[position]()
    raise ValueError(
        f"position must be None, a positional encoding (RoPE(...), ALiBi(...)) or one of "
        f"{', '.join(map(repr, POSITIONAL_ENCODINGS))}; received {position!r}."
    )
