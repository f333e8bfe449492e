"""The stiff method (Rodas4) in the one loop: L-stability, step counts on stiff moment ODEs,
agreement with dopri5, per-element control, events, the Jacobian, bad input."""

import math

import numpy as np
import pytest
import torch

from tests.flows.test_loop import _RHS
from tpde.fields import L2, Field, MultiHead, Sinkhorn, Softmax
from tpde.flows import METHODS, RODAS4, BlowUp, Converged, Rosenbrock, integrate
from tpde.flows.systems import GaussianSystem, ParticleSystem
from tpde.measures import Empirical, Gaussian, Grid

F64 = torch.float64


class _Affine(Field):
    """Γ(x) = Bx with a constant B: the moment ODE Σ̇ = BΣ + ΣBᵀ is linear,
    Σ(t) = e^{tB} Σ₀ e^{tBᵀ}, with rates b_i + b_j for a diagonal B."""

    def __init__(self, B):
        self.B, self.dim = B, B.shape[-1]

    @property
    def time_dependent(self):
        return False

    def particle_velocity(self, t, mu, x, engine, info=None):
        return x @ self.B.T

    def gaussian_affine(self, t, mean, cov):
        return torch.zeros_like(mean), self.B.expand(*cov.shape)


def _stiff_linear(smooth=False):
    # Rates of Σ̇: b_i + b_j ∈ {−1, −(1 + 10⁴)/2, −10⁴}: a spread of 10⁴. ``smooth``: the
    # fast entries start (and stay) at rounding level, the solution is the slow mode alone.
    b = torch.tensor([-0.5, -5e3], dtype=F64)
    cov0 = torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
    if smooth:
        cov0 = torch.tensor([[1.0, 0.0], [0.0, 1e-12]], dtype=F64)
    exact = lambda t: cov0 * torch.exp(t * (b[:, None] + b[None, :]))  # noqa: E731
    return _Affine(torch.diag(b)), Gaussian(torch.zeros(2, dtype=F64), cov0), exact


