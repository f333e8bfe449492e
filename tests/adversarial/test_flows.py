"""Adversarial inputs to tpde.flows: integrate, events, methods, ExplicitRK, grids, JKO,
the agreement harness and the convexity probe.

Each case asserts a clear error (type and the informative part of the message) or a
finite, documented result (a status, never NaN); "fixed" marks cases that failed before
this suite's fixes.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.adversarial.strategies import (
    ADVERSARIAL,
    F64,
    NOT_A_MEASURE,
    NOT_A_MEASURE_IDS,
    NOT_POSITIVE,
    NOT_POSITIVE_IDS,
    cloud,
    error_table_test,
    eye,
    non_int_counts,
)
from tpde.fields import (
    L2,
    GaussianNotPreserved,
    Linear,
    Masked,
    Normalized,
    NotAGradientFlow,
    Sigmoid,
    Softmax,
    convexity_probe,
    geodesic_second_derivative,
)
from tpde.flows import (
    BlowUp,
    Clustered,
    Converged,
    ExplicitRK,
    FiniteVolumes,
    compare,
    integrate,
    jko_flow,
    jko_step,
)
from tpde.measures import Empirical, Gaussian, Grid

I2 = eye()
MU = Empirical(cloud(6, 2))
G = Gaussian(torch.zeros(2, dtype=F64), I2)
GRID = Grid(torch.full((4, 4), 1 / 16, dtype=F64), -2, 2)
CONTRACT = Softmax(-I2, I2, I2)  # V = I, A = −I: a gradient flow that contracts
ASYM = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64)


def _square(m):
    return (m.points**2).sum()


ERRORS = {
    # times
    "t1-nan": (
        lambda: integrate(CONTRACT, MU, math.nan),
        ValueError,
        "t1 must be finite and >= t0 = 0.0; received t1 = nan",
    ),
    "t1-inf": (lambda: integrate(CONTRACT, MU, math.inf), ValueError, "received t1 = inf"),
    "t1-negative": (lambda: integrate(CONTRACT, MU, -1), ValueError, "received t1 = -1.0"),
    "t1-None": (
        lambda: integrate(CONTRACT, MU, None),
        TypeError,
        "t1 must be a real number; received None",
    ),  # fixed
    "t1-str": (
        lambda: integrate(CONTRACT, MU, "1"),
        TypeError,
        "t1 must be a real number; received '1'",
    ),  # fixed
    "t0-nan": (
        lambda: integrate(CONTRACT, MU, 1.0, t0=math.nan),
        ValueError,
        "t0 must be finite; received nan",
    ),  # fixed
    "t0-negative": (
        lambda: integrate(CONTRACT, MU, 1.0, t0=-1),
        ValueError,
        r"t0 must be >= 0 \(depth-time\)",
    ),
    "t0-after-t1": (
        lambda: integrate(CONTRACT, MU, 1.0, t0=2),
        ValueError,
        "t1 must be finite and >= t0 = 2.0",
    ),
    # budgets and saves
    "save-one": (
        lambda: integrate(CONTRACT, MU, 1.0, save=1),
        ValueError,
        "number of saved times >= 2; received 1",
    ),
    "save-negative": (lambda: integrate(CONTRACT, MU, 1.0, save=-3), ValueError, "received -3"),
    "save-bool": (
        lambda: integrate(CONTRACT, MU, 1.0, save=True),
        TypeError,
        "save must be None, an int .* received True",
    ),  # fixed
    "save-word": (
        lambda: integrate(CONTRACT, MU, 1.0, save="all"),
        ValueError,
        "unknown save 'all'; choose one of 'steps'",
    ),
    "save-strings": (
        lambda: integrate(CONTRACT, MU, 1.0, save=["a"]),
        TypeError,
        r"save times must be numbers; received \['a'\]",
    ),  # fixed
    "save-outside": (
        lambda: integrate(CONTRACT, MU, 1.0, save=[2.0]),
        ValueError,
        r"lie in \[t0, t1\] = \[0.0, 1.0\]; received \[2.0\]",
    ),
    "save-before": (
        lambda: integrate(CONTRACT, MU, 1.0, save=[-1.0]),
        ValueError,
        r"received \[-1.0\]",
    ),
    "save-inf": (
        lambda: integrate(CONTRACT, MU, 1.0, save=[math.inf]),
        ValueError,
        "save times must be finite",
    ),
    "save-nan": (
        lambda: integrate(CONTRACT, MU, 1.0, save=[0.5, math.nan]),
        ValueError,
        "save times must be finite",
    ),
    "save-too-many": (
        lambda: integrate(CONTRACT, MU, 1.0, save=10**9),
        ValueError,
        r"asks for 1000000000 saved times, more than max_steps \+ 1 = 100001",
    ),  # fixed
    "save-more-than-steps": (
        lambda: integrate(CONTRACT, MU, 1.0, save=[0.1, 0.2, 0.3], max_steps=1),
        ValueError,
        r"asks for 3 saved times, more than max_steps \+ 1 = 2",
    ),  # fixed
    # events
    "event-name": (
        lambda: integrate(CONTRACT, MU, 1.0, events=("boom",)),
        ValueError,
        "unknown event 'boom'; choose among 'blow_up', 'converged', 'clustered'",
    ),
    "event-int": (
        lambda: integrate(CONTRACT, MU, 1.0, events=(3,)),
        TypeError,
        "events must be names or BlowUp/Converged/Clustered objects; received int",
    ),
    "event-clustered-gaussian": (
        lambda: integrate(CONTRACT, G, 1.0, events=("clustered",)),
        ValueError,
        "reads the diameter of the state, which a GaussianSystem does not have",
    ),
    "blowup-size": (
        lambda: BlowUp(1e3, size="min"),
        ValueError,
        "unknown BlowUp size 'min'; choose one of 'max', 'trace'",
    ),
    "blowup-relative-factor": (
        lambda: BlowUp(1, relative=True),
        ValueError,
        "growth factor and must be > 1; received 1",
    ),
    "blowup-relative-str": (
        lambda: BlowUp(10, relative="yes"),
        TypeError,
        "BlowUp relative must be True or False; received 'yes'",
    ),  # fixed
    "converged-relative-factor": (
        lambda: Converged(1, relative=True),
        ValueError,
        "slow-down factor and must be < 1; received 1",
    ),
    "converged-relative-int": (
        lambda: Converged(1e-3, relative=1),
        TypeError,
        "Converged relative must be True or False",
    ),  # fixed
    # methods and engines
    "method-name": (
        lambda: integrate(CONTRACT, MU, 1.0, method="rk5"),
        ValueError,
        "unknown method 'rk5'; choose one of 'auto', 'euler', 'heun', 'rk4', 'dopri5'",
    ),
    "method-int": (
        lambda: integrate(CONTRACT, MU, 1.0, method=4),
        TypeError,
        "method must be a name .* received int",
    ),
    "engine-name": (
        lambda: integrate(CONTRACT, MU, 1.0, engine="x"),
        ValueError,
        "unknown engine 'x'",
    ),
    "engine-tiled-softmax": (
        lambda: integrate(CONTRACT, MU, 0.1, engine="tiled"),
        ValueError,
        "engine 'tiled' does not compute softmax averages",
    ),
    "rk-weights": (
        lambda: ExplicitRK("x", 1, a=((),), b=(0.5,), c=(0.0,)),
        ValueError,
        r"weights b must sum to 1 \(consistency\); received 0.5",
    ),
    "rk-order": (
        lambda: ExplicitRK("x", 0, a=((),), b=(1.0,), c=(0.0,)),
        ValueError,
        "order must be an int >= 1; received 0",
    ),
    "rk-nan": (
        lambda: ExplicitRK("x", 1, a=((),), b=(math.nan,), c=(0.0,)),
        ValueError,
        "coefficients of b must be finite real numbers; received nan",
    ),  # fixed
    "rk-inf-node": (
        lambda: ExplicitRK("x", 2, a=((), (math.inf,)), b=(0.5, 0.5), c=(0.0, math.inf)),
        ValueError,
        "coefficients of a must be finite",
    ),  # fixed
    "rk-string": (
        lambda: ExplicitRK("x", 1, a=((),), b=("1",), c=(0.0,)),
        ValueError,
        "received '1'",
    ),  # fixed
    "rk-empty": (
        lambda: ExplicitRK("x", 1, a=(), b=(), c=()),
        ValueError,
        r"has no stage \(b is empty\)",
    ),  # fixed
    "rk-nodes": (
        lambda: ExplicitRK("x", 2, a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 0.5)),
        ValueError,
        r"node c\[1\] = 0.5 must equal the sum of row 1",
    ),
    "rk-row": (
        lambda: ExplicitRK("x", 2, a=((0.0,), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0)),
        ValueError,
        "row 0 of a must have 0 entries",
    ),
    "rk-fsal": (
        lambda: ExplicitRK("x", 1, a=((),), b=(1.0,), c=(0.0,), fsal=True),
        ValueError,
        "fsal needs an adaptive tableau",
    ),
    "rk-embedded-size": (
        lambda: ExplicitRK("x", 1, a=((),), b=(1.0,), c=(0.0,), b_error=(0.5, 0.5)),
        ValueError,
        "b has 1 stages but b_error has 2",
    ),
    # fields and measures of the wrong kind
    "field-int": (
        lambda: integrate(3, MU, 1.0),
        TypeError,
        "field must be a tpde field \\(or a ready System\\); received int",
    ),
    "field-function": (lambda: integrate(lambda x: x, MU, 1.0), TypeError, "received function"),
    "mu-dim": (
        lambda: integrate(CONTRACT, Empirical(cloud(3, 3)), 1.0),
        ValueError,
        "dimension mismatch",
    ),
    "gaussian-sigmoid": (
        lambda: integrate(Sigmoid(I2, I2, I2), G, 1.0),
        GaussianNotPreserved,
        "there is no moment ODE",
    ),
    "gaussian-normalized": (
        lambda: integrate(Normalized(CONTRACT), G, 0.1),
        GaussianNotPreserved,
        "does not keep Gaussians Gaussian",
    ),
    "masked-no-positions": (
        lambda: integrate(Masked(CONTRACT), MU, 0.1),
        ValueError,
        "needs token positions",
    ),
    "batch-mismatch": (
        lambda: integrate(
            Softmax(-I2.expand(3, 2, 2), I2, I2), Empirical(cloud(6, 2).expand(4, 6, 2)), 0.1
        ),
        ValueError,
        "batch mismatch",
    ),  # fixed
    "grid-rk4": (
        lambda: integrate(CONTRACT, GRID, 0.1, method="rk4"),
        ValueError,
        "strong-stability-preserving methods 'euler' or 'heun'",
    ),
    "volumes-scheme": (
        lambda: FiniteVolumes(GRID, scheme="x"),
        ValueError,
        "unknown scheme 'x'; choose one of 'upwind', 'muscl'",
    ),
    "volumes-cfl-above-one": (
        lambda: FiniteVolumes(GRID, cfl=2),
        ValueError,
        r"cfl is the target Courant number and must lie in \(0, 1\]",
    ),
    "volumes-particles": (
        lambda: FiniteVolumes(MU),
        TypeError,
        "FiniteVolumes discretises a Grid; received Empirical",
    ),
    # JKO: geometries, energies, non-gradient-flow fields
    "jko-geometry": (
        lambda: jko_step(MU, CONTRACT, 0.1, geometry="w3"),
        ValueError,
        "unknown geometry 'w3'; choose one of 'w2'",
    ),
    "jko-bures-particles": (
        lambda: jko_step(MU, CONTRACT, 0.1, geometry="bures"),
        TypeError,
        "geometry 'bures' steps Gaussian measures; received Empirical",
    ),
    "jko-twisted-gaussian": (
        lambda: jko_step(G, CONTRACT, 0.1, geometry="twisted"),
        TypeError,
        "geometry 'twisted' steps Empirical measures",
    ),
    "jko-entropic-particles": (
        lambda: jko_step(MU, CONTRACT, 0.1, geometry="entropic"),
        ValueError,
        "steps densities on a Grid",
    ),
    "jko-grid-w2": (
        lambda: jko_step(GRID, CONTRACT, 0.1),
        TypeError,
        "steps Empirical measures; received Grid",
    ),
    "jko-tensor": (lambda: jko_step(cloud(3, 2), CONTRACT, 0.1), TypeError, "received Tensor"),
    "jko-dim": (
        lambda: jko_step(Empirical(cloud(3, 3)), CONTRACT, 0.1),
        ValueError,
        "dimension mismatch",
    ),
    "jko-batched-cloud": (
        lambda: jko_step(Empirical(cloud(6, 2).expand(3, 6, 2)), CONTRACT, 0.1),
        ValueError,
        r"one particle cloud; received a batch of shape \(3,\)",
    ),  # fixed
    "jko-batched-gaussian": (
        lambda: jko_step(
            Gaussian(torch.zeros(3, 2, dtype=F64), I2), CONTRACT, 0.1, geometry="bures"
        ),
        ValueError,
        "one Gaussian at a time",
    ),
    "jko-l2": (
        lambda: jko_step(MU, L2(I2, I2, I2), 0.1),
        NotAGradientFlow,
        "L2 attention is not a gradient flow",
    ),
    "jko-linear": (
        lambda: jko_step(MU, Linear(I2, I2, I2), 0.1),
        NotAGradientFlow,
        "Linear attention is not a gradient flow",
    ),
    "jko-sigmoid-twisted": (
        lambda: jko_step(MU, Sigmoid(I2, I2, I2), 0.1, geometry="twisted"),
        NotAGradientFlow,
        "Sigmoid attention",
    ),
    "jko-asymmetric-mobility": (
        lambda: jko_step(MU, Softmax(I2, I2, ASYM), 0.1),
        NotAGradientFlow,
        "must be symmetric",
    ),
    "jko-batched-field": (
        lambda: jko_step(MU, Softmax(-I2.expand(3, 2, 2), I2, I2), 0.1),
        NotAGradientFlow,
        "batched parameters",
    ),
    "jko-time-dependent": (
        lambda: jko_step(MU, Softmax(lambda t: -I2, I2, I2), 0.1),
        ValueError,
        "autonomous gradient flow; the field has time-dependent parameters",
    ),
    "jko-normalized": (
        lambda: jko_step(MU.normalized(), Normalized(CONTRACT), 0.1),
        NotImplementedError,
        "moves tokens on a manifold",
    ),
    "jko-twisted-callable": (
        lambda: jko_step(MU, _square, 0.1, geometry="twisted"),
        ValueError,
        "needs the metric's mobility",
    ),
    "jko-mobility-w2": (
        lambda: jko_step(MU, _square, 0.1, mobility=I2),
        ValueError,
        "mobility applies to the twisted geometries",
    ),
    "jko-mobility-field": (
        lambda: jko_step(MU, CONTRACT, 0.1, mobility=I2),
        ValueError,
        "a field sets its own mobility",
    ),
    "jko-epsilon-w2": (
        lambda: jko_step(MU, CONTRACT, 0.1, epsilon=0.1),
        ValueError,
        "epsilon applies to geometry 'entropic'",
    ),
    "jko-energy-int": (lambda: jko_step(MU, 3, 0.1), TypeError, "energy must be a field"),
    "jko-energy-float": (
        lambda: jko_step(MU, lambda m: 1.0, 0.1),
        ValueError,
        "must return a 0-d tensor .* returned float",
    ),
    "jko-energy-constant": (
        lambda: jko_step(MU, lambda m: torch.tensor(1.0, dtype=F64), 0.1),
        ValueError,
        "has no autograd path to the measure",
    ),
    "jko-energy-nan": (
        lambda: jko_step(MU, lambda m: _square(m) * math.nan, 0.1),
        ValueError,
        "the energy is nan at the step's initial measure",
    ),
    "jko-max-iter": (
        lambda: jko_step(MU, CONTRACT, 0.1, max_iter=0),
        ValueError,
        "max_iter must be a positive int; received 0",
    ),
    "jko-flow-too-many-steps": (
        lambda: jko_flow(MU, CONTRACT, 1e-9, 1.0),
        ValueError,
        r"t1 / tau = 1e\+09 JKO steps exceed max_steps = 100000",
    ),  # fixed
    "jko-flow-t1-zero": (
        lambda: jko_flow(MU, CONTRACT, 0.1, 0.0),
        ValueError,
        "t1 must be finite and > 0; received 0.0",
    ),
    "jko-flow-t1-nan": (lambda: jko_flow(MU, CONTRACT, 0.1, math.nan), ValueError, "received nan"),
    "jko-flow-t1-None": (
        lambda: jko_flow(MU, CONTRACT, 0.1, None),
        TypeError,
        "t1 must be a real number; received None",
    ),  # fixed
    "jko-flow-max-steps": (
        lambda: jko_flow(MU, CONTRACT, 0.1, 1.0, max_steps=0),
        ValueError,
        "max_steps must be a positive int",
    ),  # fixed
    # the agreement harness
    "compare-particles": (
        lambda: compare(CONTRACT, MU, 1.0),
        TypeError,
        "g0 must be a tpde Gaussian; received Empirical",
    ),
    "compare-batched": (
        lambda: compare(CONTRACT, Gaussian(torch.zeros(3, 2, dtype=F64), I2), 0.1, n=(10,)),
        ValueError,
        "g0 must be a single Gaussian",
    ),
    "compare-n-zero": (
        lambda: compare(CONTRACT, G, 0.1, n=(0,)),
        ValueError,
        r"n must hold positive values; received \(0,\)",
    ),
    "compare-seeds-zero": (
        lambda: compare(CONTRACT, G, 0.1, n=(10,), seeds=0),
        ValueError,
        "seeds must name at least one seed",
    ),
    "compare-save-one": (
        lambda: compare(CONTRACT, G, 0.1, n=(10,), save=1),
        ValueError,
        "save must be an int >= 2",
    ),
    "compare-t1-nan": (
        lambda: compare(CONTRACT, G, math.nan, n=(10,)),
        ValueError,
        "t1 must be finite and > 0",
    ),
    "compare-h-negative": (
        lambda: compare(CONTRACT, G, 0.1, n=(10,), h=(-0.5,)),
        ValueError,
        "h must hold positive values",
    ),
    "compare-steps-zero": (
        lambda: compare(CONTRACT, G, 0.1, n=(10,), particle_steps=0),
        ValueError,
        "particle_steps must be an int >= 1",
    ),
    "compare-sigmoid": (
        lambda: compare(Sigmoid(I2, I2, I2), G, 0.1, n=(10,)),
        GaussianNotPreserved,
        "no moment ODE",
    ),
    # the convexity probe
    "probe-geodesics": (
        lambda: convexity_probe(CONTRACT, MU, n_geodesics=0),
        ValueError,
        "n_geodesics must be a positive int",
    ),
    "probe-radius-zero": (
        lambda: convexity_probe(CONTRACT, MU, radius=0),
        ValueError,
        "radius must be > 0; received 0",
    ),
    "probe-radius-nan": (
        lambda: convexity_probe(CONTRACT, MU, radius=math.nan),
        ValueError,
        "radius must be finite; received nan",
    ),  # fixed
    "probe-radius-gaussian": (
        lambda: convexity_probe(CONTRACT, G, radius=1.5),
        ValueError,
        r"radius must lie in \(0, 1\) for Gaussians",
    ),
    "probe-times-outside": (
        lambda: convexity_probe(CONTRACT, MU, times=(0.0, 2.0)),
        ValueError,
        r"at least one time in \[0, 1\] \(the geodesic's parameter\); received \[0.0, 2.0\]",
    ),  # fixed
    "probe-times-empty": (
        lambda: convexity_probe(CONTRACT, MU, times=()),
        ValueError,
        r"received \[\]",
    ),  # fixed
    "probe-times-str": (
        lambda: convexity_probe(CONTRACT, MU, times=("a",)),
        TypeError,
        "times must be numbers in",
    ),  # fixed
    "probe-rtol": (
        lambda: convexity_probe(CONTRACT, MU, rtol=-1),
        ValueError,
        "rtol must be finite and >= 0",
    ),  # fixed
    "probe-l2": (
        lambda: convexity_probe(L2(I2, I2, I2), MU),
        NotAGradientFlow,
        "not a gradient flow",
    ),
    "probe-grid": (
        lambda: convexity_probe(CONTRACT, GRID),
        TypeError,
        "Empirical measure or a Gaussian; received Grid",
    ),
    "second-derivative-kinds": (
        lambda: geodesic_second_derivative(CONTRACT, MU, G),
        TypeError,
        "two Gaussians or two Empirical measures",
    ),
}


test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


@pytest.mark.parametrize("value", NOT_POSITIVE, ids=NOT_POSITIVE_IDS)
@pytest.mark.parametrize("name", ["dt", "rtol", "atol"])
def test_steps_and_tolerances_must_be_finite_and_positive(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be finite and > 0; received {value!r}"):
        integrate(CONTRACT, MU, 1.0, **{name: value})


@pytest.mark.parametrize("value", NOT_POSITIVE, ids=NOT_POSITIVE_IDS)
@pytest.mark.parametrize(
    "build",
    [
        lambda v: BlowUp(v),
        lambda v: Converged(v),
        lambda v: Clustered(v),
        lambda v: jko_step(MU, CONTRACT, v),
        lambda v: FiniteVolumes(GRID, cfl=v),
        lambda v: jko_step(GRID, CONTRACT, 0.1, geometry="entropic", epsilon=v),
    ],
    ids=["blowup-threshold", "converged-tol", "clustered-threshold", "jko-tau", "cfl", "epsilon"],
)
def test_event_thresholds_and_step_sizes_must_be_finite_and_positive(build, value):
    with pytest.raises(ValueError, match=rf"must be finite and > 0; received {value!r}"):
        build(value)


@given(non_int_counts())
@ADVERSARIAL
def test_max_steps_must_be_a_positive_int(value):
    with pytest.raises(ValueError, match=rf"max_steps must be a positive int; received {value!r}"):
        integrate(CONTRACT, MU, 1.0, max_steps=value)


@pytest.mark.parametrize("mu", NOT_A_MEASURE, ids=NOT_A_MEASURE_IDS)
def test_integrate_needs_a_measure(mu):
    with pytest.raises(TypeError, match=r"mu0 must be a CircleDensity, an Empirical, .* or a Grid"):
        integrate(CONTRACT, mu, 1.0)


# ---------------------------------------------------------------------------- documented results
def _finite(trajectory) -> bool:
    final = trajectory.final
    tensor = final.points if isinstance(final, Empirical) else final.cov()
    return bool(torch.isfinite(tensor).all())


@pytest.mark.parametrize(
    ("run", "status"),
    [
        (
            lambda: integrate(CONTRACT, MU, 1.0, dt=1e10, method="rk4"),
            "completed",
        ),  # one step, cut at t1
        (lambda: integrate(CONTRACT, MU, 0.0), "completed"),  # t1 = t0: the start is saved
        (lambda: integrate(CONTRACT, MU, 1.0, max_steps=1), "max_steps"),
        (lambda: integrate(Softmax(I2, I2, I2), G, 10.0, method="dopri5"), "blow_up"),
        (lambda: integrate(Linear(I2, I2, 5 * I2), MU, 50.0, events=None), "blow_up"),  # overflow
        (lambda: integrate(CONTRACT, Empirical(cloud(6, 2).half()), 0.1), "completed"),
    ],
    ids=[
        "huge-dt",
        "zero-span",
        "budget",
        "gaussian-blow-up",
        "overflow-without-events",
        "float16",
    ],
)
def test_runs_at_the_edges_end_with_a_status_not_nan(run, status):
    # Documented (tpde.flows.events, loop): numerical events are statuses; the state
    # before an overflowing step is kept, so what is returned is finite.
    trajectory = run()
    assert trajectory.status == status and _finite(trajectory)


def test_float32_overflow_in_a_run_is_a_blow_up_with_a_finite_state():
    huge = Empirical(torch.full((3, 2), 1e19) + cloud(3, 2).float())
    trajectory = integrate(Softmax(I2.float(), I2.float(), I2.float()), huge, 1.0)
    assert trajectory.status == "blow_up" and _finite(trajectory)


@given(st.integers(-6, 5))
@ADVERSARIAL
def test_a_contracting_flow_at_any_scale_completes(exponent):
    # Issue 14: BlowUp fires on upward crossings, so a large contracting start is no blow-up.
    # Σ̇ = −2Σ² here: from λ(Σ₀) = 1e12 on an explicit step must be ~1/(4λ) < 1e-12, which
    # the loop's step-collapse rule (absolute, 1e-12·max(1, t)) reports as blow-up (known).
    g = Gaussian(torch.zeros(2, dtype=F64), 10.0 ** (2 * exponent) * I2)
    trajectory = integrate(Softmax.from_interaction(-I2, I2), g, 0.5, method="dopri5")
    assert trajectory.status == "completed" and _finite(trajectory)


def test_a_custom_tableau_integrates():
    midpoint = ExplicitRK("midpoint", 2, a=((), (0.5,)), b=(0.0, 1.0), c=(0.0, 0.5))
    trajectory = integrate(CONTRACT, MU, 0.1, method=midpoint)
    assert trajectory.status == "completed" and _finite(trajectory)


def test_jko_steps_at_extreme_step_sizes_report_a_status():
    # A huge τ or a tiny one still returns a JKOStep with a status, finite measure.
    for tau in (1e-12, 1e6):
        step = jko_step(MU, CONTRACT, tau)
        assert step.status in ("completed", "not_converged")
        assert torch.isfinite(step.measure.points).all()
