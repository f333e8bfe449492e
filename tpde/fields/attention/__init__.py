"""Attention variants: Q/K/V fields, heads, masks, grouped-query attention, positions.

One module per variant (it registers itself in :mod:`tpde.fields.registry` with
``@register``); :mod:`~tpde.fields.attention.positions` holds the positional encodings
(RoPE, ALiBi) of :class:`GroupedQueryAttention` and :class:`Masked`. Every name of a
module's ``__all__`` is exported here and from :mod:`tpde.fields`.
"""

from tpde.fields._exports import export_modules

__all__ = export_modules(__name__, __path__, globals())
