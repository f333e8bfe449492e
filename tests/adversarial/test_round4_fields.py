"""Adversarial inputs, fourth round (issue 28): fields and metrics.

Classes: stationary states that move (a rounded 0 normalised into a unit vector); errors
that blame the wrong argument; degenerate inputs that must be refused (LayerNorm in d = 1,
the Bures barycentre of singular covariances). Each case asserts a clear error (type and
message) or a documented result against an oracle (tpde.theory's law, a float64 value by
hand). "fixed" marks the cases that failed before this round's fixes; the counts per class
are in the section headers.
"""

import math
import re

import pytest
import torch

from tests.adversarial.strategies import F64, error_table_test
from tpde.fields import (
    MLP,
    Cosine,
    Field,
    GroupedQueryAttention,
    LayerNorm,
    LayerSchedule,
    MultiHead,
    Normalized,
    RMSNorm,
    Softmax,
    SwiGLU,
)
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_barycenter
from tpde.theory import equiangular_velocity

I2, I3 = torch.eye(2, dtype=F64), torch.eye(3, dtype=F64)


def simplex(n: int, d: int) -> torch.Tensor:
    """The regular simplex of n ≤ d + 1 unit vectors in R^d (⟨x_i, x_j⟩ = −1/(n − 1))."""
    if d == 2:
        angles = 2 * math.pi * torch.arange(n, dtype=F64) / n
        return torch.stack([angles.cos(), angles.sin()], -1)
    e = torch.eye(n, dtype=F64) - 1 / n  # centred basis vectors, rank n − 1
    basis = torch.linalg.svd(e)[2][: n - 1]  # an orthonormal basis of their span
    points = e @ basis.T
    points = points / points.norm(dim=-1, keepdim=True)
    return torch.nn.functional.pad(points, (0, d - (n - 1)))


# ------------------------------------------------ stationary states (14 cases, 10 failed before)
STATIONARY = {  # field on tokens at the regular simplex, β = 0: Γ = V·mean = 0 exactly
    "simplex-3-d2": (Softmax(0 * I2, I2, I2), simplex(3, 2)),
    "simplex-4-d3": (Softmax(0 * I3, I3, I3), simplex(4, 3)),
    "antipodal-d3": (Softmax(0 * I3, I3, 2 * I3), simplex(2, 3)),
    "simplex-3-multihead": (MultiHead([Softmax(0 * I2, I2, I2)] * 2), simplex(3, 2)),
}


@pytest.mark.parametrize("scheme", ["peri-ln", "ngpt", ("ngpt", {"tangent": False})], ids=str)
@pytest.mark.parametrize("name", STATIONARY)
def test_a_stationary_state_does_not_move(name, scheme):
    # fixed: peri-ln and ngpt moved at unit speed (9 of 12 failed before; the antipodal pair
    # has an exact 0 and passed under every scheme; ngpt tangent=False is radial).
    field, points = STATIONARY[name]
    scheme, options = scheme if isinstance(scheme, tuple) else (scheme, {})
    velocity = Normalized(field, scheme, **options).velocity(Empirical(points))
    # tpde.theory's law for the scheme at the simplex (ρ = −1/(n − 1)), β = 0: ρ̇ = 0.
    n = points.shape[0]
    law = equiangular_velocity(-1 / (n - 1), 1.0, beta=0.0, n=n, scheme=scheme)
    assert float(law[0]) == 0.0
    if options:  # tangent=False: the layer's direction α(N(Γ) − x) = −αx, radial only
        velocity = velocity - (velocity * points).sum(-1, keepdim=True) * points
    assert float(velocity.abs().max()) <= 1e-15


def test_a_tiny_field_still_moves_at_unit_speed():
    # The threshold is relative to the field's values, not absolute: V = 1e-200 I away
    # from a stationary state still gives Peri-LN's unit speed.
    points = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=F64)
    velocity = Normalized(Softmax(I2, I2, 1e-200 * I2), "peri-ln").velocity(Empirical(points))
    torch.testing.assert_close(velocity.norm(dim=-1), torch.ones(3, dtype=F64))


