"""Adversarial inputs, third round (issue 20): tpde.theory's closed forms (equiangular laws
and frames, the instability rate and dominant mode, Rényi centres, the hardmax rule).

Each case asserts a clear error or a result against an oracle (mpmath's Bessel functions
at 30 digits, the unscaled input); "fixed" marks the cases that failed before this round's
fixes (73 cases, 44 failed before).
"""

import math

import mpmath
import numpy as np
import pytest
import torch

from tests.adversarial.strategies import F64, error_table_test
from tpde.theory import (
    dominant_mode,
    equiangular_frame,
    equiangular_solution,
    equiangular_velocity,
    hardmax_vertices,
    instability_rate,
    renyi_centres,
)

I2 = torch.eye(2, dtype=F64)
POINTS = torch.nn.functional.normalize(
    torch.randn(40, 2, generator=torch.Generator().manual_seed(0), dtype=F64), dim=-1
)


def _velocity(rho=0.1, r=1.0, **kw):
    return lambda: equiangular_velocity(rho, r, **{"beta": 1.0, "n": 3, **kw})


def _solution(times=(0.0, 1.0), rho0=0.1, **kw):
    return lambda: equiangular_solution(times, rho0, **{"beta": 1.0, "n": 3, **kw})


MIX = {"scheme": "mix-ln", "switch": 1.0}

