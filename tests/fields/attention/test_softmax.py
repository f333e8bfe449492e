"""The softmax field: definitions, Gaussian closure, parameters, and rejected input."""

import pytest
import torch

import tpde._engines.keops as keops_engine
from tpde._engines import pick_engine
from tpde.fields import GaussianNotPreserved, Softmax
from tpde.fields.base import Field
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64


def test_interaction_matrix_and_default_scale(generator):
    Q = torch.randn(4, 3, generator=generator, dtype=F64)
    K = torch.randn(4, 3, generator=generator, dtype=F64)
    field = Softmax(Q, K, torch.eye(3, dtype=F64))
    assert field.params.scale == pytest.approx(0.5)  # 1/√k with k = 4
    p = field.params.at(0.0, like=Q)
    torch.testing.assert_close(p.A, 0.5 * K.T @ Q)


def test_isotropic_parameters_take_the_short_route(generator):
    # A = cI and V = I (GLPR's model, here batched over c) are detected once: queries c·x,
    # no product with V. The velocity equals the general route's (a zero query bias forces
    # it) to rounding; a parameter changed in place, or one under autograd, goes back to
    # the general route.
    d = 3
    c = torch.tensor([0.5, 2.0], dtype=F64).reshape(2, 1, 1, 1)
    A, V = c * torch.eye(d, dtype=F64), torch.eye(d, dtype=F64)
    field = Softmax.from_interaction(A, V)
    general = Softmax(A, torch.eye(d, dtype=F64), V, scale=1.0, query_bias=torch.zeros(d))
    mu = Empirical(torch.randn(2, 5, 7, d, generator=generator, dtype=F64))
    torch.testing.assert_close(field.params.isotropic_interaction(mu.points), c)
    assert (
        field.params.value_is_identity and general.params.isotropic_interaction(mu.points) is None
    )
    torch.testing.assert_close(field.velocity(mu), general.velocity(mu), rtol=1e-14, atol=1e-14)
    field.params.Q[..., 0, 1] += 0.3  # in place: the version counter changes
    assert field.params.isotropic_interaction(mu.points) is None
    moved = Softmax(field.params.Q.clone(), torch.eye(d, dtype=F64), V, scale=1.0,
                    query_bias=torch.zeros(d))  # fmt: skip
    torch.testing.assert_close(field.velocity(mu), moved.velocity(mu), rtol=1e-14, atol=1e-14)
    tracked = A.clone().requires_grad_()
    under_grad = Softmax.from_interaction(tracked, V)
    assert under_grad.params.isotropic_interaction(mu.points) is None
    under_grad.velocity(mu).sum().backward()
    assert tracked.grad is not None and float(tracked.grad.abs().max()) > 0


def test_a_batched_identity_value_keeps_its_batch(generator):
    # V = I batched over 3 (with unbatched Q, K and points) gives a velocity per batch
    # element, (3, n, d), as any batched V does: it is not the V = I short route.
    eye = torch.eye(2, dtype=F64)
    mu = Empirical(torch.randn(5, 2, generator=generator, dtype=F64))
    batched = Softmax(eye, eye, eye.expand(3, 2, 2).clone()).velocity(mu)
    assert batched.shape == (3, 5, 2)
    torch.testing.assert_close(batched, Softmax(eye, eye, eye).velocity(mu).expand(3, 5, 2))


def test_particle_velocity_is_the_defining_sum(generator):
    # ẋ_i = V Σ_j w_j e^{x_jᵀAx_i} x_j / Σ_j w_j e^{x_jᵀAx_i}, written out with loops.
    A = torch.randn(2, 2, generator=generator, dtype=F64)
    V = torch.randn(2, 2, generator=generator, dtype=F64)
    x = torch.randn(7, 2, generator=generator, dtype=F64)
    w = torch.rand(7, generator=generator, dtype=F64)
    w = w / w.sum()
    expected = torch.stack(
        [
            V
            @ sum(w[j] * torch.exp(x[j] @ A @ x[i]) * x[j] for j in range(7))
            / sum(w[j] * torch.exp(x[j] @ A @ x[i]) for j in range(7))
            for i in range(7)
        ]
    )
    got = Softmax.from_interaction(A, V).velocity(Empirical(x, w))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_velocity_on_a_gaussian_is_the_tilted_mean(generator):
    # Γ[N(α, Σ)](x) = V(α + ΣAx), and the particle velocity converges to it.
    A = torch.tensor([[-0.4, 0.2], [0.1, -0.3]], dtype=F64)
    V = torch.tensor([[1.0, 0.3], [0.0, 0.5]], dtype=F64)
    g = Gaussian(
        torch.tensor([0.2, -0.1], dtype=F64), torch.tensor([[0.5, 0.1], [0.1, 0.3]], dtype=F64)
    )
    x = torch.tensor([[0.3, 0.4], [-0.5, 0.1]], dtype=F64)
    field = Softmax.from_interaction(A, V)
    exact = field.velocity(g, x)
    torch.testing.assert_close(exact, (g.mean() + x @ (g.cov() @ A).T) @ V.T)
    cloud = Empirical.from_gaussian(g, 200_000, generator=generator)
    # Monte Carlo error of a self-normalised average at n = 2e5: ~ 3e-3; allow 1e-2.
    assert float((field.velocity(cloud, x) - exact).abs().max()) < 1e-2


