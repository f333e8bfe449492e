"""Adversarial inputs to the layer surfaces: grouped-query attention with positions, the
feed-forward fields and their activations, sums of fields, the norm scheme objects, Hardmax,
Exponential and the spectral engine (issue 20, second round).

Each case asserts a clear error (type and the informative part of the message: what was
received, how to fix it) or a documented result checked against a float64 oracle.
"""

import math

import pytest
import torch

from tests.adversarial.strategies import F64, cloud, error_table_test, scales
from tpde.fields import (
    L2,
    MLP,
    NGPT,
    ALiBi,
    Exponential,
    Field,
    GaussianNotPreserved,
    GradientFlowField,
    GroupedQueryAttention,
    Hardmax,
    InteractionEnergy,
    LayerNorm,
    MixLN,
    Normalized,
    PostLN,
    RMSNorm,
    RoPE,
    Softmax,
    Sum,
    SwiGLU,
)
from tpde.measures import Empirical, Gaussian, Grid

D, H, HKV, DH = 4, 4, 2, 2


def _r(*shape, seed=0):
    gen = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=gen, dtype=F64)


WQ, WK, WV, WO = _r(H * DH, D), _r(HKV * DH, D), _r(HKV * DH, D), _r(D, H * DH)
POINTS = cloud(5, D)
POS = torch.arange(5.0, dtype=F64)
SEQ = Empirical(POINTS, positions=POS)
W1, B1, W2, B2 = _r(6, D), _r(6), _r(D, 6), _r(D)
MU = Empirical(POINTS)
I2 = torch.eye(2, dtype=F64)
MU2 = Empirical(cloud(5, 2))
SM = Softmax(I2, I2, I2)
CIRCLE = Empirical(torch.nn.functional.normalize(cloud(40, 2, seed=3), dim=-1))
GAUSS2 = Gaussian(torch.zeros(2, dtype=F64), I2)


def gqa(**options):
    args = {"Wq": WQ, "Wk": WK, "Wv": WV, "Wo": WO, "heads": H, "kv_heads": HKV}
    args.update(options)
    return GroupedQueryAttention(**args)


def mlp(**options):
    args = {"W1": W1, "b1": B1, "W2": W2, "b2": B2}
    args.update(options)
    return MLP(**args)


class _NaNField(Field):
    """A user's field that returns NaN."""

    dim = 2

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x * math.nan


class _NoDim(Field):
    """A user's field that forgot dim."""

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x


class _Numpy(Field):
    dim = 2

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x.numpy()


class _Narrow(Field):
    """A user's field that returns one coordinate instead of d."""

    dim = 2

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x[..., :1]


def _activation_takes_t(z, t):
    return z


