"""Adversarial inputs to tpde.metrics: w2, Sinkhorn (divergence and solve), the Bures
geometry and barycenter, entropic Gaussian OT, twisted and conditional W2, diagnostics and
angular clustering.

Each case asserts a clear error (type and the informative part of the message) or a finite,
documented result; "fixed" marks cases that failed before this suite's fixes.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tpde.metrics.sinkhorn as sinkhorn_module
from tests.adversarial.strategies import (
    ADVERSARIAL,
    F64,
    HALF,
    NOT_POSITIVE,
    NOT_POSITIVE_IDS,
    cloud,
    error_table_test,
    eye,
)
from tpde.fields import Normalized, NotAGradientFlow, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian, Grid, uniform_on_sphere
from tpde.metrics import (
    BuresTangent,
    angular_cluster_count,
    bures_barycenter,
    bures_exp,
    bures_geodesic,
    bures_inner,
    bures_log,
    bures_monge_map,
    bures_wasserstein,
    cluster_density,
    clusters_over_time,
    conditional_w2,
    entropic_ot_gaussian,
    sinkhorn_divergence,
    sinkhorn_solve,
    time_to_single_cluster,
    twisted_w2,
    w2,
)
from tpde.metrics import diagnostics as D

I2 = eye()
MU, NU = Empirical(cloud(6, 2, seed=1)), Empirical(cloud(5, 2, seed=2))
G = Gaussian(torch.zeros(2, dtype=F64), I2)
H = Gaussian(torch.ones(2, dtype=F64), 2 * I2)
FLAT = Gaussian(torch.zeros(2, dtype=F64), torch.zeros(2, 2, dtype=F64))
ASYM = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64)
POS = torch.linspace(0, 1, 6)
SPHERE = uniform_on_sphere(8, 3, generator=torch.Generator().manual_seed(0))
GRID = Grid(torch.full((4,), 0.25, dtype=F64), -1, 1)


def _scaled(scale, dtype=F64):
    return Empirical(cloud(6, 2, seed=1).to(dtype) * scale), Empirical(
        cloud(5, 2, seed=2).to(dtype) * scale
    )


ERRORS = {
    # w2
    "w2-dim": (
        lambda: w2(MU, Empirical(cloud(5, 3))),
        ValueError,
        r"different dimensions \(2 and 3\)",
    ),
    "w2-mixed": (
        lambda: w2(G, MU),
        TypeError,
        "does not compare a Gaussian and Empirical.*Empirical.from_gaussian",
    ),
    "w2-grid-gaussian": (
        lambda: w2(GRID, Gaussian(torch.zeros(1, dtype=F64), eye(1))),
        TypeError,
        "Grid.from_gaussian",
    ),
    "w2-tensors": (
        lambda: w2(MU.points, NU.points),
        TypeError,
        r"w2 takes tpde measures; mu is a Tensor. Wrap points",
    ),
    "w2-max-iter-zero": (
        lambda: w2(MU, NU, max_iter=0),
        ValueError,
        "max_iter must be a positive int; received 0",
    ),
    "w2-max-iter-one": (
        lambda: w2(MU, NU, max_iter=1),
        RuntimeError,
        r"Pass a larger max_iter \(received 1\)",
    ),
    "w2-batched": (
        lambda: w2(Empirical(cloud(6, 2).expand(3, 6, 2)), NU),
        ValueError,
        r"batch of \(3,\) particle clouds; compare one cloud at a time",
    ),
    "w2-overflow-f64": (
        lambda: w2(*_scaled(1e154)),
        OverflowError,
        "transport costs of these measures overflow.*homogeneous",
    ),  # fixed
    "w2-overflow-f32": (
        lambda: w2(*_scaled(1e19, torch.float32)),
        OverflowError,
        "or compute in float64",
    ),  # fixed
    "w2-gaussian-batches": (
        lambda: w2(
            Gaussian(torch.zeros(3, 2, dtype=F64), I2), Gaussian(torch.zeros(4, 2, dtype=F64), I2)
        ),
        ValueError,
        r"batch shapes \(3,\) and \(4,\) do not broadcast",
    ),
    # Sinkhorn
    "sd-blur-underflow": (
        lambda: sinkhorn_divergence(MU, NU, blur=1e-300),
        ValueError,
        r"blur = 1e-300 is too small for torch.float64.*w2\(mu, nu\) \*\* 2 / 2",
    ),  # fixed
    "sd-blur-underflow-f32": (
        lambda: sinkhorn_divergence(*_scaled(1.0, torch.float32), blur=1e-20),
        ValueError,
        "too small for torch.float32.*or compute in float64",
    ),  # fixed
    "sd-blur-overflow": (
        lambda: sinkhorn_divergence(MU, NU, blur=1e160),
        ValueError,
        r"blur = 1e\+160 is too large for torch.float64",
    ),  # fixed
    "sd-gaussian-blur-underflow": (
        lambda: sinkhorn_divergence(G, H, blur=1e-300),
        ValueError,
        "too small for torch.float64",
    ),  # fixed
    "sd-gaussian-blur-overflow": (
        lambda: sinkhorn_divergence(G, H, blur=1e100),
        ValueError,
        "too large for torch.float64",
    ),  # fixed
    "sd-points-overflow-f32": (
        lambda: sinkhorn_divergence(*_scaled(1e20, torch.float32)),
        OverflowError,
        "squared distances between these points overflow torch.float32",
    ),  # fixed
    "sd-scaling-one": (
        lambda: sinkhorn_divergence(MU, NU, scaling=1),
        ValueError,
        r"scaling must lie in \(0, 1\).*received 1.0",
    ),
    "sd-scaling-above": (
        lambda: sinkhorn_divergence(MU, NU, scaling=1.5),
        ValueError,
        "received 1.5",
    ),
    "sd-engine": (
        lambda: sinkhorn_divergence(MU, NU, engine="x"),
        ValueError,
        "unknown engine 'x'; choose one of 'auto', 'dense', 'keops', 'multiscale'",
    ),
    "sd-engine-type": (
        lambda: sinkhorn_divergence(MU, NU, engine=1),
        TypeError,
        "engine must be a string",
    ),
    "sd-multiscale-d4": (
        lambda: sinkhorn_divergence(
            Empirical(cloud(5, 4)), Empirical(cloud(5, 4)), engine="multiscale"
        ),
        ValueError,
        "exists for d ≤ 3 only",
    ),
    "sd-dim": (
        lambda: sinkhorn_divergence(MU, Empirical(cloud(5, 3))),
        ValueError,
        "different dimensions",
    ),
    "sd-mixed": (
        lambda: sinkhorn_divergence(G, MU),
        TypeError,
        "does not compare a Gaussian and Empirical",
    ),
    "sd-batched": (
        lambda: sinkhorn_divergence(Empirical(cloud(6, 2).expand(3, 6, 2)), NU),
        ValueError,
        "compare one cloud at a time",
    ),
    "solve-max-iter-zero": (
        lambda: sinkhorn_solve(MU, NU, max_iter=0),
        ValueError,
        "max_iter must be a positive int",
    ),
    "solve-atol": (
        lambda: sinkhorn_solve(MU, NU, atol=-1),
        ValueError,
        "atol must be finite and >= 0; received -1.0",
    ),
    "solve-tensors": (
        lambda: sinkhorn_solve(MU.points, NU.points),
        TypeError,
        "sinkhorn_solve takes tpde measures",
    ),
    # Bures geometry
    "bures-particles": (
        lambda: bures_wasserstein(MU, H),
        TypeError,
        r"two tpde.measures.Gaussian; g0 is a Empirical. For particles use tpde.metrics.w2",
    ),
    "bures-dim": (
        lambda: bures_wasserstein(G, Gaussian(torch.zeros(3, dtype=F64), eye(3))),
        ValueError,
        "different dimensions",
    ),
    "monge-degenerate": (
        lambda: bures_monge_map(FLAT, H),
        ValueError,
        "g0's covariance is degenerate.*Use bures_geodesic",
    ),
    "log-degenerate": (
        lambda: bures_log(FLAT, H),
        ValueError,
        "bures_log: g0's covariance is degenerate",
    ),
    "geodesic-t-nan": (
        lambda: bures_geodesic(G, H, math.nan),
        ValueError,
        "t contains 1 non-finite",
    ),
    "geodesic-t-str": (
        lambda: bures_geodesic(G, H, "a"),
        TypeError,
        "t must be an array of numbers",
    ),
    "geodesic-beyond-extension": (
        lambda: bures_geodesic(
            Gaussian(torch.zeros(1, dtype=F64), eye(1)),
            Gaussian(torch.zeros(1, dtype=F64), 4 * eye(1)),
            -2.0,
        ),
        ValueError,
        r"t = -2 lies beyond the geodesic's extension, \[-1, inf\]",
    ),  # fixed
    "geodesic-beyond-extension-backwards": (  # Σ₀ near-singular: computed from g1 back
        lambda: bures_geodesic(
            Gaussian(torch.zeros(2, dtype=F64), torch.diag(torch.tensor([1.0, 1e-12], dtype=F64))),
            Gaussian(torch.zeros(2, dtype=F64), torch.diag(torch.tensor([4.0, 1.0], dtype=F64))),
            -5.0,
        ),
        ValueError,
        r"t = -5 lies beyond the geodesic's extension, \[-1e-06, inf\]",
    ),  # fixed: it reported t = 6 and the reversed geodesic's range
    "geodesic-particles": (lambda: bures_geodesic(MU, H, 0.5), TypeError, "g0 is a Empirical"),
    "exp-tensor": (
        lambda: bures_exp(G, I2),
        TypeError,
        r"tangent must be a BuresTangent\(mean, sym\); received Tensor",
    ),
    "exp-dim": (
        lambda: bures_exp(G, BuresTangent(torch.zeros(3, dtype=F64), eye(3))),
        ValueError,
        r"mean \(..., 2\) and sym \(..., 2, 2\)",
    ),
    "exp-asymmetric": (
        lambda: bures_exp(
            G, BuresTangent(torch.zeros(2, dtype=F64), torch.tensor([[0.0, 1], [0, 0]], dtype=F64))
        ),
        ValueError,
        "tangent.sym must be symmetric",
    ),
    "exp-nan": (
        lambda: bures_exp(
            G, BuresTangent(torch.zeros(2, dtype=F64), torch.full((2, 2), math.nan, dtype=F64))
        ),
        ValueError,
        "tangent.sym contains 4 non-finite",
    ),
    "inner-int": (lambda: bures_inner(G, 1, 2), TypeError, "u must be a BuresTangent"),
    # barycenter
    "bary-empty": (
        lambda: bures_barycenter([]),
        ValueError,
        "gaussians is empty; pass at least one Gaussian",
    ),
    "bary-particles": (
        lambda: bures_barycenter([G, MU]),
        TypeError,
        r"gaussians\[1\] must be a Gaussian; received Empirical",
    ),
    "bary-dims": (
        lambda: bures_barycenter([G, Gaussian(torch.zeros(3, dtype=F64), eye(3))]),
        ValueError,
        r"different dimensions \[2, 3\]",
    ),
    "bary-tensor": (
        lambda: bures_barycenter(torch.eye(2)),
        TypeError,
        "a list of tpde.measures.Gaussian or one Gaussian of batch shape",
    ),
    "bary-weights-negative": (
        lambda: bures_barycenter([G, H], weights=[1.5, -0.5]),
        ValueError,
        "weights must be nonnegative; received minimum -0.5",
    ),
    "bary-weights-sum": (
        lambda: bures_barycenter([G, H], weights=[0.5, 0.6]),
        ValueError,
        "weights must sum to 1 .* received a sum of 1.1",
    ),
    "bary-weights-length": (
        lambda: bures_barycenter([G, H], weights=[1.0]),
        ValueError,
        r"shape \(..., K\) with K = 2 Gaussians",
    ),
    "bary-weights-nan": (
        lambda: bures_barycenter([G, H], weights=[math.nan, 0.5]),
        ValueError,
        "weights contains 1 non-finite",
    ),
    "bary-max-iter": (
        lambda: bures_barycenter([G, H], max_iter=0),
        ValueError,
        "max_iter must be a positive int",
    ),
    "bary-degenerate": (
        lambda: bures_barycenter([FLAT, FLAT]),
        ValueError,
        "needs at least one definite covariance Σ_k with a positive",
    ),
    # entropic Gaussian OT
    "eot-cost": (
        lambda: entropic_ot_gaussian(G, H, 1.0, cost="x"),
        ValueError,
        "unknown cost 'x'; choose one of 'quadratic', 'attention'",
    ),
    "eot-attention-no-A": (
        lambda: entropic_ot_gaussian(G, H, 1.0, cost="attention"),
        ValueError,
        r"needs the interaction matrix A .* pass A=scale \* K.T @ Q",
    ),
    "eot-A-shape": (
        lambda: entropic_ot_gaussian(G, H, 1.0, cost="attention", A=torch.eye(3)),
        ValueError,
        r"A must have shape \(..., 2, 2\)",
    ),
    "eot-A-quadratic": (
        lambda: entropic_ot_gaussian(G, H, 1.0, A=I2),
        ValueError,
        "A is only used with cost='attention'",
    ),
    "eot-particles": (lambda: entropic_ot_gaussian(MU, H, 1.0), TypeError, "g0 is a Empirical"),
    # twisted and conditional W2
    "twisted-nothing": (lambda: twisted_w2(MU, NU), ValueError, "needs the mobility: pass M"),
    "twisted-A-only": (lambda: twisted_w2(MU, NU, A=I2), ValueError, "needs the mobility"),
    "twisted-M-and-V": (
        lambda: twisted_w2(MU, NU, M=I2, A=I2, V=I2),
        ValueError,
        "not both M and V",
    ),
    "twisted-asymmetric": (
        lambda: twisted_w2(MU, NU, M=ASYM),
        NotAGradientFlow,
        "M must be symmetric",
    ),
    "twisted-M-shape": (
        lambda: twisted_w2(MU, NU, M=torch.eye(3)),
        ValueError,
        r"M must have shape \(2, 2\)",
    ),
    "twisted-M-nan": (
        lambda: twisted_w2(MU, NU, M=torch.full((2, 2), math.nan)),
        ValueError,
        "M contains 4 non-finite",
    ),
    "twisted-singular-A": (
        lambda: twisted_w2(G, G, A=torch.tensor([[1.0, 0], [0, 0]], dtype=F64), V=I2),
        NotAGradientFlow,
        "twisted_w2: A is singular",
    ),
    "twisted-coupling": (
        lambda: twisted_w2(MU, NU, M=I2, coupling="x"),
        ValueError,
        "unknown coupling 'x'",
    ),
    "twisted-reference-without-A": (
        lambda: twisted_w2(MU, NU, M=I2, reference=MU),
        ValueError,
        "a reference measure needs the interaction matrix A",
    ),
    "twisted-reference-dim": (
        lambda: twisted_w2(MU, NU, A=I2, V=I2, reference=Empirical(cloud(3, 3))),
        ValueError,
        "reference lives in dimension 3",
    ),
    "conditional-no-positions": (
        lambda: conditional_w2(MU, MU),
        ValueError,
        "mu has no positions. Pass positions=",
    ),
    "conditional-positions-differ": (
        lambda: conditional_w2(
            Empirical(MU.points, positions=POS),
            Empirical(NU.points, positions=torch.linspace(0, 1, 5)),
        ),
        ValueError,
        "position marginals of mu and nu differ",
    ),
    "conditional-reduction": (
        lambda: conditional_w2(
            Empirical(MU.points, positions=POS), Empirical(MU.points, positions=POS), reduction="x"
        ),
        ValueError,
        "unknown reduction 'x'; choose one of 'mean', 'max'",
    ),
    "conditional-gaussian": (
        lambda: conditional_w2(G, H),
        TypeError,
        "compares particles with positions; mu is a Gaussian",
    ),
    # diagnostics
    "rank-rtol": (
        lambda: D.numerical_rank(I2, rtol=-1),
        ValueError,
        "rtol must be finite and >= 0",
    ),
    "rank-atol-nan": (
        lambda: D.numerical_rank(I2, atol=math.nan),
        ValueError,
        "atol must be finite and >= 0",
    ),
    "clusters-gaussian": (
        lambda: D.cluster_count(G, 0.5),
        TypeError,
        "cluster_labels is for particle clouds; received a Gaussian",
    ),
    "clusters-tensor": (
        lambda: D.cluster_count(MU.points, 0.5),
        TypeError,
        "mu must be an Empirical measure; received Tensor",
    ),
    "clusters-batched": (
        lambda: D.cluster_count(Empirical(cloud(6, 2).expand(3, 6, 2)), 0.5),
        ValueError,
        "compare one cloud at a time",
    ),
    "gaussianity-samples": (
        lambda: D.distance_to_gaussian(MU, n_samples=0),
        ValueError,
        "n_samples must be a positive int",
    ),
    "gaussianity-gaussian": (
        lambda: D.distance_to_gaussian(G),
        TypeError,
        "takes an Empirical particle cloud; received Gaussian",
    ),
    "gaussianity-seed-str": (
        lambda: D.distance_to_gaussian(MU, seed="a"),
        TypeError,
        r"seed must be an int \(a generator seed\); received 'a'",
    ),  # fixed
    "gaussianity-seed-negative": (
        lambda: D.distance_to_gaussian(MU, seed=-1),
        ValueError,
        "seed must be >= 0; received -1",
    ),  # fixed
    # angular clustering
    "angular-delta-two": (
        lambda: angular_cluster_count(SPHERE, 4.0),
        ValueError,
        r"delta must lie in \(0, 2\)",
    ),
    "angular-gaussian": (
        lambda: angular_cluster_count(G),
        TypeError,
        "takes token clouds .* received Gaussian",
    ),
    "angular-tensor": (lambda: angular_cluster_count(SPHERE.points), TypeError, "received Tensor"),
    "over-time-int": (
        lambda: clusters_over_time(3),
        TypeError,
        "takes the Trajectory of a particle flow .* received int",
    ),  # fixed
    "single-cluster-cloud": (
        lambda: time_to_single_cluster(SPHERE),
        TypeError,
        "received Empirical. For one cloud use angular_cluster_count",
    ),  # fixed
    "over-time-gaussian": (
        lambda: clusters_over_time(integrate(Softmax(-I2, I2, I2), G, 0.1)),
        TypeError,
        "received Gaussian",
    ),
}


test_bad_input_raises_a_clear_error = error_table_test(ERRORS)


@pytest.mark.parametrize("value", NOT_POSITIVE, ids=NOT_POSITIVE_IDS)
@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda v: sinkhorn_divergence(MU, NU, blur=v), "blur"),
        (lambda v: sinkhorn_divergence(MU, NU, scaling=v), "scaling"),
        (lambda v: sinkhorn_divergence(MU, NU, rtol=v), "rtol"),
        (lambda v: sinkhorn_solve(MU, NU, rtol=v), "rtol"),
        (lambda v: entropic_ot_gaussian(G, H, v), "eps"),
        (lambda v: bures_barycenter([G, H], tol=v), "tol"),
        (lambda v: D.cluster_count(MU, v), "threshold"),
        (lambda v: angular_cluster_count(SPHERE, v), "delta"),
        (lambda v: cluster_density(SPHERE, v), "delta"),
    ],
    ids=[
        "blur",
        "scaling",
        "sd-rtol",
        "solve-rtol",
        "eps",
        "bary-tol",
        "threshold",
        "delta",
        "density-delta",
    ],
)
def test_scales_and_tolerances_must_be_finite_and_positive(build, name, value):
    with pytest.raises(ValueError, match=rf"{name} must be finite and > 0; received {value!r}"):
        build(value)


SPECTRAL = {
    "spectrum": D.spectrum,
    "effective_rank": D.effective_rank,
    "numerical_rank": D.numerical_rank,
    "anisotropy": D.anisotropy,
}
BAD_COVARIANCES = {
    "vector": (
        torch.ones(3),
        ValueError,
        r"{name} takes a measure or a covariance \(..., d, d\); received a tensor of shape \(3,\)",
    ),  # fixed: said "spectrum"
    "not-square": (torch.ones(2, 3), ValueError, r"cov must be square"),
    "nan": (torch.full((2, 2), math.nan), ValueError, "cov contains 4 non-finite"),
    "str": ("a", TypeError, "cov must be an array of numbers"),
    "asymmetric": (torch.tensor([[1.0, 2.0], [0.0, 1.0]]), ValueError, "cov must be symmetric"),
    "negative": (
        -torch.eye(2),
        ValueError,
        "cov must be positive semidefinite; .*smallest eigenvalue -1",
    ),  # fixed
    "float16": (
        torch.eye(2).half(),
        TypeError,
        "{name}: the covariance is torch.float16.*float32 or float64",
    ),  # fixed
    "bfloat16-particles": (
        Empirical(cloud(6, 2).bfloat16()),
        TypeError,
        "the covariance is torch.bfloat16",
    ),  # fixed
}


@pytest.mark.parametrize("bad", BAD_COVARIANCES.values(), ids=BAD_COVARIANCES.keys())
@pytest.mark.parametrize("name", SPECTRAL)
def test_spectral_diagnostics_refuse_what_is_not_a_covariance(name, bad):
    value, error, match = bad
    with pytest.raises(error, match=match.format(name=name)):
        SPECTRAL[name](value)


# ---------------------------------------------------------------------------- documented results
@given(st.integers(-150, 150))
@ADVERSARIAL
def test_w2_is_homogeneous_at_every_float64_scale(exponent):
    # W2(c·μ, c·ν) = c·W2(μ, ν) while |x|² fits in float64 (|x| < 1e154).
    scale = 10.0**exponent
    assert float(w2(*_scaled(scale))) == pytest.approx(scale * float(w2(MU, NU)), rel=1e-9)


@given(st.sampled_from([1e-150, 1e-10, 1e-3, 1.0, 1e3, 1e10, 1e76]))
@ADVERSARIAL
def test_gaussian_sinkhorn_is_finite_across_the_representable_blurs(blur):
    # Between the W2 limit (blur → 0: ½ W2²) and the independent coupling (blur → ∞:
    # ½|Δm|² here, the spreads cancel in the debiased divergence).
    value = float(sinkhorn_divergence(G, H, blur=blur))
    assert math.isfinite(value)
    assert 0.5 * 2 - 1e-9 <= value <= 0.5 * float(bures_wasserstein(G, H)) ** 2 + 1e-9


@pytest.mark.parametrize("eps", [1e-300, 1e-3, 1.0, 1e8, 1e150, 1e300], ids=str)
def test_entropic_gaussian_ot_is_accurate_for_every_eps(eps):
    # fixed: ε = 1e150 gave 1.8e134 and ε > 1e154 an OverflowError. The value decreases in ε
    # from W2² (ε → 0) to E|x − y|² under the product coupling, |Δm|² + tr Σ₀ + tr Σ₁ = 8.
    value = float(entropic_ot_gaussian(G, H, eps).value)
    w2_squared = float(bures_wasserstein(G, H)) ** 2
    assert w2_squared - 1e-9 <= value <= 8.0 + 1e-9
    if eps >= 1e8:
        assert value == pytest.approx(8.0, rel=1e-7)  # the product coupling's value
    if eps <= 1e-3:
        assert value == pytest.approx(w2_squared, abs=0.02)


def test_sinkhorn_far_beyond_the_clouds_warns_and_its_contract_says_so():
    # fixed: at blur 1e9 (clouds of diameter 3) GeomLoss returned 0 for S = 0.4866 without a
    # word: ε = blur² swamps the costs' digits. Now a warning, and sinkhorn_solve's estimate
    # holds the rounding bound (so its status is honest).
    with pytest.warns(RuntimeWarning, match=r"at blur = 1e\+09 the value .* may be off by up to"):
        sinkhorn_divergence(MU, NU, blur=1e9)
    result = sinkhorn_solve(MU, NU, blur=1e9)
    limit = 0.5 * float(((MU.mean() - NU.mean()) ** 2).sum())  # ½|Δm|², the large-blur value
    assert result.status == "not_converged"
    assert float(result.error_estimate) >= abs(float(result.value) - limit)
    # Moderately beyond the clouds the value is right (error ~ eps·blur² = 2e-10 at 1e3).
    assert float(sinkhorn_divergence(MU, NU, blur=1e3)) == pytest.approx(limit, abs=1e-6)


def test_an_unreachable_sinkhorn_tolerance_warns_with_the_estimate(monkeypatch):
    monkeypatch.setattr(sinkhorn_module, "MAX_ITER", 2)  # the cap sinkhorn_divergence uses
    with pytest.warns(RuntimeWarning, match=r"rtol=1e-15 not reached after 2 iterations.*estim"):
        value = sinkhorn_divergence(MU, NU, rtol=1e-15, blur=2.0)
    assert math.isfinite(float(value))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_particle_distances_keep_their_dtype(dtype):
    mu, nu = _scaled(1.0, dtype)
    for value in (w2(mu, nu), sinkhorn_divergence(mu, nu, blur=0.5)):
        assert value.dtype == dtype and math.isfinite(float(value))


def test_degenerate_and_extreme_gaussians_have_finite_distances():
    # Degenerate covariances are measures (flows collapse to them); scales up to 1e300.
    for a, b in ((FLAT, H), (Gaussian(torch.zeros(2, dtype=F64), 1e300 * I2), H)):
        assert torch.isfinite(bures_wasserstein(a, b)) and torch.isfinite(
            entropic_ot_gaussian(a, b, 1.0).value
        )
    assert torch.isfinite(bures_monge_map(G, FLAT).matrix).all()  # degenerate target: fine


def test_barycenter_edges():
    # One Gaussian, or a weight of 1 on one of them: that Gaussian itself.
    for result in (bures_barycenter([H]), bures_barycenter([G, H], weights=[0.0, 1.0])):
        assert torch.allclose(result.gaussian.cov(), H.cov(), atol=1e-8)
        assert result.status == "converged"


def test_diagnostics_of_a_collapsed_point_are_documented_zeros():
    # effective_rank and anisotropy of a zero covariance are reported as 0 (docstrings).
    point = Empirical(torch.ones(3, 2, dtype=F64))
    assert float(D.effective_rank(point)) == 0.0 and float(D.anisotropy(point)) == 0.0
    assert int(D.numerical_rank(point)) == 0 and D.cluster_count(point, 1e-9) == 1


def test_a_cloud_that_never_gathers_has_a_nan_single_cluster_time():
    # Documented: NaN where the cloud never forms one cluster within the run.
    field = Normalized(
        Softmax(torch.zeros(3, 3, dtype=F64), torch.eye(3, dtype=F64), torch.eye(3, dtype=F64))
    )
    trajectory = integrate(field, SPHERE, 0.1, save=3)
    assert math.isnan(float(time_to_single_cluster(trajectory)))
    assert clusters_over_time(trajectory).shape == (3,)
