"""Multi-head attention: heads add, H = 1 is the single head, the paper's split layout."""

import math

import pytest
import torch

from tests.conftest import random_spd
from tests.fields.attention.test_l2 import particles_vs_gaussian
from tpde.fields import L2, GaussianNotPreserved, Linear, MultiHead, Sigmoid, Softmax
from tpde.measures import Empirical, Gaussian

F64 = torch.float64
TIGHT = {"rtol": 1e-12, "atol": 1e-12}  # float64, identical algebra up to rounding


def _draw(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=F64)


def _gaussian(generator, d):
    return Gaussian(_draw(generator, d), random_spd(d, generator))


@pytest.mark.parametrize(("kind", "single"), [("softmax", Softmax), ("l2", L2)])
def test_one_head_is_the_single_head(kind, single, generator):
    d = 4
    Q, K, V = _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d)
    multi, head = MultiHead.split(Q, K, V, heads=1, kind=kind), single(Q, K, V)
    mu = Empirical(_draw(generator, 30, d))
    for engine in ("dense", "sdpa"):
        torch.testing.assert_close(
            multi.velocity(mu, engine=engine), head.velocity(mu, engine=engine), **TIGHT
        )
    g = _gaussian(generator, d)
    rhs_multi, rhs_head = (f.gaussian_rhs(0.0, g.mean(), g.cov()) for f in (multi, head))
    for a, b in zip(rhs_multi, rhs_head, strict=True):
        torch.testing.assert_close(a, b, **TIGHT)


def test_heads_add_with_their_output_matrices(generator):
    # Γ = Σ_h W_hᵀ Γ_h on particles and on Gaussians, for heads of different kinds and k.
    d = 3
    heads = [
        Softmax(_draw(generator, 2, d), _draw(generator, 2, d), _draw(generator, d, d)),
        L2(_draw(generator, 4, d), _draw(generator, 4, d), _draw(generator, d, d), form="code"),
        Linear(_draw(generator, 1, d), _draw(generator, 1, d), _draw(generator, d, d)),
    ]
    W = _draw(generator, 3, d, d)
    mu = Empirical(_draw(generator, 25, d))
    x = _draw(generator, 5, d)
    g = _gaussian(generator, d)
    plain, mixed = MultiHead(heads), MultiHead(heads, W=W)
    torch.testing.assert_close(
        plain.velocity(mu, x), sum(h.velocity(mu, x) for h in heads), **TIGHT
    )
    expected = sum(h.velocity(mu, x) @ W[i] for i, h in enumerate(heads))
    torch.testing.assert_close(mixed.velocity(mu, x), expected, **TIGHT)
    expected = sum(h.velocity(g, x) @ W[i] for i, h in enumerate(heads))
    torch.testing.assert_close(mixed.velocity(g, x), expected, **TIGHT)
    # gaussian_rhs is linear in the affine field (c, B), so the moment ODEs add too.
    rhs = [h.gaussian_rhs(0.0, g.mean(), g.cov()) for h in heads]
    for part, total in enumerate(plain.gaussian_rhs(0.0, g.mean(), g.cov())):
        torch.testing.assert_close(total, sum(r[part] for r in rhs), **TIGHT)


def test_batched_output_matrices_sweep_a_gaussian(generator):
    d = 2
    heads = [Softmax(_draw(generator, 1, d), _draw(generator, 1, d), torch.eye(d, dtype=F64))] * 2
    W = _draw(generator, 4, 2, d, d)
    g = _gaussian(generator, d)
    dmean, dcov = MultiHead(heads, W=W).gaussian_rhs(0.0, g.mean(), g.cov())
    assert dmean.shape == (4, d) and dcov.shape == (4, d, d)
    one = MultiHead(heads, W=W[3]).gaussian_rhs(0.0, g.mean(), g.cov())
    torch.testing.assert_close(dcov[3], one[1], **TIGHT)