# ---------------------------------------------------------------------- error tables
GQA_ERRORS = {
    "heads-not-multiple-of-kv": (
        lambda: gqa(kv_heads=3),
        ValueError,
        "heads = 4 is not a multiple of kv_heads = 3",
    ),
    "heads-float": (lambda: gqa(heads=4.0), ValueError, "heads must be a positive integer"),
    "query-positions-merge": (  # fixed: went through float32, so both became 2^24
        lambda: gqa().velocity(
            Empirical(POINTS.float(), positions=POS),
            POINTS[:2].float(),
            positions=[2**24, 2**24 + 1],
        ),
        ValueError,
        "positions 16777216 and 16777217 are not distinct in torch.float32",
    ),
    "rows-not-multiple-of-heads": (
        lambda: gqa(heads=3, kv_heads=1),
        ValueError,
        r"Wq must have H·d_h rows, a multiple of H = 3 query heads; received Wq of shape \(8, 4\)",
    ),
    "rope-odd-head-dim": (
        lambda: GroupedQueryAttention(
            _r(6, D), _r(6, D), _r(6, D), _r(D, 6), 2, 2, position="rope"
        ),
        ValueError,
        r"head dimension d_h = 3 is odd; .*RoPE\(dims=...\)",
    ),
    "rope-dims-above-head-dim": (
        lambda: gqa(position=RoPE(dims=4)),
        ValueError,
        "RoPE dims = 4 exceeds the head dimension d_h = 2",
    ),
    "position-typo": (lambda: gqa(position="roap"), ValueError, "received 'roap'"),
    "alibi-slope-count": (
        lambda: gqa(position=ALiBi(slopes=(1.0, 2.0))),
        ValueError,
        "ALiBi has 2 slopes but the attention has H = 4 query heads",
    ),
    "alibi-slopes-string": (  # fixed: leaked torch's "new(): invalid data type 'str'"
        lambda: ALiBi(slopes="abc"),
        TypeError,
        "ALiBi slopes must be a sequence of numbers, one per head; received 'abc'",
    ),
    "alibi-slopes-matrix": (  # fixed: a (2, 2) table was read as four slopes
        lambda: ALiBi(slopes=[[1.0, 2.0], [3.0, 4.0]]),
        ValueError,
        r"one slope per head \(a flat sequence\); received a table of shape \(2, 2\)",
    ),
    "window-zero": (lambda: gqa(window=0.0), ValueError, "window must be > 0"),
    "window-string": (  # fixed: "2" was taken as 2.0
        lambda: gqa(window="2"),
        TypeError,
        "window must be a real number; received '2'",
    ),
    "window-without-causal": (
        lambda: gqa(window=2, causal=False),
        ValueError,
        "needs causal=True",
    ),
    "wk-wrong-d": (
        lambda: gqa(Wk=_r(4, 3)),
        ValueError,
        r"Wk must have shape \(\.\.\., 4, 4\) = \(\.\.\., H_kv·d_h, d\)",
    ),
    "bo-wrong": (lambda: gqa(bo=_r(3)), ValueError, r"bo must have shape \(\.\.\., 4\)"),
    "weights-batches-differ": (
        lambda: gqa(Wq=_r(3, 8, 4), Wk=_r(2, 4, 4)),
        ValueError,
        r"batch shapes of the weights do not broadcast: Wq \(3,\), Wk \(2,\)",
    ),
    "no-positions": (lambda: gqa().velocity(MU), ValueError, "needs token positions"),
    "nan-position": (
        lambda: gqa().velocity(Empirical(POINTS, positions=POS * math.nan)),
        ValueError,
        "positions contains 5 non-finite",
    ),
    "negative-position": (
        lambda: gqa(position="rope").velocity(Empirical(POINTS, positions=POS - 10)),
        ValueError,
        "positions must be ≥ 0",
    ),
    "positions-per-cloud": (
        lambda: gqa().velocity(Empirical(_r(2, 5, D), positions=torch.arange(10.0).reshape(2, 5))),
        ValueError,
        r"positions must have shape \(n,\) = \(5,\)",
    ),
    "x-without-positions": (
        lambda: gqa().velocity(SEQ, POINTS[:2]),
        ValueError,
        r"needs their positions: pass positions of shape \(2,\)",
    ),
    "positions-for-a-field-without": (  # fixed: said "pass x too" with x passed
        lambda: gqa(causal=False).velocity(SEQ, POINTS[:2], positions=POS[:2]),
        ValueError,
        r"this field uses none \(not causal, no positional encoding\).*drop positions=",
    ),
    "positions-without-x": (
        lambda: gqa().velocity(SEQ, positions=POS),
        ValueError,
        "pass x too, or drop positions",
    ),
    "measure-wrong-d": (  # fixed: named Q, K, V, which GQA has not
        lambda: gqa().velocity(Empirical(_r(5, 3), positions=POS)),
        ValueError,
        r"the measure lives in d = 3 but the GroupedQueryAttention acts on d = 4 \(Wq has "
        r"shape \(8, 4\)\)",
    ),
    "gaussian": (
        lambda: gqa().velocity(Gaussian(torch.zeros(D, dtype=F64), torch.eye(D, dtype=F64))),
        GaussianNotPreserved,
        "a Gaussian carries none",
    ),
    "batch-mismatch": (
        lambda: gqa(Wq=_r(3, 8, 4)).velocity(Empirical(_r(2, 5, D), positions=POS)),
        ValueError,
        r"the measure is a batch of shape \(2,\) and the field's parameters a batch of shape "
        r"\(3,\)",
    ),
    "float32-positions-merge": (  # fixed: positions 2^24 and 2^24 + 1 merged in float32
        lambda: Empirical(POINTS.float(), positions=torch.arange(5, dtype=torch.int64) + 2**24),
        ValueError,
        r"positions 16777216 and 16777217 are not distinct in torch.float32",
    ),
}

