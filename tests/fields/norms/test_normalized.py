"""Normalised tokens (MATH.md §7): the schemes' equations, closed forms, clustering, energy."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from tpde.fields import LayerSchedule, Normalized, NotAGradientFlow, Sinkhorn, Softmax
from tpde.flows import Clustered, integrate, jko_step
from tpde.measures import Empirical, Gaussian, Grid, uniform_on_sphere
from tpde.metrics import angular_cluster_count

F64 = torch.float64


def _sa(beta: float, d: int):
    """Softmax with Q = K = V = I and score β⟨x, y⟩ (A = βI): GLPR's SA model."""
    return Softmax.from_interaction(beta * torch.eye(d, dtype=F64), torch.eye(d, dtype=F64))


def _two_tokens(theta0: float):
    return Empirical(torch.tensor([[1.0, 0.0], [math.cos(theta0), math.sin(theta0)]], dtype=F64))


def _angle(mu) -> float:
    x, y = mu.points
    return math.acos(max(-1.0, min(1.0, float(x @ y))))


def _two_token_angle(beta: float, theta0: float, t1: float) -> float:
    """θ' = −2 sin θ e^{β cos θ}/(e^β + e^{β cos θ}) (MATH.md §7), solved to 1e-13."""

    def rhs(_, theta):
        e = math.exp(beta * math.cos(theta[0]))
        return [-2 * math.sin(theta[0]) * e / (math.exp(beta) + e)]

    return solve_ivp(rhs, (0, t1), [theta0], rtol=1e-13, atol=1e-15).y[0, -1]


def test_two_tokens_on_the_circle_follow_the_closed_form():
    # Particles at rk4, dt = 1e-3 against the scalar angle ODE: 1e-8 (measured ~1e-13);
    # the projection after every step keeps the norms at 1 to 1e-12.
    beta, theta0, t1 = 1.5, 2.0, 2.0
    traj = integrate(
        Normalized(_sa(beta, 2)), _two_tokens(theta0), t1, dt=1e-3, save=5, method="rk4"
    )
    assert _angle(traj.final) == pytest.approx(_two_token_angle(beta, theta0, t1), abs=1e-8)
    for mu in traj.measures:
        assert float((mu.points.norm(dim=1) - 1).abs().max()) < 1e-12


@pytest.mark.parametrize(("method", "order"), [("euler", 1), ("heun", 2), ("rk4", 4)])
def test_the_projected_methods_keep_their_order(method, order):
    # The tangent velocity P⊥_x Γ plus renormalisation after whole steps: the observed order
    # is the method's (slope of log error against log dt, ±0.25).
    beta, theta0, t1 = 2.0, 2.5, 3.0
    exact = _two_token_angle(beta, theta0, t1)
    # rk4 on coarser steps: at dt = 0.0125 its error is at rounding (4e-16).
    steps = [0.4, 0.2, 0.1, 0.05] if order == 4 else [0.1, 0.05, 0.025, 0.0125]
    errors = [
        abs(_angle(integrate(Normalized(_sa(beta, 2)), _two_tokens(theta0), t1, dt=h,
                             method=method).final) - exact)
        for h in steps
    ]  # fmt: skip
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert slope == pytest.approx(order, abs=0.25)


def test_the_discrete_layer_is_euler_plus_renormalisation():
    # tangent=False: one Euler step is exactly GLPR's step_1, x ← N(x + hΓ[μ](x)).
    mu = uniform_on_sphere(16, 3, generator=torch.Generator().manual_seed(1))
    field = _sa(2.0, 3)
    h = 0.1
    step = integrate(Normalized(field, tangent=False), mu, h, dt=h, method="euler").final
    by_hand = torch.nn.functional.normalize(mu.points + h * field.velocity(mu), dim=1)
    torch.testing.assert_close(step.points, by_hand, rtol=1e-14, atol=1e-15)


