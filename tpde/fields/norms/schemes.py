r"""Normalisation schemes as objects: one small frozen class per scheme (MATH.md §7, §8).

A scheme says how a residual layer of step h normalises the tokens around a field Γ, and
what that layer becomes as h → 0. N(x) = x/|x|; P⊥_x = I − xxᵀ/|x|²; LN and RMS the real
LayerNorm and RMSNorm with their gains:

=============  ==========================================  ==================================
scheme         discrete layer (step h)                      continuous time (h → 0)
=============  ==========================================  ==================================
PostLN         x ← N(x + hΓ[μ](x))                          ẋ = P⊥_x Γ[μ](x) on S^{d−1}
PreLN          x ← x + hΓ[N#μ](N(x))                        ẋ = Γ[N#μ](N(x)) in R^d
PeriLN         x ← x + h N(Γ[N#μ](N(x)))                    ẋ = N(Γ[N#μ](N(x))) (unit speed)
MixLN          PostLN for t < switch, PreLN after           (the two, piecewise in depth-time)
NGPT           x ← N(x + hα(N(Γ[μ](x)) − x))                ẋ = α(t) P⊥_x N(Γ[μ](x)) on S^{d−1}
LayerNorm      post: x ← LN(x + hΓ[μ](x))                   (BERT's sublayer; no limit claimed)
               pre:  x ← x + hΓ[LN#μ](LN(x))                ẋ = Γ[LN#μ](LN(x)) (GPT-2)
RMSNorm        pre:  x ← x + hΓ[RMS#μ](RMS(x))              ẋ = Γ[RMS#μ](RMS(x)) (Llama)
               post: x ← RMS(x + hΓ[μ](x))
Sandwich       x ← x + h N₂(Γ[N₁#μ](N₁(x)))                 ẋ = N₂(Γ[N₁#μ](N₁(x))) (Gemma-2/3;
               (N₁ absent: x ← x + h N₂(Γ[μ](x)))            OLMo-2 without N₁)
=============  ==========================================  ==================================

N, P⊥, LN and RMS are right to rounding at every scale of the dtype (tokens of norm 1e−300
to 1e300 in float64): N and P⊥ through :mod:`tpde._scale_safe`, LN and RMS through
:func:`layer_norm` and :func:`rms_norm` (their mean of squares rescaled where it would
overflow or underflow).

A scheme owns its velocity transform (:meth:`NormScheme.velocity`), its projection (the
retraction a flow applies after every accepted step, or None), the check of the tokens it
accepts, its pieces in depth-time (Mix-LN) and its gradient structure (PostLN only). The
strings "post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt", "layernorm", "rmsnorm",
"sandwich" name them in :data:`SCHEMES`: a new scheme is one class here and one entry there.

References: Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv:2312.10794 (post-LN, the
sphere model); Karagodin, Ge, Polyanskiy, Rigollet, arXiv:2510.22026 (normalisation as speed
regulation; continuous forms of the other schemes are tpde's reading, MATH.md §7 [ours]);
Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019 (RMSNorm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from dataclasses import field as dataclass_field
from typing import ClassVar

import torch

from tpde._scale_safe import layer_norm, rms_norm, tangent_part, unit
from tpde._validation import as_tensor, check_finite, check_positive, check_real
from tpde.fields.norms._calls import (
    _check_atol,
    _check_on_sphere,
    _check_tangent,
    _normalised_call,
    _on_sphere,
    _pre_velocity,
    _resolved,
)
from tpde.fields.params import evaluate_parameter
from tpde.metrics.mobility import NotAGradientFlow

__all__ = [
    "NGPT",
    "SCHEMES",
    "LayerNorm",
    "MixLN",
    "NormScheme",
    "PeriLN",
    "PostLN",
    "PreLN",
    "RMSNorm",
    "Sandwich",
    "scheme_from",
]


# ---------------------------------------------------------------------- the maps
def tangent(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """P⊥_x v = v − x⟨x, v⟩/|x|²: the part of v tangent to the sphere through x (at every
    scale of x, without forming |x|²; v itself at x = 0, which has no direction)."""
    return tangent_part(unit(x), v)


def _on(value, like: torch.Tensor):
    """A scheme parameter on the tokens' dtype and device (floats and None stay)."""
    if value is None:
        return None
    return value.to(like) if isinstance(value, torch.Tensor) else value