FFN_ERRORS = {
    "activation-unknown": (lambda: mlp(activation="Gelu"), ValueError, "unknown activation 'Gelu'"),
    "activation-none": (lambda: mlp(activation=None), TypeError, "received NoneType"),
    "activation-reduces": (
        lambda: mlp(activation=lambda z: z.sum(-1)).velocity(MU),
        ValueError,
        r"returned shape \(5,\) for hidden units of shape \(5, 6\)",
    ),
    "activation-numpy": (  # fixed: leaked "linear(): argument 'input' must be Tensor"
        lambda: mlp(activation=lambda z: z.numpy()).velocity(MU),
        TypeError,
        "the activation '<lambda>' returned ndarray; an activation must return a torch tensor",
    ),
    "activation-float": (  # fixed: leaked AttributeError "'float' object has no attribute"
        lambda: mlp(activation=lambda z: 1.0).velocity(MU),
        TypeError,
        "the activation '<lambda>' returned float",
    ),
    "activation-changes-dtype": (  # fixed: leaked "mat1 and mat2 must have the same dtype"
        lambda: mlp(activation=lambda z: z.float()).velocity(MU),
        TypeError,
        r"returned torch.float32 for hidden units in torch.float64; .* keep its input's dtype",
    ),
    "activation-nan": (  # fixed: reported as "attention scores overflowed"
        lambda: mlp(activation=lambda z: z * math.nan).velocity(MU),
        FloatingPointError,
        "the activation '<lambda>' returned 30 non-finite values .* for finite hidden units",
    ),
    "activation-two-arguments": (  # fixed: leaked "missing 1 required positional argument"
        lambda: mlp(activation=_activation_takes_t),
        TypeError,
        "activation '_activation_takes_t' must take one tensor",
    ),
    "bias-wrong": (lambda: mlp(b1=_r(4)), ValueError, r"b1 must have shape \(\.\.\., 6\)"),
    "w2-transposed": (lambda: mlp(W2=_r(6, 4)), ValueError, r"W2 must have shape \(\.\.\., 4, 6\)"),
    "w1-none": (lambda: mlp(W1=None), ValueError, "W1 is required"),
    "w1-changes-shape": (
        lambda: mlp(W1=lambda t: W1 if t == 0 else _r(5, D)).velocity(MU, t=0.5),
        ValueError,
        "W1 changed shape over time",
    ),
    "w1-changes-batch": (  # fixed: a batch appearing at t > 0 was silently broadcast
        lambda: mlp(W1=lambda t: W1 if t == 0 else _r(3, 6, D)).velocity(MU, t=0.5),
        ValueError,
        r"W1 changed shape over time: \(3, 6, 4\) instead of \(6, 4\)",
    ),
    "w1-nan-later": (
        lambda: mlp(W1=lambda t: W1 * (math.nan if t > 0 else 1.0)).velocity(MU, t=1.0),
        ValueError,
        r"W1\(1.0\) contains 24 non-finite",
    ),
    "measure-wrong-d": (
        lambda: mlp().velocity(Empirical(_r(5, 3))),
        ValueError,
        "the measure lives in d = 3 but the MLP acts on d = 4",
    ),
    "gaussian": (
        lambda: SwiGLU(_r(6, 2), _r(6, 2), _r(2, 6)).velocity(GAUSS2, cloud(3, 2)),
        GaussianNotPreserved,
        "SwiGLU is a nonlinear per-token field",
    ),
    "swiglu-up-wrong": (
        lambda: SwiGLU(_r(6, D), _r(5, D), _r(D, 6)),
        ValueError,
        r"W_up must have shape \(\.\.\., 6, 4\)",
    ),
    "swiglu-empty": (
        lambda: SwiGLU(_r(0, D), _r(0, D), _r(D, 0)),
        ValueError,
        "sizes >= 1",
    ),
    "batch-mismatch": (
        lambda: mlp(W1=_r(3, 6, D)).velocity(Empirical(_r(2, 5, D))),
        ValueError,
        "the measure is a batch of shape",
    ),
    "overflow-names-the-products": (  # fixed: blamed "attention scores" in an MLP
        lambda: mlp(W1=W1 * 1e300, W2=W2 * 1e300, activation="relu").velocity(MU),
        OverflowError,
        "the hidden units \\(the first layer",
    ),
}

