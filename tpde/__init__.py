"""tpde: the Transformer PDE as optimal-transport geometry.

Subpackages: :mod:`tpde.measures` (state), :mod:`tpde.attention` (fields),
:mod:`tpde.flows` (time), :mod:`tpde.metrics` (distances and diagnostics).
"""

from tpde import attention, flows, measures, metrics

__version__ = "0.1.0"
__all__ = ["attention", "flows", "measures", "metrics"]