# ---------------------------------------------------------------------- the protocol
@dataclass(frozen=True, eq=False)
class NormScheme:
    """Base class of normalisation schemes (module notes).

    A scheme implements :meth:`velocity`; it may override :meth:`project` (with
    ``projects = True``), :meth:`check_tokens`, :meth:`piece` and ``breakpoints``,
    ``time_dependent`` and :meth:`gradient_structure`.
    """

    #: The string alias of the scheme (:data:`SCHEMES`).
    name: ClassVar[str] = ""
    #: Whether flows apply :meth:`project` after every accepted step.
    projects: ClassVar[bool] = False
    #: Whether the tokens must lie on the unit sphere.
    on_sphere: ClassVar[bool] = False
    #: Depth-times where the scheme changes (Mix-LN).
    breakpoints: ClassVar[tuple[float, ...]] = ()
    #: Whether equiangular tokens stay equiangular with a scalar law for their inner
    #: product ρ and radius r (:mod:`tpde.theory.equiangular`, MATH.md §9).
    equiangular_law: ClassVar[bool] = False

    def velocity(self, field, t, mu, x, engine, info) -> torch.Tensor:
        """Γ̃[μ](x), the scheme's velocity around the field's Γ (μ an Empirical)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement velocity.")

    def project(self, points: torch.Tensor) -> torch.Tensor:
        """The retraction after every step (identity unless ``projects``)."""
        return points

    def piece(self, t: float) -> NormScheme:
        """The scheme acting at depth-time t (itself, unless piecewise)."""
        return self

    def start(self, mu):
        """The tokens a flow under this scheme starts from, given tokens ``mu``: ``mu``
        itself, unless the scheme's model normalises its tokens before the first layer."""
        return mu

    @property
    def time_dependent(self) -> bool:
        return False

    def check_dim(self, d: int) -> None:
        """Raise unless the scheme's parameters fit tokens of dimension d."""

    def check_tokens(self, mu) -> None:
        """Raise unless the scheme accepts the tokens of ``mu`` (an Empirical)."""
        if self.on_sphere:
            _check_on_sphere(mu, self.name, getattr(self, "atol", None))

    def gradient_structure(self, field, t: float):
        raise NotAGradientFlow(
            f"{self.name} attention has no gradient structure in tpde: only the post-LN "
            "sphere flow of a gradient-flow field with mobility cI does (MATH.md §7)."
        )

    def describe(self) -> str:
        """The scheme as its constructor call (for reprs)."""
        return f"{type(self).__name__}()"


# ---------------------------------------------------------------------- sphere schemes
@dataclass(frozen=True, eq=False)
class _OnSphere(NormScheme):
    """The sphere schemes' common part: tokens on S^{d−1}, N after every step, and the
    choice of the tangent velocity (keyword fields ``tangent`` and ``atol``, see PostLN)."""

    tangent: bool = dataclass_field(default=True, kw_only=True)
    atol: float | None = dataclass_field(default=None, kw_only=True)
    projects: ClassVar[bool] = True
    on_sphere: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "tangent", _check_tangent(self.tangent))
        object.__setattr__(self, "atol", _check_atol(self.atol))

    def project(self, points):
        return unit(points)


