"""The base of the feed-forward fields (their weights: :class:`tpde.fields.params.Weights`).

A feed-forward field (MLP, SwiGLU; MATH.md §8) moves each token by a function of the
token alone, F(x): no interaction, so μ is ignored. Its weights are constant tensors or
callables ``t -> tensor`` (one layer per depth-time, as attention's parameters), with
symbolic trailing shapes (W₁: (m, d), W₂: (d, m), …) that must chain; leading batch
dimensions broadcast against batched points.
"""

from __future__ import annotations

import torch

from tpde.fields.base import Field
from tpde.fields.params import Weights
from tpde.measures import Measure

__all__ = ["FeedForward"]


class FeedForward(Field):
    """Base of the per-token fields F(x): velocity F at every point, μ ignored.

    Subclasses set ``params`` (a :class:`Weights` whose sizes include ``"d"``) and ``dim``,
    and implement :meth:`feed_forward`. There is no Gaussian closure: the pushforward of a
    Gaussian by a nonlinear F is not Gaussian (MATH.md §8), so the base class refuses
    Gaussians (:class:`~tpde.fields.GaussianNotPreserved`).
    """

    params: Weights
    overflow_source = "the hidden units (the first layer's products W x)"

    def feed_forward(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """F(x) for x (..., n, d)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement feed_forward(t, x), the map F(x) every "
            "feed-forward field defines (docs/EXTENDING.md, 'A feed-forward field')."
        )

    def particle_velocity(self, t, mu, x, engine: str, info=None) -> torch.Tensor:
        """F(x): μ, the engine and ``info`` play no part (no interaction)."""
        return self.feed_forward(t, x)

    def gaussian_refusal(self) -> str:
        """Why a Gaussian is refused, for the base class's GaussianNotPreserved."""
        return (
            f"{type(self).__name__} is a nonlinear per-token field: the pushforward of a "
            "Gaussian by it is not Gaussian, so there is no closed moment ODE. Integrate "
            "particles instead (Empirical.from_gaussian(g, n))."
        )

    def check_measure(self, mu) -> None:
        """Raise unless ``mu`` is a tpde measure on R^d (d from the weights)."""
        if isinstance(mu, Measure) and mu.dim != self.dim:
            name, shape = self.params._source["d"]
            raise ValueError(
                f"dimension mismatch: the measure lives in d = {mu.dim} but the "
                f"{type(self).__name__} acts on d = {self.dim} ({name} has shape {shape})."
            )
        super().check_measure(mu)