ERRORS = {
    # equiangular_velocity
    "velocity-rho-str": (  # fixed: "0.5" accepted
        _velocity(rho="0.5"),
        TypeError,
        "rho must be a real number or an array of real numbers; received '0.5'",
    ),
    "velocity-rho-None": (  # fixed: "rho must be finite; received nan"
        _velocity(rho=None),
        TypeError,
        "rho must be a real number .* received None",
    ),
    "velocity-rho-complex": (  # fixed: float() argument must be ... not 'complex'
        _velocity(rho=0.1 + 1j),
        TypeError,
        r"rho must be a real number .* received \(0.1\+1j\)",
    ),
    "velocity-rho-nan": (_velocity(rho=math.nan), ValueError, "rho must be finite"),
    "velocity-rho-above-1": (_velocity(rho=1 + 1e-9), ValueError, r"rho in \[-1/\(n-1\), 1\]"),
    "velocity-beta-inf": (_velocity(beta=math.inf), ValueError, "beta must be finite"),
    "velocity-beta-str": (_velocity(beta="1"), TypeError, "beta must be a real number"),
    "velocity-n-float": (_velocity(n=3.0), ValueError, "an int >= 2; received 3.0"),
    "velocity-scheme": (_velocity(scheme="postln"), ValueError, "unknown scheme 'postln'"),
    "velocity-kernel": (_velocity(kernel="softmax"), ValueError, "unknown kernel"),
    "velocity-r-str": (  # fixed: "1" accepted
        _velocity(r="1", scheme="pre-ln"),
        TypeError,
        "the radius r must be a real number",
    ),
    "velocity-r-zero": (_velocity(r=0.0, scheme="pre-ln"), ValueError, "finite and > 0"),
    "velocity-r-shape": (  # fixed: numpy's "shape mismatch: objects cannot be broadcast"
        _velocity(rho=[0.1, 0.2], r=[1.0, 2.0, 3.0], scheme="pre-ln"),
        ValueError,
        r"rho and r must broadcast to one shape; received shapes \(2,\) and \(3,\)",
    ),
    "velocity-alpha-negative": (  # fixed: ignored outside ngpt
        _velocity(alpha=-1.0),
        ValueError,
        "alpha must be > 0; received alpha = -1.0",
    ),
    "velocity-alpha-str": (_velocity(alpha="x"), TypeError, "alpha must be a real number"),  # fixed
    "velocity-usa-overflow": (  # fixed: OverflowError: math range error
        _velocity(beta=800.0, kernel="usa", scheme="pre-ln"),
        ValueError,
        "USA velocity overflows float64 at beta = 800.*kernel='sa'",
    ),
    "velocity-mix-ln": (_velocity(scheme="mix-ln"), ValueError, "no single velocity"),
    "velocity-layernorm": (_velocity(scheme="layernorm"), ValueError, "has no equiangular law"),
    # equiangular_solution
    "solution-times-str": (  # fixed: could not convert string to float: 'abc'
        _solution(times="abc"),
        TypeError,
        "times must be a real number or an array",
    ),
    "solution-times-2d": (  # fixed: flattened silently
        _solution(times=[[0.0, 1.0], [2.0, 3.0]]),
        ValueError,
        r"times must be a 1-d array \(T,\); received shape \(2, 2\)",
    ),
    "solution-times-decreasing": (_solution(times=[1.0, 0.0]), ValueError, "increasing"),
    "solution-rho0-array": (  # fixed: only 0-dimensional arrays can be converted
        _solution(rho0=[0.1, 0.2]),
        TypeError,
        r"rho0 must be a real number; received \[0.1, 0.2\]",
    ),
    "solution-r0-str": (  # fixed: accepted
        _solution(r0="1", scheme="pre-ln"),
        TypeError,
        "r0 must be a real number; received '1'",
    ),
    "solution-switch-str": (  # fixed: '>' not supported between 'str' and 'int'
        _solution(times=[0, 1, 2], **{**MIX, "switch": "1"}),
        TypeError,
        "switch must be a real number; received '1'",
    ),
    "solution-switch-bool": (  # fixed: True read as 1
        _solution(times=[0, 1, 2], **{**MIX, "switch": True}),
        TypeError,
        "switch must be a real number; received True",
    ),
    "solution-switch-nan": (
        _solution(**{**MIX, "switch": math.nan}),
        ValueError,
        "switch (must be finite|> 0)",
    ),
    "solution-mix-alpha": (  # fixed: accepted
        _solution(times=[0, 1, 2], alpha=-1.0, **MIX),
        ValueError,
        "alpha must be > 0",
    ),
    "solution-mix-r0-negative": (
        _solution(times=[0, 1, 2], r0=-1.0, **MIX),
        ValueError,
        "the radius r must be finite and > 0",
    ),
    "solution-switch-not-mix": (_solution(switch=1.0), ValueError, "applies to scheme 'mix-ln'"),
    "solution-rtol-nan": (  # fixed: "rho must be finite; received nan"
        _solution(rtol=math.nan),
        ValueError,
        "rtol must be finite and > 0; received nan",
    ),
    "solution-rtol-str": (  # fixed: numpy UFuncTypeError
        _solution(rtol="a"),
        TypeError,
        "rtol must be a number; received 'a'",
    ),
    "solution-atol-negative": (  # fixed: scipy's "`atol` must be positive"
        _solution(atol=-1.0),
        ValueError,
        "atol must be finite and > 0; received -1.0",
    ),
    "solution-usa-overflow": (  # fixed: OverflowError: math range error
        _solution(beta=800.0, kernel="usa", scheme="pre-ln"),
        ValueError,
        "USA velocity overflows",
    ),
    # refused before solving (stiffness estimate; the second one hung with scipy 1.17)
    "solution-r0-tiny": (  # fixed: "the equiangular ODE solve failed: Required step size"
        _solution(r0=1e-300, scheme="pre-ln"),
        ValueError,
        r"received r0 = 1e-300, .* moves too fast to solve: .*rho\(t; r0\) = rho\(t/r0; 1\)",
    ),
    "solution-peri-ln-r0-tiny": (
        _solution(r0=1e-300, scheme="peri-ln"),
        ValueError,
        r"\(peri-ln\) .*received r0 = 1e-300, .* moves too fast to solve",
    ),
    "solution-ngpt-alpha-huge": (  # fixed: same, with no word on alpha; then a hang
        _solution(alpha=1e300, scheme="ngpt"),
        ValueError,
        r"alpha = 1e\+300, .* moves too fast to solve: its Jacobian at the start has an "
        r"eigenvalue of size 4.43e\+299",
    ),
    "solution-long-horizon": (  # a decay lasting ~500 time units, 10 evaluations: hopeless
        _solution(times=(0.0, 1e12), rho0=0.999, max_evals=10),  # (round 5: a long horizon
        ValueError,  # alone is no work, the stiffness lasts while the state moves)
        r"needs at least .* right-hand side evaluations, past max_evals \(10 left\)",
    ),
    "solution-max-evals-hit": (  # the bound itself: work stops with an error, not a hang
        _solution(times=(0.0, 50.0), beta=5.0, rtol=1e-13, max_evals=40),
        RuntimeError,
        r"stopped at max_evals = 40 right-hand side evaluations",
    ),
    "solution-max-evals-zero": (
        _solution(max_evals=0),
        ValueError,
        "max_evals must be a positive int",
    ),
    # equiangular_frame
    "frame-d-below-n": (
        lambda: equiangular_frame(3, 2, 0.1),
        ValueError,
        "it needs d >= n; received n = 3, d = 2",
    ),
    "frame-rho-str": (lambda: equiangular_frame(3, 3, "0.1"), TypeError, "rho must be a real"),
    "frame-dtype-int": (
        lambda: equiangular_frame(3, 3, 0.1, dtype=torch.int64),
        TypeError,
        "floating torch dtype",
    ),
    "frame-generator-int": (  # fixed: 'int' object has no attribute 'device'
        lambda: equiangular_frame(3, 3, 0.1, generator=0),
        TypeError,
        r"generator must be a torch.Generator .* received int",
    ),
    # instability_rate, dominant_mode
    "rate-k-zero": (lambda: instability_rate(0, 1.0), ValueError, "k = 0 is the total mass"),
    "rate-k-float": (lambda: instability_rate(1.5, 1.0), ValueError, "integers >= 1"),
    "rate-beta-zero": (lambda: instability_rate(1, 0.0), ValueError, "needs beta > 0"),
    "rate-d-one": (lambda: instability_rate(1, 1.0, d=1), ValueError, "an int >= 2"),
    "rate-usa-overflow": (  # fixed: OverflowError: math range error
        lambda: instability_rate(1, 800.0, kernel="usa"),
        ValueError,
        r"USA instability rate grows as e\^beta and overflows float64 here \(beta = 800",
    ),
    "dominant-beta-huge": (  # fixed: MemoryError (a 298 GiB array of modes)
        lambda: dominant_mode(1e20),
        ValueError,
        "takes beta <= 1e\\+12; received beta = 1e\\+20",
    ),
    "dominant-beta-nan": (lambda: dominant_mode(math.nan), ValueError, "beta must be finite"),
    # renyi_centres
    "renyi-delta-zero": (lambda: renyi_centres(POINTS, 0.0), ValueError, "delta must be > 0"),
    "renyi-empty": (lambda: renyi_centres(POINTS[:0], 0.5), ValueError, "n >= 1"),
    "renyi-strong-str": (  # fixed: "yes" read as True
        lambda: renyi_centres(POINTS, 0.5, strong="yes"),
        TypeError,
        "strong must be True or False; received 'yes'",
    ),
    # hardmax_vertices
    "hardmax-A-nan": (  # fixed: NaN scores, every token "heads for" token 0
        lambda: hardmax_vertices(POINTS, torch.full((2, 2), math.nan, dtype=F64)),
        ValueError,
        "A contains 4 non-finite value",
    ),
    "hardmax-empty": (  # fixed: IndexError from argmax
        lambda: hardmax_vertices(POINTS[:0], I2),
        ValueError,
        r"points must have shape \(n, d\) with n >= 1; received \(0, 2\)",
    ),
    "hardmax-A-shape": (
        lambda: hardmax_vertices(POINTS, torch.eye(3)),
        ValueError,
        r"A must have shape \(2, 2\)",
    ),
}

