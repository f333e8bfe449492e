r"""Normalised tokens: any field wrapped by a normalisation scheme (MATH.md §7, §8).

``Normalized(field, scheme)`` is the field Γ̃ of a residual layer whose tokens are
normalised by ``scheme``, a :class:`~tpde.fields.norms.schemes.NormScheme` object (PostLN,
PreLN, PeriLN, MixLN, NGPT, LayerNorm, RMSNorm) or its string alias ("post-ln", "pre-ln",
"peri-ln", "mix-ln", "ngpt", "layernorm", "rmsnorm") with the scheme's options as keyword
arguments. :mod:`tpde.fields.norms.schemes` holds the table of equations; this wrapper binds a
scheme to a field and is what flows see: its velocity is the scheme's transform of the
field's, its projection (capability "projection", where the scheme has one) the scheme's
retraction after every accepted step, its pieces in depth-time the scheme's (Mix-LN).

The sphere schemes (PostLN, NGPT) move tokens on S^{d−1}: since their velocity is tangent
(P⊥_x, extended off the sphere by P⊥_x = I − xxᵀ/|x|², which keeps |x| constant) every
method keeps its order; ``tangent=False`` flows the discrete layer's own direction, and
then an Euler step followed by the projection *is* the layer (first order). Pre-norm
schemes (PreLN, PeriLN, RMSNorm, LayerNorm(placement="pre")) feed the field normalised
keys and queries; the tokens themselves live in R^d. The sphere schemes (tangent) evaluate
the wrapped field at the normalised tokens, Γ[N#μ](N(x)): equal to Γ[μ](x) on the sphere,
and off it (where Runge–Kutta stages evaluate) the 0-homogeneous extension, so that a field
with a sphere-only engine (softmax and exponential with A = βI on S¹ or S²: "spectral",
"harmonics") keeps it at every stage.

A Transformer layer with two sublayers is a sum of two normalised fields, e.g. Llama's
``Normalized(attention, RMSNorm(g1)) + Normalized(swiglu, RMSNorm(g2))``
(:class:`~tpde.fields.Sum`); the discrete layer is one Lie–Trotter step with Euler
sub-steps at h = 1 (:func:`tpde.flows.integrate`, ``method="lie-trotter"``).
"""

from __future__ import annotations

import torch

from tpde.fields.base import Field, GaussianNotPreserved
from tpde.fields.calls import part_velocity
from tpde.fields.norms.schemes import scheme_from
from tpde.measures import Empirical, Gaussian, Grid

__all__ = ["Normalized"]


