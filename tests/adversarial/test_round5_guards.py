"""Adversarial inputs, fifth round (issue 36): the guards of the theory solve and the circle PDE.

Classes: valid inputs refused (a growth rate taken for stiffness; float32 densities refused
by a tolerance below float32's rounding), silent answers (negative rates giving a negative
step), messages that blame the wrong thing (an overflow of e^β called stiffness) and errors
from deep inside (torch's FFT, ``math range error``). Each case asserts a clear error (type
and message) or a documented result against an oracle. The counts per class (cases, failed
before this round's fixes) are in the section headers.
"""

import math

import numpy as np
import pytest
import torch

from tests.adversarial.strategies import F64, error_table_test
from tpde.fields import Exponential, Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import CircleDensity
from tpde.theory import equiangular_solution, equiangular_velocity

I2 = torch.eye(2, dtype=F64)


# -------- valid inputs refused: a growth rate is not stiffness, the horizon is not the work
# -------- (61 cases, 49 failed before, with the solvable fast rates below)
LONG = {  # (scheme, beta, rho0, horizon): every one solves, rho rising to 1 (ρ̇ = c ≥ 0)
    f"{scheme}-b{beta:g}-rho{rho0:g}-T{horizon:g}": (scheme, beta, rho0, horizon)
    for scheme in ("post-ln", "pre-ln")
    for beta in (0.5, 1.0, 4.0)
    for rho0 in (0.0, 0.3)
    for horizon in (10.0, 1e6, 1e9, 1e12)
}
# near ρ = 1 the start decays at rate ≈ 2 (post-ln): stiff only while the state moves, then
# the clip at ρ = 1 leaves nothing to follow (was "too stiff" over the whole horizon)
LONG.update(
    {
        f"post-ln-b1-rho{rho0:g}-T{horizon:g}": ("post-ln", 1.0, rho0, horizon)
        for rho0 in (0.999, 0.99999)
        for horizon in (1e11, 1e12, 1e14)
    }
)


@pytest.mark.parametrize("case", LONG.values(), ids=LONG.keys())
def test_a_growth_rate_over_a_long_horizon_is_solved(case):
    # fixed: post-ln, β = 1, T = 1e6, ρ0 = 0 was refused as "too stiff" (eigenvalue 0.866, a
    # growth rate multiplied by the horizon); last round it solved (the regression of issue 36).
    scheme, beta, rho0, horizon = case
    solution = equiangular_solution([0.0, horizon], rho0, beta=beta, n=4, scheme=scheme)
    assert solution.rho[0] == rho0
    drho, _ = equiangular_velocity(rho0, 1.0, beta=beta, n=4, scheme=scheme)
    assert float(drho) > 0  # the law moves rho up: the state at T is at least the start
    assert rho0 <= solution.rho[-1] <= 1 + 1e-12  # DOP853 may overshoot the clip by rounding
    if scheme == "post-ln" and horizon >= 1e6:  # long past the transient: clustered
        assert solution.rho[-1] >= 1 - 1e-9
    if scheme == "pre-ln" and horizon >= 1e6:  # r grows (ṙ = g > 0), slowing every rate
        assert solution.r[-1] > 1.0


def test_the_regression_case_of_issue_36_solves_to_one():
    # post-LN, β = 1, T = 1e6, ρ0 = 0 (n = 4): ρ → 1, as last round.
    solution = equiangular_solution([0.0, 1.0, 1e6], 0.0, beta=1.0, n=4, scheme="post-ln")
    assert solution.rho[-1] >= 1 - 1e-12
    # the early time agrees with the law's rate at the start (ρ̇(0) = c(0) > 0)
    assert solution.rho[1] > 0


# ---- refused as it must be: stiffness past max_evals, rates past the controller's underflow
# ---- (12 cases, 12 failed before, on the message only: the refusals held, but a rate past
# ---- the underflow was "too stiff" and the stiffness was charged over the whole horizon)
STIFF = {  # a decay rate ≈ 2 lasting while the state moves (≈ 500 and 5e4 time units)
    f"post-ln-rho{rho0:g}-max{budget}": (
        lambda rho0=rho0, budget=budget: equiangular_solution(
            [0.0, 1e6], rho0, beta=1.0, n=3, scheme="post-ln", max_evals=budget
        ),
        ValueError,
        r"too stiff to solve: .*a decay rate .*, lasting while the state moves",
    )
    for rho0 in (0.999, 0.99999)
    for budget in (10, 100, 1000)
}
FAST = {  # rates past 1/√tiny ≈ 6.7e153, where scipy's step-size control underflows
    f"{scheme}-{what}": (
        lambda kw=kw, scheme=scheme: equiangular_solution(
            [0.0, 1.0], 0.1, beta=1.0, n=3, scheme=scheme, **kw
        ),
        ValueError,
        r"moves too fast to solve: .*where the solver's step-size control underflows",
    )
    for scheme, what, kw in (
        ("ngpt", "alpha-1e300", {"alpha": 1e300}),
        ("ngpt", "alpha-1e200", {"alpha": 1e200}),
        ("ngpt", "alpha-1e160", {"alpha": 1e160}),
        ("pre-ln", "r0-1e-300", {"r0": 1e-300}),
        ("pre-ln", "r0-1e-200", {"r0": 1e-200}),
        ("peri-ln", "r0-1e-300", {"r0": 1e-300}),
    )
}


