r"""Normalised tokens: any attention field wrapped by a normalisation scheme (MATH.md §7).

N(x) = x/|x| is the RMS-type normalisation of the theory papers; P⊥_x = I − xxᵀ/|x|² the
projection onto the tangent space of the sphere through x. For a field Γ (any tpde field)
and a residual layer of step h (depth as time, MATH.md §1):

=========  ==========================================  ======================================
scheme     discrete layer (step h)                      continuous time (h → 0)
=========  ==========================================  ======================================
post-ln    x ← N(x + hΓ[μ](x))                          ẋ = P⊥_x Γ[μ](x) on S^{d−1}
pre-ln     x ← x + hΓ[N#μ](N(x))                        ẋ = Γ[N#μ](N(x)) in R^d
peri-ln    x ← x + h N(Γ[N#μ](N(x)))                    ẋ = N(Γ[N#μ](N(x))) (unit speed)
mix-ln     post-ln for t < switch, pre-ln after         (the two, piecewise in depth-time)
ngpt       x ← N(x + hα(N(Γ[μ](x)) − x))                ẋ = α(t) P⊥_x N(Γ[μ](x)) on S^{d−1}
layernorm  x ← LN(x + hΓ[μ](x))                         (the real model's Post-LN sublayer)
=========  ==========================================  ======================================

With x = rθ, pre-LN moves the angle at speed |P⊥_θΓ|/r and the radius by ṙ = ⟨θ, Γ⟩: the
angular motion slows down as the tokens grow; peri-LN caps the speed at 1; nGPT moves on the
sphere at speed ≤ α — normalisation as speed regulation (Karagodin, Ge, Polyanskiy,
Rigollet, "Normalization in Attention Dynamics", arXiv:2510.22026, 2025; the continuous
forms here are tpde's reading of the schemes, MATH.md §7 [ours]). Post-LN is the sphere
model of Geshkovski, Letrouit, Polyanskiy, Rigollet ("A mathematical perspective on
Transformers", arXiv:2312.10794): for softmax with Q = K = V = I and score β⟨x, y⟩ its
tokens cluster.

The sphere schemes (post-ln, ngpt) declare a projection: flows renormalise the tokens after
every accepted step (:class:`~tpde.flows.systems.ParticleSystem`), and since their velocity
is tangent (P⊥_x, extended off the sphere by P⊥_x = I − xxᵀ/|x|², which keeps |x|
constant) every method keeps its order. ``tangent=False`` uses the discrete layer's own
direction instead (Γ for post-LN, α(N(Γ) − x) for nGPT): then an Euler step followed by the
projection *is* the layer, x ← N(x + hΓ) (the loop of Geshkovski et al.'s phase diagrams),
first order for any method. ``layernorm`` applies the real LayerNorm,
LN(x) = γ ⊙ (x − m(x)1)/√(v(x) + ε) + b (m, v the mean and variance over the d coordinates),
after every step: with Euler and h = 1 per layer it is BERT's Post-LN sublayer
h ← LN(h + Attn(h)). LN is not idempotent for general γ, b, so no h → 0 limit is claimed.
"""

from __future__ import annotations

import math

import torch

from tpde._validation import as_tensor, check_choice, check_finite, check_positive
from tpde.attention._params import evaluate_parameter
from tpde.attention.base import Field, GaussianNotPreserved
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics.mobility import NotAGradientFlow

__all__ = ["SCHEMES", "Normalized", "layer_norm", "normalize", "tangent"]

SCHEMES = ("post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt", "layernorm")
#: Schemes whose tokens live on the unit sphere.
ON_SPHERE = ("post-ln", "ngpt")


def normalize(x: torch.Tensor) -> torch.Tensor:
    """N(x) = x/|x| over the last dimension (a zero vector stays 0), at every scale."""
    from tpde._normalize import unit

    return unit(x)


