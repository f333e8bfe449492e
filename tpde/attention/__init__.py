"""Attention fields Γ[μ]: the physics of the Transformer PDE.

Every variant is one :class:`Field` with the same interface: ``velocity`` on particles
(every engine that can express it), ``gaussian_rhs`` where Gaussians stay Gaussian.
"""

from tpde.attention.base import Field, GaussianNotPreserved, NotAGradientFlow
from tpde.attention.energies import (
    Energy,
    GradientStructure,
    InteractionEnergy,
    PotentialEnergy,
    as_energy,
    gradient_structure,
)
from tpde.attention.gradient_flow import (
    Dissipation,
    GradientFlowField,
    GradientFlowGap,
    energy_dissipation,
    gradient_flow_gap,
)
from tpde.attention.l2 import L2
from tpde.attention.linear import Linear
from tpde.attention.masked import Masked
from tpde.attention.multihead import MultiHead
from tpde.attention.schedule import LayerSchedule
from tpde.attention.sigmoid import Sigmoid
from tpde.attention.sinkhorn import Sinkhorn, SinkhornInfo, SinkhornNotConverged
from tpde.attention.softmax import Softmax

__all__ = [
    "L2",
    "Dissipation",
    "Energy",
    "Field",
    "GaussianNotPreserved",
    "GradientFlowField",
    "GradientFlowGap",
    "GradientStructure",
    "InteractionEnergy",
    "LayerSchedule",
    "Linear",
    "Masked",
    "MultiHead",
    "NotAGradientFlow",
    "PotentialEnergy",
    "Sigmoid",
    "Sinkhorn",
    "SinkhornInfo",
    "SinkhornNotConverged",
    "Softmax",
    "as_energy",
    "energy_dissipation",
    "gradient_flow_gap",
    "gradient_structure",
]
