"""LayerNorm's fast path: torch's ``native_layer_norm`` and the decision to leave it.

``tpde._scale_safe.layer_norm`` runs torch's kernel where ε is above the dtype's underflow
floor and γ, b are None or (d,) tensors of the tokens' dtype and device; it falls back to
the scaled computation when a row's 1/√(v + ε) is 0 (the variance overflowed) or NaN, and
writes the formula out for every other γ, b, ε. Each case is checked against the 60-digit
decimal oracle of ``test_norm_scales`` (``exact``) at its tolerance, 16 eps of the dtype
normwise per token (measured at most 1.4 eps on the kernel's path), and the path taken is
seen by wrapping the module's own functions.
"""

import math

import pytest
import torch
from torch.autograd import forward_ad

import tpde._scale_safe as scale_safe
from tests.adversarial.strategies import F64
from tests.adversarial.test_norm_scales import BIAS, GAMMA, LN_EPS, X0, exact, worst_error
from tpde._scale_safe import layer_norm
from tpde.fields import LayerNorm

F32 = torch.float32
TOL = 16 * torch.finfo(F64).eps
ONES, ZEROS = torch.ones(6, dtype=F64), torch.zeros(6, dtype=F64)


@pytest.fixture
def paths(monkeypatch):
    """Counts of the calls into the kernel's path and into the scaled path."""
    seen = {"native": 0, "scaled": 0}
    for name, key in (("_native_layer_norm", "native"), ("_scaled_layer_norm", "scaled")):
        original = getattr(scale_safe, name)

        def counted(*args, _original=original, _key=key):
            seen[_key] += 1
            return _original(*args)

        monkeypatch.setattr(scale_safe, name, counted)
    return seen


def test_ordinary_tokens_take_the_kernel_alone(paths):
    got = layer_norm(X0, GAMMA, BIAS, LN_EPS)
    assert paths == {"native": 1, "scaled": 0}
    assert worst_error(got, exact(X0, GAMMA, BIAS, LN_EPS, centre=True)) <= TOL


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_a_row_whose_variance_overflows_sends_the_batch_to_the_scaled_path(paths, dtype):
    # One token at 1e200 (float64) or 1e30 (float32): its squares overflow, the kernel's
    # 1/√(v + ε) is 0 there (float64) or NaN (float32: Inf − Inf in its running moments);
    # the scaled path gets every row right.
    x = X0.clone()
    x[1] *= 1e200 if dtype == F64 else 1e30
    x = x.to(dtype)
    rstd = torch.native_layer_norm(x, (6,), None, None, LN_EPS)[2]
    assert not rstd[1].item() > 0 and rstd[0].item() > 0  # the kernel's own verdict
    got = layer_norm(x, GAMMA.to(dtype), BIAS.to(dtype), LN_EPS)
    assert paths == {"native": 1, "scaled": 1}
    expected = exact(x, GAMMA.to(dtype), BIAS.to(dtype), LN_EPS, centre=True)
    assert worst_error(got, expected) <= 16 * torch.finfo(dtype).eps


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_a_nan_or_inf_token_goes_to_the_scaled_path_and_stays_in_its_row(paths, bad):
    # NaN (or Inf − Inf) makes that row's 1/√(v + ε) NaN: the least row is NaN, which fails
    # "> 0"; the other rows are right, the bad one is NaN, as the written-out formula gives.
    x = X0.clone()
    x[2, 3] = bad
    got = layer_norm(x, GAMMA, BIAS, LN_EPS)
    assert paths == {"native": 1, "scaled": 1}
    assert got[2].isnan().all()
    rows = [0, 1, 3]
    assert worst_error(got[rows], exact(x[rows], GAMMA, BIAS, LN_EPS, centre=True)) <= TOL


@pytest.mark.parametrize(
    ("gamma", "bias", "g", "b"),
    [(None, None, ONES, ZEROS), (None, BIAS, ONES, BIAS), (GAMMA, None, GAMMA, ZEROS)],
    ids=["no gain, no bias (OLMo)", "no gain", "no bias (Cohere)"],
)
def test_no_gain_or_no_bias_is_none_on_the_kernel(paths, gamma, bias, g, b):
    got = layer_norm(X0, gamma, bias, LN_EPS)
    assert paths == {"native": 1, "scaled": 0}
    assert worst_error(got, exact(X0, g, b, LN_EPS, centre=True)) <= TOL
    # the scheme object (OLMo's parameter-free LayerNorm, Cohere's without bias) alike
    scheme = LayerNorm(gamma, bias, LN_EPS, placement="pre")
    assert worst_error(scheme.norm(X0), exact(X0, g, b, LN_EPS, centre=True)) <= TOL


def test_none_gains_on_the_scaled_path(paths):
    got = layer_norm(X0 * 1e300, None, None, LN_EPS)
    assert paths == {"native": 1, "scaled": 1}
    assert worst_error(got, exact(X0 * 1e300, ONES, ZEROS, LN_EPS, centre=True)) <= TOL


@pytest.mark.parametrize(
    ("x", "gamma", "bias", "eps"),
    [
        (X0, 2.0, 0.5, LN_EPS),  # numbers: broadcast by the formula
        (X0, GAMMA.to(F32), BIAS, LN_EPS),  # a float32 gain on float64 tokens: promoted
        (X0, GAMMA[None], BIAS, LN_EPS),  # a (1, d) gain
        (X0, GAMMA, BIAS, 1e-300),  # ε below float64's floor 2·tiny/eps ≈ 4.5e-292
        (X0[:0], GAMMA, BIAS, LN_EPS),  # no tokens
    ],
    ids=["numbers", "float32 gain", "(1, d) gain", "eps below the floor", "empty"],
)
def test_other_gains_and_eps_are_written_out(paths, x, gamma, bias, eps):
    got = layer_norm(x, gamma, bias, eps)
    assert paths["native"] == 0
    assert got.dtype == F64 and got.shape == x.shape
    g, b = (torch.as_tensor(v, dtype=F64).reshape(-1).expand(6) for v in (gamma, bias))
    if len(x):
        assert worst_error(got, exact(x, g, b, eps, centre=True)) <= TOL


# gradcheck's forward-mode check calls torch.jit.script, which torch 2.13 deprecates
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_the_kernel_path_has_the_formulas_gradients_and_tangents():
    # Reverse and forward mode (gradcheck against finite differences in float64, its own
    # tolerances), through the kernel's path with the host read; and the tangent of a dual
    # equals the reverse-mode directional derivative to 1e-14 relative.
    x = X0.clone().requires_grad_()
    gamma, bias = GAMMA.clone().requires_grad_(), BIAS.clone().requires_grad_()

    def norm(*args):
        return layer_norm(*args, 1e-3)

    assert torch.autograd.gradcheck(norm, (x, gamma, bias), check_forward_ad=True)
    assert torch.autograd.gradcheck(lambda z: layer_norm(z, None, None, 1e-3), (x,))
    direction = torch.randn(X0.shape, generator=torch.Generator().manual_seed(16), dtype=F64)
    weights = torch.randn(X0.shape, generator=torch.Generator().manual_seed(17), dtype=F64)
    (grad,) = torch.autograd.grad((norm(x, GAMMA, BIAS) * weights).sum(), x)
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(norm(forward_ad.make_dual(X0, direction), GAMMA, BIAS))
    torch.testing.assert_close(
        (tangent.tangent * weights).sum(), (grad * direction).sum(), rtol=1e-14, atol=0
    )