@pytest.mark.parametrize(
    ("scheme", "options"),
    [
        ("ngpt", {"alpha": 1e30}),
        ("ngpt", {"alpha": 1e100}),
        ("ngpt", {"alpha": 1e150}),
        ("pre-ln", {"r0": 1e-100}),
        ("pre-ln", {"r0": 1e-150}),
        ("peri-ln", {"r0": 1e-20}),
    ],
    ids=[
        "ngpt-1e30",
        "ngpt-1e100",
        "ngpt-1e150",
        "pre-ln-1e-100",
        "pre-ln-1e-150",
        "peri-ln-1e-20",
    ],
)
def test_fast_rates_below_the_underflow_are_solved(scheme, options):
    # fixed: refused as "too stiff" (a rate times the horizon); DOP853 follows them (ρ → 1 at
    # once: ngpt's ρ(t; α) = ρ(αt; 1), pre-ln's ρ(t; r0) = ρ(t/r0; 1) for small t).
    solution = equiangular_solution([0.0, 1.0], 0.1, beta=1.0, n=3, scheme=scheme, **options)
    assert solution.rho[-1] >= 1 - 1e-6


test_stiffness_and_unresolvable_time_scales_are_refused = error_table_test({**STIFF, **FAST})


# ------ messages that blame the wrong thing: e^β overflows (20 cases, 4 failed before)
USA = {
    f"{scheme}-b{beta:g}-rho{rho0:g}": (
        lambda scheme=scheme, beta=beta, rho0=rho0: equiangular_solution(
            [0.0, 1.0], rho0, beta=beta, n=4, scheme=scheme, kernel="usa"
        ),
        ValueError,
        r"USA velocity overflows float64 at beta = " + f"{beta:g}",
    )
    for scheme in ("post-ln", "pre-ln")
    for beta in (710.0, 800.0)
    for rho0 in (0.0, 0.5, 0.9, 0.99)
}
# fixed: post-ln at ρ0 = 0.5 and 0.9 was "too stiff" (eigenvalue 2.6e176): e^(βρ) fits at
# the start, and the flow's way to ρ = 1 overflows.
test_usa_overflow_is_named_as_an_overflow = error_table_test(USA)


@pytest.mark.parametrize("scheme", ["peri-ln", "ngpt"])
@pytest.mark.parametrize("rho0", [0.0, 0.5])
def test_usa_schemes_that_cancel_the_normaliser_still_solve_at_beta_800(scheme, rho0):
    solution = equiangular_solution([0.0, 1.0], rho0, beta=800.0, n=4, scheme=scheme, kernel="usa")
    assert np.all(np.isfinite(solution.rho))


# ----------------------- circle PDE: float32 densities (49 cases, 49 failed before)
def _density(kind: str, M: int, dtype) -> CircleDensity:
    theta = torch.arange(M, dtype=F64) * (2 * math.pi / M)
    values = {
        "cos": 1 + 0.3 * torch.cos(theta),
        "cos2": 1 + 0.2 * torch.cos(2 * theta) + 0.1 * torch.sin(theta),
        "bump": torch.exp(0.5 * torch.cos(theta - 1.0)),
        "uniform-ish": 1 + 1e-3 * torch.sin(3 * theta),
    }[kind]
    return CircleDensity(values.to(dtype))


def _circle_field(beta: float, v: float = 1.0, kernel=Softmax):
    return Normalized(kernel(I2, I2, v * I2, scale=beta), "post-ln")


@pytest.mark.parametrize("kind", ["cos", "cos2", "bump", "uniform-ish"])
@pytest.mark.parametrize("M", [64, 96, 128])
@pytest.mark.parametrize("beta", [0.5, 2.0])
@pytest.mark.parametrize("kernel", [Softmax, Exponential], ids=["sa", "usa"])
def test_a_float32_density_runs_the_circle_pde(kind, M, beta, kernel):
    # fixed: every float32 density was "not resolved" (the default tolerance 1e-8 is below
    # float32's rounding). Oracle: the float64 run of the same density, to float32 rounding.
    field = _circle_field(beta, kernel=kernel)
    low = integrate(field, _density(kind, M, torch.float32), 0.05)
    high = integrate(field, _density(kind, M, F64), 0.05)
    assert str(low.status) == "completed" and str(high.status) == "completed"
    got, want = low.measures[-1].density.double(), high.measures[-1].density
    assert float((got - want).abs().max() / want.abs().max()) <= 1e-4


