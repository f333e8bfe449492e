"""LayerNorm and RMSNorm at every scale of the dtype (issue 20, the norms' part).

The textbook mean of squares overflows for |x| beyond ≈ 1e154 in float64 (1e19 in float32):
LayerNorm returned NaN and RMSNorm zeros there. Every case compares with the exact value,
computed in 60-digit decimal arithmetic from the very floats handed to tpde (``exact``), so
the oracle shares nothing with the code under test and is right to 1e-60 at any scale.

Tolerance: 16 eps of the dtype, normwise per token (‖got − exact‖∞ ≤ 16 eps ‖exact‖∞). The
computation is a mean, a difference, a sum of squares, a square root, a quotient and a
product, each a few roundings relative to the token's own scale; measured at most 1.9 eps
(float64 and float32, every power of ten).
"""

import math
from decimal import Decimal, localcontext

import pytest
import torch

from tests.adversarial.strategies import F64, cloud, scales
from tpde._scale_safe import _scaled_layer_norm, _scaled_rms_norm, layer_norm, rms_norm
from tpde.fields import LayerNorm, Normalized, RMSNorm, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

F32 = torch.float32
DTYPES = pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
LN_EPS, RMS_EPS = 1e-12, 1e-6  # BERT's and SmolLM2's (Llama's) defaults
X0 = cloud(4, 6, seed=11)
GAMMA = torch.rand(6, generator=torch.Generator().manual_seed(12), dtype=F64) + 0.5
BIAS = cloud(1, 6, seed=13)[0]


def exact(x, gamma, bias, eps: float, centre: bool) -> torch.Tensor:
    """γ ⊙ (x − m)/√(mean (x − m)² + ε) + b per token (m = mean(x), or 0 for RMSNorm), in
    60-digit decimals from the floats of x (Decimal(float) is exact), rounded once."""
    gamma, bias = gamma.double().tolist(), bias.double().tolist()
    out = []
    with localcontext() as context:
        context.prec = 60
        for row in x.double().tolist():
            row = [Decimal(v) for v in row]
            mean = sum(row) / len(row) if centre else Decimal(0)
            centred = [v - mean for v in row]
            root = (sum(c * c for c in centred) / len(row) + Decimal(eps)).sqrt()
            out.append(
                [
                    float(c / root * Decimal(g) + Decimal(b))
                    for c, g, b in zip(centred, gamma, bias, strict=True)
                ]
            )
    return torch.tensor(out, dtype=F64)


def worst_error(got, expected) -> float:
    """max over tokens of ‖got − expected‖∞/‖expected‖∞ (in units of nothing: relative)."""
    diff = (got.double() - expected).abs().amax(-1)
    return float((diff / expected.abs().amax(-1)).max())


# ============================================================== the functions
@DTYPES
def test_layer_norm_and_rms_norm_are_exact_at_every_scale(dtype):
    tol = 16 * torch.finfo(dtype).eps
    zero = torch.zeros(6, dtype=F64)
    wrong = []
    for s in scales(dtype):
        x = (X0 * s).to(dtype)
        got = layer_norm(x, GAMMA.to(dtype), 0.0, LN_EPS)
        if not worst_error(got, exact(x, GAMMA, zero, LN_EPS, centre=True)) <= tol:
            wrong.append(("layer_norm", s))
        got = rms_norm(x, GAMMA.to(dtype), RMS_EPS)
        if not worst_error(got, exact(x, GAMMA, zero, RMS_EPS, centre=False)) <= tol:
            wrong.append(("rms_norm", s))
    assert wrong == []


def test_the_three_regimes_of_eps():
    # Huge tokens: ε/s² is negligible and LN is scale-invariant, LN(s·x0) = LN₀(x0) (ε = 0);
    # tiny tokens: ε dominates, LN(x) = γ ⊙ (x − m)/√ε; between (v·s² ≈ ε) both count.
    x0 = X0[:2]
    centred = x0 - x0.mean(-1, keepdim=True)
    invariant = centred / centred.pow(2).mean(-1, keepdim=True).sqrt() * GAMMA
    for s in (1e160, 1e250, 1e307):
        torch.testing.assert_close(layer_norm(x0 * s, GAMMA, 0.0, LN_EPS), invariant)
    for s in (1e-160, 1e-250):
        torch.testing.assert_close(
            layer_norm(x0 * s, GAMMA, 0.0, LN_EPS), (x0 * s - (x0 * s).mean(-1, keepdim=True))
            / math.sqrt(LN_EPS) * GAMMA, rtol=1e-14, atol=0,
        )  # fmt: skip
    between = x0 * 1e-6  # v·s² ≈ ε = 1e-12
    expected = exact(between, GAMMA, BIAS, LN_EPS, centre=True)
    assert worst_error(layer_norm(between, GAMMA, BIAS, LN_EPS), expected) <= 16 * 2.0**-52