SUM_ERRORS = {
    "different-d": (
        lambda: SM + Softmax(*(torch.eye(3, dtype=F64),) * 3),
        ValueError,
        r"received parts of dimensions \[2, 3\]",
    ),
    "empty": (lambda: Sum([]), TypeError, "non-empty list of fields"),
    "not-a-field": (lambda: Sum([SM, "ab"]), TypeError, "part 1 of the sum is a str"),
    "plus-int": (lambda: SM + 3, TypeError, "unsupported operand"),
    "gaussian-names-the-part": (
        lambda: (SM + MLP(_r(3, 2), None, _r(2, 3), None)).velocity(GAUSS2, cloud(3, 2)),
        GaussianNotPreserved,
        "MLP does not: there is no moment closure",
    ),
    "gaussian-names-the-part-deep": (
        lambda: ((SM + SM) + L2(I2, I2, I2) + gqa_2d(causal=False)).velocity(GAUSS2, I2),
        GaussianNotPreserved,
        "GroupedQueryAttention does not",
    ),
    "part-without-dim": (  # fixed: leaked AttributeError
        lambda: SM + _NoDim(),
        TypeError,
        "part 1 of the sum, _NoDim, has no dim",
    ),
    "part-returns-nan": (  # fixed: reported as "attention scores overflowed"
        lambda: (SM + _NaNField()).velocity(MU2),
        FloatingPointError,
        "part 1 of the sum, _NaNField, returned 10 non-finite",
    ),
    "wrapped-field-returns-nan": (  # fixed: reported as "attention scores overflowed"
        lambda: Normalized(_NaNField(), "pre-ln").velocity(MU2),
        FloatingPointError,
        r"_NaNField \(inside Normalized\) returned 10 non-finite entries \(NaN\)",
    ),
    "part-returns-numpy": (  # fixed: silently added
        lambda: (SM + _Numpy()).velocity(MU2),
        TypeError,
        "_Numpy.particle_velocity returned ndarray",
    ),
    "part-returns-wrong-shape": (  # fixed: broadcast silently to wrong numbers
        lambda: (SM + _Narrow()).velocity(MU2),
        ValueError,
        r"part 1 of the sum, _Narrow, returned shape \(5, 1\) for points of shape \(5, 2\)",
    ),
    "field-returns-wrong-shape": (  # fixed: a (5, 1) velocity for (5, 2) tokens was returned
        lambda: _Narrow().velocity(MU2),
        ValueError,
        r"_Narrow.particle_velocity returned shape \(5, 1\) for points of shape \(5, 2\)",
    ),
    "positions-part": (
        lambda: (SM + gqa_2d()).velocity(MU2),
        ValueError,
        "causal attention needs token positions",
    ),
}


def gqa_2d(**options):
    return GroupedQueryAttention(_r(2, 2), _r(2, 2), _r(2, 2), _r(2, 2), 1, 1, **options)


_FREE = GradientFlowField(InteractionEnergy(lambda z: (z**2).sum(-1)))