def _gram_fields(d=3, batch=4, seed=0):
    """Softmax and L2 (code form) with V = GᵀG, K = −Q, the paper's rank-histogram fields
    (MATH.md §6): stiff, with fast modes of rate ~‖V‖‖A‖‖Σ‖."""
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(batch, d // 2 + 1, d, dtype=F64, generator=g)
    G = torch.randn(batch, d, d, dtype=F64, generator=g)
    V = G.transpose(-1, -2) @ G
    S = torch.randn(batch, d, d, dtype=F64, generator=g)
    cov0 = S @ S.transpose(-1, -2) + 0.1 * torch.eye(d, dtype=F64)
    mean0 = 0.3 * torch.randn(batch, d, dtype=F64, generator=g)
    scaled = Q / math.sqrt(d)
    return (
        {"softmax": Softmax(scaled, -Q, V, scale=1.0), "l2": L2(scaled, -Q, V, 1.0, form="code")},
        Gaussian(mean0, cov0),
    )


def test_one_step_damps_an_infinitely_stiff_mode():
    # L-stability: the stability function R(z) of a step on y' = λy tends to 0 as z = hλ →
    # −∞ (Rodas4 is stiffly accurate: R(∞) = 0; measured |R(z)| ≈ 8.8/|z|). One step of
    # h = 1 and h = 100 on rates 5·10³ and 10⁴ (entries Σ₀₁ and Σ₁₁) damps them by ~1/|z|
    # (the trapezoidal rule, A- but not L-stable, would leave |R| → 1); the slow entry
    # Σ₀₀ (rate 1) is within 1 % of e^{−1} after h = 1.
    field, g0, exact = _stiff_linear()
    system = GaussianSystem(field, g0, 0.0)
    cov0 = g0.cov()
    for h in (1.0, 100.0):
        y, error, _ = RODAS4.step(_RHS(system), 0.0, system.initial(), h, h_clock=h)
        for (i, j), rate in (((0, 1), 5000.5), ((1, 1), 1e4)):
            assert abs(float(y[1][i, j] / cov0[i, j])) < 20 / (h * rate)
        assert torch.isfinite(error[1]).all()
        if h == 1.0:
            assert float(y[1][0, 0]) == pytest.approx(float(exact(1.0)[0, 0]), rel=1e-2)


def test_stiff_linear_moment_ode_takes_far_fewer_steps_than_dopri5():
    # A smooth solution beside modes of rate up to 10⁴, same tolerance on [0, 0.3]: dopri5's
    # step is bounded by stability (|hλ| ≲ 3.3: ~900 steps; measured 904 + 205 rejected),
    # Rodas4's by the accuracy of the slow mode only (measured 5 + 0). (A start with the
    # fast modes excited adds a boundary layer that both must resolve: ~100 Rodas4 steps.)
    field, g0, exact = _stiff_linear(smooth=True)
    runs = {
        m: integrate(field, g0, 0.3, method=m, rtol=1e-6, atol=1e-9) for m in ("dopri5", "rodas4")
    }
    for traj in runs.values():
        # atol 1e-9 on entries of size 1e-1…1: both within 1e-6 of the closed form.
        torch.testing.assert_close(traj.final.cov(), exact(0.3), rtol=0, atol=1e-6)
    steps = {m: r.stats["n_steps"] + r.stats["n_rejected"] for m, r in runs.items()}
    assert steps["dopri5"] > 30 * steps["rodas4"]
    assert runs["rodas4"].stats["method"] == "rodas4"


@pytest.mark.parametrize("variant", ["softmax", "l2"])
def test_rodas4_agrees_with_dopri5_on_gram_value_moment_odes(variant):
    # V = GᵀG, A = −QᵀQ/√d: means and covariances (batch of 3, d = 3) to t = 1. dopri5 at
    # rtol 1e-10 is the reference; Rodas4 at rtol 1e-7 lands within 1e-5 relative to the
    # largest entry (measured 2e-7).
    fields, g0 = _gram_fields(batch=3)
    field = fields[variant]
    ref = integrate(field, g0, 1.0, method="dopri5", rtol=1e-10, atol=1e-13)
    stiff = integrate(field, g0, 1.0, method="rodas4", rtol=1e-7, atol=1e-10)
    scale = ref.final.cov().abs().amax((-2, -1), keepdim=True)
    relative = (stiff.final.cov() - ref.final.cov()) / scale
    assert float(relative.abs().max()) < 1e-5
    torch.testing.assert_close(stiff.final.mean(), ref.final.mean(), rtol=1e-5, atol=1e-8)


def test_each_element_keeps_its_own_steps_and_events():
    # Σ̇ = 2Σ² from Σ₀ ∈ [0.2, 2]: blow-up at t* = 1/(2Σ₀), over a decade. Each element
    # stops at its own time (within 1e-3 of the closed form, measured 2e-6) and the batch
    # costs about what its slowest element costs alone.
    count = 20
    s0 = torch.logspace(math.log10(0.2), math.log10(2.0), count, dtype=F64).reshape(count, 1, 1)
    g0 = Gaussian(torch.zeros(count, 1, dtype=F64), s0)
    one = Softmax.from_interaction(torch.ones(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64))
    traj = integrate(one, g0, 5.0, method="rodas4", events=(BlowUp(1e3),))
    assert (traj.status == "blow_up").all() and not traj.stats["synchronous"]
    exact = (1 / s0.flatten() - 1e-3) / 2  # Σ(t) = Σ₀/(1 − 2Σ₀t) reaches 1e3
    torch.testing.assert_close(traj.event_time, exact, rtol=0, atol=1e-3)
    steps = traj.stats["steps"] + traj.stats["rejected"]
    assert len(set(steps.tolist())) > 1  # elements take their own numbers of steps
    alone = [
        integrate(one, g0[i], 5.0, method="rodas4", events=(BlowUp(1e3),)).stats
        for i in (0, count - 1)
    ]
    slowest = max(s["n_steps"] + s["n_rejected"] for s in alone)
    assert traj.stats["n_iterations"] <= 1.3 * slowest


def test_converged_events_on_a_stiff_batch():
    # Σ̇ = 2aΣ² with a < 0 from Σ₀ = 1: Σ = 1/(1 − 2at), |Σ̇| = 2|a|Σ² falls below tol at
    # t = (√(2|a|/tol) − 1)/(2|a|); the event fires at the end of the first accepted step
    # past it (Rodas4's steps there are a few % of t: tolerance 5 %, measured 0.4 %).
    a = torch.tensor([-0.5, -1.0, -2.0], dtype=F64).reshape(3, 1, 1)
    field = Softmax.from_interaction(a, torch.ones(1, 1, dtype=F64))
    g0 = Gaussian(torch.zeros(1, dtype=F64), torch.ones(1, 1, dtype=F64))
    traj = integrate(field, g0, 1e3, method="rodas4", events=(Converged(1e-4),))
    assert (traj.status == "converged").all()
    rate = a.abs().flatten()
    exact = ((2 * rate / 1e-4).sqrt() - 1) / (2 * rate)
    torch.testing.assert_close(traj.event_time, exact, rtol=5e-2, atol=0)
    # The paper's stopping rule on the stiff V = GᵀG softmax flow: every element stops at a
    # state whose ‖Σ̇‖_F is below tol.
    fields, g0 = _gram_fields(batch=3, seed=1)
    g0 = Gaussian(torch.zeros_like(g0.mean()), g0.cov())
    stiff = integrate(fields["softmax"], g0, 1e4, method="rodas4", events=(Converged(1e-3),))
    assert (stiff.status == "converged").all()
    _, dcov = fields["softmax"].gaussian_rhs(0.0, stiff.final.mean(), stiff.final.cov())
    assert (dcov.flatten(-2).norm(dim=-1) < 1e-3).all()


def _fixed_step_error(field, g0, t1, exact, h):
    system = GaussianSystem(field, g0, 0.0)
    y, t, n = system.initial(), 0.0, round(t1 / h)
    for _ in range(n):
        y, _, _ = RODAS4.step(_RHS(system), t, y, t1 / n, h_clock=t1 / n)
        t += t1 / n
    return float((y[1] - exact).abs().max() / exact.abs().max())


def test_fourth_order_on_a_time_dependent_field():
    # A(t) = cos t, V = 1: ṡ = 2 cos(t) s², s(t) = s₀/(1 − 2s₀ sin t). A Rosenbrock step
    # needs ∂f/∂t (here by a forward difference) to keep its order on a non-autonomous
    # field: with it the slope is 4.2 (pre-asymptotic, ±0.3), without (d = 0) it is 1.00.
    field = Softmax.from_interaction(
        lambda t: torch.tensor([[math.cos(t)]], dtype=F64), torch.tensor([[1.0]], dtype=F64)
    )
    s0, t1 = 0.4, 1.0
    g0 = Gaussian(torch.zeros(1, dtype=F64), torch.tensor([[s0]], dtype=F64))
    exact = torch.tensor([[s0 / (1 - 2 * s0 * math.sin(t1))]], dtype=F64)
    steps = [0.1, 0.05, 0.025, 0.0125]
    errors = [_fixed_step_error(field, g0, t1, exact, h) for h in steps]
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert slope == pytest.approx(4, abs=0.3)
    # Adaptive, through integrate (a time-dependent field steps in lockstep).
    traj = integrate(field, g0, t1, method="rodas4", rtol=1e-9, atol=1e-12)
    assert traj.stats["synchronous"]
    torch.testing.assert_close(traj.final.cov(), exact, rtol=1e-7, atol=0)


def test_particle_jacobian_time_derivative():
    # A(t) = cos t: the particle Linearization's ∂f/∂t (forward difference, relative error
    # ~√ε ≈ 1.5e-8) against a central difference of the right-hand side (error ~h² ≈ 1e-10).
    field = Softmax.from_interaction(
        lambda t: torch.tensor([[math.cos(t)]], dtype=F64), torch.tensor([[1.0]], dtype=F64)
    )
    mu = Empirical(torch.tensor([[-1.0], [0.3], [1.2]], dtype=F64))
    system, t = ParticleSystem(field, mu), 0.7
    lin = system.jacobian(t, system.initial())
    h = 1e-5
    up, down = (lin.to_vector(system.rhs(t + s, system.initial())) for s in (h, -h))
    torch.testing.assert_close(lin.time_derivative, (up - down) / (2 * h), rtol=1e-6, atol=0)
    assert lin.matrix.shape == (3, 3) and not lin.time_derivative.requires_grad


def _finite_difference_jacobian(system, state, lin, eps=1e-6):
    y = lin.to_vector(state)
    columns = []
    for j in range(y.shape[-1]):
        step = torch.zeros_like(y)
        step[..., j] = eps
        up = lin.to_vector(system.rhs(0.0, lin.to_state(y + step)))
        down = lin.to_vector(system.rhs(0.0, lin.to_state(y - step)))
        columns.append((up - down) / (2 * eps))
    return torch.stack(columns, -1)


def _jacobian_fields():
    g = torch.Generator().manual_seed(3)
    r = lambda *s: 0.5 * torch.randn(*s, dtype=F64, generator=g)  # noqa: E731
    Q, K, V = r(2, 3, 3), r(2, 3, 3), r(2, 3, 3)
    bias = {"query_bias": r(3), "key_bias": r(3), "value_bias": r(3)}
    head_bias = {"query_bias": r(1), "key_bias": r(1), "value_bias": r(3)}
    return {
        "softmax": Softmax(Q, K, V),
        "softmax-k1-bias": Softmax(Q[:, :1], K[:, :1], V, **head_bias),
        "l2": L2(Q, K, V, **bias),
        "l2-code": L2(Q, K, V, form="code"),
        "multihead": MultiHead([Softmax(Q[0, :1], K[0, :1], V[0]), L2(Q[0, 1:], K[0, 1:], V[0])]),
        "sinkhorn": Sinkhorn(Q[0] + Q[0].T, torch.eye(3, dtype=F64), V[0], scale=1.0),
    }


JACOBIAN_FIELDS = ["softmax", "softmax-k1-bias", "l2", "l2-code", "multihead", "sinkhorn"]


@pytest.mark.parametrize("name", JACOBIAN_FIELDS)
def test_the_jacobian_matches_finite_differences(name):
    # Closed form (softmax, L2: capability "gaussian_derivative") or autograd (the others),
    # against central differences of step 1e-6 (truncation ~1e-11, rounding ~1e-10
    # relative: tolerance 1e-8 of the largest entry). Batch of 2, nonzero means, d = 3.
    field = _jacobian_fields()[name]
    g = torch.Generator().manual_seed(4)
    S = torch.randn(2, 3, 3, dtype=F64, generator=g)
    g0 = Gaussian(0.5 * torch.randn(2, 3, dtype=F64, generator=g), S @ S.mT + 0.5 * torch.eye(3))
    system = GaussianSystem(field, g0, 0.0)
    state = system.initial()
    lin = system.jacobian(0.0, state)
    assert lin.matrix.shape == (2, 9, 9)  # n = d + d(d+1)/2
    reference = _finite_difference_jacobian(system, state, lin)
    scale = float(reference.abs().max())
    torch.testing.assert_close(lin.matrix / scale, reference / scale, rtol=0, atol=1e-8)


def test_gradients_flow_through_a_rosenbrock_run():
    # d/dσ₀ of s(t) = s₀/(1 − 2vas₀t) is 1/(1 − 2vas₀t)²; the closed-form Jacobian is
    # differentiated through, so the discrete gradient is that of the solution to rtol.
    v, a, t = 0.7, 0.9, 0.5
    s0 = torch.tensor(0.5, dtype=F64, requires_grad=True)
    field = Softmax.from_interaction(torch.tensor([[a]], dtype=F64), torch.tensor([[v]], dtype=F64))
    g0 = Gaussian(torch.zeros(1, dtype=F64), s0.reshape(1, 1))
    traj = integrate(field, g0, t, method="rodas4", rtol=1e-11, atol=1e-13)
    (grad,) = torch.autograd.grad(traj.final.cov()[0, 0], s0)
    assert float(grad) == pytest.approx(1 / (1 - 2 * v * a * 0.5 * t) ** 2, rel=1e-7)


def test_rodas4_is_a_declared_method_with_its_tableau():
    assert METHODS["rodas4"] is RODAS4 and RODAS4.adaptive and RODAS4.order == 4
    assert RODAS4.error_exponent == 0.25  # the embedded solution is of order 3


# ----------------------------------------------------------------------------- bad input


def test_systems_without_a_jacobian_are_refused_by_name():
    field = Softmax.from_interaction(-torch.eye(2, dtype=F64), torch.eye(2, dtype=F64))
    grid = Grid(torch.full((8, 8), 1 / 64, dtype=F64), [-1.0, -1.0], [1.0, 1.0])
    match = r"stiff.*GaussianSystem.*ParticleSystem.*this GridSystem has none"
    with pytest.raises(ValueError, match=match):
        integrate(field, grid, 1.0, method="rodas4")


def test_a_right_hand_side_without_jacobian_and_a_bad_tableau_are_refused():
    field, g0, _ = _stiff_linear()
    system = GaussianSystem(field, g0, 0.0)
    with pytest.raises(TypeError, match=r"Rosenbrock method 'rodas4' needs the Jacobian"):
        RODAS4.step(system.rhs, 0.0, system.initial(), 0.1)
    with pytest.raises(ValueError, match=r"inconsistent sizes: m has 2 stages but C has 1"):
        Rosenbrock("broken", 2, 1, 0.5, a=((), (1.0,)), C=((),), c=(0, 1), d=(0.5, 0),
                   m=(0.5, 0.5), e=(0, 1))  # fmt: skip
    with pytest.raises(ValueError, match=r"row 1 of a must have 1 entries"):
        Rosenbrock("broken", 2, 1, 0.5, a=((), ()), C=((), (1.0,)), c=(0, 1), d=(0.5, 0),
                   m=(0.5, 0.5), e=(0, 1))  # fmt: skip


# ----------------------------------------------------------------------------- large clouds
def test_a_stiff_cloud_beyond_the_dense_jacobian_is_solved_by_gmres_stages():
    # Issue 36: clouds of n·d > 256 had no stiff method. n·d = 288 here, A = I/2 and
    # V = −diag(1000, 1, 0.5, 0.2): the first coordinates contract at rate ~1000 while the
    # others drift. rodas4 on the operator Jacobian (GMRES stage solves,
    # tpde.flows.systems.krylov) against rk4 at hλ = 0.1 in float64, whose own error is
    # 1e-7 (measured against rk4 at half the step; rodas4 is 4e-9 from that one): tolerance
    # 1e-6. The work: 101 + 4 rodas4 steps where rk4 takes 3000 (dopri5 takes 127 here:
    # λ·t1 = 300 is mildly stiff; benchmarks/stiff_particles.py has the stiffer cases).
    n, d = 72, 4
    X = torch.randn(n, d, generator=torch.Generator().manual_seed(0), dtype=F64)
    V = -torch.diag(torch.tensor([1e3, 1.0, 0.5, 0.2], dtype=F64))
    field = Softmax.from_interaction(0.5 * torch.eye(d, dtype=F64), V)
    traj = integrate(field, Empirical(X), 0.3, method="rodas4")
    reference = integrate(field, Empirical(X), 0.3, method="rk4", dt=1e-4)
    assert traj.status == "completed"
    torch.testing.assert_close(traj.final.points, reference.final.points, rtol=0, atol=1e-6)
    assert traj.stats["n_steps"] + traj.stats["n_rejected"] < 300
