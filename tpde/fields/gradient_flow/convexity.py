r"""Geodesic convexity probe: second derivatives of an energy along W2 geodesics.

An energy G is λ-geodesically convex when d²/dt² G(γ(t)) ≥ λ W2(γ(0), γ(1))² along every
(constant-speed) W2 geodesic γ; λ ≥ 0 is what makes JKO schemes contract and converge
unconditionally (Ambrosio, Gigli, Savaré 2008, ch. 4). The probe computes the second
derivative by autograd (double backward) along

- **Bures geodesics** between Gaussians: with the Monge matrix T from Σ₀ to Σ₁ held fixed,
  γ(t) = N((1−t)m₀ + t m₁, P_t Σ₀ P_t), P_t = (1−t)I + tT (MATH.md §5). Σ_t is a polynomial
  in t, so no second derivative of a matrix square root is needed (:func:`tpde._linalg.
  sqrtm_psd` is once differentiable) — the energy itself must be twice differentiable
  (the softmax energy's Gaussian closed form is; Sinkhorn's takes a square root and is not).
- **Displacement interpolations** of particles: x_t = (1−t)x_i + t y_j on the support of an
  optimal plan (POT's network simplex on detached copies; a permutation for two uniform
  clouds of the same size), weights P_ij.

MATH.md §5: the softmax energy is not geodesically convex in natural cases, e.g. V = I,
A = −I (where the PDE descends G = E); a potential energy with a convex potential or an
interaction energy with a convex kernel is convex (the controls of the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tpde._linalg import symmetrize, trace
from tpde._validation import check_positive, check_positive_int, check_real
from tpde.fields.gradient_flow.energies import as_energy
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_monge_map
from tpde.metrics.wasserstein import MAX_ITER, solve_emd, squared_distances

__all__ = ["ConvexityProbe", "convexity_probe", "geodesic_second_derivative"]


@dataclass(frozen=True)
class ConvexityProbe:
    """Second derivatives of an energy along a set of geodesics.

    Attributes
    ----------
    second_derivatives : (g, T) d²/dt² G(γ_k(t)) / W2(γ_k(0), γ_k(1))²: estimates of the
        convexity constant λ along each geodesic at each time.
    raw : (g, T) the unnormalised second derivatives.
    times : (T,) the times t.
    lengths : (g,) W2 length of each geodesic.
    tol : threshold: a value below −tol counts as negative (rounding of the double
        backward: ``rtol`` times the largest |value|).
    n_negative : how many (geodesic, time) pairs are negative.
    min_value : the smallest normalised second derivative.
    worst : (geodesic index, t) where it occurs.
    """

    second_derivatives: torch.Tensor
    raw: torch.Tensor
    times: torch.Tensor
    lengths: torch.Tensor
    tol: torch.Tensor
    n_negative: int
    min_value: float
    worst: tuple[int, float]

    @property
    def convex(self) -> bool:
        """No negative second derivative found (evidence, not proof, of convexity)."""
        return self.n_negative == 0


def _gaussian_path(g0: Gaussian, g1: Gaussian, monge=None):
    """t ↦ γ(t) on the Bures geodesic (Monge matrix fixed), and the squared length."""
    m0, S0, m1 = g0.mean().detach(), g0.cov().detach(), g1.mean().detach()
    if monge is None:
        monge = bures_monge_map(g0, g1).matrix.detach()
    eye = torch.eye(g0.dim, dtype=m0.dtype, device=m0.device)

    def path(t):
        push = (1 - t) * eye + t * monge
        return Gaussian._trusted((1 - t) * m0 + t * m1, symmetrize(push @ S0 @ push))

    delta = monge - eye
    length2 = ((m1 - m0) ** 2).sum() + trace(delta @ S0 @ delta)
    return path, length2


def _particle_path(mu0: Empirical, mu1: Empirical):
    """t ↦ Σ P_ij δ_{(1−t)x_i + t y_j} on an optimal plan's support, and W2²."""
    x, y = mu0.points.detach(), mu1.points.detach()
    cost = squared_distances(x, y)
    plan, _, _ = solve_emd(
        mu0.weights, mu1.weights, cost.to(torch.float64), MAX_ITER, "convexity_probe"
    )
    plan = plan.cpu().numpy()
    i, j = np.nonzero(plan > 1e-12 * plan.max())
    weights = torch.as_tensor(plan[i, j], dtype=x.dtype, device=x.device)
    weights = weights / weights.sum()
    i, j = torch.as_tensor(i, device=x.device), torch.as_tensor(j, device=x.device)
    xs, ys = x[i], y[j]
    template = Empirical(xs, weights)

    def path(t):
        return template.with_points((1 - t) * xs + t * ys)

    length2 = (weights * ((xs - ys) ** 2).sum(-1)).sum()
    return path, length2


