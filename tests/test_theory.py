"""tpde.theory: the closed forms against MATH.md, numerical linearisations and particles."""

import math

import numpy as np
import pytest
import torch
from scipy.special import ive

from tpde.fields import Exponential, Masked, Normalized, Softmax
from tpde.flows import Clustered, integrate
from tpde.measures import Empirical, uniform_on_sphere
from tpde.theory import (
    dominant_mode,
    equiangular_frame,
    equiangular_solution,
    equiangular_velocity,
    hardmax_vertices,
    instability_rate,
    renyi_centres,
)

F64 = torch.float64


def _field(kernel: str, beta: float, d: int):
    eye = torch.eye(d, dtype=F64)
    if kernel == "sa":
        return Softmax.from_interaction(beta * eye, eye)
    return Exponential(eye, eye, eye, scale=beta)


# ---------------------------------------------------------------------- equiangular laws
@pytest.mark.parametrize("beta", [-1.5, 0.0, 0.7, 4.0])
def test_two_tokens_give_the_two_token_laws_of_math_section_7(beta):
    # n = 2, ρ = cos θ: SA θ̇ = −2 sin θ e^{β cos θ}/(e^β + e^{β cos θ}), USA θ̇ = −sin θ e^{β cos θ}
    # (MATH.md §7), so ρ̇ = −sin θ · θ̇.
    theta = np.linspace(0.05, 3.1, 9)
    rho = np.cos(theta)
    sa = 2 * np.sin(theta) ** 2 * np.exp(beta * rho) / (np.exp(beta) + np.exp(beta * rho))
    usa = np.sin(theta) ** 2 * np.exp(beta * rho)
    np.testing.assert_allclose(equiangular_velocity(rho, beta=beta, n=2)[0], sa, rtol=1e-13)
    np.testing.assert_allclose(
        equiangular_velocity(rho, beta=beta, n=2, kernel="usa")[0], usa, rtol=1e-13
    )


def test_peri_ln_and_ngpt_laws_do_not_depend_on_the_normaliser():
    rho, r = np.linspace(-0.2, 0.9, 7), np.linspace(1, 3, 7)
    for scheme in ("peri-ln", "ngpt"):
        sa = equiangular_velocity(rho, r, beta=3.0, n=6, scheme=scheme, alpha=0.4)
        usa = equiangular_velocity(rho, r, beta=3.0, n=6, scheme=scheme, kernel="usa", alpha=0.4)
        np.testing.assert_allclose(sa, usa, rtol=1e-13)


@pytest.mark.parametrize("kernel", ["sa", "usa"])
@pytest.mark.parametrize("scheme", ["post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt"])
def test_equiangular_particles_follow_the_law_to_1e8(scheme, kernel):
    n, d, beta, t1, rho0 = 5, 6, 2.0, 2.0, -0.1
    frame = equiangular_frame(n, d, rho0, generator=torch.Generator().manual_seed(3))
    options = {"mix-ln": {"switch": 1.0, "depth": t1}, "ngpt": {"alpha": 0.6}}.get(scheme, {})
    field = Normalized(_field(kernel, beta, d), scheme, **options)
    times = np.linspace(0, t1, 5)
    traj = integrate(field, Empirical(frame), t1, method="dopri5", rtol=1e-11, atol=1e-13,
                     save=times.tolist(), events=())  # fmt: skip
    points = torch.stack([m.points for m in traj.measures])
    radius = points.norm(dim=-1)
    theta = points / radius.unsqueeze(-1)
    off = (theta @ theta.mT)[:, ~torch.eye(n, dtype=torch.bool)].numpy()
    alpha, switch = options.get("alpha", 1.0), options.get("switch")
    law = equiangular_solution(times, rho0, beta=beta, n=n, scheme=scheme, kernel=kernel,
                               alpha=alpha, switch=switch)  # fmt: skip
    assert np.abs(off - law.rho[:, None]).max() < 1e-8
    assert np.abs(radius.numpy() - law.r[:, None]).max() < 1e-8
    assert abs(law.rho[-1] - rho0) > 0.05  # the tokens moved: the check is not vacuous