def test_split_reproduces_the_authors_multihead_rhs(generator):
    # rhs_multihead of vcastin/2025-transformers-PDEs (utils.py), transcribed: k = d/H,
    # A_h = K_hᵀQ_h/√k, C_h = W_hᵀV_h with W = I, Σ̇ = Σ_h C_hΣA_hΣ + transpose; and the
    # mean of MATH.md §3: α̇ = Σ_h C_h(I + ΣA_h)α.
    d, H = 4, 2
    k = d // H
    Q, K, V = _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d)
    g = _gaussian(generator, d)
    S, alpha = g.cov(), g.mean()
    eye = torch.eye(d, dtype=F64)
    dcov, dmean = 0, 0
    for h in range(H):
        rows = slice(k * h, k * (h + 1))
        A_h = K[rows].T @ Q[rows] / math.sqrt(k)
        C_h = eye[rows].T @ V[rows]
        dcov = dcov + C_h @ S @ A_h @ S
        dmean = dmean + C_h @ (eye + S @ A_h) @ alpha
    field = MultiHead.split(Q, K, V, heads=H)
    got_mean, got_cov = field.gaussian_rhs(0.0, alpha, S)
    torch.testing.assert_close(got_cov, dcov + dcov.T, **TIGHT)
    torch.testing.assert_close(got_mean, dmean, **TIGHT)
    assert sum(h.params.V for h in field.heads).allclose(V)  # Σ_h C_h = V


def test_split_heads_score_in_the_head_dimension(generator):
    # Softmax heads of width k = 3 < d = 6 score as scale·⟨Qx, Ky⟩ (k-dimensional queries);
    # each head's own velocity scores as ⟨Ax, y⟩ (d-dimensional): two routes, one sum.
    # W = I passed explicitly is the default.
    d = 6
    Q, K, V = _draw(generator, 9, d), _draw(generator, 9, d), _draw(generator, d, d)
    split = MultiHead.split(Q, K, V, heads=3, scale=0.4)
    explicit = MultiHead(split.heads, W=torch.eye(d, dtype=F64).expand(3, d, d))
    mu = Empirical(_draw(generator, 40, d))
    expected = sum(head.velocity(mu, engine="dense") for head in split.heads)
    for engine in ("dense", "chunked", "sdpa"):
        torch.testing.assert_close(split.velocity(mu, engine=engine), expected, **TIGHT)
        torch.testing.assert_close(explicit.velocity(mu, engine=engine), expected, **TIGHT)


def test_time_dependent_split(generator):
    d = 4
    Q0, K, V = _draw(generator, d, d), _draw(generator, d, d), _draw(generator, d, d)
    field = MultiHead.split(lambda t: (1 + t) * Q0, K, lambda t: V + t, heads=2)
    mu = Empirical(_draw(generator, 20, d))
    static = MultiHead.split(1.5 * Q0, K, V + 0.5, heads=2)
    torch.testing.assert_close(field.velocity(mu, t=0.5), static.velocity(mu), **TIGHT)
    W = lambda t: (1 + t) * torch.eye(d, dtype=F64).expand(2, d, d)  # noqa: E731
    scaled = MultiHead(static.heads, W=W)
    torch.testing.assert_close(scaled.velocity(mu, t=1.0), 2 * static.velocity(mu), **TIGHT)


