r"""Parallel blocks: branches that read the same tokens, stepped as one (MATH.md §8).

GPT-NeoX/Pythia, GPT-J and Phi compute attention and the MLP from the same input and add
both to the residual stream in one update,

    x ← x + Attn[N₁#μ](N₁(x)) + F(N₂(x))            (N₁ = N₂ in GPT-J and Phi),

not one after the other. As h → 0 the velocity is the same sum as a sequential layer's,
Γ = Γ_attn + Γ_mlp; what differs is the discrete step. A :class:`~tpde.fields.Sum` is split
by Lie–Trotter into its parts (attention sub-step, then MLP sub-step: the sequential block);
a :class:`Parallel` is one part, whose Euler step at h = 1 evaluates every branch at the
same x: the parallel block. The layer is therefore ``Sum([Parallel([a, b])])`` (a sum of
one part), which the splitting methods step exactly as the network does.

The branches stay available by name (``branches``) for a per-branch split of the update:
x_{l+1} − x_l = Σ_b Γ_b(x_l) exactly (:meth:`tpde.pretrained.Transformer.split`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tpde.fields.base import Field
from tpde.fields.sum import Sum
from tpde.measures import Empirical

__all__ = ["Parallel"]


class Parallel(Field):
    r"""Γ[μ](x) = Σ_b Γ_b[μ](x), stepped as one field (module notes).

    Parameters
    ----------
    branches : sequence of fields on one dimension d (at least one)
        Each reads the same tokens; a branch may be a :class:`~tpde.fields.Normalized`
        field (its own pre-norm), so the two norms of GPT-NeoX and the one shared norm of
        GPT-J and Phi are both branches of a Parallel.

    Notes
    -----
    The velocity, capabilities, pieces in depth-time and checks are those of
    ``Sum(branches)`` (the continuous-time field is the same). The one difference is that
    it has no ``parts``: a splitting method (Lie–Trotter, Strang) steps it whole, so its
    Euler step at h = 1 is x + Σ_b Γ_b(x), the parallel residual block. A branch that
    projects (a Post-norm scheme) is accepted only when all branches share that projection
    (the sum's rule), applied once after the joint step.
    """

    def __init__(self, branches: Sequence[Field]):
        if isinstance(branches, Field) or not isinstance(branches, Sequence) or not branches:
            raise TypeError(
                f"Parallel takes a non-empty list of fields (the branches that read the same "
                f"tokens); received {type(branches).__name__}."
            )
        self._sum = branches if isinstance(branches, Sum) else Sum(list(branches))
        if self._sum.projection_needs_split():
            raise ValueError(
                "the branches of a Parallel project differently (each behind its own "
                "post-norm); a parallel block is one step followed by at most one projection. "
                "Use one shared scheme, or a Sum (stepped sub-step by sub-step)."
            )
        self.branches = self._sum.parts
        self.dim = self._sum.dim
        self.breakpoints = self._sum.breakpoints
        self._pieces: dict = {}

    #: Γ = Σ_b Γ_b (Field.sums_children).
    sums_children = True

    def children(self) -> tuple[Field, ...]:
        """The branches, in order."""
        return self.branches

    @property
    def capabilities(self) -> frozenset:
        return self._sum.capabilities

    @property
    def time_dependent(self) -> bool:
        return self._sum.time_dependent

    def piece(self, t: float) -> Field:
        """The parallel block of the branches acting at t (itself where none is piecewise)."""
        piece = self._sum.piece(t)
        if piece is self._sum:
            return self
        if id(piece) not in self._pieces:
            self._pieces[id(piece)] = Parallel(piece)
        return self._pieces[id(piece)]

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        return self._sum.particle_velocity(t, mu, x, engine, info, positions, own=own)

    @property
    def overflow_source(self) -> str:
        return self._sum.overflow_source

    def project(self, points: torch.Tensor) -> torch.Tensor:
        """The projection every branch shares (capability "projection" only)."""
        return self._sum.project(points)

    def gaussian_affine(self, t, mean, cov):
        return self._sum.gaussian_affine(t, mean, cov)

    def gaussian_refusal(self) -> str:
        return self._sum.gaussian_refusal()

    def check_measure(self, mu) -> None:
        self._sum.check_measure(mu)

    def __len__(self) -> int:
        return len(self.branches)

    def __repr__(self) -> str:
        return f"Parallel({' + '.join(repr(b) for b in self.branches)})"