def test_twenty_seeds_gather_into_one_cluster():
    # d = 3, Q = K = V = I, β = 1, 32 uniform tokens: one cluster (GLPR), every seed. One
    # batched run; each element stops at its own Clustered event (diameter < 1e-4).
    mu = uniform_on_sphere(32, 3, batch=(20,), generator=torch.Generator().manual_seed(7))
    traj = integrate(Normalized(_sa(1.0, 3)), mu, 60.0, method="dopri5", events=(Clustered(1e-4),))
    assert (traj.status == "clustered").all()
    assert (angular_cluster_count(traj.final, 1e-3) == 1).all()
    assert float(traj.event_time.max()) < 40  # measured 12–25
    assert float((traj.final.points.norm(dim=-1) - 1).abs().max()) < 1e-12


def test_pre_ln_angular_speed_falls_as_one_over_the_radius():
    # Pre-LN: x = rθ with θ̇ = P⊥_θ Γ[N#μ](θ)/r. The angle's speed, measured by central
    # differences of the saved angles, times r(t) equals the Post-LN speed at the same
    # angles (to the O(δ²) of the differences: 1e-5 relative).
    gen = torch.Generator().manual_seed(3)
    start = uniform_on_sphere(12, 3, generator=gen).points * (1 + torch.rand(12, 1, generator=gen))
    field = _sa(1.0, 3)
    delta = 1e-4
    times = [0.5 - delta, 0.5, 0.5 + delta, 2.0 - delta, 2.0, 2.0 + delta]
    traj = integrate(Normalized(field, "pre-ln"), Empirical(start), 2.0 + delta, dt=1e-3,
                     save=times, method="rk4")  # fmt: skip
    for k in (2, 5):
        before, now, after = (traj.measures[k + j].points for j in (-1, 0, 1))
        theta = torch.nn.functional.normalize(now, dim=1)
        speed = (
            (torch.nn.functional.normalize(after, dim=1)
             - torch.nn.functional.normalize(before, dim=1)).norm(dim=1) / (2 * delta)
        )  # fmt: skip
        on_sphere = Normalized(field).velocity(Empirical(theta)).norm(dim=1)
        radius = now.norm(dim=1)
        torch.testing.assert_close(speed * radius, on_sphere, rtol=1e-5, atol=1e-9)
    assert float(traj.final.points.norm(dim=1).min()) > 1.0  # the radii grew (⟨θ, Γ⟩ > 0)


def test_peri_ln_moves_every_token_at_unit_speed():
    mu = Empirical(torch.randn(20, 4, generator=torch.Generator().manual_seed(4), dtype=F64))
    speed = Normalized(_sa(0.7, 4), "peri-ln").velocity(mu).norm(dim=1)
    torch.testing.assert_close(speed, torch.ones(20, dtype=F64))


def test_ngpt_moves_on_the_sphere_no_faster_than_alpha():
    mu = uniform_on_sphere(20, 3, generator=torch.Generator().manual_seed(5))
    field = Normalized(_sa(1.0, 3), "ngpt", alpha=0.3)
    assert float(field.velocity(mu).norm(dim=1).max()) <= 0.3 + 1e-12
    traj = integrate(field, mu, 3.0, dt=0.05, method="rk4")
    assert float((traj.final.points.norm(dim=1) - 1).abs().max()) < 1e-12
    slow = integrate(
        Normalized(_sa(1.0, 3), "ngpt", alpha=lambda t: 0.3), mu, 3.0, dt=0.05, method="rk4"
    )
    torch.testing.assert_close(slow.final.points, traj.final.points)


