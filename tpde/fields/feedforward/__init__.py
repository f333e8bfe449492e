"""Feed-forward fields: per-token fields F(x) (MATH.md §8), no interaction, no Gaussian.

:class:`FeedForward` is the base (velocity F at every point, μ ignored; weights in a
:class:`tpde.fields.params.Weights`); :class:`MLP` and :class:`SwiGLU` derive from it; the
activations are one table, :data:`ACTIVATIONS`. They are outside the variant registry (no
Q, K, V). Every name of a module's ``__all__`` is exported here and from
:mod:`tpde.fields`.
"""

from tpde.fields._exports import export_modules

__all__ = export_modules(__name__, __path__, globals())
