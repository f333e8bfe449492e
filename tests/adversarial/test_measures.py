"""Adversarial inputs to tpde.measures: Empirical, Gaussian, Grid, uniform_on_sphere.

Each case asserts a clear error (type and the informative part of the message) or a finite,
documented result. Cases marked "fixed" failed before this suite's fixes (raw torch errors,
silent wrong dtypes, messages blaming a value that was not passed).
"""

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.adversarial.strategies import (
    ADVERSARIAL,
    COMPLEX,
    F64,
    HALF,
    NON_FINITE,
    cloud,
    error_table_test,
    eye,
    finite_clouds,
    poisoned,
    wrong_shapes,
)
from tpde.measures import Empirical, Gaussian, Grid, uniform_on_sphere

X = cloud(5, 2)
W = torch.full((5,), 0.2, dtype=F64)
G0 = Gaussian(torch.zeros(2, dtype=F64), eye())
CELLS = torch.full((4,), 0.25, dtype=F64)


def _nan_at(shape, index, dtype=F64):
    t = torch.ones(shape, dtype=dtype)
    t[index] = math.nan
    return t


# ---------------------------------------------------------------------------- errors
ERRORS = {
    # Empirical: points
    "points-1d": (
        lambda: Empirical(torch.ones(5)),
        ValueError,
        r"shape \(n, d\); received shape \(5,\)",
    ),
    "points-0d": (lambda: Empirical(torch.tensor(1.0)), ValueError, r"received shape \(\)"),
    "points-no-rows": (
        lambda: Empirical(torch.ones(0, 2)),
        ValueError,
        r"at least one point.*\(0, 2\)",
    ),
    "points-no-columns": (
        lambda: Empirical(torch.ones(5, 0)),
        ValueError,
        r"at least one point.*\(5, 0\)",
    ),
    "points-None": (
        lambda: Empirical(None),
        TypeError,
        "points must be a torch tensor or a numpy array; received NoneType",
    ),
    "points-dict": (
        lambda: Empirical({}),
        TypeError,
        "received dict. Convert it with torch.as_tensor",
    ),
    "points-str": (
        lambda: Empirical("abc"),
        TypeError,
        "points must be an array of numbers; received str",
    ),
    "points-ragged": (
        lambda: Empirical([[1, 2], [3]]),
        TypeError,
        "points must be an array of numbers; received list",
    ),
    "points-meta": (
        lambda: Empirical(torch.ones(5, 2, device="meta")),
        ValueError,
        "points is a 'meta' tensor.*no values",
    ),  # fixed
    "points-nan": (
        lambda: Empirical(_nan_at((3, 2), (1, 0))),
        ValueError,
        r"points contains 1 non-finite value\(s\).*index \(1, 0\)",
    ),
    # Empirical: weights
    "weights-negative": (
        lambda: Empirical(X, torch.tensor([1.2, -0.2, 0, 0, 0], dtype=F64)),
        ValueError,
        "nonnegative; received minimum -0.2",
    ),
    "weights-sum": (
        lambda: Empirical(X, torch.full((5,), 0.3, dtype=F64)),
        ValueError,
        "sum to 1; received a sum of 1.5. Normalise",
    ),
    "weights-all-zero": (
        lambda: Empirical(X, torch.zeros(5, dtype=F64)),
        ValueError,
        "sum to 1; received a sum of 0",
    ),
    "weights-shape": (
        lambda: Empirical(X, torch.full((4,), 0.25, dtype=F64)),
        ValueError,
        r"shape \(n,\) = \(5,\).*received shape \(4,\)",
    ),
    "weights-batched": (
        lambda: Empirical(X, W.expand(2, 5)),
        ValueError,
        r"received shape \(2, 5\)",
    ),
    "weights-nan": (
        lambda: Empirical(X, _nan_at((5,), 2)),
        ValueError,
        r"weights contains 1 non-finite.*\(2,\)",
    ),
    "weights-complex": (
        lambda: Empirical(X, W.to(torch.complex128)),
        TypeError,
        "weights must be real",
    ),
    "weights-str": (lambda: Empirical(X, "abc"), TypeError, "weights must be an array of numbers"),
    "weights-meta": (
        lambda: Empirical(X, torch.full((5,), 0.2, device="meta")),
        ValueError,
        "weights is a 'meta' tensor",
    ),  # fixed
    # Empirical: positions
    "positions-range": (
        lambda: Empirical(X, positions=torch.tensor([0, 0.5, 1, -1.5, 2.0])),
        ValueError,
        r"positions must be ≥ 0 .*; received a minimum of -1.5",
    ),
    "positions-nan": (
        lambda: Empirical(X, positions=_nan_at((5,), 3)),
        ValueError,
        "positions contains 1 non-finite",
    ),
    "positions-shape": (
        lambda: Empirical(X, positions=torch.tensor([0.0, 1.0])),
        ValueError,
        r"positions must have shape \(n,\) = \(5,\)",
    ),
    # Empirical: methods
    "sample-zero": (
        lambda: Empirical(X).sample(0),
        ValueError,
        "number of samples must be a positive int; received 0",
    ),
    "sample-negative": (lambda: Empirical(X).sample(-1), ValueError, "positive int; received -1"),
    "sample-float": (lambda: Empirical(X).sample(2.0), ValueError, "positive int; received 2.0"),
    "sample-bool": (lambda: Empirical(X).sample(True), ValueError, "positive int; received True"),
    "sample-batched": (
        lambda: Empirical(cloud(4, 2).expand(3, 4, 2)).sample(2),
        ValueError,
        "index an element first",
    ),
    "normalized-origin": (
        lambda: Empirical(torch.zeros(3, 2)).normalized(),
        ValueError,
        "nonzero points: a point at the origin",
    ),
    "to-int-dtype": (
        lambda: Empirical(X).to(dtype=torch.int64),
        TypeError,
        "floating torch dtype.*received torch.int64",
    ),  # fixed
    "to-str-dtype": (
        lambda: Empirical(X).to(dtype="float32"),
        TypeError,
        "floating torch dtype.*received 'float32'",
    ),  # fixed
    "with-points-shape": (
        lambda: Empirical(X).with_points(torch.ones(4, 2)),
        ValueError,
        r"shape \(5, 2\); received \(4, 2\)",
    ),
    "index-unbatched": (lambda: Empirical(X)[0], TypeError, "holds one cloud, not a batch"),
    "index-too-deep": (
        lambda: Empirical(cloud(4, 2).expand(3, 4, 2))[0, 0],
        IndexError,
        r"batch dimensions \(3,\) only",
    ),
    "from-gaussian-batched": (
        lambda: Empirical.from_gaussian(Gaussian(torch.zeros(2, 2), eye().expand(2, 2, 2)), 4),
        ValueError,
        "single Gaussian; received batch shape",
    ),
    # Gaussian
    "gauss-mean-0d": (
        lambda: Gaussian(torch.tensor(0.0), eye(1)),
        ValueError,
        r"mean must have shape \(..., d\) with d >= 1",
    ),
    "gauss-d0": (
        lambda: Gaussian(torch.zeros(0), torch.zeros(0, 0)),
        ValueError,
        r"d >= 1; received shape \(0,\)",
    ),
    "gauss-cov-shape": (
        lambda: Gaussian(torch.zeros(2), torch.eye(3)),
        ValueError,
        r"cov must have shape \(..., 2, 2\).*received shape \(3, 3\)",
    ),
    "gauss-cov-vector": (
        lambda: Gaussian(torch.zeros(2), torch.ones(2)),
        ValueError,
        r"received shape \(2,\)",
    ),
    "gauss-asymmetric": (
        lambda: Gaussian(torch.zeros(2), torch.tensor([[1, 0.5], [0, 1]])),
        ValueError,
        r"symmetric; .*asymmetry 0.5.*\(S \+ S.mT\) / 2",
    ),
    "gauss-negative": (
        lambda: Gaussian(torch.zeros(2), -torch.eye(2)),
        ValueError,
        "positive semidefinite; .*smallest eigenvalue -1",
    ),
    "gauss-cov-nan": (
        lambda: Gaussian(torch.zeros(2), _nan_at((2, 2), (0, 0))),
        ValueError,
        "cov contains 1 non-finite",
    ),
    "gauss-mean-inf": (
        lambda: Gaussian(torch.tensor([math.inf, 0.0]), torch.eye(2)),
        ValueError,
        "mean contains 1 non-finite",
    ),
    "gauss-batch-mismatch": (
        lambda: Gaussian(torch.zeros(3, 2), eye().expand(4, 2, 2)),
        ValueError,
        r"batch shapes of mean \(3,\) and cov \(4,\) do not broadcast",
    ),
    "gauss-index-unbatched": (lambda: G0[0], IndexError, "unbatched Gaussian cannot be indexed"),
    "gauss-None": (
        lambda: Gaussian(None, None),
        TypeError,
        "mean must be a torch tensor or a numpy array",
    ),
    "gauss-str": (lambda: Gaussian("a", "b"), TypeError, "mean must be an array of numbers"),
    "gauss-meta": (
        lambda: Gaussian(torch.zeros(2, device="meta"), torch.eye(2, device="meta")),
        ValueError,
        "mean is a 'meta' tensor",
    ),  # fixed
    "gauss-cov-meta": (
        lambda: Gaussian(torch.zeros(2), torch.eye(2, device="meta")),
        ValueError,
        "cov is a 'meta' tensor",
    ),  # fixed
    "gauss-to-half": (
        lambda: G0.to(dtype=torch.float16),
        TypeError,
        "dtype is torch.float16: covariances need linear algebra",
    ),  # fixed
    "gauss-sample-zero": (lambda: G0.sample(0), ValueError, "positive int; received 0"),
    # Grid
    "grid-3d": (
        lambda: Grid(torch.full((2, 2, 2), 1 / 8), -1, 1),
        ValueError,
        "d = 1 or 2 only.*Empirical.from_gaussian",
    ),
    "grid-0d": (
        lambda: Grid(torch.tensor(1.0), -1, 1),
        ValueError,
        "received a 0-d tensor. Pass one mass per cell",
    ),
    "grid-empty": (
        lambda: Grid(torch.ones(0), -1, 1),
        ValueError,
        r"at least one cell per axis; received shape \(0,\)",
    ),
    "grid-negative": (
        lambda: Grid(torch.tensor([1.5, -0.5]), -1, 1),
        ValueError,
        "nonnegative; received minimum -0.5.*clamp_min",
    ),
    "grid-sum": (
        lambda: Grid(torch.tensor([0.5, 0.6]), -1, 1),
        ValueError,
        "summing to 1; received a total of 1.1",
    ),
    "grid-nan": (
        lambda: Grid(torch.tensor([math.nan, 1.0]), -1, 1),
        ValueError,
        "density contains 1 non-finite",
    ),
    "grid-complex": (
        lambda: Grid(CELLS.to(torch.complex64), -1, 1),
        TypeError,
        "density must be real",
    ),
    "grid-meta": (
        lambda: Grid(torch.full((4,), 0.25, device="meta"), -1, 1),
        ValueError,
        "density is a 'meta' tensor",
    ),  # fixed
    "box-inverted": (
        lambda: Grid(CELLS, 1, -1),
        ValueError,
        r"lower < upper on every axis; received lower = \[1.0\], upper = \[-1.0\]",
    ),
    "box-empty": (lambda: Grid(CELLS, 1, 1), ValueError, "lower < upper"),
    "box-nan": (lambda: Grid(CELLS, math.nan, 1), ValueError, "lower contains 1 non-finite"),
    "box-inf": (lambda: Grid(CELLS, -math.inf, 1), ValueError, "lower contains 1 non-finite"),
    "box-shape": (
        lambda: Grid(CELLS, [-1, -1], [1, 1]),
        ValueError,
        r"lower must be a number or have shape \(1,\) for a grid in d = 1",
    ),
    "box-str": (lambda: Grid(CELLS, "a", 1), TypeError, "lower must be an array of numbers"),
    "box-beyond-float32": (
        lambda: Grid(CELLS.float(), -1e300, 1e300),
        OverflowError,
        r"lower = \[-1e\+300\] does not fit in torch.float32",
    ),  # fixed
    "box-too-wide": (
        lambda: Grid(CELLS.float(), -1e30, 1e30),
        OverflowError,
        "too wide for torch.float32: its squared cell sizes",
    ),  # fixed
    "deposit-shape-zero": (
        lambda: Grid.from_empirical(Empirical(cloud(5, 1)), 0, -1, 1),
        ValueError,
        r"1 positive int\(s\), one per axis; received \(0,\)",
    ),
    "deposit-shape-negative": (
        lambda: Grid.from_empirical(Empirical(cloud(5, 1)), -3, -1, 1),
        ValueError,
        r"received \(-3,\)",
    ),
    "deposit-shape-float": (
        lambda: Grid.from_empirical(Empirical(cloud(5, 1)), 3.0, -1, 1),
        TypeError,
        "shape must be an int or a tuple of 1 ints; received 3.0",
    ),
    "deposit-shape-length": (
        lambda: Grid.from_empirical(Empirical(cloud(5, 2)), (3, 3, 3), -1, 1),
        ValueError,
        r"2 positive int\(s\).*\(3, 3, 3\)",
    ),
    "deposit-outside": (
        lambda: Grid.from_empirical(Empirical(torch.full((5, 1), 10.0)), 4, -1, 1),
        ValueError,
        "no mass falls inside the box; enlarge it",
    ),
    "deposit-assignment": (
        lambda: Grid.from_empirical(Empirical(cloud(5, 1)), 4, -1, 1, assignment="x"),
        ValueError,
        "unknown assignment 'x'; choose one of 'cic', 'ngp'",
    ),
    "deposit-batched": (
        lambda: Grid.from_empirical(Empirical(cloud(5, 1).expand(3, 5, 1)), 4, -1, 1),
        ValueError,
        r"deposits one cloud; received a batch of shape \(3,\)",
    ),  # fixed
    "deposit-not-empirical": (
        lambda: Grid.from_empirical(G0, 4, -1, 1),
        TypeError,
        "mu must be an Empirical; received Gaussian",
    ),
    "discretise-batched": (
        lambda: Grid.from_gaussian(
            Gaussian(torch.zeros(3, 1), torch.eye(1).expand(3, 1, 1)), 4, -1, 1
        ),
        ValueError,
        r"single Gaussian; received batch shape \(3,\)",
    ),
    "discretise-3d": (
        lambda: Grid.from_gaussian(Gaussian(torch.zeros(3), torch.eye(3)), 4, -1, 1),
        ValueError,
        "d = 1 or 2 only",
    ),
    "discretise-quadrature": (
        lambda: Grid.from_gaussian(Gaussian(torch.zeros(1), torch.eye(1)), 4, -1, 1, quadrature=0),
        ValueError,
        "quadrature must be a positive int; received 0",
    ),
    "discretise-far": (
        lambda: Grid.from_gaussian(Gaussian(torch.full((1,), 100.0), torch.eye(1)), 4, -1, 1),
        ValueError,
        "no mass falls inside the box",
    ),
    "discretise-not-gaussian": (
        lambda: Grid.from_gaussian(Empirical(cloud(4, 1)), 4, -1, 1),
        TypeError,
        "g must be a Gaussian; received Empirical",
    ),
    "grid-to-int": (
        lambda: Grid(CELLS, -1, 1).to(dtype=torch.int32),
        TypeError,
        "floating torch dtype",
    ),  # fixed
    # uniform_on_sphere
    "sphere-n0": (
        lambda: uniform_on_sphere(0, 3),
        ValueError,
        "n must be a positive int; received 0",
    ),
    "sphere-d0": (
        lambda: uniform_on_sphere(3, 0),
        ValueError,
        "d must be a positive int; received 0",
    ),
    "sphere-d1": (
        lambda: uniform_on_sphere(3, 1),
        ValueError,
        r"S\^\(d-1\) needs d >= 2; received d = 1",
    ),
    "sphere-n-float": (
        lambda: uniform_on_sphere(3.0, 2),
        ValueError,
        "n must be a positive int; received 3.0",
    ),
    "sphere-n-bool": (lambda: uniform_on_sphere(True, 2), ValueError, "received True"),
    "sphere-int-dtype": (
        lambda: uniform_on_sphere(3, 2, dtype=torch.int64),
        TypeError,
        "floating torch dtype.*torch.int64",
    ),  # fixed
    "sphere-batch-int": (
        lambda: uniform_on_sphere(3, 2, batch=2),
        TypeError,
        r"batch must be a tuple of sizes, e.g. \(2,\)",
    ),  # fixed
    "sphere-batch-negative": (
        lambda: uniform_on_sphere(3, 2, batch=(-1,)),
        ValueError,
        "batch size must be a positive int; received -1",
    ),
    "sphere-meta": (
        lambda: uniform_on_sphere(3, 2, device="meta"),
        ValueError,
        "'meta' tensor",
    ),  # fixed
}