class Normalized(Field):
    r"""A field wrapped by a normalisation scheme (module notes).

    Parameters
    ----------
    field : Field
        Any tpde field Γ (softmax, L2, Sinkhorn, multi-head, masked, feed-forward, a
        layer schedule …).
    scheme : NormScheme or str
        A scheme object (:mod:`tpde.fields.norms.schemes`) or its alias; default "post-ln"
        (tokens on the sphere).
    **options
        With an alias, the scheme's options: ``tangent``, ``atol`` (sphere schemes),
        ``switch``, ``depth`` (mix-ln), ``alpha`` (ngpt), ``gamma``, ``bias``, ``eps``,
        ``placement`` (layernorm, rmsnorm). An option of another scheme raises, naming the
        schemes it applies to.

    Notes
    -----
    Tokens are particles (:class:`~tpde.measures.Empirical`, batched or not); there is no
    Gaussian closure and no grid. Batched parameters of the wrapped field broadcast with
    batched points (one β per batch element of a phase diagram).

    Gradient structure: the post-LN flow of a gradient-flow field with mobility cI is its
    spherical analogue (:class:`~tpde.fields.norms.schemes.PostLN`).
    """

    def __init__(self, field: Field, scheme="post-ln", **options):
        if not isinstance(field, Field):
            raise TypeError(f"Normalized wraps a tpde field; received {type(field).__name__}.")
        self.field, self.scheme = field, scheme_from(scheme, options)
        self.dim = field.dim
        if self.dim is not None:  # a field of any d: checked against each measure's d
            self.scheme.check_dim(self.dim)
        self.breakpoints = tuple(self.scheme.breakpoints)
        self._pieces = {}

    # ------------------------------------------------------------------ protocol
    @property
    def projection_owner(self) -> object:
        """The scheme: its retraction is this field's projection."""
        return self.scheme

    def children(self) -> tuple[Field, ...]:
        """The wrapped field."""
        return (self.field,)

    @property
    def capabilities(self) -> frozenset:
        """ "projection" where the scheme has one; nothing else (no Gaussian closure)."""
        return frozenset({"projection"}) if self.scheme.projects else frozenset()

    @property
    def time_dependent(self) -> bool:
        return self.scheme.time_dependent or self.field.time_dependent

    def piece(self, t: float) -> Field:
        """The field acting at t: for Mix-LN the Post-LN field before the switch, the
        Pre-LN field after (each built once)."""
        scheme = self.scheme.piece(t)
        if scheme is self.scheme:
            return self
        if scheme not in self._pieces:
            self._pieces[scheme] = Normalized(self.field, scheme)
        return self._pieces[scheme]

    def velocity(
        self, mu, x=None, *, positions=None, t: float = 0.0, engine: str = "auto", info=None
    ):
        """Γ̃[μ](x) of the scheme (:meth:`Field.velocity`). Mix-LN: the piece acting at ``t``
        checks the tokens and evaluates (after the switch they have left the sphere)."""
        piece = self.piece(t)
        if piece is not self:
            return piece.velocity(mu, x, positions=positions, t=t, engine=engine, info=info)
        return super().velocity(mu, x, positions=positions, t=t, engine=engine, info=info)

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        """The scheme's velocity; the wrapped field gets the query ``positions`` and ``own``
        (the scheme maps keys and queries alike, so its queries are its keys exactly when
        x are μ's tokens: a wrapped softmax on the circle keeps the spectral engine)."""
        bound = positions is not None or own is not None
        field = _Part(self.field, positions, own) if bound else self.field
        return self.scheme.velocity(field, t, mu, x, engine, info)

    @property
    def overflow_source(self) -> str:
        """What overflows first: the wrapped field's (for messages)."""
        return self.field.overflow_source

    def project(self, points: torch.Tensor) -> torch.Tensor:
        """The scheme's retraction after every step (N on the sphere, LN or RMS "post")."""
        return self.scheme.project(points)

    def check_measure_kind(self, mu) -> None:
        """Token clouds only (no Grid, no Gaussian), before the wrapped field's checks."""
        if isinstance(mu, Grid):
            raise ValueError(
                f"{self.scheme.name} attention acts on token clouds (Empirical); a Grid has no "
                "tokens to normalise. Use grid.to_empirical() or particles."
            )
        if isinstance(mu, Gaussian):
            raise GaussianNotPreserved(self.gaussian_refusal())

    def check_measure(self, mu) -> None:
        """The field's checks (:meth:`Field.check_measure`), then the scheme's: gains of
        the tokens' d, tokens on the sphere for the sphere schemes."""
        super().check_measure(mu)
        if self.dim is None:  # a field of any d: the scheme's gains meet the tokens' d here
            self.scheme.check_dim(mu.dim)
        self.scheme.check_tokens(mu)

    def gaussian_refusal(self) -> str:
        return (
            f"normalised ({self.scheme.name}) attention does not keep Gaussians Gaussian; "
            "there is no moment closure; sample tokens instead, e.g. "
            "Empirical.from_gaussian(g, n).normalized()."
        )

    # ------------------------------------------------------------------ gradient flow
    def gradient_structure(self, t: float = 0.0):
        """The wrapped field's structure, where the scheme's flow is its analogue (PostLN
        with the tangent velocity and a mobility cI); :class:`NotAGradientFlow` otherwise."""
        return self.scheme.gradient_structure(self.field, t)

    def energy(self, mu, *, t: float = 0.0, engine: str = "auto", info=None):
        """The wrapped field's energy E(μ) (its multiple G = c·E decreases; see
        :meth:`gradient_structure`)."""
        self.gradient_structure(t)
        return self.field.energy(mu, t=t, engine=engine, info=info)

    def __repr__(self) -> str:
        return f"Normalized({self.field!r}, {self.scheme.describe()})"


class _Part:
    """The wrapped field with the positions of the query points and ``own`` (whether they
    are μ's tokens) bound: what a scheme calls (``particle_velocity`` on normalised keys
    and queries, which keep their positions, and are each other exactly when x and μ's
    tokens are)."""

    def __init__(self, field: Field, positions, own):
        self.field, self.positions, self.own = field, positions, own

    def particle_velocity(self, t, mu, x, engine, info=None) -> torch.Tensor:
        return part_velocity(self.field, t, mu, x, engine, info, self.positions, own=self.own)

    def __getattr__(self, name):
        if name == "field":  # not yet set (a copy): no recursion through self.field
            raise AttributeError(name)
        return getattr(self.field, name)
