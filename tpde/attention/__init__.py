"""Attention fields Γ[μ]: the physics of the Transformer PDE.

Every variant is one :class:`Field` with the same public protocol (``particle_velocity``,
``check_measure``, ``gaussian_affine`` where Gaussians stay Gaussian, and the optional
capabilities of :data:`CAPABILITIES`); the variants are registered by name in
:mod:`tpde.attention.registry`. Gradient-flow structure: :mod:`tpde.attention.structure`;
energies: :mod:`tpde.attention.energies`. Per-token feed-forward fields (:class:`MLP`,
:class:`SwiGLU`, activations in :mod:`tpde.attention.activations`) are fields too, outside
the registry (they have no Q, K, V).
"""

from tpde.attention import registry
from tpde.attention.base import (
    CAPABILITIES,
    AffineDerivative,
    Field,
    GaussianNotPreserved,
    InnerSolves,
    NotAGradientFlow,
    supports,
)
from tpde.attention.cosine import Cosine
from tpde.attention.energies import Energy, InteractionEnergy, PotentialEnergy, as_energy
from tpde.attention.exponential import Exponential
from tpde.attention.gradient_flow import (
    Dissipation,
    GradientFlowField,
    GradientFlowGap,
    energy_dissipation,
    gradient_flow_gap,
)
from tpde.attention.grouped import GroupedQueryAttention
from tpde.attention.hardmax import Hardmax
from tpde.attention.l2 import L2
from tpde.attention.linear import Linear
from tpde.attention.masked import Masked
from tpde.attention.mlp import MLP
from tpde.attention.multihead import MultiHead
from tpde.attention.normalized import Normalized
from tpde.attention.norms import (
    NGPT,
    LayerNorm,
    MixLN,
    NormScheme,
    PeriLN,
    PostLN,
    PreLN,
    RMSNorm,
)
from tpde.attention.positions import ALiBi, PositionalEncoding, RoPE
from tpde.attention.schedule import LayerSchedule
from tpde.attention.sigmoid import Sigmoid
from tpde.attention.sinkhorn import Sinkhorn, SinkhornInfo, SinkhornNotConverged
from tpde.attention.softmax import Softmax
from tpde.attention.structure import GradientStructure, gradient_structure
from tpde.attention.sum import Sum
from tpde.attention.swiglu import SwiGLU

__all__ = [
    "CAPABILITIES",
    "L2",
    "MLP",
    "NGPT",
    "ALiBi",
    "AffineDerivative",
    "Cosine",
    "Dissipation",
    "Energy",
    "Exponential",
    "Field",
    "GaussianNotPreserved",
    "GradientFlowField",
    "GradientFlowGap",
    "GradientStructure",
    "GroupedQueryAttention",
    "Hardmax",
    "InnerSolves",
    "InteractionEnergy",
    "LayerNorm",
    "LayerSchedule",
    "Linear",
    "Masked",
    "MixLN",
    "MultiHead",
    "NormScheme",
    "Normalized",
    "NotAGradientFlow",
    "PeriLN",
    "PositionalEncoding",
    "PostLN",
    "PotentialEnergy",
    "PreLN",
    "RMSNorm",
    "RoPE",
    "Sigmoid",
    "Sinkhorn",
    "SinkhornInfo",
    "SinkhornNotConverged",
    "Softmax",
    "Sum",
    "SwiGLU",
    "as_energy",
    "energy_dissipation",
    "gradient_flow_gap",
    "gradient_structure",
    "registry",
    "supports",
]