def test_mix_ln_is_post_ln_then_pre_ln():
    mu = uniform_on_sphere(16, 3, generator=torch.Generator().manual_seed(6))
    field = Normalized(_sa(1.0, 3), "mix-ln", switch=0.5, depth=1.0)
    traj = integrate(field, mu, 1.0, dt=0.01, save=[0.5], method="rk4")
    post = integrate(Normalized(_sa(1.0, 3)), mu, 0.5, dt=0.01, method="rk4").final
    torch.testing.assert_close(traj.measures[1].points, post.points)
    assert float((traj.measures[1].points.norm(dim=1) - 1).abs().max()) < 1e-12
    pre = integrate(
        Normalized(_sa(1.0, 3), "pre-ln"), post, 1.0, t0=0.5, dt=0.01, method="rk4"
    ).final
    torch.testing.assert_close(traj.final.points, pre.points)
    # velocity(t) is the velocity of the piece acting at t, off the sphere after the switch.
    mid = traj.measures[1]
    torch.testing.assert_close(field.velocity(mid, t=0.2), Normalized(_sa(1.0, 3)).velocity(mid))
    late = Normalized(_sa(1.0, 3), "pre-ln")
    torch.testing.assert_close(field.velocity(traj.final, t=0.7), late.velocity(traj.final))
    with pytest.raises(ValueError, match="post-ln attention moves tokens on the unit sphere"):
        field.velocity(traj.final, t=0.2)


def test_layernorm_scheme_is_the_post_ln_sublayer():
    # With Euler and h = 1: x ← LN(x + Γ[μ](x)), LN with the given γ, b, ε.
    gen = torch.Generator().manual_seed(8)
    d = 5
    mu = Empirical(torch.randn(10, d, generator=gen, dtype=F64))
    gamma, bias = 1 + 0.1 * torch.randn(d, generator=gen, dtype=F64), torch.randn(d, dtype=F64)
    field = _sa(0.5, d)
    out = integrate(Normalized(field, "layernorm", gamma=gamma, bias=bias, eps=1e-12), mu, 1.0,
                    dt=1.0, method="euler").final  # fmt: skip
    y = mu.points + field.velocity(mu)
    expected = torch.nn.functional.layer_norm(y, (d,), gamma, bias, eps=1e-12)
    torch.testing.assert_close(out.points, expected)
    # A stack of layers with their own LayerNorms: a LayerSchedule of Normalized fields.
    stack = LayerSchedule([Normalized(field, "layernorm"), Normalized(field, "layernorm")])
    two = integrate(stack, mu, 2.0, dt=1.0, method="euler").final
    once = torch.nn.functional.layer_norm(y, (d,), eps=1e-12)
    again = once + field.velocity(Empirical(once))
    torch.testing.assert_close(two.points, torch.nn.functional.layer_norm(again, (d,), eps=1e-12))


