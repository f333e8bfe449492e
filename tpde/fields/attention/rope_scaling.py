r"""RoPE scalings: the frequency schedules that stretch a rotary encoding past its context.

A scaling replaces RoPE's frequencies θ_m = b^{−2m/r} (m = 0 … r/2 − 1; b the base, r the
rotated width) by θ'_m, and may multiply the rotation tables cos, sin by an attention factor α
(so every score between rotated coordinates by α²). s is the factor, C₀ the original
(pre-training) context, C the model's context (``max_position_embeddings``), L the sequence
length (largest position + 1, integer positions), λ_m = 2π/θ_m a wavelength (MATH.md §8):

==========  ====================================================================  ==========
scaling     θ'_m                                                                  α
==========  ====================================================================  ==========
linear      θ_m / s                                                               1
dynamic     b'^{−2m/r}, b' = b·(sL/C − (s − 1))^{r/(r−2)} when L > C, else θ_m    1
llama3      θ_m (λ_m < C₀/h), θ_m/s (λ_m > C₀/l), else (1 − γ_m)θ_m/s + γ_m θ_m,   1
            γ_m = (C₀/λ_m − l)/(h − l)
yarn        (1 − e_m) θ_m/s + e_m θ_m, e_m = 1 − clamp((m − lo)/(hi − lo), 0, 1)    g(s, μ)/g(s, μ′)
longrope    θ_m / f_m, f = long factors when L > C₀, else short ones               √(1 + ln s/ln C₀)
==========  ====================================================================  ==========

YaRN's ramp ends: lo, hi = d(β_fast), d(β_slow), d(ρ) = r·ln(C₀/(2πρ))/(2 ln b), rounded
outwards (floor, ceil) unless ``truncate=False``, clipped to [0, r − 1] (hi += 0.001 if they meet);
g(s, μ) = 1 + 0.1·μ·ln s for s > 1, else 1 (μ = μ′ = 1 unless both ``mscale`` and
``mscale_all_dim`` are given); a given ``attention_factor`` replaces α. LongRoPE's s defaults
to C/C₀ and α to 1 when s ≤ 1.

Two read the sequence length (``reads_length``): dynamic NTK and LongRoPE. L is one number
for a whole sequence — queries and keys rotate with the same frequencies, so scores still
depend on p_j − p_i only — and :class:`~tpde.fields.GroupedQueryAttention` takes it from the
positions it attends over (queries and keys). Hugging Face transformers takes it from the
``position_ids`` of a forward call; its dynamic module also keeps the largest frequencies it
has computed (after a sequence of length L₁ > C, a shorter one of length L₂ ∈ (C, L₁) keeps
L₁'s), so its output depends on the calls before. Here θ' is a function of the present
sequence: it equals a fresh transformers model's on every call.

Every formula is computed in float64 and is transformers' ``ROPE_INIT_FUNCTIONS``
(``modeling_rope_utils.py``, version 5) with its float32 casts read as float64.

References: Chen et al., "Extending Context Window of Large Language Models via Positional
Interpolation", arXiv:2306.15595 (linear); bloc97 and emozilla, "Dynamically scaled RoPE",
r/LocalLLaMA (2023) (dynamic NTK); Peng et al., "YaRN: Efficient Context Window Extension of
Large Language Models", arXiv:2309.00071; Meta, "The Llama 3 Herd of Models", arXiv:2407.21783
(llama3); Ding et al., "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens",
arXiv:2402.13753.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from tpde._validation import check_positive, check_positive_int

__all__ = [
    "ROPE_SCALINGS",
    "DynamicNTK",
    "LinearScaling",
    "Llama3Scaling",
    "LongRoPE",
    "RopeScaling",
    "YaRN",
]


def rope_frequencies(base: float, dims: int, device=None) -> torch.Tensor:
    """θ_m = 1/b^{2m/r}, m = 0 … r/2 − 1, in float64 (transformers' order of operations)."""
    exponents = torch.arange(0, dims, 2, dtype=torch.float64, device=device) / dims
    return 1.0 / base**exponents


class RopeScaling:
    """Base of the RoPE scalings: a frequency schedule θ_m → θ'_m and an attention factor α.

    A subclass is a frozen dataclass that validates its parameters and overrides
    :meth:`frequencies` (and :attr:`attention_scaling`, :meth:`check` where it has them).
    ``reads_length`` says whether θ' depends on the sequence length L.
    """

    # Its rope_type in transformers' configs, the key of ROPE_SCALINGS; not a documented
    # attribute, so that the docs' cross-references to `name` stay unambiguous.
    name: ClassVar[str] = ""
    #: Whether the frequencies depend on the sequence length L.
    reads_length: ClassVar[bool] = False
    #: Whether it is made for sequences longer than the model's context C (dynamic NTK: it
    #: acts only there), so that a loader should not refuse them.
    beyond_context: ClassVar[bool] = False

    @property
    def attention_scaling(self) -> float:
        """α, the factor of the cos and sin tables (default 1)."""
        return 1.0

    def check(self, dims: int) -> None:
        """Raise ValueError if the scaling cannot act on a rotated width r = ``dims``."""

    def frequencies(
        self, base: float, dims: int, length: float | None = None, device=None
    ) -> torch.Tensor:
        """θ'_m (r/2,) in float64 for base b, rotated width r and sequence length L."""
        raise NotImplementedError(f"{type(self).__name__} does not define its frequencies.")


def _positive(value, cls: type, key: str) -> float:
    return check_positive(value, f"{cls.__name__} {key}")


def _context(value, cls: type, key: str) -> int:
    return check_positive_int(value, f"{cls.__name__} {key}")


@dataclass(frozen=True)
class LinearScaling(RopeScaling):
    r"""Position interpolation: θ'_m = θ_m/s, positions p read as p/s (Chen et al. 2023).

    Parameters
    ----------
    factor : float
        s > 0 (Gemma-3's global layers from 4B on: 8).
    """

    factor: float

    name: ClassVar[str] = "linear"

    def __post_init__(self):
        object.__setattr__(self, "factor", _positive(self.factor, type(self), "factor"))

    def frequencies(self, base, dims, length=None, device=None):
        return rope_frequencies(base, dims, device) / self.factor


@dataclass(frozen=True)
class DynamicNTK(RopeScaling):
    r"""Dynamic NTK: a larger base once the sequence outgrows the context.

    For L ≤ C the frequencies are RoPE's; for L > C the base is b' = b·(sL/C − (s − 1))^{r/(r−2)}
    and θ'_m = b'^{−2m/r} (transformers' ``_compute_dynamic_ntk_parameters`` with its
    ``dynamic_rope_update``). The lowest frequency then turns by about the angle it turned at C
    over the whole sequence; the highest (m = 0) is unchanged.

    Parameters
    ----------
    factor : float
        s > 0.
    context : int
        C, the context it was trained for (``max_position_embeddings``).
    """

    factor: float
    context: int

    name: ClassVar[str] = "dynamic"
    reads_length: ClassVar[bool] = True
    beyond_context: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "factor", _positive(self.factor, type(self), "factor"))
        object.__setattr__(self, "context", _context(self.context, type(self), "context"))

    def check(self, dims: int) -> None:
        if dims <= 2:
            raise ValueError(
                f"DynamicNTK raises the base to the power r/(r − 2), so it needs a rotated width "
                f"r > 2; received r = {dims}."
            )

    def frequencies(self, base, dims, length=None, device=None):
        if length is None or length <= self.context:
            return rope_frequencies(base, dims, device)
        grown = self.factor * length / self.context - (self.factor - 1)
        return rope_frequencies(base * grown ** (dims / (dims - 2)), dims, device)


