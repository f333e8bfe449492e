"""Closed-form entropic OT between Gaussians: POT Sinkhorn on samples, Janati et al., MATH.md §3."""

import math

import numpy as np
import ot
import pytest
import torch
from scipy.optimize import minimize

from tests.conftest import random_spd
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein, entropic_ot_gaussian

F64 = torch.float64


def np_sqrtm(S):
    evals, evecs = np.linalg.eigh(S)
    return (evecs * np.sqrt(np.clip(evals, 0, None))) @ evecs.T


def pair(d, generator):
    g0 = Gaussian(torch.randn(d, generator=generator, dtype=F64), random_spd(d, generator))
    g1 = Gaussian(torch.randn(d, generator=generator, dtype=F64), random_spd(d, generator))
    return g0, g1


def pot_entropic(x, y, cost_matrix, eps):
    """OT_ε = ⟨f, a⟩ + ⟨g, b⟩ from POT's converged Sinkhorn scalings (uniform weights).

    With P = diag(u) K diag(v), the objective ⟨P, M⟩ + ε KL(P | a⊗b) at the optimum equals
    Σ a_i ε log(u_i / a_i) + Σ b_j ε log(v_j / b_j). Also returns the standard error of the
    estimator, √((Var f + Var g) / n) (central limit theorem for empirical entropic OT,
    Mena & Niles-Weed 2019; del Barrio et al. 2023).
    """
    n = x.shape[0]
    a = np.full(n, 1 / n)
    plan, log = ot.sinkhorn(a, a, cost_matrix, eps, log=True, stopThr=1e-10, numItermax=10**5)
    f, g = eps * np.log(log["u"] / a), eps * np.log(log["v"] / a)
    return f.mean() + g.mean(), math.sqrt((f.var() + g.var()) / n), plan


def run_against_pot(n, generator):
    d, eps = 2, 1.0
    g0, g1 = pair(d, generator)
    A = torch.randn(d, d, generator=generator, dtype=F64) / 2
    x = g0.sample(n, generator=generator).numpy()
    y = g1.sample(n, generator=generator).numpy()
    costs = {"quadratic": (ot.dist(x, y), {}), "attention": (-(x @ A.numpy().T) @ y.T, {"A": A})}
    for cost, (matrix, extra) in costs.items():
        value, stderr, plan = pot_entropic(x, y, matrix, eps)
        closed = entropic_ot_gaussian(g0, g1, eps, cost, **extra)
        # Sampling error: 5 standard errors of the plug-in estimator (its bias is O(1/n)).
        assert abs(value - float(closed.value)) < 5 * stderr, cost
        # Cross-covariance of the discrete plan vs C: entries of an n-sample covariance
        # have standard error ≈ √(Σ0_ii Σ1_jj / n); 5 of them.
        cross = (x - x.mean(0)).T @ plan @ (y - y.mean(0))
        scale = np.sqrt(np.outer(np.diag(g0.cov().numpy()), np.diag(g1.cov().numpy())) / n)
        assert (np.abs(cross - closed.cross_cov.numpy()) < 5 * scale).all(), cost


def test_matches_pot_sinkhorn_on_samples(generator):
    run_against_pot(2000, generator)


@pytest.mark.slow
def test_matches_pot_sinkhorn_on_1e4_samples(generator):
    run_against_pot(10_000, generator)


