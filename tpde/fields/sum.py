r"""Sums of fields: a whole Transformer layer as one field (MATH.md §8).

A Pre-norm layer moves its tokens by ẋ = Attn[N₁#μ](N₁(x)) + F(N₂(x)) as h → 0: the sum
of two normalised fields, written as it reads,

    layer = Normalized(attention, RMSNorm(g1)) + Normalized(swiglu, RMSNorm(g2))

The sum's velocity is the sum of its parts' on every measure and engine each part
supports; the discrete layer x ← x + Attn(N₁x); x ← x + F(N₂x) is one Lie–Trotter step
of the sum with Euler sub-steps at h = 1 (Lu et al., arXiv:1906.02762), which
:func:`tpde.flows.integrate` runs with ``method="lie-trotter"`` ("strang": the Macaron
layer A h/2, B h, A h/2). Splitting steps apply each part's own projection after its
sub-step, so a Post-LN layer (BERT: x ← LN₁(x + Attn x); x ← LN₂(x + F x)) is the sum of
``Normalized(attention, LayerNorm(...))`` and ``Normalized(mlp, LayerNorm(...))`` too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tpde._validation import finite_sum
from tpde.fields.base import (
    Field,
    GaussianNotPreserved,
    _foreign_fields,
    addition,
    check_velocity_shape,
    check_velocity_type,
    shared_capabilities,
)
from tpde.fields.calls import part_velocity
from tpde.measures import Empirical, Gaussian

__all__ = ["Sum"]


@addition
class Sum(Field):
    r"""Γ[μ](x) = Σ_p Γ_p[μ](x), the field whose velocity is the sum of its parts'.

    Parameters
    ----------
    parts : sequence of fields on one dimension d (sums inside are flattened, so
        ``a + b + c`` has three parts; a part of any dimension, ``dim = None``, joins any
        d). ``field_a + field_b`` builds one.

    Notes
    -----
    Capabilities come from the parts: "gaussian" when every part keeps Gaussians Gaussian
    (the sum of affine closures c + Bx is affine, and the moment ODE is that of the summed
    closure); "projection" when every part projects and all projections are one map (the
    same scheme object, or the same part), since an unsplit step cannot apply two. Under a
    splitting method each part's projection follows its own sub-step.

    Depth-time: the sum jumps where any part jumps (``breakpoints``, the union), and
    ``piece(t)`` is the sum of the parts' pieces.
    """

    def __init__(self, parts: Sequence[Field]):
        if isinstance(parts, Field) or not isinstance(parts, Sequence) or len(parts) == 0:
            raise TypeError(
                f"Sum takes a non-empty list of fields (or write field_a + field_b); received "
                f"{type(parts).__name__}."
            )
        flat: list[Field] = []
        for index, part in enumerate(parts):
            if not isinstance(part, Field):
                raise TypeError(f"part {index} of the sum is a {type(part).__name__}, not a "
                                "tpde field.")  # fmt: skip
            flat.extend(part.parts if isinstance(part, Sum) else [part])
        for index, part in enumerate(flat):
            if not hasattr(part, "dim"):
                raise TypeError(
                    f"part {index} of the sum, {type(part).__name__}, has no dim: every tpde "
                    "field declares the dimension d of its tokens (self.dim = d in __init__)."
                )
        dims = [part.dim for part in flat]
        fixed = {d for d in dims if d is not None}  # dim None: a field of any dimension
        if len(fixed) > 1:
            raise ValueError(
                f"the parts of a sum must act on one dimension d; received parts of dimensions "
                f"{dims} (in order). A layer's attention and feed-forward fields both act on "
                "the model dimension."
            )
        self.parts = tuple(flat)
        self.dim = fixed.pop() if fixed else None
        self.breakpoints = tuple(sorted({b for part in flat for b in part.breakpoints}))
        self._pieces: dict = {}

    #: Γ = Σ_p Γ_p (Field.sums_children).
    sums_children = True

    # ------------------------------------------------------------------ protocol
    def children(self) -> tuple[Field, ...]:
        """The parts, in order."""
        return self.parts

    @property
    def capabilities(self) -> frozenset:
        own = shared_capabilities(self.parts)
        return own | {"projection"} if self._one_projection() else own

    def _one_projection(self):
        """The part whose projection every part shares, or None (see the class notes)."""
        if not all(part.supports("projection") for part in self.parts):
            return None
        first = self.parts[0]
        key = first.projection_owner
        if all(part.projection_owner is key for part in self.parts):
            return first
        return None

    @property
    def time_dependent(self) -> bool:
        return any(part.time_dependent for part in self.parts)

    def piece(self, t: float) -> Field:
        """The sum of the parts acting at t (itself where no part is piecewise)."""
        if not self.breakpoints:
            return self
        pieces = tuple(part.piece(t) for part in self.parts)
        if all(p is q for p, q in zip(pieces, self.parts, strict=True)):
            return self
        key = tuple(map(id, pieces))
        if key not in self._pieces:  # one object per combination: flows see the change once
            self._pieces[key] = Sum(pieces)
        return self._pieces[key]

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        total = None
        for index, part in enumerate(self.parts):
            v = part_velocity(part, t, mu, x, engine, info, positions, own=own)
            who = f"part {index} of the sum, {type(part).__name__},"
            check_velocity_type(v, part)
            check_velocity_shape(v, x, who)  # a narrower v would broadcast into the total
            _check_foreign_part(v, part, who)
            total = v if total is None else total + v
        return total

    @property
    def overflow_source(self) -> str:
        """What overflows first in the parts (for the message of a non-finite velocity)."""
        sources = dict.fromkeys(part.overflow_source for part in self.parts)
        return " or ".join(sources)

    def project(self, points: torch.Tensor) -> torch.Tensor:
        """The projection the parts share (capability "projection" only)."""
        owner = self._one_projection()
        if owner is None:
            raise ValueError(
                "this sum has no single projection: its parts project differently (or not at "
                "all). Integrate it with a splitting method (method='lie-trotter' or "
                "'strang'), which applies each part's projection after its own sub-step."
            )
        return owner.project(points)

    def gaussian_affine(self, t, mean, cov):
        """c = Σ_p c_p, B = Σ_p B_p: the parts' affine closures added."""
        c, B = self.parts[0].gaussian_affine(t, mean, cov)
        for part in self.parts[1:]:
            c_p, B_p = part.gaussian_affine(t, mean, cov)
            c, B = c + c_p, B + B_p
        return c, B

    def gaussian_refusal(self) -> str:
        lost = [type(p).__name__ for p in self.parts if not p.supports("gaussian")]
        return (
            f"a sum keeps Gaussians Gaussian only if every part does, and {', '.join(lost)} "
            "does not: there is no moment closure. Integrate particles instead "
            "(Empirical.from_gaussian)."
        )

    def check_measure_kind(self, mu) -> None:
        """A Gaussian only where every part keeps Gaussians (before the parts' checks)."""
        if isinstance(mu, Gaussian) and not self.supports("gaussian"):
            raise GaussianNotPreserved(self.gaussian_refusal())

    def projection_needs_split(self) -> bool:
        """Whether some part projects but the parts share no projection: only a splitting
        method applies each part's projection (an unsplit step would drop them)."""
        projects = any(part.supports("projection") for part in self.parts)
        return projects and self._one_projection() is None

    def __len__(self) -> int:
        return len(self.parts)

    def __repr__(self) -> str:
        return " + ".join(repr(part) for part in self.parts)


def _check_foreign_part(v: torch.Tensor, part: Field, who: str) -> None:
    """Raise FloatingPointError where a part holding a field defined outside tpde (itself or
    a declared child, :func:`~tpde.fields.base._foreign_fields`) returned non-finite values:
    named, not reported later as an overflow of the sum."""
    foreign = _foreign_fields(part)
    if not foreign or finite_sum(v):
        return
    inside = ""
    if foreign != [part]:
        chain = " inside ".join(type(f).__name__ for f in reversed(foreign))
        inside = f" (a field defined outside tpde: {chain})"
    raise FloatingPointError(
        f"{who}{inside} returned {int((~torch.isfinite(v.detach())).sum())} non-finite entries "
        "(NaN or Inf) for finite tokens: its own particle_velocity produced them (look for "
        "0/0 at a point, a log of 0, or an exp that overflows)."
    )