def tangent(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """P⊥_x v = v − x⟨x, v⟩/|x|²: the part of v tangent to the sphere through x (at every
    scale of x; v itself at x = 0, which has no direction)."""
    from tpde._normalize import tangent_part, unit

    return tangent_part(unit(x), v)


def layer_norm(x: torch.Tensor, gamma, bias, eps: float) -> torch.Tensor:
    """LN(x) = γ ⊙ (x − m(x)1)/√(v(x) + ε) + b over the last dimension (biased variance)."""
    centred = x - x.mean(-1, keepdim=True)
    scaled = centred / torch.sqrt((centred * centred).mean(-1, keepdim=True) + eps)
    return scaled * gamma + bias


class Normalized(Field):
    r"""A field wrapped by a normalisation scheme (module notes: the equations).

    Parameters
    ----------
    field : Field
        Any tpde field Γ (softmax, L2, Sinkhorn, multi-head, masked, a layer schedule …).
    scheme : {"post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt", "layernorm"}
        Default "post-ln" (tokens on the sphere).
    tangent : bool
        Sphere schemes only: True (default) flows the continuous model with the tangent
        velocity (every method keeps its order); False flows the discrete layer's direction
        (Euler + renormalisation is exactly the layer; first order).
    switch : float
        "mix-ln": the depth-time where Post-LN hands over to Pre-LN, in (0, depth).
    depth : float
        "mix-ln": the depth-time of the whole stack (default 1: layers on [0, 1]).
    alpha : float or callable ``t -> float``
        "ngpt": the step α > 0 of the normalised update (learned per layer in nGPT;
        a constant or a function of depth-time here). Default 1.
    gamma, bias : tensor (d,)
        "layernorm": the LayerNorm's gain γ and bias b (defaults 1 and 0). A stack of
        layers with their own LayerNorms is a :class:`~tpde.attention.LayerSchedule` of
        Normalized fields.
    eps : float
        "layernorm": the variance floor ε (BERT: 1e-12).
    atol : float, optional
        Sphere schemes: tolerance on | |x| − 1 | of the tokens handed to a flow (default
        1e3·eps of the dtype).

    Notes
    -----
    Tokens are particles (:class:`~tpde.measures.Empirical`, batched or not); there is no
    Gaussian closure and no grid. Batched parameters of the wrapped field broadcast with
    batched points (one β per batch element of a phase diagram). The sphere schemes have
    the capability "projection" (``project`` = N, or LN for "layernorm").

    Gradient structure on the sphere: when Γ is a (twisted) gradient flow whose mobility
    is a multiple of the identity, M = cI (V = cA, e.g. Q = K = V = I), the post-LN flow is
    its spherical analogue: P⊥_x(cM∇δE/δμ) = c∇_S δE/δμ, so the Lyapunov functional
    G = c·E of :meth:`gradient_structure` is non-increasing along post-LN flows (softmax:
    E = ½∬e^{β⟨x, Ay⟩}dμdμ non-decreasing, Geshkovski et al. §3; Z-weighted for the
    softmax normaliser, plain for 1/n) — MATH.md §7.
    """

    capabilities = frozenset({"projection", "piecewise"})  # narrowed per scheme

    def __init__(
        self,
        field: Field,
        scheme: str = "post-ln",
        *,
        tangent: bool = True,
        switch: float | None = None,
        depth: float = 1.0,
        alpha=1.0,
        gamma=None,
        bias=None,
        eps: float = 1e-12,
        atol: float | None = None,
    ):
        if not isinstance(field, Field):
            raise TypeError(f"Normalized wraps a tpde field; received {type(field).__name__}.")
        self.field, self.scheme = field, check_choice(scheme, "normalisation scheme", SCHEMES)
        if not isinstance(tangent, bool):
            raise TypeError(f"tangent must be True or False; received {tangent!r}.")
        self.dim, self.tangent = field.dim, tangent
        self.atol = None if atol is None else check_positive(atol, "atol")
        self._check_options(switch, alpha, gamma, bias, depth, eps)
        projects = scheme in (*ON_SPHERE, "layernorm")
        self.capabilities = frozenset({"projection"}) if projects else frozenset()
        if scheme == "mix-ln":
            self._mix_ln(switch, depth)
        if scheme == "ngpt":
            self.alpha = alpha if callable(alpha) else check_positive(alpha, "nGPT alpha")
        if scheme == "layernorm":
            self.gamma = self._ln_parameter(gamma, "gamma", 1.0)
            self.bias = self._ln_parameter(bias, "bias", 0.0)
            self.eps = check_positive(eps, "eps")

    # ------------------------------------------------------------------ construction
    def _check_options(self, switch, alpha, gamma, bias, depth, eps) -> None:
        given = {
            "switch": (switch is not None, "mix-ln"),
            "depth": (not (isinstance(depth, int | float) and depth == 1.0), "mix-ln"),
            "eps": (not (isinstance(eps, int | float) and eps == 1e-12), "layernorm"),
            "alpha": (not (isinstance(alpha, int | float) and alpha == 1.0), "ngpt"),
            "gamma": (gamma is not None, "layernorm"),
            "bias": (bias is not None, "layernorm"),
        }
        for name, (passed, owner) in given.items():
            if passed and self.scheme != owner:
                raise ValueError(
                    f"{name} applies to the {owner!r} scheme only; received it with "
                    f"scheme {self.scheme!r}."
                )

    def _mix_ln(self, switch, depth) -> None:
        depth = check_positive(depth, "depth")
        if switch is None:
            raise ValueError("the 'mix-ln' scheme needs switch=t, the depth-time in (0, depth) "
                             "where Post-LN hands over to Pre-LN.")  # fmt: skip
        switch = float(switch)
        if not 0 < switch < depth:
            raise ValueError(
                f"the Mix-LN switch must lie inside the depth range (0, {depth:g}) so that "
                f"both schemes act; received switch = {switch:g}. Pass depth= for a longer "
                "stack."
            )
        self.switch, self.depth = switch, depth
        self.breakpoints = (switch,)
        self.capabilities = frozenset({"piecewise", "projection"})
        self._pieces = (
            Normalized(self.field, "post-ln", tangent=self.tangent, atol=self.atol),
            Normalized(self.field, "pre-ln"),
        )

    def _ln_parameter(self, value, name: str, default: float):
        if value is None:
            return default
        tensor = as_tensor(value, name)
        if tensor.shape != (self.dim,):
            raise ValueError(
                f"LayerNorm {name} must have shape ({self.dim},), one entry per coordinate of "
                f"the tokens; received {tuple(tensor.shape)}."
            )
        check_finite(tensor, name)
        return tensor

    # ------------------------------------------------------------------ protocol
    @property
    def time_dependent(self) -> bool:
        own = callable(getattr(self, "alpha", None)) or self.scheme == "mix-ln"
        return own or self.field.time_dependent

    def piece(self, t: float) -> Field:
        """Mix-LN: the Post-LN field before the switch, the Pre-LN field after."""
        if self.scheme != "mix-ln":
            return self
        return self._pieces[0] if float(t) < self.switch else self._pieces[1]

    def velocity(self, mu, x=None, *, t: float = 0.0, engine: str = "auto", info=None):
        """Γ̃[μ](x) of the scheme (:meth:`Field.velocity`). Mix-LN: the piece acting at ``t``
        checks the tokens and evaluates (after the switch they have left the sphere)."""
        if self.scheme == "mix-ln":
            return self.piece(t).velocity(mu, x, t=t, engine=engine, info=info)
        return super().velocity(mu, x, t=t, engine=engine, info=info)

    def particle_velocity(self, t, mu: Empirical, x, engine: str, info=None) -> torch.Tensor:
        scheme = self.scheme
        if scheme == "mix-ln":
            return self.piece(t).particle_velocity(t, mu, x, engine, info)
        if scheme in ("pre-ln", "peri-ln"):
            keys = mu.with_points(normalize(mu.points))
            out = self.field.particle_velocity(t, keys, normalize(x), engine, info)
            return normalize(out) if scheme == "peri-ln" else out
        out = self.field.particle_velocity(t, mu, x, engine, info)
        if scheme == "layernorm":
            return out
        if scheme == "ngpt":
            alpha = self._alpha(t)
            if not self.tangent:
                return alpha * (normalize(out) - normalize(x))
            return alpha * tangent(x, normalize(out))
        return tangent(x, out) if self.tangent else out  # post-ln

    def _alpha(self, t) -> float:
        if not callable(self.alpha):
            return self.alpha
        value = float(evaluate_parameter(self.alpha, "alpha", t))
        if not (math.isfinite(value) and value > 0):
            raise ValueError(
                f"the nGPT step alpha(t) must be finite and > 0; received alpha({t}) = {value}."
            )
        return value

    def project(self, points: torch.Tensor) -> torch.Tensor:
        """The retraction after every step: N (sphere schemes) or LN ("layernorm")."""
        if self.scheme == "layernorm":
            to = lambda p: p.to(points) if isinstance(p, torch.Tensor) else p  # noqa: E731
            return layer_norm(points, to(self.gamma), to(self.bias), self.eps)
        if self.scheme in ON_SPHERE:
            return normalize(points)
        return points

    def check_measure(self, mu) -> None:
        super().check_measure(mu)
        if isinstance(mu, Grid):
            raise ValueError(
                f"{self.scheme} attention acts on token clouds (Empirical); a Grid has no "
                "tokens to normalise. Use grid.to_empirical() or particles."
            )
        if isinstance(mu, Gaussian):
            raise GaussianNotPreserved(
                f"normalised ({self.scheme}) attention does not keep Gaussians Gaussian; "
                "sample tokens instead, e.g. Empirical.from_gaussian(g, n).normalized()."
            )
        if self.scheme in ON_SPHERE or (self.scheme == "mix-ln"):
            self._check_on_sphere(mu)

    def _check_on_sphere(self, mu: Empirical) -> None:
        norms = mu.points.detach().norm(dim=-1)
        atol = self.atol if self.atol is not None else 1e3 * torch.finfo(norms.dtype).eps
        low, high = torch.aminmax(norms)  # one pass: max | |x| − 1 | from the extremes
        worst = max(float(high) - 1, 1 - float(low))
        if worst > atol:
            raise ValueError(
                f"{self.scheme} attention moves tokens on the unit sphere, but the tokens have "
                f"norms up to {worst:.3g} away from 1 (tolerance {atol:.3g}). Normalise them "
                "first: mu.normalized() (tpde.measures.Empirical.normalized), or draw them "
                "with tpde.measures.uniform_on_sphere."
            )

    def gaussian_affine(self, t, mean, cov):
        raise GaussianNotPreserved(
            f"normalised ({self.scheme}) attention does not keep Gaussians Gaussian; there is "
            "no moment closure. Integrate tokens (Empirical) instead."
        )

    # ------------------------------------------------------------------ gradient flow
    def gradient_structure(self, t: float = 0.0):
        """The wrapped field's structure, where the post-LN flow is its spherical analogue.

        Needs a sphere scheme (post-ln with the tangent velocity) and a wrapped field whose
        mobility is cI (c ≠ 0): then G = (structure.lyapunov_sign)·E is non-increasing along
        the flow (class notes). Raises :class:`NotAGradientFlow` otherwise.
        """
        if self.scheme != "post-ln" or not self.tangent:
            raise NotAGradientFlow(
                f"{self.scheme} attention (tangent={self.tangent}) has no gradient structure "
                "in tpde: only the post-LN sphere flow of a gradient-flow field with "
                "mobility cI does (MATH.md §7)."
            )
        structure = self.field.gradient_structure(t)
        M = structure.mobility
        c = float(M.diagonal().mean())
        eye = torch.eye(self.dim, dtype=M.dtype, device=M.device)
        if float((M - c * eye).abs().max()) > 1e-8 * abs(c):
            raise NotAGradientFlow(
                "the post-LN flow is a spherical gradient flow only for a mobility cI (V = cA, "
                f"e.g. Q = K = V = I); the wrapped field's mobility has eigenvalues "
                f"{torch.linalg.eigvalsh(M).tolist()} (MATH.md §7)."
            )
        return structure

    def energy(self, mu, *, t: float = 0.0, engine: str = "auto", info=None):
        """The wrapped field's energy E(μ) (its multiple G = c·E decreases; see
        :meth:`gradient_structure`)."""
        self.gradient_structure(t)
        return self.field.energy(mu, t=t, engine=engine, info=info)

    def __repr__(self) -> str:
        extra = "" if self.tangent or self.scheme not in ON_SPHERE else ", tangent=False"
        return f"Normalized({self.field!r}, scheme={self.scheme!r}{extra})"