test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize(
    "build",
    [
        lambda z: Empirical(torch.ones(5, 2, dtype=z)),
        lambda z: Gaussian(torch.zeros(2, dtype=z), torch.eye(2)),
        lambda z: Gaussian(torch.zeros(2), torch.eye(2, dtype=z)),
    ],
    ids=["points", "mean", "cov"],
)
def test_complex_inputs_are_refused(build, dtype):
    with pytest.raises(TypeError, match=rf"must be real; received a complex tensor \({dtype}\)"):
        build(dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_gaussians_are_refused_naming_the_fix(dtype):
    # fixed: was NotImplementedError "linalg_eigh_cpu" not implemented for 'Half'.
    with pytest.raises(TypeError, match=rf"cov is {dtype}: .*Pass float32 or float64"):
        Gaussian(torch.zeros(2, dtype=dtype), torch.eye(2, dtype=dtype))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_particles_keep_their_dtype(dtype):
    # Documented: tensors keep their dtype; moments are plain weighted sums (no linear algebra).
    mu = Empirical(cloud(5, 2).to(dtype))
    assert mu.dtype == dtype and mu.mean().dtype == dtype
    assert torch.isfinite(mu.cov().float()).all()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool], ids=str)
def test_integer_and_bool_inputs_take_the_default_float_dtype(dtype):
    # Documented in tpde._validation.as_tensor: integer and bool inputs become floats.
    mu = Empirical(torch.ones(5, 2, dtype=dtype))
    g = Gaussian(torch.zeros(2, dtype=dtype), torch.eye(2, dtype=dtype))
    grid = Grid(torch.tensor([0, 1, 0], dtype=dtype), -1, 1)
    for tensor in (mu.points, g.cov(), grid.density):
        assert tensor.dtype == torch.get_default_dtype()