def test_a_query_orthogonal_to_q_has_no_direction_in_cosine_attention():
    # fixed: Qx = 0.1 + 0.2 − 0.3 = 5.6e-17 (a rounded 0) was normalised to the direction
    # +1, so that token scored β·cos = +β against every key instead of 0 (uniform weights).
    Q = torch.ones(1, 3, dtype=F64)
    x = torch.tensor([[0.1, 0.2, -0.3]], dtype=F64)
    keys = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.5]], dtype=F64)
    field = Cosine(Q, I3[:1], I3, scale=50.0)
    got = field.velocity(Empirical(keys), x)
    torch.testing.assert_close(got, keys.mean(0, keepdim=True), rtol=1e-14, atol=1e-14)


# ------------------------- errors that blame the wrong argument (13 cases, 9 failed before)
D, H, HKV, DH = 4, 4, 2, 2


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


GQA = {"Wq": _r(H * DH, D), "Wk": _r(HKV * DH, D), "Wv": _r(HKV * DH, D), "Wo": _r(D, H * DH)}
FFN = {"W1": _r(6, D), "b1": _r(6), "W2": _r(D, 6), "b2": _r(D)}
GLU = {"W_gate": _r(6, D), "W_up": _r(6, D), "W_down": _r(D, 6)}


def _gqa(**wrong):
    return lambda: GroupedQueryAttention(**{**GQA, **wrong}, heads=H, kv_heads=HKV)


def _blames(name, shape):
    """The message that names ``name`` (with its received shape) as the wrong weight."""
    return rf"{name} has shape {re.escape(str(shape))}(,| but) .*{name} must have shape"


ERRORS = {
    "gqa-Wq-rows": (_gqa(Wq=_r(9, D)), ValueError, _blames("Wq", (9, 4))),  # fixed: Wo
    "gqa-Wq-cols": (_gqa(Wq=_r(8, 5)), ValueError, _blames("Wq", (8, 5))),  # fixed: Wk
    "gqa-Wk-rows": (_gqa(Wk=_r(6, D)), ValueError, _blames("Wk", (6, 4))),  # fixed: Wv
    "gqa-Wk-cols": (_gqa(Wk=_r(4, 5)), ValueError, _blames("Wk", (4, 5))),
    "gqa-Wv-rows": (_gqa(Wv=_r(6, D)), ValueError, _blames("Wv", (6, 4))),
    "gqa-Wo-transposed": (_gqa(Wo=_r(8, D)), ValueError, _blames("Wo", (8, 4))),
    "gqa-bq": (_gqa(bq=_r(7)), ValueError, _blames("bq", (7,))),
    "mlp-W1-rows": (  # fixed: blamed b1
        lambda: MLP(**{**FFN, "W1": _r(7, D)}),
        ValueError,
        _blames("W1", (7, 4)),
    ),
    "mlp-W1-cols": (  # fixed: blamed W2
        lambda: MLP(**{**FFN, "W1": _r(6, 5)}),
        ValueError,
        _blames("W1", (6, 5)),
    ),
    "swiglu-W_gate-rows": (  # fixed: blamed W_up
        lambda: SwiGLU(**{**GLU, "W_gate": _r(5, D)}),
        ValueError,
        _blames("W_gate", (5, 4)),
    ),
    "gqa-no-majority": (  # d_h = 3 (Wq, Wk) against 2 (Wo, Wv): every holder is named
        _gqa(Wq=_r(12, D), Wk=_r(6, D)),
        ValueError,
        r"disagree on H·d_h \(Wq has shape \(12, 4\), Wo has shape \(4, 8\)\) and no size "
        "has a majority",
    ),
}


# ----------------------------------------------- degenerate inputs (8 cases, 6 failed before)
I1 = torch.eye(1, dtype=F64)


class _AnyDim(Field):
    """A field of every dimension (dim None): d is known only from the measure."""

    dim = None

    def particle_velocity(self, t, mu, x, engine, info=None):
        return -x


def _line(u):
    u = torch.tensor(u, dtype=F64)
    return Gaussian(torch.zeros(2, dtype=F64), torch.outer(u, u) / u.dot(u))