test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


# ============================================================== results at the edges
def _mp_rate(k: int, beta: float, d: int, kernel: str) -> float:
    """λ_k from mpmath at 30 digits (the docstring's formulas)."""
    mpmath.mp.dps = 30
    nu = mpmath.mpf(d) / 2 - 1
    b = mpmath.mpf(beta)
    bessel = mpmath.besseli(k + nu, b)
    if kernel == "sa":
        value = k * (k + d - 2) * bessel / (b * mpmath.besseli(nu, b))
    else:
        value = k * (k + d - 2) * mpmath.gamma(mpmath.mpf(d) / 2) * (2 / b) ** nu * bessel / b
    return float(value)


@pytest.mark.parametrize(
    ("k", "beta", "d", "kernel"),
    [
        (1, 1e-300, 3, "sa"),  # fixed: NaN (I_{1.5}(β) underflows)
        (1, 1e-300, 3, "usa"),  # fixed: NaN
        (3, 1e-5, 2, "sa"),
        (1, 1.0, 768, "sa"),  # fixed: NaN (a transformer's width; I_383(1) underflows)
        (2, 1.0, 768, "usa"),  # fixed: NaN
        (5, 10.0, 1000, "sa"),  # fixed: NaN
        (1, 1e10, 2, "sa"),  # fixed: NaN (scipy's ive is NaN past ~1e9)
        (1000, 1e12, 2, "sa"),  # fixed: NaN
        (2**62, 1.0, 2, "sa"),  # fixed: NaN (k(k + d − 2) overflowed int64)
        (4, 700.0, 2, "usa"),
    ],
)
def test_the_instability_rate_is_right_at_every_scale(k, beta, d, kernel):
    # rtol 1e-7: scipy's ive (1e-14) and its expansions where it fails (Debye with two
    # correction terms at orders >= 10: ~1e-9; measured ≤ 3e-10).
    expected = _mp_rate(k, beta, d, kernel)
    got = instability_rate(k, beta, kernel=kernel, d=d)
    assert math.isfinite(got)
    assert got == pytest.approx(expected, rel=1e-7, abs=0)