def test_low_rank_heads_take_the_factored_gaussian_slope(generator):
    # k < d: VΣA is formed as (V(ΣKᵀ))(scale·Q), O(d²k); it must equal V Σ (scale·KᵀQ),
    # batched over Gaussians, with biases (rounding only: 1e-12).
    Q = torch.randn(2, 6, generator=generator, dtype=F64)
    K = torch.randn(2, 6, generator=generator, dtype=F64)
    V = torch.randn(6, 6, generator=generator, dtype=F64)
    bq = torch.randn(2, generator=generator, dtype=F64)
    field = Softmax(Q, K, V, scale=0.7, query_bias=bq)
    S = torch.randn(3, 6, 6, generator=generator, dtype=F64)
    cov = S @ S.mT / 6
    mean = torch.randn(3, 6, generator=generator, dtype=F64)
    offset, slope = field.gaussian_affine(0.0, mean, cov)
    A = 0.7 * K.T @ Q
    torch.testing.assert_close(slope, V @ cov @ A, rtol=1e-12, atol=1e-12)
    tilt = mean + cov @ (0.7 * K.T @ bq)
    torch.testing.assert_close(offset, tilt @ V.T, rtol=1e-12, atol=1e-12)


def test_batched_parameters_broadcast_against_batched_gaussians(generator):
    A = torch.randn(5, 1, 2, 2, generator=generator, dtype=F64)
    field = Softmax.from_interaction(A, torch.eye(2, dtype=F64))
    g = Gaussian(torch.zeros(3, 2, dtype=F64), torch.eye(2, dtype=F64).expand(3, 2, 2))
    dmean, dcov = field.gaussian_rhs(0.0, g.mean(), g.cov())
    assert dmean.shape == (5, 3, 2) and dcov.shape == (5, 3, 2, 2)
    torch.testing.assert_close(dcov[2, 1], A[2, 0] + A[2, 0].T)


def test_callable_parameters_are_evaluated_at_t():
    field = Softmax(lambda t: torch.tensor([[t + 1.0]]), torch.ones(1, 1), torch.eye(1))
    mu = Empirical(torch.tensor([[1.0], [2.0]], dtype=F64))
    assert not torch.allclose(field.velocity(mu, t=0.0), field.velocity(mu, t=2.0))


def test_base_field_has_no_closure_or_energy():
    with pytest.raises(GaussianNotPreserved, match="does not keep Gaussians Gaussian"):
        Field().gaussian_rhs(0.0, torch.zeros(1), torch.eye(1))
    with pytest.raises(NotImplementedError, match="not known to be a gradient flow"):
        Field().energy(Empirical(torch.zeros(1, 1)))  # Softmax has one (test_energies.py)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((torch.zeros(3), torch.zeros(1, 3), torch.eye(3)), r"Q must have shape \(\.\.\., k, d\)"),
        (
            (torch.zeros(2, 3), torch.zeros(1, 3), torch.eye(3)),
            r"K must have shape \(\.\.\., 2, 3\)",
        ),
        (
            (torch.zeros(2, 3), torch.zeros(2, 3), torch.eye(2)),
            r"V must have shape \(\.\.\., 3, 3\)",
        ),
        ((torch.zeros(2, 2, 3), torch.zeros(3, 2, 3), torch.eye(3)), "do not broadcast"),
        ((torch.full((1, 1), float("nan")), torch.ones(1, 1), torch.eye(1)), "non-finite"),
    ],
)
def test_bad_parameters(args, match):
    with pytest.raises(ValueError, match=match):
        Softmax(*args)