NORM_ERRORS = {
    "gamma-wrong-d": (
        lambda: Normalized(SM, LayerNorm(gamma=_r(3))),
        ValueError,
        r"LayerNorm gamma must have shape \(2,\)",
    ),
    "gamma-matrix": (lambda: RMSNorm(gamma=_r(2, 2)), ValueError, "must be a vector"),
    "gamma-nan": (
        lambda: LayerNorm(gamma=torch.tensor([1.0, math.nan])),
        ValueError,
        "LayerNorm gamma contains 1 non-finite",
    ),
    "bias-wrong-d": (
        lambda: Normalized(SM, LayerNorm(bias=_r(3))),
        ValueError,
        r"LayerNorm bias must have shape \(2,\)",
    ),
    "eps-zero": (lambda: LayerNorm(eps=0.0), ValueError, "eps must be finite and > 0"),
    "eps-nan": (lambda: RMSNorm(eps=math.nan), ValueError, "received nan"),
    "eps-negative": (lambda: RMSNorm(eps=-1e-6), ValueError, "received -1e-06"),
    # check_positive took float() of anything: a string or a bool passed as a number
    "eps-string": (lambda: RMSNorm(eps="1e-6"), TypeError, "eps must be a number; received '1e-6'"),
    "eps-bool": (lambda: RMSNorm(eps=True), TypeError, "eps must be a number; received True"),
    "placement-typo": (lambda: LayerNorm(placement="Pre"), ValueError, "received 'Pre'"),
    "scheme-typo": (lambda: Normalized(SM, "post_ln"), ValueError, "unknown normalisation"),
    "option-of-another-scheme": (
        lambda: Normalized(SM, "pre-ln", tangent=False),
        ValueError,
        "tangent applies to the 'post-ln' and 'mix-ln' and 'ngpt' schemes only",
    ),
    "options-beside-object": (
        lambda: Normalized(SM, PostLN(), tangent=False),
        ValueError,
        "go to the scheme object itself",
    ),
    "tangent-string": (lambda: PostLN(tangent="no"), TypeError, "True or False"),
    "ngpt-alpha-vector": (
        lambda: Normalized(SM, NGPT(alpha=lambda t: torch.ones(2))).velocity(MU2.normalized()),
        ValueError,
        r"returned shape \(2,\)",
    ),
    "mixln-switch-string": (lambda: MixLN(switch="abc"), TypeError, "received the string"),
    "mixln-switch-outside": (lambda: MixLN(switch=2.0), ValueError, r"range \(0, 1\)"),
    "off-sphere": (
        lambda: Normalized(SM, "post-ln").velocity(MU2),
        ValueError,
        "norms up to .* away from 1",
    ),
    "gamma-on-field-of-any-d": (  # fixed: "must have shape (None,)"
        lambda: Normalized(_FREE, RMSNorm(gamma=_r(3))).velocity(MU2),
        ValueError,
        r"RMSNorm gamma must have shape \(2,\), one entry per coordinate of the tokens; "
        r"received \(3,\)",
    ),
}

HARDMAX_ERRORS = {
    "from-l2": (lambda: Hardmax.from_field(L2(I2, I2, I2)), TypeError, "received L2"),
    "from-normalized": (
        lambda: Hardmax.from_field(Normalized(SM, "pre-ln")),
        TypeError,
        "received Normalized",
    ),
    "from-int": (lambda: Hardmax.from_field(3), TypeError, "received int"),
    "interaction-not-square": (  # fixed: blamed K, which the user never passed
        lambda: Hardmax.from_interaction(_r(2, 3), I2),
        ValueError,
        r"A must be a square \(\.\.\., d, d\) interaction matrix .*; received shape \(2, 3\)",
    ),
    "interaction-vector": (  # fixed: blamed Q
        lambda: Hardmax.from_interaction(_r(2), I2),
        ValueError,
        r"A must be a square \(\.\.\., d, d\) interaction matrix .*; received shape \(2,\)",
    ),
    "tie-tol-negative": (lambda: Hardmax(I2, I2, I2, tie_tol=-1), ValueError, "tie_tol"),
    "engine-sdpa": (
        lambda: Hardmax(I2, I2, I2).velocity(MU2, engine="sdpa"),
        ValueError,
        "engine must be 'auto', 'dense' or 'chunked'; received 'sdpa'",
    ),
    "gaussian": (
        lambda: Hardmax(I2, I2, I2).velocity(GAUSS2, I2),
        GaussianNotPreserved,
        "Hardmax",
    ),
}


def _exp(beta=1.0, V=I2, A=I2):
    return Exponential(A, I2, V, scale=beta)


