"""tpde.attention: a façade over tpde.fields with the names it had before the move (issue 26)."""

import tpde.attention
import tpde.fields

#: tpde.attention.__all__ before the fields moved to tpde.fields: the façade's contract.
OLD_NAMES = [
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


def test_facade_keeps_its_names():
    assert tpde.attention.__all__ == OLD_NAMES


def test_facade_names_are_the_fields_objects():
    for name in OLD_NAMES:
        assert getattr(tpde.attention, name) is getattr(tpde.fields, name), name


def test_fields_exports_every_facade_name():
    assert set(OLD_NAMES) <= set(tpde.fields.__all__)
