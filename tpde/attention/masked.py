"""Masked (causal) attention: tokens carry positions and attend only to earlier ones."""

from __future__ import annotations

import torch

from tpde._engines import check_engine
from tpde._validation import as_tensor, check_finite, check_positive
from tpde.attention._forms import key_positions
from tpde.attention.base import (
    Field,
    GaussianNotPreserved,
    check_no_overflow,
    own_tokens,
    query_positions,
)
from tpde.attention.registry import register, variant
from tpde.measures import Empirical, Gaussian, Grid, Measure

__all__ = ["Masked"]

NO_GAUSSIAN = (
    "masked attention needs token positions, and a Gaussian carries none: there is no "
    "Gaussian closure. Sample particles with positions instead, e.g. "
    "Empirical(g.sample(n), positions=torch.linspace(0, 1, n))."
)


class Masked(Field):
    r"""Causal attention: a token at position s attends to the tokens at positions r ≤ s.

    Γ[μ](s, x) = ∫_{r ≤ s} k(x, y) V y dμ(r, y) / ∫_{r ≤ s} k(x, y) dμ(r, y)
    (MATH.md §2, "Masked (causal)"), with the kernel k of the wrapped field.

    Parameters
    ----------
    field : Softmax or L2
        A single-head field whose kernel is a softmax (exponential) kernel; its parameters
        (tensors or callables of t) are used as they are.
    sink_mass : float
        Mass m ≥ 0 of an external attention sink (default 0: none; see below).
    sink_point : tensor (d,), optional
        Location z of the external sink; default the origin.

    Notes
    -----
    Tokens are the particles of an :class:`Empirical` built with ``positions`` s_i ≥ 0
    (for a sequence, s_i = i/(n − 1) ∈ [0, 1], or the integer indices i: the mask depends
    only on the order); positions never move. Particles:
    ẋ_i = V Σ_{j: s_j ≤ s_i} w_j k(x_i, x_j) x_j / Σ_{j: s_j ≤ s_i} w_j k(x_i, x_j), ties
    included, so a token always sees itself and the token at the smallest position only
    sees itself (and its ties): ẋ = Vx under softmax.

    Attention sink. Every query sees the tokens at position 0: they are the atom of the
    position marginal at s = 0, the sink of MATH.md §2, which a measure carries whenever
    it puts tokens (of any mass) at s = 0, e.g. a first token at s_0 = 0 with weight m
    for a mean-field limit with a sink of mass m. Those tokens move like the others (they
    attend to each other). Optionally, ``sink_mass = m > 0`` adds an *external* sink, the
    point mass m·δ_z at position 0 which is no token: it is attended by every query, with
    weight m against the tokens' total 1, and it does not move. With softmax and z = 0 it
    adds m to every normaliser and nothing to the numerators (a "null" sink, as
    softmax-off-by-one does).

    Engines: "dense" and "chunked" mask the scores; "sdpa" runs one ``is_causal`` kernel
    on the tokens stably sorted by position, where a tie group of g tokens is given g − 1
    extra slots so that ties see each other (no n×n mask is built;
    :func:`tpde._engines.torch_engines.causal_slots`); "keops" masks with ``ifelse``.

    Gaussians carry no positions, so there is no Gaussian closure.
    """

    def __init__(self, field: Field, *, sink_mass: float = 0.0, sink_point=None):
        if not isinstance(field, Field) or not field.supports("softmax_form"):
            raise TypeError(
                f"Masked wraps a field whose attention is one softmax average (capability "
                f"'softmax_form': Softmax, L2, …); received {type(field).__name__}. Mask each "
                "head of a MultiHead instead."
            )
        self.field = field
        self.dim = field.dim
        self.sink_mass = check_positive(sink_mass, "sink_mass", strict=False)
        if sink_point is None:
            self.sink_point = None
        else:
            point = as_tensor(sink_point, "sink_point")
            if point.shape != (self.dim,):
                raise ValueError(
                    f"sink_point must have shape ({self.dim},) like a token; received "
                    f"{tuple(point.shape)}."
                )
            check_finite(point, "sink_point")
            self.sink_point = point

    # ------------------------------------------------------------------ particles
    def velocity(
        self,
        mu: Measure,
        x=None,
        *,
        positions=None,
        t: float = 0.0,
        engine: str = "auto",
    ):
        """Γ[μ](s, x): at μ's own tokens, or at points ``x`` (m, d) with ``positions`` (m,).

        See :meth:`Field.velocity`; ``positions`` are the query positions (≥ 0) and are
        required with ``x`` (and refused without it).
        """
        return velocity_at_positions(
            self, mu, x, positions, engine, "masked attention", self._masked_velocity, t=t
        )

    @property
    def time_dependent(self) -> bool:
        return self.field.time_dependent

    @property
    def needs_positions(self) -> bool:
        return True

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None
    ) -> torch.Tensor:
        """Γ[μ](x) at μ's own tokens (x: (…, n, d), a batch of clouds or one), or at points
        x with their ``positions`` (m,) (checked by the caller)."""
        if positions is not None:
            return self._masked_velocity(t, mu, x, positions, engine)
        own_tokens(x, mu, "masked attention")
        return self._masked_velocity(t, mu, x, mu.positions, engine)

    def _masked_velocity(self, t, mu: Empirical, x, query_positions, engine):
        keys_measure = self._with_sink(mu)
        form = self.field.softmax_form(t, keys_measure, x)
        return form.velocity(
            engine, query_positions=query_positions, key_positions=key_positions(keys_measure)
        )

    def _with_sink(self, mu: Empirical) -> Empirical:
        """μ plus the external sink m·δ_z at position 0 (weights renormalised by 1 + m)."""
        if self.sink_mass == 0:
            return mu
        like = mu.points
        if self.sink_point is None:
            point = like.new_zeros(self.dim)
        else:
            point = self.sink_point.to(dtype=like.dtype, device=like.device)
        mass = torch.full((1,), self.sink_mass, dtype=like.dtype, device=like.device)
        point = point.expand(*like.shape[:-2], 1, self.dim)  # one sink per cloud of a batch
        return Empirical(
            torch.cat([like, point], dim=-2),
            torch.cat([mu.weights, mass]) / (1 + self.sink_mass),
            torch.cat([mu.positions, torch.zeros_like(mass)]),
        )

    # ------------------------------------------------------------------ Gaussians
    def gaussian_refusal(self) -> str:
        return NO_GAUSSIAN

    # ------------------------------------------------------------------ checks
    def check_measure(self, mu) -> None:
        super().check_measure(mu)
        if isinstance(mu, Grid):
            raise ValueError(
                "masked attention needs token positions, and a Grid carries none: integrate "
                "particles with positions, Empirical(points, positions=s)."
            )
        if isinstance(mu, Empirical) and mu.positions is None:
            raise ValueError(
                "masked attention needs token positions, but this Empirical has none: build "
                "it with Empirical(points, positions=s), s of shape (n,), s ≥ 0 (for a "
                "sequence, s_i = i / (n - 1))."
            )
        if isinstance(mu, Gaussian):
            raise GaussianNotPreserved(NO_GAUSSIAN)

    def __repr__(self) -> str:
        sink = f", sink_mass={self.sink_mass:g}" if self.sink_mass else ""
        return f"Masked({self.field!r}{sink})"


def velocity_at_positions(
    field, mu, x, positions, engine, who: str, evaluate, *, t: float, info=None, uses=True
):
    """The public velocity of a field with positions (:meth:`Masked.velocity` and the
    decoder attention's): at μ's own tokens (x None, or a field that ``uses`` no positions)
    through :meth:`Field.velocity`; at points x with their ``positions``: checks, then
    ``evaluate(t, mu, x, positions, engine)``, then the overflow check."""
    if x is None or not uses:
        query_positions(positions, x, who, uses)  # refuses positions without x
        return Field.velocity(field, mu, x, t=t, engine=engine, info=info)
    engine = check_engine(engine)
    field.check_measure(mu)
    x = field.check_points(x, mu)
    out = evaluate(t, mu, x, query_positions(positions, x, who, uses), engine)
    check_no_overflow(out, mu, f"the velocity Γ[μ] of {who}")
    return out


@register("masked", head=False, positions=True)
def _causal(Q, K, V, scale=None, *, kind: str = "softmax", **options):
    """Causal (masked) attention over a softmax-form variant (softmax by default)."""
    return Masked(variant(kind, head=True).build(Q, K, V, scale, **options))
