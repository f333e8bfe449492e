"""tpde: the Transformer PDE as optimal-transport geometry.

Subpackages: :mod:`tpde.measures` (state), :mod:`tpde.fields` (fields; :mod:`tpde.attention`
is a façade over it), :mod:`tpde.flows` (time), :mod:`tpde.metrics` (distances and
diagnostics).
"""

from tpde import attention, fields, flows, measures, metrics

__version__ = "0.1.0"
__all__ = ["attention", "fields", "flows", "measures", "metrics"]