@dataclass(frozen=True, eq=False)
class PostLN(_OnSphere):
    """Post-LN, the sphere model: ẋ = P⊥_x Γ[μ](x) (``tangent=True``), or the discrete
    layer's direction Γ (``tangent=False``: Euler + renormalisation is x ← N(x + hΓ), GLPR's
    loop; first order for any method). With the tangent velocity the field is evaluated at
    N(x) against N#μ, equal to Γ[μ](x) on the sphere; off it, where Runge–Kutta stages
    evaluate, this 0-homogeneous extension keeps circle-only engines usable at every stage.

    Parameters
    ----------
    tangent : bool (default True: every method keeps its order).
    atol : float, optional. Tolerance on | |x| − 1 | of the tokens handed to a flow
        (default 1e3·eps of the dtype).

    Gradient structure: when Γ is a (twisted) gradient flow whose mobility is cI (V = cA,
    e.g. Q = K = V = I), P⊥_x(cM∇δE/δμ) = c∇_S δE/δμ, so the field's Lyapunov functional
    is non-increasing along the post-LN flow (Geshkovski et al. §3; MATH.md §7).
    """

    name: ClassVar[str] = "post-ln"
    equiangular_law: ClassVar[bool] = True

    def velocity(self, field, t, mu, x, engine, info):
        if not self.tangent:
            return field.particle_velocity(t, mu, x, engine, info)
        out, directions, _ = _on_sphere(field, t, mu, x, engine, info)
        return tangent_part(directions, out)  # = P⊥_x out, N(x) computed once

    def gradient_structure(self, field, t: float):
        if not self.tangent:
            return super().gradient_structure(field, t)
        structure = field.gradient_structure(t)
        M = structure.mobility
        c = float(M.diagonal().mean())
        eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
        if float((M - c * eye).abs().max()) > 1e-8 * abs(c):
            raise NotAGradientFlow(
                "the post-LN flow is a spherical gradient flow only for a mobility cI (V = cA, "
                f"e.g. Q = K = V = I); the wrapped field's mobility has eigenvalues "
                f"{torch.linalg.eigvalsh(M).tolist()} (MATH.md §7)."
            )
        return structure

    def describe(self) -> str:
        return "PostLN()" if self.tangent else "PostLN(tangent=False)"


@dataclass(frozen=True, eq=False)
class NGPT(_OnSphere):
    """nGPT: ẋ = α(t) P⊥_x N(Γ[μ](x)) on the sphere (speed ≤ α); ``tangent=False`` flows
    the layer's direction α(N(Γ) − x) (Euler + renormalisation is the layer).

    Parameters
    ----------
    alpha : float > 0 or callable ``t -> float`` (learned per layer in nGPT). Default 1.
    tangent, atol : as :class:`PostLN`.
    """

    alpha: object = 1.0
    name: ClassVar[str] = "ngpt"
    equiangular_law: ClassVar[bool] = True

    def __post_init__(self):
        if not callable(self.alpha):
            object.__setattr__(self, "alpha", check_positive(self.alpha, "nGPT alpha"))
        super().__post_init__()

    @property
    def time_dependent(self) -> bool:
        return callable(self.alpha)

    def alpha_at(self, t) -> float:
        """α(t), checked: a finite positive scalar."""
        if not callable(self.alpha):
            return self.alpha
        value = evaluate_parameter(self.alpha, "alpha", t)
        if value.numel() != 1:
            raise ValueError(
                f"the nGPT step alpha(t) must be one number per depth-time; alpha({t}) "
                f"returned shape {tuple(value.shape)}."
            )
        value = float(value)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(
                f"the nGPT step alpha(t) must be finite and > 0; received alpha({t}) = {value}."
            )
        return value

    def velocity(self, field, t, mu, x, engine, info):
        alpha = self.alpha_at(t)
        if not self.tangent:
            out = _resolved(field, t, mu, x, field.particle_velocity(t, mu, x, engine, info))
            return alpha * (unit(out) - unit(x))
        out, directions, keys = _on_sphere(field, t, mu, x, engine, info)
        out = _resolved(field, t, keys, directions, out)  # a rounded 0 stays 0
        return alpha * tangent_part(directions, unit(out))

    def describe(self) -> str:
        extra = "" if self.tangent else ", tangent=False"
        return f"NGPT(alpha={'<callable>' if callable(self.alpha) else self.alpha}{extra})"


# ---------------------------------------------------------------------- R^d schemes
@dataclass(frozen=True, eq=False)
class PreLN(NormScheme):
    """Pre-LN: ẋ = Γ[N#μ](N(x)); with x = rθ the angle moves at speed |P⊥_θΓ|/r."""

    name: ClassVar[str] = "pre-ln"
    equiangular_law: ClassVar[bool] = True

    def velocity(self, field, t, mu, x, engine, info):
        return _pre_velocity(unit, field, t, mu, x, engine, info)