def test_mix_ln_is_post_ln_then_pre_ln():
    times = np.linspace(0, 3, 7)
    mix = equiangular_solution(times, 0.1, beta=1.0, n=4, scheme="mix-ln", switch=1.5)
    post = equiangular_solution(times[:4], 0.1, beta=1.0, n=4)
    np.testing.assert_allclose(mix.rho[:4], post.rho, rtol=1e-11)
    np.testing.assert_allclose(mix.r[:4], 1.0)
    after = equiangular_solution(times[3:] - 1.5, post.rho[-1], beta=1.0, n=4, scheme="pre-ln")
    np.testing.assert_allclose(mix.rho[3:], after.rho, rtol=1e-10)
    np.testing.assert_allclose(mix.r[3:], after.r, rtol=1e-10)


@pytest.mark.parametrize(
    ("n", "d", "rho"), [(4, 4, 0.3), (6, 9, -0.15), (5, 4, -0.25), (3, 1, 1.0)]
)
def test_equiangular_frame_has_the_asked_gram_matrix(n, d, rho):
    frame = equiangular_frame(n, d, rho, generator=torch.Generator().manual_seed(0))
    assert frame.shape == (n, d) and frame.dtype == F64
    gram = (1 - rho) * torch.eye(n, dtype=F64) + rho
    assert float((frame @ frame.T - gram).abs().max()) < 1e-14


@pytest.mark.parametrize(
    ("n", "d", "rho", "match"),
    [
        (4, 4, -0.4, r"rho in \[-1/\(n-1\), 1\] = \[-0.333333, 1\]"),
        (4, 4, 1.2, r"received .*rho = 1.2|rho = 1.2"),
        (4, 3, 0.2, r"full rank n: it needs d >= n; received n = 4, d = 3"),
        (5, 3, -0.25, r"regular simplex .* needs d >= n - 1; received n = 5, d = 3"),
        (1, 3, 0.0, r"n is a number of tokens, an int >= 2; received 1"),
    ],
)
def test_equiangular_frame_refuses_impossible_starts(n, d, rho, match):
    with pytest.raises(ValueError, match=match):
        equiangular_frame(n, d, rho)


def test_equiangular_bad_input_names_the_bound():
    with pytest.raises(ValueError, match=r"rho in \[-1/\(n-1\), 1\] = \[-0.5, 1\]"):
        equiangular_velocity(-0.6, beta=1.0, n=3)
    with pytest.raises(ValueError, match=r"'layernorm' scheme has no equiangular law.*beta\*d"):
        equiangular_velocity(0.2, beta=1.0, n=3, scheme="layernorm")
    with pytest.raises(ValueError, match="mix-ln is post-ln before its switch"):
        equiangular_velocity(0.2, beta=1.0, n=3, scheme="mix-ln")
    with pytest.raises(ValueError, match="mix-ln needs switch > 0"):
        equiangular_solution([0, 1], 0.2, beta=1.0, n=3, scheme="mix-ln")
    with pytest.raises(ValueError, match="switch applies to scheme 'mix-ln' only"):
        equiangular_solution([0, 1], 0.2, beta=1.0, n=3, switch=0.5)
    with pytest.raises(ValueError, match="radius r must be finite and > 0"):
        equiangular_velocity(0.2, 0.0, beta=1.0, n=3, scheme="pre-ln")
    with pytest.raises(ValueError, match="nGPT's step alpha must be > 0"):
        equiangular_velocity(0.2, beta=1.0, n=3, scheme="ngpt", alpha=0.0)
    with pytest.raises(ValueError, match="kernel"):
        equiangular_velocity(0.2, beta=1.0, n=3, kernel="softmax")
    with pytest.raises(ValueError, match="times must be increasing"):
        equiangular_solution([1, 0], 0.2, beta=1.0, n=3)