def test_quadratic_equals_janati_et_al(generator):
    # Janati, Muzellec, Peyré, Cuturi (2020), balanced case, written out independently in
    # numpy with their σ² = ε/2: D_σ = (4A^{1/2}BA^{1/2} + σ⁴I)^{1/2},
    # OT = |a−b|² + trA + trB − trD_σ + dσ²(1 − log 2σ²) + σ² log det(D_σ + σ²I),
    # C_σ = ½A^{1/2}D_σA^{-1/2} − σ²/2 I. Float64 rounding: 1e-11.
    for d in (1, 3, 6):
        g0, g1 = pair(d, generator)
        A, B = g0.cov().numpy(), g1.cov().numpy()
        diff = (g0.mean() - g1.mean()).numpy()
        for eps in (0.05, 1.0, 7.0):
            s2 = eps / 2
            rA = np_sqrtm(A)
            D = np_sqrtm(4 * rA @ B @ rA + s2**2 * np.eye(d))
            value = (
                diff @ diff
                + np.trace(A)
                + np.trace(B)
                - np.trace(D)
                + d * s2 * (1 - np.log(2 * s2))
                + s2 * np.linalg.slogdet(D + s2 * np.eye(d))[1]
            )
            cross = 0.5 * rA @ D @ np.linalg.inv(rA) - s2 / 2 * np.eye(d)
            ours = entropic_ot_gaussian(g0, g1, eps)
            assert float(ours.value) == pytest.approx(value, abs=1e-11)
            np.testing.assert_allclose(ours.cross_cov.numpy(), cross, atol=1e-11)


def test_attention_self_cost_and_closure_of_math_md(generator):
    # MATH.md §3, ε = 1: OT(μ, μ) = −αᵀAα − ½ tr(D − I) + ½ log det((I + D)/2),
    # D = (I + 4Σ^{1/2}AᵀΣAΣ^{1/2})^{1/2}; E_π[y | x] = α + G(x − α),
    # G = 2ΣAΣ^{1/2}(I + D)⁻¹Σ^{-1/2}.
    d = 3
    alpha = torch.randn(d, generator=generator, dtype=F64).numpy()
    S = random_spd(d, generator).numpy()
    A = torch.randn(d, d, generator=generator, dtype=F64).numpy()
    rS = np_sqrtm(S)
    D = np_sqrtm(np.eye(d) + 4 * rS @ A.T @ S @ A @ rS)
    value = -alpha @ A @ alpha - 0.5 * np.trace(D - np.eye(d))
    value += 0.5 * np.linalg.slogdet((np.eye(d) + D) / 2)[1]
    G = 2 * S @ A @ rS @ np.linalg.inv(np.eye(d) + D) @ np.linalg.inv(rS)
    g = Gaussian(torch.as_tensor(alpha), torch.as_tensor(S))
    ours = entropic_ot_gaussian(g, g, 1.0, "attention", A=torch.as_tensor(A))
    assert float(ours.value) == pytest.approx(value, abs=1e-11)
    np.testing.assert_allclose(ours.barycentric_map().matrix.numpy(), G, atol=1e-11)
    # General ε: OT_ε for −yᵀAx equals ε · OT_1 for −yᵀ(A/ε)x (divide the objective by ε).
    eps = 0.3
    scaled = entropic_ot_gaussian(g, g, 1.0, "attention", A=torch.as_tensor(A) / eps)
    general = entropic_ot_gaussian(g, g, eps, "attention", A=torch.as_tensor(A))
    assert float(general.value) == pytest.approx(eps * float(scaled.value), abs=1e-11)


def test_attention_cost_by_direct_minimisation(generator):
    # Independent route: minimise −m0ᵀPm1 − tr(PCᵀ) − (ε/2) log det(I − KKᵀ) over the
    # correlation K (C = Σ0^{1/2}KΣ1^{1/2}, ‖K‖ < 1) numerically; P = Aᵀ (two measures).
    d, eps = 2, 0.7
    g0, g1 = pair(d, generator)
    A = torch.randn(d, d, generator=generator, dtype=F64).numpy()
    r0, r1 = np_sqrtm(g0.cov().numpy()), np_sqrtm(g1.cov().numpy())
    m0, m1 = g0.mean().numpy(), g1.mean().numpy()

    def objective(k):
        K = k.reshape(d, d)
        gram = np.eye(d) - K @ K.T
        sign, logdet = np.linalg.slogdet(gram)
        if sign <= 0 or np.linalg.eigvalsh(gram).min() <= 0:
            return 1e6
        C = r0 @ K @ r1
        return -m0 @ A.T @ m1 - np.trace(A.T @ C.T) - eps / 2 * logdet

    best = minimize(objective, np.zeros(d * d), method="Nelder-Mead",
                    options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 20000})  # fmt: skip
    ours = entropic_ot_gaussian(g0, g1, eps, "attention", A=torch.as_tensor(A))
    assert float(ours.value) == pytest.approx(best.fun, abs=1e-8)  # Nelder–Mead tolerance
    K = best.x.reshape(d, d)
    np.testing.assert_allclose(ours.cross_cov.numpy(), r0 @ K @ r1, atol=1e-4)


