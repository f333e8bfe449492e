"""Bures–Wasserstein barycenter: POT, closed forms, fixed point, gradients, batches, bad input."""

import numpy as np
import ot
import pytest
import torch

from tests.conftest import random_spd
from tpde._linalg import sqrtm_psd, symmetrize
from tpde.measures import Empirical, Gaussian
from tpde.metrics import BuresBarycenter, bures_barycenter, bures_geodesic

F64 = torch.float64


def _gaussians(K, d, generator, batch=()):
    means = torch.randn(*batch, K, d, generator=generator, dtype=F64)
    return Gaussian(means, random_spd(d, generator, batch=(*batch, K)))


def _weights(K, generator):
    w = torch.rand(K, generator=generator, dtype=F64) + 0.1
    return w / w.sum()


@pytest.mark.parametrize("d", [2, 5])
def test_equals_pot(d, generator):
    # POT iterates Σ ← Σ_k w_k (Σ^{1/2}Σ_kΣ^{1/2})^{1/2} (Agueh–Carlier) from another start;
    # both converged (POT to 1e-12 in Frobenius, tpde to 1e-13 relative gradient): 1e-10.
    g, w = _gaussians(4, d, generator), _weights(4, generator)
    result = bures_barycenter(g, w, tol=1e-13)
    mean, cov = ot.gaussian.bures_wasserstein_barycenter(
        g.mean().numpy(), g.cov().numpy(), w.numpy(), num_iter=10_000, eps=1e-12
    )
    assert isinstance(result, BuresBarycenter) and result.status == "converged"
    np.testing.assert_allclose(result.gaussian.cov().numpy(), cov, atol=1e-10)
    np.testing.assert_allclose(result.gaussian.mean().numpy(), mean, atol=1e-14)
    assert result.gaussian.batch_shape == () and result.iterations.shape == ()


def test_commuting_covariances_closed_form(generator):
    # Σ_k = Q diag(λ_k) Qᵀ commute: Σ* = (Σ_k w_k Σ_k^{1/2})², which is also the start, so the
    # run stops at iteration 0 with a residual at rounding level.
    Q, _ = torch.linalg.qr(torch.randn(4, 4, generator=generator, dtype=F64))
    lam = torch.rand(3, 4, generator=generator, dtype=F64) + 0.2
    covs = Q @ torch.diag_embed(lam) @ Q.T
    w = _weights(3, generator)
    result = bures_barycenter([Gaussian(torch.zeros(4, dtype=F64), c) for c in covs], w)
    expected = Q @ torch.diag((w[:, None] * lam.sqrt()).sum(0) ** 2) @ Q.T
    torch.testing.assert_close(result.gaussian.cov(), expected, atol=1e-13, rtol=0)
    assert int(result.iterations) == 0 and float(result.residual) < 1e-13


def test_fixed_point_property_and_two_point_geodesic(generator):
    g, w = _gaussians(5, 3, generator), _weights(5, generator)
    result = bures_barycenter(g, w, tol=1e-13)
    S = result.gaussian.cov()
    root = sqrtm_psd(S)
    rhs = (w[:, None, None] * sqrtm_psd(symmetrize(root @ g.cov() @ root))).sum(0)
    torch.testing.assert_close(S, rhs, atol=1e-11, rtol=0)  # Σ = Σ_k w_k (Σ^½Σ_kΣ^½)^½
    torch.testing.assert_close(result.gaussian.mean(), (w[:, None] * g.mean()).sum(0))
    # Two Gaussians, weights (1 − t, t): the barycenter is the geodesic point at t.
    pair = _gaussians(2, 3, generator)
    mid = bures_barycenter(pair, torch.tensor([0.7, 0.3], dtype=F64), tol=1e-13).gaussian
    geo = bures_geodesic(pair[0], pair[1], 0.3)
    torch.testing.assert_close(mid.cov(), geo.cov(), atol=1e-11, rtol=0)
    torch.testing.assert_close(mid.mean(), geo.mean(), atol=1e-14, rtol=0)
    # One Gaussian: itself.
    alone = bures_barycenter([pair[0]])
    torch.testing.assert_close(alone.gaussian.cov(), pair[0].cov(), atol=1e-13, rtol=0)