_NOT_TWICE = (
    "the energy is not twice differentiable by autograd here (a once-differentiable "
    "operation such as a matrix square root, or an engine with first-order gradients only: "
    "use engine='dense')"
)


def _first_derivative(G, path, t: float, engine: str, create_graph: bool, device):
    tt = torch.tensor(float(t), dtype=torch.float64, device=device, requires_grad=True)
    value = G(path(tt), engine)
    if not bool(torch.isfinite(value)):
        raise ValueError(
            f"the energy is {float(value.detach())} at t = {float(t):.4g} on the geodesic: probe "
            "geodesics inside the energy's domain (e.g. a smaller radius)."
        )
    (first,) = torch.autograd.grad(value, tt, create_graph=create_graph)
    return tt, first


def _second_derivative(G, path, times, engine: str, device, h: float = 1e-4) -> torch.Tensor:
    """d²/dt² G(path(t)) by double backward, cross-checked against a central difference of
    first derivatives (step h: error ~h² ≈ 1e-8 relative). A once-differentiable operation
    fed by a constant incoming gradient would otherwise be silently dropped from the second
    derivative; a disagreement above 1e-4 raises."""
    values = []
    for t in times:
        with torch.enable_grad():
            tt, first = _first_derivative(G, path, t, engine, True, device)
            try:
                (second,) = torch.autograd.grad(first, tt)
            except RuntimeError as err:
                raise ValueError(f"{_NOT_TWICE}; torch said: {err}") from None
            ahead = _first_derivative(G, path, t + h, engine, False, device)[1]
            behind = _first_derivative(G, path, t - h, engine, False, device)[1]
        numeric = float(ahead - behind) / (2 * h)
        scale = max(abs(numeric), abs(float(first.detach())), 1e-300)
        if abs(float(second) - numeric) > 1e-4 * scale:
            raise ValueError(
                f"{_NOT_TWICE}: at t = {float(t):.4g} autograd gives {float(second):.6g} but "
                f"a difference of first derivatives gives {numeric:.6g}."
            )
        values.append(second.detach())
    return torch.stack(values)


def geodesic_second_derivative(energy, mu0, mu1, times=(0.0, 0.5, 1.0), *, engine="dense"):
    """d²/dt² G(γ(t)) along the W2 geodesic from mu0 to mu1 at the given times, shape (T,).

    Parameters
    ----------
    energy : field (its Lyapunov functional G = c·E), :class:`~tpde.fields.Energy`, or
        callable measure -> 0-d tensor, twice differentiable.
    mu0, mu1 : two Gaussians (mu0 nondegenerate) or two Empirical measures.
    engine : pairwise engine of field energies; "dense" supports double backward.
    """
    G = as_energy(energy)
    times = _check_times(times)
    if isinstance(mu0, Gaussian) and isinstance(mu1, Gaussian):
        path, _ = _gaussian_path(mu0, mu1)
    elif isinstance(mu0, Empirical) and isinstance(mu1, Empirical):
        path, _ = _particle_path(mu0, mu1)
    else:
        raise TypeError(
            f"geodesic_second_derivative takes two Gaussians or two Empirical measures; "
            f"received {type(mu0).__name__} and {type(mu1).__name__}."
        )
    return _second_derivative(G, path, times, engine, mu0.device)


