"""Fields Γ[μ]: the physics of the Transformer PDE, by role.

At the top, the protocol and the kit to write a field with:

- :mod:`~tpde.fields.base`: :class:`Field` (the protocol flows rely on), :func:`supports`
  and :data:`CAPABILITIES`, :class:`GaussianNotPreserved`;
- :mod:`~tpde.fields.params`: :class:`QKV`, :class:`HeadParams` (attention parameters),
  :class:`Weights` and :func:`linear` (named weights that must chain);
- :mod:`~tpde.fields.forms`: :class:`SoftmaxForm`, :func:`key_log_weights`,
  :func:`key_positions` (a softmax attention in one form every engine runs);
- :mod:`~tpde.fields.registry`: the variant registry (``registry.build(name, Q, K, V)``);
- composition: :class:`Sum` (one layer's sublayers) and :class:`LayerSchedule` (a stack).

Then one folder per role: :mod:`tpde.fields.attention` (variants, heads, masks,
grouped-query attention, positions), :mod:`tpde.fields.feedforward` (:class:`FeedForward`,
:class:`MLP`, :class:`SwiGLU`, activations), :mod:`tpde.fields.norms` (the schemes and
:class:`Normalized`), :mod:`tpde.fields.gradient_flow` (energies, gradient structure, the
gradient-flow field, the convexity probe). Every public name of every module (its
``__all__``) is exported here, so a new module needs no edit to a list (docs/EXTENDING.md).
"""

from tpde.fields._exports import export_modules
from tpde.metrics.mobility import NotAGradientFlow

__all__ = [
    "NotAGradientFlow",
    *export_modules(__name__, __path__, globals(), as_modules=("registry",)),
]
