"""Models the field studies, fourth round (issue 28): masks on unnormalised kernels and
hardmax with normalised scores.

The causal "lost in the middle" model of Duerinckx, Geshkovski and Rossi (arXiv:2605.09213,
2026): tokens on the circle, strictly earlier keys only, the first token frozen,
position-only ALiBi weights normalised over the predecessors, the unnormalised exponential
kernel, RK4. Before this round ``Masked`` refused ``Exponential`` and had no strict mask or
pair weights, and ``Hardmax.from_field(Cosine(...))`` raised. Each case checks tpde against a
plain loop written from the paper's equations (float64), or a clear error. "fixed" marks
the cases that failed before (17 cases; all 17 failed before, one only for the new
attribute Hardmax.scores).
"""

import math

import numpy as np
import pytest
import torch

from tests.adversarial.strategies import F64, error_table_test
from tpde.fields import (
    ALiBi,
    Cosine,
    Exponential,
    Hardmax,
    Masked,
    Normalized,
    Softmax,
)
from tpde.flows import integrate
from tpde.measures import Empirical

I2 = torch.eye(2, dtype=F64)
N, BETA, SLOPE = 8, 2.0, 0.7


def _circle(n, seed=0):
    angles = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=F64) * 2 * math.pi
    return torch.stack([angles.cos(), angles.sin()], -1)


def lost_in_the_middle(beta=BETA, slope=SLOPE):
    """The model as tpde fields: Post-LN of the strict, ALiBi-weighted, masked USA kernel."""
    kernel = Exponential(I2, I2, I2, scale=beta)
    masked = Masked(kernel, strict=True, position_bias=ALiBi(slopes=(slope,)))
    return Normalized(masked, "post-ln")