SPECTRAL_ERRORS = {
    "off-circle": (
        lambda: _exp().velocity(Empirical(CIRCLE.points * (1 + 1e-10)), engine="spectral"),
        ValueError,
        "every token on the unit circle; the norms are up to 1e-10 away",
    ),
    "d3": (
        lambda: Exponential(*(torch.eye(3, dtype=F64),) * 3).velocity(
            Empirical(torch.nn.functional.normalize(cloud(5, 3), dim=-1)), engine="spectral"
        ),
        ValueError,
        "it needs tokens in d = 2",
    ),
    "A-anisotropic": (
        lambda: _exp(A=torch.diag(torch.tensor([1.0, 2.0], dtype=F64))).velocity(
            CIRCLE, engine="spectral"
        ),
        ValueError,
        r"A = scale·KᵀQ = βI",
    ),
    "V-anisotropic": (
        lambda: _exp(V=_r(2, 2)).velocity(CIRCLE, engine="spectral"),
        ValueError,
        "V = vI",
    ),
    "beta-negative": (
        lambda: _exp(A=-I2).velocity(CIRCLE, engine="spectral"),
        ValueError,
        "β > 0 .* received β = -1",
    ),
    "beta-batch-one-negative": (
        lambda: Softmax(torch.stack([I2, -I2]), I2, I2, scale=1.0).velocity(
            CIRCLE, engine="spectral"
        ),
        ValueError,
        "β > 0 .* received β = -1",
    ),
    "zero-weight": (
        lambda: _exp().velocity(
            Empirical(CIRCLE.points, weights=torch.cat([torch.zeros(1), torch.ones(39) / 39])),
            engine="spectral",
        ),
        ValueError,
        "every token's weight > 0",
    ),
    "other-points": (
        lambda: _exp().velocity(CIRCLE, CIRCLE.points[:3], engine="spectral"),
        ValueError,
        "at μ's own tokens",
    ),
    "grid": (  # fixed: told a Grid's user about "other points x" they never passed
        lambda: _exp().velocity(
            Grid.from_empirical(CIRCLE, (4, 4), (-1.5, -1.5), (1.5, 1.5)), engine="spectral"
        ),
        ValueError,
        "a Grid's cell centres",
    ),
    "half-precision": (
        lambda: _exp().velocity(CIRCLE.to(dtype=torch.float16), engine="spectral"),
        ValueError,
        "float32 or float64; the tokens are torch.float16",
    ),
    "time-dependent": (
        lambda: Exponential(lambda t: I2, I2, I2).velocity(CIRCLE, engine="spectral"),
        ValueError,
        "not a function of t",
    ),
    "usa-overflow": (
        lambda: _exp(800.0).velocity(CIRCLE, engine="dense"),
        OverflowError,
        "exceed the range of torch.float64",
    ),
}

test_gqa_bad_input = error_table_test(GQA_ERRORS)
test_feed_forward_bad_input = error_table_test(FFN_ERRORS)
test_sum_bad_input = error_table_test(SUM_ERRORS)
test_norm_scheme_bad_input = error_table_test(NORM_ERRORS)
test_hardmax_bad_input = error_table_test(HARDMAX_ERRORS)
test_spectral_bad_input = error_table_test(SPECTRAL_ERRORS)


# ---------------------------------------------------------------------- documented results
def _dense_softmax_oracle(points, weights, beta):
    """Σ_j w_j e^{β⟨x_i, x_j⟩} x_j / Σ_j w_j e^{β⟨x_i, x_j⟩} in float64, max-shifted."""
    scores = beta * points @ points.T
    p = weights * torch.exp(scores - scores.amax(-1, keepdim=True))
    return (p @ points) / p.sum(-1, keepdim=True)


@pytest.mark.parametrize("beta", [1e-12, 1e-3, 1.0, 30.0, 300.0, 1e6])
def test_spectral_matches_the_dense_oracle_for_tiny_and_huge_beta(beta):
    """Spectral SA equals the float64 dense oracle to 1e-13 from β = 1e-12 to 1e6 (fixed:
    β = 1e6 took 13 s in a backward recurrence of β terms, 1e8 would take half an hour)."""
    points = CIRCLE.points
    out = Softmax(I2, I2, I2, scale=beta).velocity(CIRCLE, engine="spectral")
    expected = _dense_softmax_oracle(points, CIRCLE.weights, beta)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-13)


def test_spectral_accepts_rounding_off_the_circle_and_batched_beta():
    """Tokens off the circle by 1 ulp run; a batch of β gives each β's dense result."""
    points = CIRCLE.points * (1 + 2e-16)
    betas = torch.tensor([0.5, 2.0, 7.0], dtype=F64)
    A = betas[:, None, None] * I2
    out = Softmax(A, I2, I2, scale=1.0).velocity(Empirical(points), engine="spectral")
    for b, beta in enumerate(betas.tolist()):
        expected = _dense_softmax_oracle(points, CIRCLE.weights, beta)
        torch.testing.assert_close(out[b], expected, rtol=0, atol=1e-13)