# ---------------------------------------------------------------------- instability on S¹
@pytest.mark.parametrize("kernel", ["sa", "usa"])
@pytest.mark.parametrize("beta", [1.0, 5.0, 10.0])
def test_rates_match_a_numerical_linearisation_of_tpdes_field(kernel, beta):
    # Density 1 + ε cos kφ on a lattice of N points (a tpde measure with those weights),
    # velocity of the post-LN field there, ∂tρ = −∂θ(ρv): ȧ_k = −ik F_k with F_k the k-th
    # Fourier coefficient of ρv, and a_k = ε/2.
    N, eps = 256, 1e-6
    phi = 2 * np.pi * np.arange(N) / N
    points = torch.as_tensor(np.stack([np.cos(phi), np.sin(phi)], -1))
    normal = torch.as_tensor(np.stack([-np.sin(phi), np.cos(phi)], -1))
    field = Normalized(_field(kernel, beta, 2))
    for k in range(1, 7):
        density = 1 + eps * np.cos(k * phi)
        mu = Empirical(points, torch.as_tensor(density / density.sum()))
        v = (field.velocity(mu) * normal).sum(-1).numpy()
        flux = np.mean(density * v * np.exp(-1j * k * phi))
        rate = float(np.real(-1j * k * flux / (eps / 2)))
        assert rate == pytest.approx(instability_rate(k, beta, kernel=kernel), rel=1e-5)


@pytest.mark.parametrize("kernel", ["sa", "usa"])
@pytest.mark.parametrize("beta", [1.0, 5.0])
def test_sphere_rates_match_a_numerical_linearisation_on_s2(kernel, beta):
    # Density 1 + ε P_ℓ(z) on S² as a quadrature measure (Gauss–Legendre in z, uniform in
    # φ); M_ℓ = ∫ρ P_ℓ(z) grows at λ_ℓ: dM/dt = Σ_j w_j P'_ℓ(z_j) ż_j with ż the z
    # component of tpde's post-LN velocity.
    from numpy.polynomial import legendre

    nodes, gl = legendre.leggauss(40)
    phi = 2 * np.pi * np.arange(80) / 80
    z, ph = np.repeat(nodes, 80), np.tile(phi, 40)
    s = np.sqrt(1 - z**2)
    points = torch.as_tensor(np.stack([s * np.cos(ph), s * np.sin(ph), z], -1))
    field = Normalized(_field(kernel, beta, 3))
    eps = 1e-6
    for ell in range(1, 7):
        P = legendre.Legendre.basis(ell)
        density = np.repeat(gl, 80) * (1 + eps * P(z))
        w = density / density.sum()
        v = field.velocity(Empirical(points, torch.as_tensor(w)))[:, 2].numpy()
        rate = np.sum(w * P.deriv()(z) * v) / np.sum(w * P(z))
        assert rate == pytest.approx(instability_rate(ell, beta, kernel=kernel, d=3), rel=1e-5)
    assert dominant_mode(5.0, d=3) == 3 and dominant_mode(1.0, d=3) == 1


def test_rates_use_the_scaled_bessel_functions():
    k = np.arange(1, 7)
    np.testing.assert_allclose(
        instability_rate(k, 3.0), k**2 * ive(k, 3.0) / (3.0 * ive(0, 3.0)), rtol=1e-15
    )
    assert np.isfinite(instability_rate(k, 5e3)).all()  # no overflow at large β (SA)
    assert isinstance(instability_rate(2, 1.0), float)


def test_dominant_mode():
    assert (dominant_mode(1), dominant_mode(5), dominant_mode(10)) == (1, 3, 4)
    for beta in (0.3, 17.0, 200.0, 3000.0):
        modes = np.arange(1, 2000)
        assert dominant_mode(beta) == modes[np.argmax(modes**2 * ive(modes, beta))]
    assert abs(dominant_mode(3000.0) - math.sqrt(2 * 3000)) < 2  # k* ≈ √(2β)


@pytest.mark.parametrize("beta", [0.0, -2.0])
def test_beta_must_be_positive_for_the_fourier_formulas(beta):
    with pytest.raises(ValueError, match=r"instability rate .* needs beta > 0.*received beta"):
        instability_rate(1, beta)
    with pytest.raises(ValueError, match=r"dominant mode .* needs beta > 0"):
        dominant_mode(beta)


@pytest.mark.parametrize("k", [0, -1, 1.5, [1, 0]])
def test_modes_below_one_are_refused(k):
    with pytest.raises(ValueError, match="Fourier modes k must be"):
        instability_rate(k, 1.0)


