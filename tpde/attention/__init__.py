"""Attention fields Γ[μ]: the physics of the Transformer PDE.

Every variant is one :class:`Field` with the same interface: ``velocity`` on particles
(every engine that can express it), ``gaussian_rhs`` where Gaussians stay Gaussian.
"""

from tpde.attention.base import Field, GaussianNotPreserved
from tpde.attention.softmax import Softmax

__all__ = ["Field", "GaussianNotPreserved", "Softmax"]