@DTYPES
def test_zero_and_constant_tokens_give_the_bias(dtype):
    # A constant token has no spread: LN = b (the textbook 0/√ε), RMS of 0 is 0, at every
    # scale. Dyadic scales 2^k, where the mean of a constant token is exact in floats (at
    # others it rounds by an ulp of |x|, and LN of a token that close to constant is
    # ill-conditioned: any LN of a perturbation within rounding is as right).
    top = 1000 if dtype == F64 else 120
    for k in range(-top, top + 1, 20):
        constant = torch.full((2, 6), 2.0**k, dtype=dtype)
        constant[1] = -(2.0**k)
        got = layer_norm(constant, GAMMA.to(dtype), BIAS.to(dtype), 1e-12)
        assert torch.equal(got, BIAS.to(dtype).expand(2, 6)), k
    huge = torch.cat([torch.zeros(1, 6, dtype=dtype), X0[:1].to(dtype) * 1e30])
    assert torch.equal(rms_norm(huge, GAMMA.to(dtype), 1e-6)[0], torch.zeros(6, dtype=dtype))


def test_gradients_of_the_scaled_path_pass_gradcheck():
    # The scaled path (taken beyond the textbook range) on ordinary tokens, forced here;
    # constant and zero tokens included (the norm's gradient is 0 there, not NaN).
    x = X0.clone().requires_grad_()
    gamma, bias = GAMMA.clone().requires_grad_(), BIAS.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: _scaled_layer_norm(*a, 1e-3), (x, gamma, bias))
    assert torch.autograd.gradcheck(lambda *a: _scaled_rms_norm(*a, 1e-3), (x, gamma))
    flat = torch.cat([torch.full((1, 6), 2.0, dtype=F64), torch.zeros(1, 6, dtype=F64)])
    flat.requires_grad_()
    assert torch.autograd.gradcheck(lambda z: _scaled_layer_norm(z, GAMMA, BIAS, 1e-3), flat)
    assert torch.autograd.gradcheck(lambda z: _scaled_rms_norm(z, GAMMA, 1e-3), flat)
    # and the two paths agree where both are right (float64, 1e-15 relative measured)
    for both in (
        (layer_norm, _scaled_layer_norm, (GAMMA, BIAS)),
        (rms_norm, _scaled_rms_norm, (GAMMA,)),
    ):
        textbook, scaled, params = both
        torch.testing.assert_close(scaled(X0, *params, 1e-3), textbook(X0, *params, 1e-3),
                                   rtol=1e-14, atol=1e-14)  # fmt: skip


@pytest.mark.parametrize("s", [1e200, 1e-200], ids=["huge", "tiny"])
def test_gradients_at_extreme_scales_are_the_closed_forms(s):
    # d/dx Σ w ⊙ N(x): at s = 1e200 the gradient at x0 (ε = 0) divided by s; at s = 1e-200
    # N is linear, LN(x) = γ ⊙ (x − m)/√ε, RMS(x) = γ ⊙ x/√ε. Relative tolerance 1e-12
    # (ε/v ≈ 1e-12 separates the huge case's gradient from the ε = 0 one at x0).
    w = cloud(4, 6, seed=14)
    for norm, eps, centre in ((layer_norm, LN_EPS, True), (rms_norm, RMS_EPS, False)):
        x = (X0 * s).requires_grad_()
        args = (GAMMA, BIAS, eps) if centre else (GAMMA, eps)
        (got,) = torch.autograd.grad((norm(x, *args) * w).sum(), x)
        if s > 1:
            x0 = X0.clone().requires_grad_()
            zero_eps = (GAMMA, BIAS, 0.0) if centre else (GAMMA, 0.0)
            (expected,) = torch.autograd.grad((norm(x0, *zero_eps) * w).sum(), x0)
            expected = expected / s
        else:
            gw = GAMMA * w / math.sqrt(eps)
            expected = gw - gw.mean(-1, keepdim=True) if centre else gw
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