def test_a_field_of_any_dimension_joins_a_sum():
    """Fixed: a GradientFlowField (dim None, any d) + Softmax on d = 2 was refused as
    "parts of dimensions [None, 2]"; the sum acts on d = 2 and adds the velocities."""
    total = _FREE + SM
    assert total.dim == 2 and (_FREE + _FREE).dim is None
    expected = _FREE.velocity(MU2) + SM.velocity(MU2)
    torch.testing.assert_close(total.velocity(MU2), expected, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="the measure lives in d = 4 but the Sum acts on d = 2"):
        total.velocity(MU)


def test_sums_of_sums_flatten_and_add_on_grids():
    """(a + b) + (c + a) has four parts; on a Grid its velocity is the parts' sum (1e-15)."""
    ffn = MLP(_r(3, 2), None, _r(2, 3), None)
    total = (SM + ffn) + (L2(I2, I2, I2) + SM)
    assert len(total) == 4 and total.parts[3] is SM
    grid = Grid.from_empirical(MU2, (4, 4), (-3.0, -3.0), (3.0, 3.0))
    expected = sum(part.velocity(grid) for part in total.parts)
    torch.testing.assert_close(total.velocity(grid), expected, rtol=0, atol=1e-15)


def test_hardmax_ties_share_the_mass_and_from_field_keeps_the_limit():
    """Two keys tied for the best score share the weight; Hardmax.from_field(Softmax) is the
    β → ∞ limit: softmax at β = 1e4 agrees to 1e-12 on a cloud without ties."""
    keys = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 0.0]], dtype=F64)
    mu = Empirical(keys, weights=torch.tensor([0.25, 0.5, 0.25], dtype=F64))
    query = torch.tensor([[1.0, 0.0]], dtype=F64)  # scores 1, 1, −1: keys 0 and 1 tie
    out = Hardmax(I2, I2, I2).velocity(mu, query)
    torch.testing.assert_close(out, (0.25 * keys[0] + 0.5 * keys[1]).unsqueeze(0) / 0.75)
    soft = Softmax(I2, I2, I2, scale=1e4)
    hard = Hardmax.from_field(soft)
    x = cloud(6, 2, seed=5)
    torch.testing.assert_close(hard.velocity(MU2, x), soft.velocity(MU2, x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_hardmax_is_right_at_every_scale_of_the_tokens(dtype):
    """The maximisers of yᵀAx do not depend on the tokens' scale: Hardmax of c·X is c times
    Hardmax of X (rounding: 4 eps) for every power of ten c of the dtype's normal range
    (fixed: scores underflowed to ties below 1e-160 and overflowed above 1e154)."""
    keys = cloud(7, 2, seed=2)
    expected = Hardmax(I2, I2, I2).velocity(Empirical(keys))
    eps = torch.finfo(dtype).eps
    for c in scales(dtype)[1:-1:5]:
        out = Hardmax(I2, I2, I2).velocity(Empirical((keys * c).to(dtype)))
        torch.testing.assert_close(out.double() / c, expected, rtol=4 * eps, atol=4 * eps)


def test_gqa_sdpa_equals_dense_on_unsorted_tied_positions_in_float32_and_float64():
    """Positions out of order with ties, RoPE + window: sdpa = dense to 1e-14 in float64,
    the float32 run within 1e-5 of the float64 one."""
    pos = torch.tensor([3.0, 0.0, 2.0, 2.0, 5.0], dtype=F64)
    field = gqa(position="rope", window=2)
    mu = Empirical(POINTS, positions=pos)
    dense = field.velocity(mu, engine="dense")
    torch.testing.assert_close(field.velocity(mu, engine="sdpa"), dense, rtol=0, atol=1e-14)
    single = field.velocity(Empirical(POINTS.float(), positions=pos), engine="sdpa")
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), dense, rtol=0, atol=1e-5)


def test_gqa_window_on_mean_field_positions_is_the_integer_window():
    """Window w = 3 over p = 0 … 7 is the window 2.5/7 over s = p/7: the same velocity (1e-14),
    on every softmax engine (fixed: windows below 1 were refused, so no mean-field window)."""
    points = cloud(8, D, seed=11)
    p = torch.arange(8.0, dtype=F64)
    for engine in ("dense", "chunked", "sdpa"):
        integer = gqa(window=3).velocity(Empirical(points, positions=p), engine=engine)
        mean_field = gqa(window=2.5 / 7).velocity(Empirical(points, positions=p / 7), engine=engine)
        torch.testing.assert_close(mean_field, integer, rtol=0, atol=1e-14)