def test_small_eps_limit_is_bures(generator):
    # OT_ε − W2² = O(ε log 1/ε) for nondegenerate covariances: check the rate, not one value.
    g0, g1 = pair(4, generator)
    bures2 = float(bures_wasserstein(g0, g1)) ** 2
    gaps = []
    for eps in (1e-2, 1e-4, 1e-6):
        gaps.append(abs(float(entropic_ot_gaussian(g0, g1, eps).value) - bures2))
        assert gaps[-1] < 10 * 4 * eps * math.log(1 / eps)  # d · ε log(1/ε), factor 10
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 1e-3


def test_coupling_batching_and_degenerate_input(generator):
    g0, g1 = pair(3, generator)
    result = entropic_ot_gaussian(g0, g1, 0.5)
    joint = result.coupling()
    assert joint.dim == 6
    assert float(torch.linalg.eigvalsh(joint.cov()).min()) > 0  # ε > 0: nondegenerate plan
    torch.testing.assert_close(joint.cov()[:3, :3], g0.cov())
    # Batched Gaussians equal the loop.
    means = torch.randn(4, 3, generator=generator, dtype=F64)
    covs = random_spd(3, generator, batch=(4,))
    batched = entropic_ot_gaussian(Gaussian(means, covs), g1, 0.5)
    assert batched.value.shape == (4,)
    for i in range(4):
        single = entropic_ot_gaussian(Gaussian(means[i], covs[i]), g1, 0.5)
        assert float(batched.value[i]) == pytest.approx(float(single.value), abs=1e-12)
    # A rank-one source covariance is allowed (formula uses Σ0^{1/2} only) and finite.
    u = torch.randn(3, 1, generator=generator, dtype=F64)
    flat = entropic_ot_gaussian(Gaussian(torch.zeros(3, dtype=F64), u @ u.T), g1, 0.5)
    assert torch.isfinite(flat.value) and torch.isfinite(flat.cross_cov).all()


def test_gradcheck_value(generator):
    other = pair(2, generator)[1]
    A = torch.randn(2, 2, generator=generator, dtype=F64)

    def value(f, m):
        g = Gaussian._trusted(m, f @ f.T + 0.1 * torch.eye(2, dtype=F64))
        return entropic_ot_gaussian(g, other, 0.4, "attention", A=A).value

    f = torch.randn(2, 2, generator=generator, dtype=F64, requires_grad=True)
    m = torch.randn(2, generator=generator, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(value, (f, m))


def test_bad_input(generator):
    g0, g1 = pair(2, generator)
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        entropic_ot_gaussian(g0, g1, 0.0)
    with pytest.raises(ValueError, match="unknown cost"):
        entropic_ot_gaussian(g0, g1, 1.0, "cosine")
    with pytest.raises(ValueError, match="needs the interaction matrix A"):
        entropic_ot_gaussian(g0, g1, 1.0, "attention")
    with pytest.raises(ValueError, match="only used with cost='attention'"):
        entropic_ot_gaussian(g0, g1, 1.0, A=torch.eye(2))
    with pytest.raises(ValueError, match="A must have shape"):
        entropic_ot_gaussian(g0, g1, 1.0, "attention", A=torch.eye(3))
    with pytest.raises(TypeError, match=r"takes two tpde\.measures\.Gaussian"):
        entropic_ot_gaussian(g0, Empirical(torch.zeros(3, 2)), 1.0)
