"""Depth schedules: a stack of layers as one time-dependent field."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch

from tpde.fields.base import Field, shared_capabilities
from tpde.fields.calls import part_velocity
from tpde.measures import Empirical

__all__ = ["LayerSchedule"]


class LayerSchedule(Field):
    """Layer l of a stack acts on the depth-time interval [l, l + 1): Γ_t = Γ^{(⌊t⌋)}.

    Parameters
    ----------
    layers : sequence of L fields on the same dimension d.

    Notes
    -----
    A residual stack x ↦ x + Γ^{(l)}(x), l = 0 … L − 1, is the Euler discretisation with
    step 1 of ẋ = Γ_t(x) with this schedule (MATH.md §1: depth as time). Times outside
    [0, L) use the nearest layer. The schedule declares its jumps (``breakpoints`` 1 … L−1)
    and its pieces (``piece(t)``): :func:`tpde.flows.integrate` lands a step on every jump
    and evaluates every stage of a step with the layer where the step starts, so a
    higher-order method never mixes two layers inside one step.
    """

    def __init__(self, layers: Sequence[Field]):
        if isinstance(layers, Field) or not isinstance(layers, Sequence) or not layers:
            raise TypeError(
                f"layers must be a non-empty list of fields; received {type(layers).__name__}."
            )
        for index, layer in enumerate(layers):
            if not isinstance(layer, Field):
                raise TypeError(f"layer {index} is a {type(layer).__name__}, not a tpde field.")
        dims = {layer.dim for layer in layers}
        if len(dims) > 1:
            raise ValueError(f"all layers must act on one dimension d; received {sorted(dims)}.")
        self.layers = tuple(layers)
        self.dim = self.layers[0].dim
        self.breakpoints = tuple(float(b) for b in range(1, len(self.layers)))

    def children(self) -> tuple[Field, ...]:
        """The layers, in order. Every layer checks the measure (a masked layer needs
        positions, a sphere scheme tokens on the sphere): a run fails at its start, not at
        the layer that objects; positions are passed on to the layer acting at t."""
        return self.layers

    @property
    def capabilities(self) -> frozenset:
        """ "gaussian" when every layer has it; projections are the pieces' own (the flow
        asks the layer acting at t)."""
        return shared_capabilities(self.layers)

    def piece(self, t: float) -> Field:
        """The layer acting at depth-time t (layer l on [l, l + 1))."""
        index = bisect.bisect_right(self.breakpoints, float(t))
        return self.layers[index]

    @property
    def time_dependent(self) -> bool:
        return True  # piecewise constant in t: the layers change at the breakpoints

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        return part_velocity(self.piece(t), t, mu, x, engine, info, positions, own=own)

    def gaussian_affine(self, t, mean, cov):
        return self.piece(t).gaussian_affine(t, mean, cov)

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        return f"LayerSchedule({len(self)} layers, d={self.dim})"