@dataclass(frozen=True, eq=False)
class PeriLN(NormScheme):
    """Peri-LN: ẋ = N(Γ[N#μ](N(x))), unit-speed updates."""

    name: ClassVar[str] = "peri-ln"
    equiangular_law: ClassVar[bool] = True

    def velocity(self, field, t, mu, x, engine, info):
        out, queries, keys = _normalised_call(unit, field, t, mu, x, engine, info)
        return unit(_resolved(field, t, keys, queries, out))  # 0 stays 0 (_resolved)


@dataclass(frozen=True, eq=False)
class MixLN(NormScheme):
    """Mix-LN: :class:`PostLN` on [0, switch), :class:`PreLN` after (piecewise in depth).

    Parameters
    ----------
    switch : float in (0, depth), the depth-time where Post-LN hands over to Pre-LN.
    depth : float, the depth-time of the whole stack (default 1: layers on [0, 1]).
    tangent, atol : the Post-LN part's (:class:`PostLN`).
    """

    switch: float = None
    depth: float = 1.0
    tangent: bool = True
    atol: float | None = None
    name: ClassVar[str] = "mix-ln"
    equiangular_law: ClassVar[bool] = True

    def __post_init__(self):
        depth = check_positive(self.depth, "depth")
        if self.switch is None:
            raise ValueError("the 'mix-ln' scheme needs switch=t, the depth-time in (0, depth) "
                             "where Post-LN hands over to Pre-LN.")  # fmt: skip
        if isinstance(self.switch, str):
            raise TypeError(
                f"the Mix-LN switch is a depth-time (a number in (0, {depth:g})); received the "
                f"string {self.switch!r}."
            )
        switch = check_real(self.switch, "switch")
        if not 0 < switch < depth:
            raise ValueError(
                f"the Mix-LN switch must lie inside the depth range (0, {depth:g}) so that "
                f"both schemes act; received switch = {switch:g}. Pass depth= for a longer "
                "stack."
            )
        object.__setattr__(self, "switch", switch)
        object.__setattr__(self, "depth", depth)
        post = PostLN(tangent=self.tangent, atol=self.atol)  # checks them
        object.__setattr__(self, "_pieces", (post, PreLN()))

    @property
    def breakpoints(self) -> tuple[float, ...]:
        return (self.switch,)

    @property
    def time_dependent(self) -> bool:
        return True

    def piece(self, t: float) -> NormScheme:
        """Post-LN before the switch, Pre-LN after."""
        return self._pieces[0] if float(t) < self.switch else self._pieces[1]

    def velocity(self, field, t, mu, x, engine, info):
        return self.piece(t).velocity(field, t, mu, x, engine, info)

    def check_tokens(self, mu) -> None:
        self._pieces[0].check_tokens(mu)  # a flow starting after the switch asks its piece

    def describe(self) -> str:
        return f"MixLN(switch={self.switch:g}, depth={self.depth:g})"


@dataclass(frozen=True, eq=False)
class _AffineNorm(NormScheme):
    """A norm with a gain (and a bias) placed before the field ("pre": the field sees the
    normalised tokens) or after the step ("post": the projection after every step).
    Subclasses have the fields ``gamma`` (and ``bias``), ``eps`` and ``placement``."""

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def projects(self) -> bool:  # type: ignore[override]
        return self.placement == "post"

    def velocity(self, field, t, mu, x, engine, info):
        if self.placement == "post":
            return field.particle_velocity(t, mu, x, engine, info)
        return _pre_velocity(self.norm, field, t, mu, x, engine, info)

    def project(self, points):
        return self.norm(points) if self.placement == "post" else points

    def check_dim(self, d: int) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in ("gamma", "bias") and isinstance(value, torch.Tensor):
                if value.shape != (d,):
                    raise ValueError(
                        f"{type(self).__name__} {item.name} must have shape ({d},), one entry "
                        f"per coordinate of the tokens; received {tuple(value.shape)}."
                    )