def test_bad_scale_and_bad_callable():
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        Softmax(torch.ones(1, 1), torch.ones(1, 1), torch.eye(1), scale=0.0)
    field = Softmax(
        lambda t: torch.ones(1, 1) if t == 0 else torch.ones(2, 1), torch.ones(1, 1), torch.eye(1)
    )
    with pytest.raises(ValueError, match="Q changed shape over time"):
        field.velocity(Empirical(torch.zeros(2, 1)), t=1.0)


def test_velocity_rejects_bad_measures_points_and_engines():
    field = Softmax.from_interaction(torch.eye(2), torch.eye(2))
    mu = Empirical(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="dimension mismatch: the measure lives in d = 3"):
        field.velocity(Empirical(torch.zeros(3, 3)))
    with pytest.raises(TypeError, match="must be a tpde measure"):
        field.velocity(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"x must have shape \(m, 2\)"):
        field.velocity(mu, x=torch.zeros(3))
    with pytest.raises(ValueError, match="non-finite"):
        field.velocity(mu, x=torch.full((1, 2), float("inf")))
    with pytest.raises(ValueError, match="unknown engine 'gpu'; choose one of 'auto'"):
        field.velocity(mu, engine="gpu")
    with pytest.raises(ValueError, match="needs evaluation points x"):
        field.velocity(Gaussian(torch.zeros(2), torch.eye(2)))


def test_keops_unavailable_is_an_error_when_asked_and_a_warning_in_auto(monkeypatch):
    monkeypatch.setattr(keops_engine, "keops_status", lambda: (False, "g++ missing (test)"))
    field = Softmax.from_interaction(torch.eye(2), torch.eye(2))
    with pytest.raises(RuntimeError, match=r"KeOps is not usable: g\+\+ missing \(test\)"):
        field.velocity(Empirical(torch.zeros(3, 2)), engine="keops")
    import tpde._engines as engines

    monkeypatch.setattr(engines, "keops_status", lambda: (False, "g++ missing (test)"))
    engines._warn_keops_fallback.cache_clear()
    with pytest.warns(
        RuntimeWarning,
        match=r"KeOps is not usable \(g\+\+ missing \(test\)\); falling back to 'chunked'",
    ):
        assert pick_engine(10**4, 10**4, torch.device("cuda"), torch.float64) == "chunked"


def test_integrate_rejects_bad_arguments():
    field = Softmax.from_interaction(torch.eye(1), torch.eye(1))
    g = Gaussian(torch.zeros(1), torch.eye(1))
    with pytest.raises(ValueError, match=r"dt must be finite and > 0; received -0\.1"):
        integrate(field, g, 1.0, dt=-0.1, method="rk4")
    with pytest.raises(ValueError, match="t1 must be finite and >= t0"):
        integrate(field, g, -1.0)
    with pytest.raises(ValueError, match="unknown method 'rk45'"):
        integrate(field, g, 1.0, method="rk45")
    with pytest.raises(ValueError, match="unknown event 'explode'"):
        integrate(field, g, 1.0, events=("explode",))
    with pytest.raises(TypeError, match=r"mu0 must be a .*an Empirical"):
        integrate(field, torch.zeros(3, 1), 1.0)
    with pytest.raises(ValueError, match="dimension mismatch"):
        integrate(field, Gaussian(torch.zeros(2), torch.eye(2)), 1.0)
    with pytest.raises(ValueError, match=r"save times must lie in \[t0, t1\]"):
        integrate(field, g, 1.0, save=[2.0])
    with pytest.raises(ValueError, match="unknown engine"):
        integrate(field, Empirical(torch.zeros(2, 1)), 1.0, engine="fast")


def test_velocity_on_a_grid_is_the_velocity_on_its_cell_masses():
    from tpde.measures import Grid

    grid = Grid(torch.tensor([[0.1, 0.2], [0.3, 0.4]], dtype=F64), [-1.0, -1.0], [1.0, 1.0])
    field = Softmax.from_interaction(
        torch.tensor([[-0.5, 0.1], [0.1, -0.3]], dtype=F64), torch.eye(2, dtype=F64)
    )
    cells = Empirical(grid.centres(), grid.density.reshape(-1))
    torch.testing.assert_close(field.velocity(grid), field.velocity(cells))
