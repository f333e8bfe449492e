"""tpde: the Transformer PDE as optimal-transport geometry.

Subpackages, in dependency order: :mod:`tpde.measures` (state), :mod:`tpde.metrics`
(distances and diagnostics), :mod:`tpde.fields` (velocity fields), :mod:`tpde.flows` (time);
:mod:`tpde.attention` is a façade over :mod:`tpde.fields`.
"""

from tpde import measures, metrics, fields, flows, attention  # noqa: I001 (dependency order)

__version__ = "0.1.0"
__all__ = ["measures", "metrics", "fields", "flows", "attention"]  # noqa: RUF022 (dependency order)