SINGULAR = [_line([1.0, 0.0]), _line([1.0, 1.0])]  # rank 1, on different lines
LAYERNORM_D1 = "LayerNorm needs tokens in d >= 2: in d = 1 the centred token .* is 0"
ERRORS |= {
    "layernorm-d1-post": (  # fixed: integrate ended blow_up at t = 0
        lambda: Normalized(Softmax(I1, I1, I1), "layernorm"),
        ValueError,
        LAYERNORM_D1,
    ),
    "layernorm-d1-pre": (  # fixed: the field saw one point (b) for every token
        lambda: Normalized(Softmax(I1, I1, I1), LayerNorm(placement="pre")),
        ValueError,
        LAYERNORM_D1,
    ),
    "layernorm-any-dim-d1": (  # fixed: checked at the measure, where d is known
        lambda: Normalized(_AnyDim(), "layernorm").velocity(Empirical(_r(4, 1))),
        ValueError,
        LAYERNORM_D1,
    ),
    "layernorm-d1-integrate": (  # fixed
        lambda: integrate(Normalized(_AnyDim(), "layernorm"), Empirical(_r(4, 1)), 1.0),
        ValueError,
        LAYERNORM_D1,
    ),
    "barycenter-singular-noncommuting": (  # fixed: NaN residual, "not_converged"
        lambda: bures_barycenter(SINGULAR),
        ValueError,
        r"needs at least one definite covariance Σ_k with a positive weight, and every Σ_k "
        r"of 1 problem\(s\) is singular",
    ),
    "barycenter-definite-has-no-weight": (  # fixed: the definite one has weight 0
        lambda: bures_barycenter(
            [*SINGULAR, Gaussian(torch.zeros(2, dtype=F64), I2)],
            torch.tensor([0.5, 0.5, 0.0], dtype=F64),
        ),
        ValueError,
        "needs at least one definite covariance",
    ),
}

test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


def test_rmsnorm_in_d1_and_layernorm_in_d2_still_work():
    mu = Empirical(_r(4, 1))
    assert torch.isfinite(Normalized(Softmax(I1, I1, I1), RMSNorm()).velocity(mu)).all()
    mu2 = Empirical(_r(4, 2))
    assert torch.isfinite(Normalized(Softmax(I2, I2, I2), "layernorm").velocity(mu2)).all()


def test_a_barycenter_with_one_definite_covariance_converges():
    g = bures_barycenter([*SINGULAR, Gaussian(torch.zeros(2, dtype=F64), I2)])
    assert g.status == "converged" and torch.isfinite(g.residual).all()


MIX = Normalized(Softmax(I2, I2, I2), "mix-ln", switch=1.0, depth=3.0)
OFF_SPHERE = Empirical(3 * _r(5, 2, seed=4))


def test_a_sum_with_a_mix_ln_part_accepts_tokens_off_the_sphere_after_the_switch():
    # fixed: the sum refused them (its parts checked the measure with the scheme of t = 0)
    # while the part alone accepted them.
    other = Softmax(I2, I2, 0.5 * I2)
    got = (MIX + other).velocity(OFF_SPHERE, t=2.0)
    want = MIX.velocity(OFF_SPHERE, t=2.0) + other.velocity(OFF_SPHERE, t=2.0)
    torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="post-ln attention moves tokens on the unit sphere"):
        (MIX + other).velocity(OFF_SPHERE, t=0.5)  # before the switch: Post-LN, refused


def test_a_schedule_checks_the_layer_acting_at_t():
    # fixed: a stack whose first layer is Post-LN refused off-sphere tokens at t = 1.5,
    # where the Pre-LN layer acts and the layer alone accepts them.
    pre = Normalized(Softmax(I2, I2, I2), "pre-ln")
    stack = LayerSchedule([Normalized(Softmax(I2, I2, I2), "post-ln"), pre])
    torch.testing.assert_close(
        stack.velocity(OFF_SPHERE, t=1.5), pre.velocity(OFF_SPHERE), rtol=0, atol=0
    )