@pytest.mark.parametrize(("field", "sign"), [(_sa(1.0, 3), 1), (None, -1)])
def test_energy_is_monotone_along_post_ln_flows(field, sign):
    # V = cA (here c = 1/β·β = 1: Q = K = V = I): the post-LN flow is the spherical gradient
    # ascent of the softmax energy E (Z-weighted) and the descent of Sinkhorn's F.
    if field is None:
        field = Sinkhorn(torch.eye(3, dtype=F64), torch.eye(3, dtype=F64), torch.eye(3, dtype=F64),
                         scale=1.0, tol=1e-10)  # fmt: skip
    normalized = Normalized(field)
    mu = uniform_on_sphere(24, 3, generator=torch.Generator().manual_seed(9))
    traj = integrate(normalized, mu, 4.0, dt=0.05, save="steps", method="rk4")
    energy = torch.stack([normalized.energy(m) for m in traj.measures])
    steps = sign * energy.diff()
    assert float(steps.min()) > -1e-12 * float(energy.abs().max())
    assert float(sign * (energy[-1] - energy[0])) > 1e-3
    assert normalized.gradient_structure().lyapunov_sign == -sign


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_a_clear_message():
    field = _sa(1.0, 3)
    off = Empirical(2 * uniform_on_sphere(5, 3).points)
    with pytest.raises(ValueError, match=r"norms up to 1 away from 1.*mu\.normalized\(\)"):
        integrate(Normalized(field), off, 1.0)
    assert integrate(Normalized(field), off.normalized(), 0.1).status == "completed"
    with pytest.raises(ValueError, match="unknown normalisation scheme 'rms'; choose one of 'post"):
        Normalized(field, "rms")
    with pytest.raises(ValueError, match=r"nGPT alpha must be finite and > 0; received -0\.5"):
        Normalized(field, "ngpt", alpha=-0.5)
    with pytest.raises(ValueError, match=r"alpha\(t\) must be finite and > 0"):
        Normalized(field, "ngpt", alpha=lambda t: 0.0).velocity(uniform_on_sphere(4, 3))
    with pytest.raises(ValueError, match=r"switch must lie inside the depth range \(0, 1\)"):
        Normalized(field, "mix-ln", switch=1.5)
    with pytest.raises(ValueError, match="needs switch=t"):
        Normalized(field, "mix-ln")
    with pytest.raises(ValueError, match=r"LayerNorm gamma must have shape \(3,\).*\(4,\)"):
        Normalized(field, "layernorm", gamma=torch.ones(4))
    with pytest.raises(ValueError, match="switch applies to the 'mix-ln' scheme only"):
        Normalized(field, switch=0.5)
    with pytest.raises(TypeError, match="Normalized wraps a tpde field"):
        Normalized(torch.eye(3))
    g = Gaussian(torch.zeros(3, dtype=F64), torch.eye(3, dtype=F64))
    with pytest.raises(Exception, match="does not keep Gaussians Gaussian"):
        integrate(Normalized(field), g, 1.0)
    grid = Grid(torch.full((4, 4), 1 / 16, dtype=F64), -1.0, 1.0)
    with pytest.raises(ValueError, match="a Grid has no tokens"):
        integrate(Normalized(_sa(1.0, 2)), grid, 1.0)
    with pytest.raises(NotImplementedError, match="JKO steps are Euclidean"):
        jko_step(uniform_on_sphere(4, 3), Normalized(field), 0.1)
    with pytest.raises(NotAGradientFlow, match="only the post-LN sphere flow"):
        Normalized(field, "pre-ln").energy(uniform_on_sphere(4, 3))
    with pytest.raises(ValueError, match="Clustered event reads the diameter"):
        integrate(field, g, 1.0, events=(Clustered(),))


def test_a_pre_norm_normalises_own_tokens_once_and_new_points_apart(monkeypatch):
    """At μ's own tokens (a flow's call) the pre-norm is applied once, keys and queries
    alike; at other points x the keys and the queries are normalised each from their own
    tokens (exact: the same arithmetic as the explicit Γ[N#μ](N(x)))."""
    import tpde.fields.norms.schemes as schemes
    from tpde.fields import RMSNorm

    generator = torch.Generator().manual_seed(7)
    d = 3
    Q, K, V = (torch.randn(d, d, generator=generator, dtype=torch.float64) for _ in range(3))
    inner = Softmax(Q, K, V)
    field = Normalized(inner, RMSNorm(eps=1e-6))
    mu = Empirical(torch.randn(6, d, generator=generator, dtype=torch.float64))
    x = torch.randn(4, d, generator=generator, dtype=torch.float64)
    calls = []
    original = schemes.rms_norm
    monkeypatch.setattr(schemes, "rms_norm", lambda *a: calls.append(1) or original(*a))
    own = field.particle_velocity(0.0, mu, mu.points, "dense", own=True)
    assert len(calls) == 1
    keys = mu.with_points(original(mu.points, 1.0, 1e-6))
    expected = inner.particle_velocity(0.0, keys, keys.points, "dense")
    torch.testing.assert_close(own, expected, rtol=0, atol=0)
    at_x = field.particle_velocity(0.0, mu, x, "dense", own=False)
    assert len(calls) == 3
    expected = inner.particle_velocity(0.0, keys, original(x, 1.0, 1e-6), "dense")
    torch.testing.assert_close(at_x, expected, rtol=0, atol=0)