def test_batch_equals_the_loop_and_lists_broadcast(generator):
    g = _gaussians(3, 3, generator, batch=(4,))  # 4 problems of K = 3
    w = torch.stack([_weights(3, generator) for _ in range(4)])
    batched = bures_barycenter(g, w)
    assert batched.gaussian.batch_shape == (4,) and batched.status.shape == (4,)
    for i in range(4):
        single = bures_barycenter(g[i], w[i])
        torch.testing.assert_close(batched.gaussian.cov()[i], single.gaussian.cov(),
                                   atol=1e-12, rtol=0)  # fmt: skip
        assert int(batched.iterations[i]) == int(single.iterations)
    # A list of Gaussians with batch shapes (4,) and () broadcasts to 4 problems.
    shared = _gaussians(1, 3, generator)[0]
    listed = bures_barycenter([g[:, 0], shared], torch.tensor([0.5, 0.5], dtype=F64))
    assert listed.gaussian.batch_shape == (4,)
    one = bures_barycenter([g[2, 0], shared])
    torch.testing.assert_close(listed.gaussian.cov()[2], one.gaussian.cov(), atol=1e-12, rtol=0)


def test_not_converged_is_reported(generator):
    g = _gaussians(4, 4, generator)
    result = bures_barycenter(g, max_iter=1, tol=1e-14)
    assert result.status == "not_converged" and not result.converged
    assert int(result.iterations) == 1 and float(result.residual) > 1e-14
    assert "not_converged" in repr(result)


def test_gradients_by_finite_differences(generator):
    # gradcheck compares autograd through the iterations with central differences of the
    # whole function; tol 1e-14 makes the iterate (and its iteration count) stable under the
    # 1e-6 perturbations. Weights enter through a softmax so they keep summing to 1.
    factors = torch.randn(3, 2, 2, generator=generator, dtype=F64, requires_grad=True)
    means = torch.randn(3, 2, generator=generator, dtype=F64, requires_grad=True)
    logits = torch.randn(3, generator=generator, dtype=F64, requires_grad=True)
    eye = torch.eye(2, dtype=F64)

    def barycenter(f, m, z):
        g = Gaussian._trusted(m, f @ f.mT + 0.3 * eye)
        bary = bures_barycenter(g, torch.softmax(z, 0), tol=1e-14).gaussian
        return bary.mean(), bary.cov()

    assert torch.autograd.gradcheck(barycenter, (factors, means, logits))


def test_float32_stays_float32(generator):
    g, w = _gaussians(3, 3, generator), _weights(3, generator)
    r32 = bures_barycenter(g.to(dtype=torch.float32), w.float())
    assert r32.gaussian.dtype == torch.float32 and r32.status == "converged"
    ref = bures_barycenter(g, w).gaussian.cov()
    # float32 with the default tol 100 eps: 1e-4 relative.
    torch.testing.assert_close(r32.gaussian.cov().double(), ref, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_a_clear_message(generator):
    g = _gaussians(3, 2, generator)
    with pytest.raises(ValueError, match="gaussians is empty"):
        bures_barycenter([])
    with pytest.raises(TypeError, match=r"must be a list of tpde\.measures\.Gaussian"):
        bures_barycenter(torch.eye(2))
    with pytest.raises(TypeError, match=r"gaussians\[1\] must be a Gaussian; received Empirical"):
        bures_barycenter([g[0], Empirical(torch.zeros(3, 2))])
    with pytest.raises(ValueError, match="last batch dimension"):
        bures_barycenter(g[0])
    with pytest.raises(ValueError, match=r"different dimensions \[2, 3\]"):
        bures_barycenter([g[0], _gaussians(1, 3, generator)[0]])
    with pytest.raises(ValueError, match=r"must sum to 1.*received a sum of 1\.5"):
        bures_barycenter(g, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=r"must be nonnegative; received minimum -0\.5"):
        bures_barycenter(g, [1.0, 0.5, -0.5])
    with pytest.raises(ValueError, match=r"shape \(\.\.\., K\) with K = 3.*\(2,\)"):
        bures_barycenter(g, [0.5, 0.5])
    with pytest.raises(ValueError, match="weights contains 1 non-finite"):
        bures_barycenter(g, [0.5, float("nan"), 0.5])
    negative = Gaussian._trusted(torch.zeros(2, dtype=F64), torch.diag(torch.tensor([1.0, -1.0],
                                 dtype=F64)))  # fmt: skip
    with pytest.raises(ValueError, match="every covariance must be positive semidefinite"):
        bures_barycenter([g[0], negative])
    flat = Gaussian(torch.zeros(2, dtype=F64), torch.diag(torch.tensor([1.0, 0.0], dtype=F64)))
    with pytest.raises(ValueError, match="needs at least one definite"):
        bures_barycenter([flat, flat])
    with pytest.raises(ValueError, match="max_iter must be a positive int; received 0"):
        bures_barycenter(g, max_iter=0)
    with pytest.raises(ValueError, match="tol must be finite and > 0; received -1"):
        bures_barycenter(g, tol=-1)
    nan = Gaussian._trusted(torch.tensor([float("nan"), 0.0], dtype=F64), torch.eye(2, dtype=F64))
    with pytest.raises(ValueError, match="means contains 1 non-finite"):
        bures_barycenter([g[0], nan])