def _norm_parameter(value, name: str, owner: str):
    if value is None:
        return None
    tensor = as_tensor(value, f"{owner} {name}")
    if tensor.ndim != 1:
        raise ValueError(
            f"{owner} {name} must be a vector (d,), one entry per coordinate of the tokens; "
            f"received shape {tuple(tensor.shape)}."
        )
    check_finite(tensor, f"{owner} {name}")
    return tensor


def _check_placement(value, owner: str) -> str:
    if value not in ("pre", "post"):
        raise ValueError(
            f"{owner} placement must be 'pre' (the field sees normalised tokens) or 'post' "
            f"(normalise after the step); received {value!r}."
        )
    return value


@dataclass(frozen=True, eq=False)
class LayerNorm(_AffineNorm):
    """The real LayerNorm LN(x) = γ ⊙ (x − m(x)1)/√(v(x) + ε) + b (m, v: mean and variance
    over the d coordinates).

    Parameters
    ----------
    gamma, bias : tensor (d,), optional (defaults 1 and 0).
    eps : float > 0, the variance floor (BERT: 1e-12).
    placement : "post" (default; BERT: x ← LN(x + hΓ), the projection after every step: with
        Euler and h = 1 per layer it is BERT's sublayer; LN is not idempotent for general γ, b,
        so no h → 0 limit is claimed) or "pre" (GPT-2: ẋ = Γ[LN#μ](LN(x))).
    """

    gamma: object = None
    bias: object = None
    eps: float = 1e-12
    placement: str = "post"
    name: ClassVar[str] = "layernorm"

    def __post_init__(self):
        object.__setattr__(self, "gamma", _norm_parameter(self.gamma, "gamma", "LayerNorm"))
        object.__setattr__(self, "bias", _norm_parameter(self.bias, "bias", "LayerNorm"))
        object.__setattr__(self, "eps", check_positive(self.eps, "eps"))
        object.__setattr__(self, "placement", _check_placement(self.placement, "LayerNorm"))

    def norm(self, x):
        return layer_norm(x, _on(self.gamma, x), _on(self.bias, x), self.eps)

    def start(self, mu):
        """The tokens after the model's own LayerNorm (BERT's embeddings end with one), so
        that no step is spent jumping onto the scheme's manifold: ``mu`` with points
        ``project(mu.points)``."""
        return mu.with_points(self.project(mu.points))

    def check_dim(self, d: int) -> None:
        if d == 1:
            raise ValueError(
                "LayerNorm needs tokens in d >= 2: in d = 1 the centred token x − m(x) is 0, "
                "so LN maps every token to the bias b and the tokens collapse to one point "
                "at the first step (pre: the field sees one point). Received d = 1; use "
                "RMSNorm (x/|x| in d = 1) or no normalisation."
            )
        super().check_dim(d)

    def describe(self) -> str:
        return f"LayerNorm(eps={self.eps:g}, placement={self.placement!r})"


@dataclass(frozen=True, eq=False)
class RMSNorm(_AffineNorm):
    """RMSNorm (Llama, SmolLM2): RMS(x) = γ ⊙ x/√(mean_k x_k² + ε). With γ = 1, ε = 0 it is
    √d·N(x), so pre-RMSNorm is pre-LN with the field's scale multiplied by √d.

    Parameters
    ----------
    gamma : tensor (d,), optional (default 1).
    eps : float > 0 (Llama: 1e-5 or 1e-6; the model file says).
    placement : "pre" (default; Llama: ẋ = Γ[RMS#μ](RMS(x))) or "post".
    """

    gamma: object = None
    eps: float = 1e-6
    placement: str = "pre"
    name: ClassVar[str] = "rmsnorm"

    def __post_init__(self):
        object.__setattr__(self, "gamma", _norm_parameter(self.gamma, "gamma", "RMSNorm"))
        object.__setattr__(self, "eps", check_positive(self.eps, "eps"))
        object.__setattr__(self, "placement", _check_placement(self.placement, "RMSNorm"))

    def norm(self, x):
        return rms_norm(x, 1.0 if self.gamma is None else _on(self.gamma, x), self.eps)

    def describe(self) -> str:
        return f"RMSNorm(eps={self.eps:g}, placement={self.placement!r})"