def loop_velocity(X, beta=BETA, slope=SLOPE):
    """ẋ_i = P⊥_{x_i} Σ_{j<i} a_ij e^{β⟨x_i, x_j⟩} x_j, a_ij = e^{−λ(i−j)}/Σ_{k<i} e^{−λ(i−k)},
    at the normalised tokens (the sphere schemes' extension off the circle), by loops."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    out = np.zeros_like(X)
    for i in range(1, len(X)):
        a = np.array([math.exp(-slope * (i - j)) for j in range(i)])
        a = a / a.sum()
        v = sum(a[j] * math.exp(beta * U[i] @ U[j]) * U[j] for j in range(i))
        out[i] = v - (v @ U[i]) * U[i]
    return out


def loop_rk4(X, t1, h):
    """Classical RK4 with the retraction N after every step (as tpde's sphere flows)."""
    for _ in range(round(t1 / h)):
        k1 = loop_velocity(X)
        k2 = loop_velocity(X + h / 2 * k1)
        k3 = loop_velocity(X + h / 2 * k2)
        k4 = loop_velocity(X + h * k3)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X


def test_the_velocity_equals_the_papers_at_the_start():  # fixed: Masked refused Exponential
    X = _circle(N)
    mu = Empirical(X, positions=torch.arange(float(N), dtype=F64))
    got = lost_in_the_middle().velocity(mu)
    np.testing.assert_allclose(got.numpy(), loop_velocity(X.numpy()), rtol=1e-13, atol=1e-14)
    assert float(got[0].abs().max()) == 0.0  # the first token is frozen


def test_trajectories_equal_a_plain_rk4_loop():  # fixed
    X = _circle(N, seed=1)
    mu = Empirical(X, positions=torch.arange(float(N), dtype=F64))
    trajectory = integrate(lost_in_the_middle(), mu, 2.0, dt=0.05, method="rk4", save=5)
    assert trajectory.status == "completed"
    for t, measure in zip(trajectory.times.tolist(), trajectory.measures, strict=True):
        want = loop_rk4(X.numpy(), t, 0.05)
        np.testing.assert_allclose(measure.points.numpy(), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(trajectory.final.points[0], X[0], rtol=0, atol=2e-16)  # frozen


def test_positions_need_not_be_integers_and_only_their_order_and_gaps_matter():  # fixed
    # Mean-field positions s = i/(n − 1) with slope λ(n − 1) are the integer model.
    X = _circle(N, seed=2)
    integer = Empirical(X, positions=torch.arange(float(N), dtype=F64))
    scaled = Empirical(X, positions=torch.arange(float(N), dtype=F64) / (N - 1))
    field = lost_in_the_middle(slope=SLOPE * (N - 1))
    torch.testing.assert_close(field.velocity(scaled), lost_in_the_middle().velocity(integer))


def test_inclusive_and_strict_masks_differ_by_self_attention():  # fixed: no strict mask
    # A softmax that includes self (causal GroupedQueryAttention's) is not the paper's: the
    # strict mask drops the diagonal; with one earlier key the strict softmax is that key.
    X = _circle(3, seed=3)
    mu = Empirical(X, positions=torch.tensor([0.0, 1.0, 2.0], dtype=F64))
    strict = Masked(Softmax(I2, I2, I2), strict=True).velocity(mu)
    inclusive = Masked(Softmax(I2, I2, I2)).velocity(mu)
    torch.testing.assert_close(strict[1], X[0], rtol=1e-15, atol=1e-15)
    assert float(strict[0].abs().max()) == 0.0 and float(inclusive[0].sub(X[0]).abs().max()) < 1e-15
    assert float((strict[2] - inclusive[2]).norm()) > 1e-3


def test_a_callable_bias_equals_alibi():  # fixed
    X = _circle(N, seed=4)
    mu = Empirical(X, positions=torch.arange(float(N), dtype=F64))
    kernel = Exponential(I2, I2, I2, scale=BETA)
    alibi = Masked(kernel, strict=True, position_bias=ALiBi(slopes=(SLOPE,))).velocity(mu)
    by_hand = Masked(kernel, strict=True, position_bias=lambda r: SLOPE * r).velocity(mu)
    torch.testing.assert_close(alibi, by_hand, rtol=1e-14, atol=1e-14)


def test_inclusive_unnormalised_kernel_averages_over_the_predecessors_and_self():  # fixed
    X = _circle(4, seed=5)
    mu = Empirical(X, positions=torch.arange(4.0, dtype=F64))
    got = Masked(Exponential(I2, I2, I2, scale=BETA)).velocity(mu)
    for i in range(4):
        want = sum(torch.exp(BETA * X[i] @ X[j]) * X[j] for j in range(i + 1)) / (i + 1)
        torch.testing.assert_close(got[i], want, rtol=1e-14, atol=1e-14)


# ------------------------------------------------------------------------ hardmax, cosine
def test_hardmax_from_cosine_is_the_large_beta_limit():  # fixed: from_field raised
    gen = torch.Generator().manual_seed(6)
    Q, K = torch.randn(3, 3, generator=gen, dtype=F64), torch.randn(3, 3, generator=gen, dtype=F64)
    V = torch.eye(3, dtype=F64)
    points = 10 ** torch.randn(12, 1, generator=gen, dtype=F64) * torch.randn(
        12, 3, generator=gen, dtype=F64
    )  # norms over decades: only directions matter to cosine scores
    mu = Empirical(points)
    hard = Hardmax.from_field(Cosine(Q, K, V, scale=1.0)).velocity(mu)
    # oracle: for each query the key of largest cos(Qx, Ky), by hand
    q = torch.nn.functional.normalize(points @ Q.T, dim=-1)
    k = torch.nn.functional.normalize(points @ K.T, dim=-1)
    torch.testing.assert_close(hard, points[(q @ k.T).argmax(-1)], rtol=1e-15, atol=0)
    # and the limit of cosine attention: the weights off the argmax decay like e^{−β·gap}
    gaps = [
        float((Cosine(Q, K, V, scale=beta).velocity(mu) - hard).abs().max() / points.abs().max())
        for beta in (200.0, 2000.0)
    ]
    assert gaps[1] < min(gaps[0] / 10, 1e-4)
    assert "scores='cosine'" in repr(Hardmax.from_field(Cosine(Q, K, V)))


def test_bilinear_hardmax_is_unchanged():
    field = Softmax(I2, I2, I2)
    assert Hardmax.from_field(field).scores == "bilinear"


ERRORS = {
    "masked-alibi-two-slopes": (
        lambda: Masked(Exponential(I2, I2, I2), position_bias=ALiBi(slopes=(1.0, 2.0))),
        ValueError,
        r"Masked takes an ALiBi with one slope, ALiBi\(slopes=\(m,\)\)",
    ),
    "masked-bias-not-callable": (
        lambda: Masked(Softmax(I2, I2, I2), position_bias=0.5),
        TypeError,
        "position_bias must be None, ALiBi.* received float",
    ),
    "masked-strict-not-bool": (
        lambda: Masked(Softmax(I2, I2, I2), strict=1),
        TypeError,
        "strict must be True or False; received 1",
    ),
    "masked-bias-wrong-shape": (
        lambda: Masked(Softmax(I2, I2, I2), position_bias=lambda r: r[:1]).velocity(
            Empirical(_circle(3), positions=torch.arange(3.0, dtype=F64))
        ),
        ValueError,
        r"position_bias\(positions\) must return one finite log-weight per key, shape \(3,\); "
        r"received shape \(1,\)",
    ),
    "masked-strict-with-sink": (
        lambda: Masked(Softmax(I2, I2, I2), strict=True, sink_mass=0.5),
        ValueError,
        "sink_mass is an external key at position 0 .* put the sink in μ as a token",
    ),
    "masked-exponential-sdpa": (
        lambda: Masked(Exponential(I2, I2, I2)).velocity(
            Empirical(_circle(3), positions=torch.arange(3.0, dtype=F64)), engine="sdpa"
        ),
        ValueError,
        "computed densely; engine must be 'auto' or 'dense'; received 'sdpa'",
    ),
    "hardmax-scores": (
        lambda: Hardmax(I2, I2, I2, scores="dot"),
        ValueError,
        "Hardmax scores must be one of 'bilinear', 'cosine'",
    ),
}

test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


@pytest.mark.parametrize("kind", ["softmax", "exponential"])
def test_a_batch_of_clouds_is_masked_per_cloud(kind):
    X = torch.stack([_circle(5, seed=s) for s in range(3)])  # (3, 5, 2)
    kernel = Softmax(I2, I2, I2) if kind == "softmax" else Exponential(I2, I2, I2)
    field = Masked(kernel, strict=True, position_bias=ALiBi(slopes=(0.3,)))
    positions = torch.arange(5.0, dtype=F64)
    batched = field.velocity(Empirical(X, positions=positions))
    for b in range(3):
        one = field.velocity(Empirical(X[b], positions=positions))
        torch.testing.assert_close(batched[b], one, rtol=1e-14, atol=1e-14)