def test_sphere_dimension_must_be_at_least_two():
    with pytest.raises(ValueError, match=r"an int >= 2 \(S\^\(d-1\)\); received 1"):
        instability_rate(1, 1.0, d=1)
    with pytest.raises(ValueError, match=r"received 2\.5"):
        dominant_mode(1.0, d=2.5)


# ---------------------------------------------------------------------- causal clustering
def test_causal_clustering_first_token_fixed_all_converge_issue19():
    # Issue 19's "must show" (and issue 22 part 3): causal softmax, post-LN, V = I, random
    # Q, K (Karagodin, Polyanskiy, Rigollet): token 1 attends to itself only, P⊥x₁x₁ = 0,
    # so it never moves; every token converges to it. 20 seeds in one batch.
    S, n, d = 20, 5, 3
    gen = torch.Generator().manual_seed(19)
    Q, K = torch.randn(S, d, d, generator=gen, dtype=F64), torch.randn(S, d, d, generator=gen,
                                                                       dtype=F64)  # fmt: skip
    start = uniform_on_sphere(n, d, batch=(S,), generator=gen).points
    mu = Empirical(start, positions=torch.linspace(0, 1, n, dtype=F64))
    field = Normalized(Masked(Softmax(Q, K, torch.eye(d, dtype=F64))), "post-ln")
    traj = integrate(field, mu, 600.0, method="dopri5", rtol=1e-9, atol=1e-12,
                     events=(Clustered(1e-7),), max_steps=50_000)  # fmt: skip
    final = traj.final.points
    assert list(np.asarray(traj.status).astype(str)) == ["clustered"] * S
    assert float((final[:, 0] - start[:, 0]).norm(dim=-1).max()) <= 1e-12
    assert float((final - final[:, :1]).norm(dim=-1).max()) <= 1e-6
    assert float((start[:, 1:] - start[:, :1]).norm(dim=-1).max()) > 0.5  # they had to move


def test_renyi_centres_by_brute_force():
    gen = torch.Generator().manual_seed(1)
    x = torch.nn.functional.normalize(torch.randn(40, 2, generator=gen, dtype=F64), dim=-1)
    delta = 0.6
    for strong in (False, True):
        expected = [0]
        for i in range(1, 40):
            earlier = range(i) if strong else expected
            if all(float((x[i] - x[j]).norm()) > delta for j in earlier):
                expected.append(i)
        assert renyi_centres(x, delta, strong=strong).tolist() == expected
    assert len(renyi_centres(x, delta, strong=True)) <= len(renyi_centres(x, delta))
    with pytest.raises(ValueError, match="parking distance delta must be > 0"):
        renyi_centres(x, 0.0)
    with pytest.raises(ValueError, match=r"points must have shape \(n, d\)"):
        renyi_centres(x[0], 0.5)


# ---------------------------------------------------------------------- zero temperature
def test_hardmax_vertices_rule_and_its_validity():
    A = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=F64)
    angles = torch.tensor([0.3, 1.9, 3.4, 4.9], dtype=F64)
    circle = torch.stack([angles.cos(), angles.sin()], -1)
    vals, vecs = torch.linalg.eigh(A)
    vertices = circle @ (vecs @ torch.diag(vals.rsqrt()) @ vecs.T).T  # on xᵀAx = 1
    interior = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6]], dtype=F64) @ vertices
    points = torch.cat([vertices, interior])
    targets, valid = hardmax_vertices(points, A)
    scores = (points @ A.T) @ points.T
    assert targets.tolist() == scores.argmax(-1).tolist()
    assert targets[:4].tolist() == [0, 1, 2, 3] and bool(valid.all())
    # A = I: the vertex (1, 1) prefers (2, 0.5), so the token (0, 0.5), which heads for it,
    # has no valid prediction.
    points = torch.tensor([[1, 1], [2, 0.5], [0, 0.5]], dtype=F64)
    targets, valid = hardmax_vertices(points, torch.eye(2, dtype=F64))
    assert targets.tolist() == [1, 1, 0] and valid.tolist() == [True, True, False]
    with pytest.raises(ValueError, match=r"A must have shape \(2, 2\)"):
        hardmax_vertices(points, torch.eye(3, dtype=F64))