@pytest.mark.parametrize(
    ("beta", "d"), [(1e10, 2), (1e12, 2), (10.0, 768)], ids=["1e10", "1e12", "d768"]
)
def test_the_dominant_mode_is_right_where_scipy_fails(beta, d):
    # fixed: 1 (NaN scores, argmax of NaN) at β = 1e10, 1e12. The oracle: mpmath's
    # k(k + d − 2) I_{k+ν}(β) over the modes around the returned k*.
    got = dominant_mode(beta, d=d)
    mpmath.mp.dps = 30
    nu = mpmath.mpf(d) / 2 - 1

    def score(k):
        return k * (k + d - 2) * mpmath.besseli(k + nu, mpmath.mpf(beta))

    assert score(got) >= score(got - 1) if got > 1 else True
    assert score(got) >= score(got + 1)
    if d == 2:
        assert abs(got - math.sqrt(2 * beta)) < 2  # k* ≈ √(2β) at large β


def test_the_velocity_at_large_beta_has_no_warning_and_its_limit():
    # fixed: numpy's overflow warnings. β → ∞ (SA): w_o → 0, so ρ̇ → 0 (post-LN); β → −∞:
    # w_s → 0, w_o → 1/(n − 1), ρ̇ = 2(1 − ρ)(1 + 2ρ)/2 = 1.08 at ρ = 0.1, n = 3.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(equiangular_velocity(0.1, beta=1e6, n=3)[0]) == 0.0
        assert float(equiangular_velocity(0.1, beta=-1e6, n=3)[0]) == pytest.approx(1.08)


@pytest.mark.parametrize("scheme", ["peri-ln", "ngpt"])
def test_peri_ln_and_ngpt_are_the_same_for_usa_past_the_overflow(scheme):
    # The normaliser cancels: at β = 800 USA equals SA (fixed: OverflowError). float64, 1e-15.
    sa = equiangular_velocity(0.3, beta=800.0, n=4, scheme=scheme, kernel="sa")
    usa = equiangular_velocity(0.3, beta=800.0, n=4, scheme=scheme, kernel="usa")
    np.testing.assert_allclose(usa, sa, rtol=1e-15, atol=0)
    assert float(equiangular_velocity(0.3, beta=1.0, n=4, scheme=scheme, kernel="usa")[0]) == (
        pytest.approx(float(equiangular_velocity(0.3, beta=1.0, n=4, scheme=scheme)[0]), rel=1e-14)
    )


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [(F64, 1e-200), (F64, 1e200), (torch.float32, 1e-30), (torch.float32, 1e25)],
    ids=["f64-1e-200", "f64-1e200", "f32-1e-30", "f32-1e25"],
)
def test_renyi_centres_and_hardmax_do_not_depend_on_the_scale(dtype, scale):
    # fixed: renyi_centres gave one centre at 1e-200 (distances underflowed to 0) and two
    # at 1e200; hardmax_vertices' scores overflowed to ±inf ties at 1e200 (float32: 1e20).
    # Both are invariant under x -> s·x (δ -> s·δ): the oracle is the unit-scale answer.
    x = POINTS.to(dtype)
    assert torch.equal(renyi_centres(x * scale, 0.5 * scale), renyi_centres(x, 0.5))
    assert torch.equal(renyi_centres(x * scale, 0.5 * scale, strong=True),
                       renyi_centres(x, 0.5, strong=True))  # fmt: skip
    A = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=dtype)
    for got, expected in zip(hardmax_vertices(x * scale, A), hardmax_vertices(x, A), strict=True):
        assert torch.equal(got, expected)


def test_the_equiangular_frame_at_the_bounds_of_rho():
    # ρ = −1/(n − 1) (the simplex, d = n − 1) and ρ = 1 (d = 1): Gram (1 − ρ)I + ρ11ᵀ to 1e-14.
    gen = torch.Generator().manual_seed(1)
    for n, d, rho in ((5, 4, -0.25), (5, 1, 1.0), (5, 5, 0.999999)):
        x = equiangular_frame(n, d, rho, generator=gen)
        gram = (1 - rho) * torch.eye(n, dtype=F64) + rho
        torch.testing.assert_close(x @ x.T, gram, rtol=0, atol=1e-14)