def test_gqa_takes_numpy_head_counts():
    """Fixed: heads=np.int64(4) (a count read from a configuration array) was refused as
    "not a positive integer; received np.int64(4)"."""
    np = pytest.importorskip("numpy")
    field = gqa(heads=np.int64(4), kv_heads=np.int64(2))
    assert (field.heads, field.kv_heads) == (4, 2)
    torch.testing.assert_close(field.velocity(SEQ), gqa().velocity(SEQ), rtol=0, atol=0)


def test_integer_positions_above_2_24_stay_exact_with_float64_tokens():
    """Fixed: integer positions went through float32 (the default dtype) on their way to the
    tokens' float64, so 2^24 + 1 became 2^24 and tied with its predecessor."""
    p = torch.arange(5, dtype=torch.int64) + 2**24
    mu = Empirical(POINTS, positions=p)
    assert mu.positions.tolist() == [float(v) for v in p.tolist()]
    assert torch.equal(mu.positions.diff(), torch.ones(4, dtype=F64))


def test_gqa_probabilities_reproduce_the_velocity_with_zero_mass_keys():
    """P^h of .probabilities, applied to the values and W_o, is the velocity (1e-14), with a
    zero-mass key given a column of zeros; rows sum to 1."""
    weights = torch.tensor([0.5, 0.0, 0.25, 0.25, 0.0], dtype=F64)
    field = gqa(position="alibi", bo=_r(D))
    mu = Empirical(POINTS, weights=weights, positions=POS)
    P = field.probabilities(mu)
    assert P.shape == (H, 5, 5)
    torch.testing.assert_close(P.sum(-1), torch.ones(H, 5, dtype=F64), rtol=0, atol=1e-14)
    assert float(P[..., [1, 4]].abs().max()) == 0.0
    values = (POINTS @ WV.T).unflatten(-1, (HKV, DH)).transpose(0, 1)  # (H_kv, n, d_h)
    heads = torch.stack([P[h] @ values[h // (H // HKV)] for h in range(H)])
    out = heads.transpose(0, 1).flatten(-2) @ WO.T + field.params.at(0.0, POINTS)[7]
    torch.testing.assert_close(out, field.velocity(mu), rtol=0, atol=1e-14)


@pytest.mark.parametrize(
    "make",
    [
        lambda W: gqa(Wq=W[0], Wk=W[1], Wv=W[2], Wo=W[3], position="rope"),
        lambda W: MLP(W[4], None, W[5], None, "silu"),
        lambda W: SwiGLU(W[4], W[6], W[5]),
    ],
    ids=["gqa", "mlp", "swiglu"],
)
def test_batched_weights_on_batched_clouds_equal_one_at_a_time(make):
    """Weights (B, …) with clouds (B, n, d): element b is the field of weights[b] on cloud b
    (1e-13), on every engine the field takes."""
    B = 3
    W = [
        _r(B, H * DH, D, seed=1),
        _r(B, HKV * DH, D, seed=2),
        _r(B, HKV * DH, D, seed=3),
        _r(B, D, H * DH, seed=4),
        _r(B, 6, D, seed=5),
        _r(B, D, 6, seed=6),
        _r(B, 6, D, seed=7),
    ]
    points = _r(B, 5, D, seed=8)
    batched = make(W)
    for engine in ("dense", "chunked", "sdpa"):
        out = batched.velocity(Empirical(points, positions=POS), engine=engine)
        for b in range(B):
            one = make([w[b] for w in W]).velocity(
                Empirical(points[b], positions=POS), engine=engine
            )
            torch.testing.assert_close(out[b], one, rtol=0, atol=1e-13)


class _Zero(Field):
    """A user's field that is healthy: zero velocity."""

    dim = D

    def particle_velocity(self, t, mu, x, engine, info=None):
        return torch.zeros_like(x)


def test_an_overflow_inside_a_sum_is_not_blamed_on_a_healthy_outside_part():
    # The MLP's hidden units overflow float64; the user's zero field is fine. The error is
    # the MLP's OverflowError, as for the MLP alone (it named the zero field once).
    big = mlp(W1=W1 * 1e200, W2=W2 * 1e200)
    with pytest.raises(OverflowError, match="the hidden units"):
        big.velocity(MU)
    with pytest.raises(OverflowError, match="the hidden units"):
        (big + _Zero()).velocity(MU)
