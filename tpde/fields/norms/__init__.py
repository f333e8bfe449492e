"""Normalised tokens: the normalisation schemes and the wrapper that applies one.

:mod:`~tpde.fields.norms.schemes` holds the schemes (:class:`NormScheme` and its
subclasses, one table :data:`SCHEMES` by alias); :class:`Normalized` binds a scheme to a
field. The scale-safe maps they use (N(x) = x/|x|, LayerNorm, RMSNorm) are tpde's own
numerics (``tpde._scale_safe``). Every name of a module's ``__all__`` is exported here and
from :mod:`tpde.fields`.
"""

from tpde.fields._exports import export_modules

__all__ = export_modules(__name__, __path__, globals())