@given(poisoned())
@ADVERSARIAL
def test_non_finite_points_are_located(case):
    points, index = case
    with pytest.raises(
        ValueError,
        match=re.escape(f"1 non-finite value(s) (NaN or Inf), the first at index {index}"),
    ):
        Empirical(points)


@given(
    st.integers(1, 4).flatmap(
        lambda d: st.tuples(st.integers(0, d - 1), st.integers(0, d - 1), st.just(d))
    ),
    st.sampled_from(NON_FINITE),
)
@ADVERSARIAL
def test_non_finite_covariances_are_refused(place, bad):
    i, j, d = place
    cov = eye(d)
    cov[i, j] = cov[j, i] = bad
    with pytest.raises(ValueError, match=r"cov contains [12] non-finite value\(s\)"):
        Gaussian(torch.zeros(d, dtype=F64), cov)


@given(st.integers(1, 4).flatmap(lambda d: st.tuples(st.just(d), wrong_shapes((d, d)))))
@ADVERSARIAL
def test_covariance_of_the_wrong_shape(case):
    d, shape = case
    with pytest.raises(ValueError, match=rf"cov must have shape \(..., {d}, {d}\)"):
        Gaussian(torch.zeros(d, dtype=F64), torch.ones(shape, dtype=F64))


@given(finite_clouds(low_exp=-150, high_exp=150))
@ADVERSARIAL
def test_moments_stay_finite_at_every_float64_scale(points):
    # |x| up to ~1e151: |x|² ~ 1e302 is still finite in float64.
    mu = Empirical(points)
    assert torch.isfinite(mu.mean()).all() and torch.isfinite(mu.cov()).all()


