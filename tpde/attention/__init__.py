"""Attention fields Γ[μ]: the physics of the Transformer PDE.

Every variant is one :class:`Field` with the same interface: ``velocity`` on particles
(every engine that can express it), ``gaussian_rhs`` where Gaussians stay Gaussian.
"""

from tpde.attention.base import Field, GaussianNotPreserved
from tpde.attention.l2 import L2
from tpde.attention.linear import Linear
from tpde.attention.masked import Masked
from tpde.attention.multihead import MultiHead
from tpde.attention.sigmoid import Sigmoid
from tpde.attention.sinkhorn import Sinkhorn, SinkhornInfo, SinkhornNotConverged
from tpde.attention.softmax import Softmax

__all__ = [
    "L2",
    "Field",
    "GaussianNotPreserved",
    "Linear",
    "Masked",
    "MultiHead",
    "Sigmoid",
    "Sinkhorn",
    "SinkhornInfo",
    "SinkhornNotConverged",
    "Softmax",
]
