"""Batch-correctness of every field and energy (issue 20): a batch of clouds (points
(B, n, d)) must give, element by element, what each cloud gives alone — every registered
variant, the norm schemes, the gradient-flow fields of the energies, on every engine that
applies (an engine that refuses a field must refuse the batch too). Tiny n: this runs in
the default suite, except KeOps (its first call compiles each formula, ~30 s), marked slow.
Sinkhorn's scalings stop at their tolerance (marginal error 1e-6, the worst element of a batch),
so its batch and its clouds agree to that tolerance, the others to rounding.
"""

import pytest
import torch

from tpde._engines import ENGINES
from tpde.fields import (
    MLP,
    Exponential,
    GroupedQueryAttention,
    Hardmax,
    LayerNorm,
    Normalized,
    RMSNorm,
    Softmax,
    SwiGLU,
)
from tpde.fields.gradient_flow.energies import InteractionEnergy, PotentialEnergy
from tpde.fields.gradient_flow.field import GradientFlowField
from tpde.fields.registry import VARIANTS, variant_names
from tpde.measures import Empirical

F64 = torch.float64
B, N, D = 3, 5, 2


def _parameters():
    gen = torch.Generator().manual_seed(7)
    return tuple(0.5 * torch.randn(D, D, generator=gen, dtype=F64) for _ in range(3))


def _points():
    gen = torch.Generator().manual_seed(8)
    return torch.randn(B, N, D, generator=gen, dtype=F64)


def _cloud(points, positions):
    return Empirical(points, positions=positions) if positions is not None else Empirical(points)


def _fields():
    Q, K, V = _parameters()
    fields = {}
    for name in variant_names():
        entry = VARIANTS[name]
        options = {"heads": 2} if name == "multihead" else {}
        fields[name] = (entry.standard(Q, K, V, **options), entry.positions, False)
    softmax = fields["softmax"][0]
    for scheme in ("post-ln", "pre-ln", "peri-ln", "ngpt", "layernorm"):
        fields[f"normalized-{scheme}"] = (
            Normalized(softmax, scheme),
            False,
            scheme in ("post-ln", "ngpt"),
        )
    quadratic = InteractionEnergy(lambda z: (z**2).sum(-1))
    quartic = PotentialEnergy(lambda x: (x**4).sum(-1))
    fields["gradient-flow-interaction"] = (GradientFlowField(quadratic), False, False)
    fields["gradient-flow-potential"] = (GradientFlowField(quartic), False, False)
    sym = VARIANTS["softmax"].standard(Q, Q, Q.mT @ Q, 1.0)  # A = KᵀQ symmetric: a gradient flow
    fields["gradient-flow-softmax"] = (GradientFlowField(sym), False, False)
    fields["symmetric-softmax"] = (sym, False, False)
    fields["symmetric-sinkhorn"] = (
        VARIANTS["sinkhorn"].standard(Q, Q, Q.mT @ Q, 1.0),
        False,
        False,
    )
    fields.update(_layer_fields(Q, K, V))
    return fields


def _layer_fields(Q, K, V):
    """The layer surfaces: grouped-query attention with positions, the feed-forward fields,
    hardmax, the affine norm schemes, a whole layer as a sum, and the isotropic fields on
    the circle (where the spectral engine applies)."""
    gen = torch.Generator().manual_seed(9)
    W = [0.5 * torch.randn(*shape, generator=gen, dtype=F64) for shape in
         ((4, D), (2, D), (2, D), (D, 4), (3, D), (D, 3), (3, D), (D,))]  # fmt: skip
    Wq, Wk, Wv, Wo, W1, W2, W3, gamma = W

    def gqa(**options):
        return GroupedQueryAttention(Wq, Wk, Wv, Wo, 2, 1, **options)

    swiglu = SwiGLU(W1, W3, W2)
    iso = 2.0 * torch.eye(D, dtype=F64)
    return {
        "gqa-rope-window": (gqa(position="rope", window=0.5), True, False),
        "gqa-alibi": (gqa(position="alibi", bq=W[7].repeat(2), bo=W[7]), True, False),
        "gqa-not-causal": (gqa(causal=False), False, False),
        "mlp": (MLP(W1, W[7][:1].repeat(3), W2, W[7], "gelu"), False, False),
        "swiglu": (swiglu, False, False),
        "hardmax": (Hardmax(Q, K, V), False, False),
        "normalized-rmsnorm": (Normalized(swiglu, RMSNorm(gamma)), False, False),
        "normalized-layernorm-pre": (
            Normalized(VARIANTS["softmax"].standard(Q, K, V), LayerNorm(gamma, gamma, 1e-5, "pre")),
            False,
            False,
        ),
        "layer-sum": (
            Normalized(gqa(position="rope"), RMSNorm(gamma)) + Normalized(swiglu, RMSNorm(gamma)),
            True,
            False,
        ),
        "exponential-circle": (Exponential(iso, iso, iso, scale=1.0), False, True),
        "softmax-circle": (Softmax(iso, iso, iso, scale=1.0), False, True),
    }


FIELDS = _fields()


def _outcome(fn):
    try:
        return fn(), None
    except Exception as err:  # an engine that does not apply: the same refusal expected
        return None, type(err)


def _check_field(name, engines):
    field, positions, sphere = FIELDS[name]
    rtol, atol = (1e-4, 1e-6) if "sinkhorn" in name else (1e-10, 1e-12)
    points = _points()
    if sphere:
        points = torch.nn.functional.normalize(points, dim=-1)
    pos = torch.linspace(0, 1, N, dtype=F64) if positions else None
    applied = 0
    for engine in engines:
        batched, error = _outcome(lambda e=engine: field.velocity(_cloud(points, pos), engine=e))
        singles = [
            _outcome(lambda b=b, e=engine: field.velocity(_cloud(points[b], pos), engine=e))
            for b in range(B)
        ]
        if singles[0][1] is not None:  # the engine does not apply to this field
            assert error is not None, (name, engine)
            continue
        assert error is None, (name, engine, error)
        applied += 1
        for b, (single, _) in enumerate(singles):
            torch.testing.assert_close(batched[b], single, rtol=rtol, atol=atol)
    return applied


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_is_batch_correct_on_every_engine(name):
    assert _check_field(name, [e for e in ENGINES if e != "keops"]) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", FIELDS)
def test_every_field_is_batch_correct_on_keops(name):
    pytest.importorskip("pykeops")
    _check_field(name, ["keops"])


ENERGIES = {
    "interaction": InteractionEnergy(lambda z: (z**2).sum(-1)),
    "potential": PotentialEnergy(lambda x: (x**4).sum(-1)),
    "softmax": FIELDS["symmetric-softmax"][0].energy,
    "sinkhorn": FIELDS["symmetric-sinkhorn"][0].energy,
}


@pytest.mark.parametrize("name", ENERGIES)
def test_every_energy_is_batch_correct(name):
    energy, points = ENERGIES[name], _points()
    values = energy(Empirical(points))
    assert values.shape == (B,)
    for b in range(B):
        expected = energy(Empirical(points[b]))
        torch.testing.assert_close(
            values[b], expected, rtol=1e-4 if name == "sinkhorn" else 1e-10, atol=1e-12
        )