def _random_geodesics(mu, n: int, radius: float, generator):
    """n (path, squared length) pairs of geodesics leaving mu in random directions."""
    paths = []
    if isinstance(mu, Gaussian):
        if mu.batch_shape != ():
            raise ValueError("convexity_probe takes a single Gaussian; index a batch first.")
        d, cov = mu.dim, mu.cov().detach()
        size = float(torch.linalg.eigvalsh(cov)[-1]).__pow__(0.5)
        eye = torch.eye(d, dtype=mu.dtype, device=mu.device)
        for _ in range(n):
            # Draws on the generator's device (the CPU), then moved: reproducible anywhere.
            xi = torch.randn(d, generator=generator, dtype=mu.dtype, device="cpu").to(mu.device)
            raw = torch.randn(d, d, generator=generator, dtype=mu.dtype, device="cpu")
            raw = raw.to(mu.device)
            sym = symmetrize(raw)
            sym = radius * sym / torch.linalg.matrix_norm(sym, ord=2)  # ‖S‖ = radius < 1
            end_mean = mu.mean().detach() + radius * size * xi / xi.norm()
            monge = eye + sym  # positive definite: the Monge map of the endpoint
            end = Gaussian._trusted(end_mean, symmetrize(monge @ cov @ monge))
            paths.append(_gaussian_path(mu, end, monge))
        return paths
    if not isinstance(mu, Empirical):
        raise TypeError(
            f"convexity_probe takes an Empirical measure or a Gaussian; received "
            f"{type(mu).__name__}."
        )
    x = mu.points.detach()
    centred = x - mu.mean().detach()
    size = float(trace(mu.cov().detach()) / mu.dim) ** 0.5
    for _ in range(n):
        shift, noise, raw = (
            torch.randn(shape, generator=generator, dtype=x.dtype, device="cpu").to(x.device)
            for shape in ((x.shape[1],), x.shape, (x.shape[1], x.shape[1]))
        )
        sym = symmetrize(raw)
        sym = sym / torch.linalg.matrix_norm(sym, ord=2)
        # A smooth part (translation + symmetric linear map) and an independent part.
        move = size * shift + centred @ sym + 0.5 * size * noise
        end = Empirical(x + radius * move, mu.weights.detach())
        paths.append(_particle_path(mu, end))
    return paths


def _check_times(times) -> list[float]:
    """Geodesic times: at least one, each finite and in [0, 1]."""
    try:
        values = [float(t) for t in np.asarray(times, dtype=float).reshape(-1)]
    except (TypeError, ValueError):
        raise TypeError(f"times must be numbers in [0, 1]; received {times!r}.") from None
    if not values or not all(0.0 <= t <= 1.0 for t in values):
        raise ValueError(
            f"times must hold at least one time in [0, 1] (the geodesic's parameter); "
            f"received {values}."
        )
    return values


def convexity_probe(
    energy,
    mu,
    *,
    n_geodesics: int = 16,
    radius: float = 0.5,
    times=(0.0, 0.5, 1.0),
    generator: torch.Generator | None = None,
    engine: str = "dense",
    rtol: float = 1e-8,
) -> ConvexityProbe:
    """Probe geodesic convexity of an energy around mu along random W2 geodesics.

    Parameters
    ----------
    energy : see :func:`geodesic_second_derivative`.
    mu : Empirical or single nondegenerate Gaussian: the start of every geodesic.
    n_geodesics : number of random directions.
    radius : size of the endpoints' displacement, relative to the measure's spread:
        Gaussians: mean moved by radius·√λ_max(Σ), covariance pushed by I + S with
        ‖S‖₂ = radius (radius < 1 keeps I + S the Monge map); particles: moved by
        radius·(σξ₀ + S(x_i − m) + ½σξ_i), σ = (tr Σ/d)^{1/2}, a random common translation
        ξ₀, a random symmetric S with ‖S‖₂ = 1 and independent ξ_i ~ N(0, I), then
        optimally rematched (the endpoint's optimal plan defines the geodesic).
    times : where the second derivative is taken, in [0, 1].
    rtol : a value below −rtol·max|value| (over the geodesic's times) counts as negative.

    Returns
    -------
    ConvexityProbe
    """
    check_positive_int(n_geodesics, "n_geodesics")
    radius = check_real(radius, "radius")
    if not 0 < float(radius) < 1 and isinstance(mu, Gaussian):
        raise ValueError(
            f"radius must lie in (0, 1) for Gaussians (I + S must stay the Monge map); "
            f"received {radius}."
        )
    if float(radius) <= 0:
        raise ValueError(f"radius must be > 0; received {radius}.")
    G = as_energy(energy)
    times_t = _check_times(times)
    check_positive(rtol, "rtol", strict=False)
    raw, lengths = [], []
    for path, length2 in _random_geodesics(mu, n_geodesics, float(radius), generator):
        raw.append(_second_derivative(G, path, times_t, engine, mu.device).to(torch.float64))
        lengths.append(length2.to(torch.float64).sqrt())
    raw_t, lengths_t = torch.stack(raw), torch.stack(lengths)
    normalised = raw_t / lengths_t[:, None] ** 2
    tol = rtol * normalised.abs().amax(dim=1, keepdim=True)  # per geodesic: values span decades
    negative = normalised < -tol
    flat = int(torch.argmin(normalised))
    k, j = divmod(flat, normalised.shape[1])
    return ConvexityProbe(
        second_derivatives=normalised,
        raw=raw_t,
        times=times_t,
        lengths=lengths_t,
        tol=tol.squeeze(1),
        n_negative=int(negative.sum()),
        min_value=float(normalised.min()),
        worst=(k, float(times_t[j])),
    )