@dataclass(frozen=True, eq=False)
class Sandwich(NormScheme):
    """The real Peri-LN layer: ẋ = N₂(Γ[N₁#μ](N₁(x))), a norm on each side of the field
    (module table). N₁, N₂ are pre-placed :class:`RMSNorm` or :class:`LayerNorm` objects
    with their gains (Gemma-2/3: both; OLMo-2: ``pre=None``, the output norm only). With
    Euler and h = 1 the step is the sublayer x ← x + N₂(f(N₁x)); as h → 0 the flow
    ẋ = N₂(Γ(N₁x)) (N₂ = √d·N with unit gain and ε = 0: :class:`PeriLN` up to the speed √d).

    Parameters
    ----------
    pre : RMSNorm or LayerNorm (placement "pre"), or None
        N₁, the norm the field reads through (identity when None).
    post : RMSNorm or LayerNorm (placement "pre")
        N₂, the norm of the field's output.
    """

    pre: object = None
    post: object = None
    name: ClassVar[str] = "sandwich"

    def __post_init__(self):
        for role in ("pre", "post"):
            norm = getattr(self, role)
            if norm is None and role == "pre":
                continue
            if not isinstance(norm, _AffineNorm) or norm.placement != "pre":
                raise TypeError(
                    f"Sandwich {role} must be an RMSNorm or LayerNorm object with placement "
                    f"'pre' (e.g. RMSNorm(gamma, eps)); received {norm!r}."
                )

    @property
    def placement(self) -> str:
        """ "pre": the field reads N₁(x) (the tokens themselves without N₁)."""
        return "pre"

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        """N₁(x), what the field reads (x itself without N₁)."""
        return x if self.pre is None else self.pre.norm(x)

    def velocity(self, field, t, mu, x, engine, info):
        out = _pre_velocity(self.norm, field, t, mu, x, engine, info)
        return self.post.norm(out)

    def check_dim(self, d: int) -> None:
        for norm in (self.pre, self.post):
            if norm is not None:
                norm.check_dim(d)

    def describe(self) -> str:
        pre = "None" if self.pre is None else self.pre.describe()
        return f"Sandwich(pre={pre}, post={self.post.describe()})"


#: Every scheme by its string alias: ``Normalized(field, "post-ln", **options)`` builds
#: ``PostLN(**options)``. The one table of scheme names: :mod:`tpde.theory` (the schemes
#: with an equiangular law, ``equiangular_law``), the experiments and the benchmarks read it.
SCHEMES: dict[str, type[NormScheme]] = {
    cls.name: cls for cls in (PostLN, PreLN, PeriLN, MixLN, NGPT, LayerNorm, RMSNorm, Sandwich)
}


def scheme_from(scheme, options: dict) -> NormScheme:
    """A scheme object from an alias and options, or a scheme object as given."""
    if isinstance(scheme, NormScheme):
        if options:
            raise ValueError(
                f"options {sorted(options)} go to the scheme object itself, e.g. "
                f"{type(scheme).__name__}(...); received them beside {scheme.describe()}."
            )
        return scheme
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        known = ", ".join(repr(k) for k in SCHEMES)
        raise ValueError(
            f"unknown normalisation scheme {scheme!r}; choose one of {known}, or pass a scheme "
            "object (tpde.fields.PostLN(), RMSNorm(gamma), ...)."
        )
    cls = SCHEMES[scheme]
    own = {item.name for item in fields(cls)}
    for name, value in options.items():
        if name in own:
            continue
        owners = [k for k, c in SCHEMES.items() if name in {f.name for f in fields(c)}]
        if not owners:
            raise TypeError(f"Normalized got an unexpected option {name!r}.")
        if name == "tangent":
            _check_tangent(value)
            if value:
                continue  # the default, harmless for schemes without a tangent choice
        where = " and ".join(repr(o) for o in owners)
        plural = "schemes" if len(owners) > 1 else "scheme"
        raise ValueError(
            f"{name} applies to the {where} {plural} only; received it with scheme {scheme!r}."
        )
    return cls(**{k: v for k, v in options.items() if k in own})
