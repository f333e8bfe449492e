"""tpde: the Transformer PDE as optimal-transport geometry.

Subpackages: :mod:`tpde.measures` (state), :mod:`tpde.fields` (fields; :mod:`tpde.attention`
is a façade over it), :mod:`tpde.flows` (time), :mod:`tpde.metrics` (distances and
diagnostics).
"""

import os as _os

if _os.environ.get("TPDE_END_WITH_PARENT"):  # a worker of `tpde run --jobs N`: armed first,
    from tpde._lifetime import arm_from_environment  # before torch (stdlib only)

    arm_from_environment()

from tpde import attention, fields, flows, measures, metrics

__version__ = "0.1.0"
__all__ = ["attention", "fields", "flows", "measures", "metrics"]