@dataclass(frozen=True)
class Llama3Scaling(RopeScaling):
    r"""Llama 3.1's schedule: long wavelengths interpolated, short ones kept, a ramp between.

    With λ_m = 2π/θ_m: θ'_m = θ_m where λ_m < C₀/h, θ_m/s where λ_m > C₀/l, and
    (1 − γ_m)θ_m/s + γ_m θ_m between, γ_m = (C₀/λ_m − l)/(h − l) (transformers'
    ``_compute_llama3_parameters``; Meta's ``apply_scaling``).

    Parameters
    ----------
    factor : float
        s > 0 (Llama 3.1: 8; 3.2: 32).
    original_context : int
        C₀ (``original_max_position_embeddings``; Llama 3.1: 8192).
    low_freq_factor, high_freq_factor : float
        l and h, 0 < l < h (Llama 3.1: 1 and 4).
    """

    factor: float
    original_context: int
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    name: ClassVar[str] = "llama3"

    def __post_init__(self):
        cls = type(self)
        object.__setattr__(self, "factor", _positive(self.factor, cls, "factor"))
        object.__setattr__(
            self, "original_context", _context(self.original_context, cls, "original_context")
        )
        low = _positive(self.low_freq_factor, cls, "low_freq_factor")
        high = _positive(self.high_freq_factor, cls, "high_freq_factor")
        if high <= low:
            raise ValueError(
                f"Llama3Scaling ramps between the wavelengths C₀/high_freq_factor and "
                f"C₀/low_freq_factor, so it needs high_freq_factor > low_freq_factor; received "
                f"{high!r} ≤ {low!r}."
            )
        object.__setattr__(self, "low_freq_factor", low)
        object.__setattr__(self, "high_freq_factor", high)

    def frequencies(self, base, dims, length=None, device=None):
        theta = rope_frequencies(base, dims, device)
        s, c0 = self.factor, self.original_context
        low, high = self.low_freq_factor, self.high_freq_factor
        wavelength = 2 * math.pi / theta
        out = torch.where(wavelength > c0 / low, theta / s, theta)
        gamma = (c0 / wavelength - low) / (high - low)
        smoothed = (1 - gamma) * out / s + gamma * out
        medium = (wavelength >= c0 / high) & (wavelength <= c0 / low)
        return torch.where(medium, smoothed, out)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """g(s, μ) = 1 + 0.1·μ·ln s for s > 1, else 1 (YaRN, eq. 21; transformers' yarn_get_mscale)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class YaRN(RopeScaling):
    r"""YaRN: interpolate the long wavelengths, keep the short ones, and sharpen the scores.

    θ'_m = (1 − e_m)θ_m/s + e_m θ_m with the extrapolation weight e_m = 1 − clamp((m − lo)/(hi −
    lo), 0, 1); lo, hi = d(β_fast), d(β_slow), d(ρ) = r·ln(C₀/(2πρ))/(2 ln b) the pair whose
    wavelength fits ρ times in C₀, rounded outwards (``truncate``) and clipped to [0, r − 1]
    (hi += 0.001 where they meet). α = g(s, μ)/g(s, μ′) with g of :func:`yarn_mscale`
    (μ = ``mscale``, μ′ = ``mscale_all_dim`` when both are given, else α = g(s, 1)), or the given
    ``attention_factor`` (transformers' ``_compute_yarn_parameters``; Peng et al. 2023).

    Parameters
    ----------
    factor : float
        s > 0 (Qwen2.5 long context: 4).
    original_context : int
        C₀ (``original_max_position_embeddings``).
    beta_fast, beta_slow : float
        β_fast = 32, β_slow = 1 by default (the paper's α, β).
    attention_factor : float, optional
        α itself; default from s (and ``mscale``, ``mscale_all_dim``).
    mscale, mscale_all_dim : float, optional
        DeepSeek's μ, μ′ (both needed to count).
    truncate : bool
        Round lo down and hi up (default True).
    """

    factor: float
    original_context: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    name: ClassVar[str] = "yarn"

    def __post_init__(self):
        cls = type(self)
        for key in ("factor", "beta_fast", "beta_slow"):
            object.__setattr__(self, key, _positive(getattr(self, key), cls, key))
        object.__setattr__(
            self, "original_context", _context(self.original_context, cls, "original_context")
        )
        for key in ("attention_factor", "mscale", "mscale_all_dim"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _positive(getattr(self, key), cls, key))
        if not isinstance(self.truncate, bool):
            raise TypeError(f"YaRN truncate must be True or False; received {self.truncate!r}.")

    @property
    def attention_scaling(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(
                self.factor, self.mscale_all_dim
            )
        return yarn_mscale(self.factor)

    def ramp(self, base: float, dims: int) -> tuple[float, float]:
        """(lo, hi): the pairs where the ramp from extrapolation to interpolation starts, ends."""

        def pair(rotations):  # the pair m whose wavelength fits `rotations` times in C₀
            ratio = self.original_context / (rotations * 2 * math.pi)
            return dims * math.log(ratio) / (2 * math.log(base))

        low, high = pair(self.beta_fast), pair(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, dims - 1)

    def frequencies(self, base, dims, length=None, device=None):
        theta = rope_frequencies(base, dims, device)
        low, high = self.ramp(base, dims)
        if low == high:
            high += 0.001  # transformers' guard against a zero-width ramp
        m = torch.arange(dims // 2, dtype=torch.float64, device=device)
        extrapolation = 1 - ((m - low) / (high - low)).clamp(0, 1)
        return theta / self.factor * (1 - extrapolation) + theta * extrapolation


@dataclass(frozen=True)
class LongRoPE(RopeScaling):
    r"""LongRoPE (Phi-3/3.5): one rescaling factor per pair, long or short by the length.

    θ'_m = θ_m/f_m with f the long factors when L > C₀, the short ones otherwise; α = √(1 + ln s/
    ln C₀) for s > 1, else 1, or the given ``attention_factor`` (transformers'
    ``_compute_longrope_parameters`` and ``dynamic_rope_update``; Ding et al. 2024).

    Parameters
    ----------
    short_factor, long_factor : sequences of r/2 positive floats
        f for L ≤ C₀ and for L > C₀.
    original_context : int
        C₀ (``original_max_position_embeddings``; Phi-3-mini-128k: 4096).
    factor : float
        s > 0, for α only (configs that omit it mean C/C₀).
    attention_factor : float, optional
        α itself.
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_context: int
    factor: float
    attention_factor: float | None = None

    name: ClassVar[str] = "longrope"
    reads_length: ClassVar[bool] = True

    def __post_init__(self):
        cls = type(self)
        for key in ("short_factor", "long_factor"):
            values = getattr(self, key)
            if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
                raise TypeError(
                    f"LongRoPE {key} must be a sequence of numbers, one per rotated pair; "
                    f"received {values!r}."
                )
            object.__setattr__(
                self, key, tuple(_positive(v, cls, f"{key}[{i}]") for i, v in enumerate(values))
            )
        object.__setattr__(
            self, "original_context", _context(self.original_context, cls, "original_context")
        )
        object.__setattr__(self, "factor", _positive(self.factor, cls, "factor"))
        if self.attention_factor is not None:
            value = _positive(self.attention_factor, cls, "attention_factor")
            object.__setattr__(self, "attention_factor", value)

    @property
    def attention_scaling(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.factor <= 1:
            return 1.0
        return math.sqrt(1 + math.log(self.factor) / math.log(self.original_context))

    def check(self, dims: int) -> None:
        for key in ("short_factor", "long_factor"):
            if len(getattr(self, key)) != dims // 2:
                raise ValueError(
                    f"LongRoPE {key} has {len(getattr(self, key))} factors, but the rotated width "
                    f"r = {dims} has {dims // 2} pairs; pass one factor per pair."
                )

    def frequencies(self, base, dims, length=None, device=None):
        self.check(dims)
        long = length is not None and length > self.original_context
        factors = self.long_factor if long else self.short_factor
        table = torch.tensor(factors, dtype=torch.float64, device=device)
        return rope_frequencies(base, dims, device) / table


#: ``rope_type`` → class of every RoPE scaling (transformers' names).
ROPE_SCALINGS: dict[str, type[RopeScaling]] = {
    cls.name: cls for cls in (LinearScaling, DynamicNTK, Llama3Scaling, YaRN, LongRoPE)
}