# ============================================================== the schemes and their flows
@DTYPES
def test_scheme_objects_norm_every_scale(dtype):
    tol = 16 * torch.finfo(dtype).eps
    ln, rms = LayerNorm(GAMMA, BIAS), RMSNorm(GAMMA)
    wrong = []
    for s in scales(dtype):
        x = (X0 * s).to(dtype)
        if not worst_error(ln.norm(x), exact(x, GAMMA, BIAS, ln.eps, centre=True)) <= tol:
            wrong.append(("LayerNorm", s))
        if not worst_error(rms.norm(x), exact(x, GAMMA, 0 * BIAS, rms.eps, False)) <= tol:
            wrong.append(("RMSNorm", s))
    assert wrong == []


@DTYPES
def test_normalized_flows_at_every_scale(dtype):
    # Post-LayerNorm (BERT): one Euler step is LN(x + hΓ[μ](x)); the field is uniform
    # attention (A = 0, Γ = V·mean μ), which is right at any scale itself. Pre-RMSNorm
    # (Llama): the velocity is Γ[RMS#μ](RMS(x)) for a general softmax field, which sees
    # only normalised tokens. Every tenth power of ten; tolerances 16 eps (the norm) and
    # 1e3 eps (a field of exp and a 4 × 4 product after it).
    gen = torch.Generator().manual_seed(15)
    V, A = (torch.randn(6, 6, generator=gen, dtype=F64).to(dtype) for _ in range(2))
    uniform = Softmax.from_interaction(torch.zeros_like(A), V)
    general = Softmax.from_interaction(A / 6, V)
    eps = torch.finfo(dtype).eps
    post = Normalized(uniform, LayerNorm(GAMMA.to(dtype), BIAS.to(dtype)))
    pre = Normalized(general, RMSNorm(GAMMA.to(dtype)))
    for s in scales(dtype)[::10] + scales(dtype)[-1:]:
        mu = Empirical((X0 * s).to(dtype))
        stepped = mu.points + 0.25 * uniform.velocity(mu)
        trajectory = integrate(post, mu, 0.25, method="euler", dt=0.25)
        assert trajectory.status == "completed", s
        expected = exact(stepped, GAMMA, BIAS, LN_EPS, centre=True)
        assert worst_error(trajectory.measures[-1].points, expected) <= 16 * eps, s
        normed = exact(mu.points, GAMMA, 0 * BIAS, RMS_EPS, centre=False).to(dtype)
        expected = general.velocity(Empirical(normed)).double()
        assert worst_error(pre.velocity(mu), expected) <= 1e3 * eps, s


def test_post_ln_names_the_norm_of_huge_tokens():
    # The sphere check reports |x| − 1 ≈ 1e200, not Inf (scale-safe norms).
    eye = torch.eye(6, dtype=F64)
    field = Normalized(Softmax.from_interaction(eye, eye))
    with pytest.raises(ValueError, match=r"norms up to \d\.\d+e\+200 away from 1"):
        integrate(field, Empirical(X0 * 1e200), 0.1)


@DTYPES
def test_the_one_sum_exactness_test_decides_as_the_least_and_largest_rows(dtype):
    """With ε above the underflow floor the norms' exactness test reads one sum of the rows
    (``_exact``'s fast path); its answer is the one of the least and largest rows in every
    case: ordinary rows, a row beyond the dtype (Inf), a NaN row, rows each finite whose sum
    overflows, ε below the floor (then only the rows decide), no rows."""
    from tpde._scale_safe import _exact

    info = torch.finfo(dtype)
    floor = info.tiny / info.eps

    def reference(second):
        if second.numel() == 0:
            return True
        low, high = torch.aminmax(second)
        return bool(low >= floor) and bool(high <= info.max)

    big = info.max / 4  # four of them overflow a sum, none overflows alone
    cases = {
        "ordinary": (torch.rand(3, 5, 1, dtype=dtype) + 1e-6, 1e-6),
        "inf row": (torch.tensor([[1.0], [math.inf]], dtype=dtype), 1e-6),
        "nan row": (torch.tensor([[1.0], [math.nan]], dtype=dtype), 1e-6),
        "finite rows, sum overflows": (torch.full((8, 1), big, dtype=dtype), 1e-6),
        "eps below the floor": (torch.tensor([[floor / 8], [1.0]], dtype=dtype), floor / 8),
        "no rows": (torch.zeros(0, 1, dtype=dtype), 1e-6),
    }
    for name, (second, eps) in cases.items():
        assert _exact(second, eps) == reference(second), name
    assert _exact(torch.full((8, 1), big, dtype=dtype), 1e-6)  # the overflowing sum: exact