@pytest.mark.parametrize(
    "cov",
    [
        torch.zeros(2, 2, dtype=F64),
        1e300 * eye(),
        1e-300 * eye(),
        torch.diag(torch.tensor([1.0, 0.0], dtype=F64)),
    ],
    ids=["zero", "huge", "tiny", "rank-one"],
)
def test_degenerate_and_extreme_gaussians_sample_finite_points(cov):
    # Documented: degenerate covariances are allowed (the rank-deficient limits of flows).
    sample = Gaussian(torch.zeros(2, dtype=F64), cov).sample(
        4, generator=torch.Generator().manual_seed(0)
    )
    assert sample.shape == (4, 2) and torch.isfinite(sample).all()


def test_boundary_weights_and_single_points_are_valid_measures():
    # A zero weight is allowed (the particle attracts nothing); a single point is a measure.
    mu = Empirical(X, torch.tensor([1.0, 0, 0, 0, 0], dtype=F64))
    assert torch.equal(mu.mean(), X[0]) and torch.all(mu.cov() == 0)
    one = Empirical(torch.ones(1, 3, dtype=F64))
    assert one.n == 1 and torch.all(one.cov() == 0)
    # numpy and list inputs convert once, float64 stays float64.
    assert Empirical(np.ones((2, 2))).dtype == torch.float64


def test_a_zero_covariance_discretises_into_one_cell():
    grid = Grid.from_gaussian(
        Gaussian(torch.zeros(1, dtype=F64), torch.zeros(1, 1, dtype=F64)), 4, -1, 1
    )
    assert torch.isfinite(grid.density).all() and float(grid.density.sum()) == pytest.approx(1.0)


def test_numpy_integers_are_counts():
    # A count taken from an array (a shape entry, arange) is a numpy integer: accepted as
    # an int; a float count and a bool stay refused.
    points = uniform_on_sphere(np.int64(6), np.int32(3)).points
    assert points.shape == (6, 3)
    assert Gaussian(torch.zeros(2), torch.eye(2)).sample(np.int64(4)).shape == (4, 2)
    with pytest.raises(ValueError, match=r"n must be a positive int; received 6\.0"):
        uniform_on_sphere(6.0, 3)
    with pytest.raises(ValueError, match=r"n must be a positive int; received np\.True_"):
        uniform_on_sphere(np.True_, 3)