@pytest.mark.parametrize("d", [2, 5])
def test_mean_field_particles_match_gaussian_ode(d):
    # 20,000 float32 particles (SDPA) against the float64 moment ODE at t1 = 1; d = 2: the
    # paper's split with H = 2; d = 5: a softmax head and an L2 head with output matrices.
    # Tolerance 0.05 relative, about five standard errors of the t = 0 moments (~0.01).
    # Q ≈ −K keeps every A_h near ≼ 0 (contracting; see the L2 test for why).
    gen = torch.Generator().manual_seed(50 + d)
    K = _draw(gen, d, d) / math.sqrt(d)
    Q = -K + 0.3 * _draw(gen, d, d) / math.sqrt(d)
    V = torch.eye(d, dtype=F64) + 0.3 * _draw(gen, d, d) / math.sqrt(d)
    if d == 2:
        field = MultiHead.split(Q, K, V, heads=2)
    else:
        W = torch.eye(d, dtype=F64) + 0.2 * _draw(gen, 2, d, d) / math.sqrt(d)
        heads = [Softmax(Q[:3], K[:3], 0.5 * V), L2(Q[3:], K[3:], 0.5 * V)]
        field = MultiHead(heads, W=W)
    g0 = Gaussian(0.5 * _draw(gen, d), random_spd(d, gen, floor=0.3))
    mean_error, cov_error = particles_vs_gaussian(field, g0, 1.0, seed=d)
    assert mean_error < 0.05 and cov_error < 0.05


def test_bad_heads_and_output_matrices():
    two, three = (
        Softmax(torch.eye(2), torch.eye(2), torch.eye(2)),
        L2(torch.eye(3), torch.eye(3), torch.eye(3)),
    )
    with pytest.raises(
        ValueError, match="same token dimension d; received head 0: d = 2, head 1: d = 3"
    ):
        MultiHead([two, three])
    with pytest.raises(ValueError, match="at least one field"):
        MultiHead([])
    with pytest.raises(TypeError, match="Wrap one field as"):
        MultiHead(two)
    with pytest.raises(TypeError, match="head 1 is a Tensor"):
        MultiHead([two, torch.eye(2)])
    with pytest.raises(
        ValueError,
        match=r"W must have shape \(\.\.\., H, d, d\) = \(\.\.\., 2, 2, 2\).*received \(2, 2\)",
    ):
        MultiHead([two, two], W=torch.eye(2))
    with pytest.raises(ValueError, match=r"received \(3, 2, 2\)"):
        MultiHead([two, two], W=torch.zeros(3, 2, 2))
    late = MultiHead(
        [two, two], W=lambda t: torch.zeros(2, 2, 2) if t == 0 else torch.zeros(2, 3, 3)
    )
    with pytest.raises(ValueError, match=r"W must have shape .* received \(2, 3, 3\)"):
        late.velocity(Empirical(torch.zeros(3, 2)), t=1.0)


def test_bad_split_arguments():
    eye4 = torch.eye(4)
    with pytest.raises(ValueError, match="cannot split Q, K with 4 rows into 3 heads"):
        MultiHead.split(eye4, eye4, torch.eye(4), heads=3)
    with pytest.raises(ValueError, match="d = 3 must be divisible by the number of heads H = 2"):
        MultiHead.split(torch.zeros(4, 3), torch.zeros(4, 3), torch.eye(3), heads=2)
    with pytest.raises(
        ValueError, match=r"same shape \(\.\.\., H·k, d\); received Q \(4, 4\) and K \(2, 4\)"
    ):
        MultiHead.split(eye4, eye4[:2], eye4, heads=2)
    with pytest.raises(ValueError, match=r"V of shape \(\.\.\., 4, 4\)"):
        MultiHead.split(eye4, eye4, torch.eye(2), heads=2)
    with pytest.raises(ValueError, match="heads must be a positive integer H; received 0"):
        MultiHead.split(eye4, eye4, eye4, heads=0)
    with pytest.raises(ValueError, match="unknown kind 'gaussian'"):
        MultiHead.split(eye4, eye4, eye4, heads=2, kind="gaussian")


def test_a_head_without_closure_is_named():
    heads = [
        Softmax(torch.eye(2), torch.eye(2), torch.eye(2)),
        Sigmoid(torch.eye(2), torch.eye(2), torch.eye(2)),
    ]
    with pytest.raises(GaussianNotPreserved, match=r"head 1 \(Sigmoid\) does not"):
        MultiHead(heads).gaussian_rhs(0.0, torch.zeros(2), torch.eye(2))