def test_a_tolerance_below_the_dtype_rounding_is_refused():
    from tpde.flows import CircleSystem

    rho = _density("cos", 64, torch.float32)
    with pytest.raises(ValueError, match=r"resolution = 1e-08 is below the rounding of the"):
        CircleSystem(_circle_field(1.0), rho, resolution=1e-8)


# ------------- circle PDE: negative rates, overflow, half precision (16 cases, 15 failed before)
@pytest.mark.parametrize("v", [-1.0, -0.5, -3.0, -1e-3])
@pytest.mark.parametrize("kernel", [Softmax, Exponential], ids=["sa", "usa"])
def test_negative_rates_decay_instead_of_blowing_up_at_t0(v, kernel):
    # fixed: V = vI, v < 0 (every mode decays) made the step bound 0.1/λ_max negative: the
    # run returned "blow_up" at t = 0. Oracle: the first mode decays (|c_1| falls), mass kept.
    rho = _density("cos", 64, F64)
    run = integrate(_circle_field(1.0, v, kernel), rho, 0.5)
    assert str(run.status) == "completed"
    assert float(run.times[-1]) == pytest.approx(0.5)
    first, last = rho.fourier()[1].abs(), run.measures[-1].fourier()[1].abs()
    assert float(last) < float(first)
    assert float(run.measures[-1].mass()) == pytest.approx(1.0, rel=1e-12)


CIRCLE_ERRORS = {
    **{
        f"usa-beta-{beta:g}-{str(dtype)[6:]}": (
            lambda beta=beta, dtype=dtype: integrate(
                _circle_field(beta, kernel=Exponential),
                CircleDensity(torch.ones(4096, dtype=dtype)),
                0.1,
            ),
            ValueError,
            r"multiplies by e\^beta, which overflows",  # fixed: "math range error"
        )
        for beta, dtype in (
            (710.0, F64),
            (800.0, F64),
            (1e4, F64),
            (90.0, torch.float32),
            (200.0, torch.float32),
        )
    },
    **{
        f"half-density-{str(dtype)[6:]}": (
            lambda dtype=dtype: integrate(_circle_field(1.0), _density("cos", 64, dtype), 0.1),
            TypeError,
            "the circle PDE computes in float32 or float64",
        )
        for dtype in (torch.float16, torch.bfloat16)
    },
    "resolution-negative": (
        lambda: __import__("tpde.flows", fromlist=["CircleSystem"]).CircleSystem(
            _circle_field(1.0), _density("cos", 64, F64), resolution=-1.0
        ),
        ValueError,
        "resolution must be finite and > 0",
    ),
}
test_circle_pde_errors_are_clear = error_table_test(CIRCLE_ERRORS)


# ---------------- CircleDensity: torch's FFT errors (21 cases, 13 failed before)
DENSITY_ERRORS = {
    f"refined-{name}": (
        lambda factor=factor: _density("cos", 16, F64).refined(factor),
        ValueError,
        "refined takes the factor of angles to add, an int >= 1",
    )
    for name, factor in (("0", 0), ("-1", -1), ("float", 2.0), ("true", True), ("str", "2"))
}
test_circle_density_errors_are_clear = error_table_test(DENSITY_ERRORS)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("method", ["cdf", "fourier", "refined", "sample", "mean"])
def test_every_density_dtype_computes_its_transforms(dtype, method):
    # fixed (half precision): torch's "Unsupported dtype Half" from rfft. Oracle: float64.
    low, high = _density("cos2", 32, dtype), _density("cos2", 32, F64)
    calls = {
        "cdf": lambda d: d.cdf(),
        "fourier": lambda d: d.fourier()[:4].abs(),
        "refined": lambda d: d.refined(2).density,
        "sample": lambda d: d.sample(200, generator=torch.Generator().manual_seed(0)).norm(dim=-1),
        "mean": lambda d: d.mean(),
    }
    got, want = calls[method](low), calls[method](high)
    tolerance = 50 * torch.finfo(dtype).eps * float(want.abs().max() + 1)
    assert float((got.double() - want.double()).abs().max()) <= tolerance


def test_refined_by_one_is_the_same_grid():
    rho = _density("bump", 32, F64)
    torch.testing.assert_close(rho.refined(1).density, rho.density, rtol=1e-14, atol=1e-14)
