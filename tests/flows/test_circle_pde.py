"""The circle PDE (tpde.flows.systems.circle): linearisation, velocity, mass, refusals."""

import math

import pytest
import torch

from tpde.fields import Exponential, Normalized, Softmax
from tpde.flows import CircleSystem, integrate
from tpde.measures import CircleDensity, Empirical
from tpde.theory import instability_rate

TWO_PI = 2 * math.pi
EYE = torch.eye(2, dtype=torch.float64)
KINDS = {"sa": Softmax, "usa": Exponential}


def field(kernel="sa", beta=5.0, value=1.0, scheme="post-ln"):
    return Normalized(KINDS[kernel](EYE, EYE, value * EYE, scale=beta), scheme)


def density(M, function):
    theta = torch.arange(M, dtype=torch.float64) * TWO_PI / M
    return CircleDensity(function(theta))


def smooth(theta):
    return torch.exp(0.5 * torch.cos(theta - 1) + 0.3 * torch.sin(3 * theta))


@pytest.mark.parametrize("kernel", ["sa", "usa"])
@pytest.mark.parametrize("beta", [1.0, 5.0, 10.0])
def test_linearisation_is_the_instability_rate(kernel, beta):
    """The right-hand side's derivative at the uniform density, applied to cos kθ and sin kθ
    (forward-mode autograd: the operator itself), is λ_k times it, k = 1 … 8."""
    system = CircleSystem(field(kernel, beta), density(256, torch.ones_like))
    uniform = system.initial()[0]
    theta = torch.arange(256, dtype=torch.float64) * TWO_PI / 256
    for k in range(1, 9):
        for mode in (torch.cos(k * theta), torch.sin(k * theta)):
            _, image = torch.func.jvp(lambda r: system.rhs(0.0, (r,))[0], (uniform,), (mode,))
            rate = instability_rate(k, beta, kernel=kernel)
            assert torch.allclose(image, rate * mode, rtol=0, atol=1e-8 * rate)


def test_rate_scales_with_the_value():
    system = CircleSystem(field("sa", 5.0, value=2.5), density(128, torch.ones_like))
    theta = torch.arange(128, dtype=torch.float64) * TWO_PI / 128
    mode = torch.cos(3 * theta)
    _, image = torch.func.jvp(lambda r: system.rhs(0.0, (r,))[0], (system.initial()[0],), (mode,))
    assert torch.allclose(image, 2.5 * instability_rate(3, 5.0) * mode, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernel", ["sa", "usa"])
def test_velocity_is_the_particle_field_at_the_grid(kernel):
    """u on the grid against tpde's dense post-LN field for the tokens at the grid angles
    with trapezoidal weights h·ρ_j (spectrally exact quadrature): the tangential part."""
    f, rho = field(kernel, 5.0), density(256, smooth)
    u = CircleSystem(f, rho).velocity(rho.density)
    theta = rho.angles()
    points = torch.stack([theta.cos(), theta.sin()], -1)
    weights = rho.density * rho.spacing
    velocity = f.particle_velocity(0.0, Empirical(points, weights / weights.sum()), points, "dense")
    tangent = torch.stack([-theta.sin(), theta.cos()], -1)
    assert torch.allclose(
        (velocity * tangent).sum(-1), u, rtol=0, atol=1e-13 * float(u.abs().max())
    )
    assert float((velocity * points).sum(-1).abs().max()) < 1e-12 * float(u.abs().max())


def test_small_mode_grows_at_its_rate():
    """Uniform + 1e-7 cos 3θ, SA, β = 5, to t = 2: the amplitude grows as e^{λ_3 t} (to the
    second order in the amplitude, 1e-7 relative)."""
    M, eps, t1 = 128, 1e-7, 2.0
    rho = density(M, lambda t: 1 + eps * TWO_PI * torch.cos(3 * t))
    traj = integrate(field("sa", 5.0), rho, t1, dt=0.01)
    assert traj.status == "completed"
    theta = rho.angles()
    amplitude = float((traj.measures[-1].density * torch.cos(3 * theta)).sum()) * 2 / M
    assert amplitude / eps == pytest.approx(math.exp(instability_rate(3, 5.0) * t1), rel=1e-6)


@pytest.mark.parametrize("kernel", ["sa", "usa"])
def test_mass_conserved_to_rounding(kernel):
    traj = integrate(field(kernel, 1.0), density(256, smooth), 1.0, save=5)
    assert traj.status == "completed"
    masses = torch.stack([m.mass() for m in traj.measures])
    assert float((masses - 1).abs().max()) < 1e-14
    assert traj.stats["mass_error"] < 1e-14


def test_uniform_is_stationary():
    system = CircleSystem(field("usa", 3.0), density(64, torch.ones_like))
    (derivative,) = system.rhs(0.0, system.initial())
    assert float(derivative.abs().max()) < 1e-15


def test_sharpening_stops_with_unresolved_naming_the_cause():
    with pytest.warns(RuntimeWarning, match="status 'unresolved'"):
        traj = integrate(field("sa", 5.0), density(128, smooth), 20.0)
    assert traj.status == "unresolved"
    assert traj.stats["unresolved"].startswith("resolution: the modes 21 < |k| <= 42 reach")
    assert 0 < float(traj.times[-1]) < 20
    last = traj.measures[-1]  # the last resolved state
    modes = torch.fft.rfft(last.density).abs()
    assert float(modes[22:43].max() / modes[0]) <= 1e-8


def test_coarse_grid_refused_naming_the_resolution():
    with pytest.raises(ValueError, match=r"too coarse for beta = 10: .* Use M >= \d+ angles"):
        integrate(field("sa", 10.0), density(32, torch.ones_like), 1.0)


def test_unresolved_initial_density_refused():
    spiky = density(64, lambda t: (t < 0.5).to(torch.float64) + 1e-3)
    with pytest.raises(ValueError, match="initial density is not resolved on its grid of M = 64"):
        integrate(field("sa", 1.0), spiky, 1.0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (field("sa", 5.0, scheme="pre-ln"), "with scheme 'pre-ln'"),
        (Softmax(EYE, EYE, EYE, scale=5.0), "received Softmax. Wrap"),
        (Normalized(Softmax(-EYE, EYE, EYE, scale=1.0), "post-ln"), "beta > 0"),
        (Normalized(Softmax(EYE, EYE, torch.diag(torch.tensor([1.0, 2.0]))), "post-ln"), "V = vI"),
        (Normalized(Softmax(EYE, torch.diag(torch.tensor([1.0, 2.0])), EYE), "post-ln"), "βI"),
    ],
)
def test_fields_other_than_the_circle_model_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        integrate(bad, density(64, torch.ones_like), 1.0)


def test_other_methods_engines_and_unstable_dt_refused():
    rho = density(128, smooth)
    with pytest.raises(ValueError, match="steps with method 'rk4'"):
        integrate(field(), rho, 1.0, method="dopri5")
    with pytest.raises(ValueError, match="engine = 'dense' applies to particles"):
        integrate(field(), rho, 1.0, engine="dense")
    with pytest.raises(ValueError, match="breaks RK4's stability bound"):
        integrate(field("usa", 5.0), rho, 1.0, dt=0.5)
