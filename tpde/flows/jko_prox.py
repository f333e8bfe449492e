r"""The proximal problems of particle and Gaussian JKO steps, and their L-BFGS solver.

Each problem maps a whitened unknown ζ to a measure ν(ζ) with ν(0) = μ_k and
d(ν(ζ), μ_k)² = τ|ζ|², so a JKO step minimises J(ζ) = G(ν(ζ)) + |ζ|²/2 (see
:mod:`tpde.flows.jko`). The whitening makes ∇²J = I + O(τ), so a unit first step is the
explicit step and L-BFGS needs few iterations.
"""

from __future__ import annotations

import math

import torch

from tpde import _lu as lu
from tpde._linalg import sqrtm_psd, symmetrize
from tpde.flows.status import Status
from tpde.flows.trajectory import JKOStep
from tpde.measures import Empirical, Gaussian

__all__ = ["GaussianProx", "ParticleProx", "lbfgs", "solve_prox"]

# Gaussian JKO needs λ_min(Σ) > DEGENERATE · d · eps · λ_max(Σ) (whitening divides by λ).
DEGENERATE = 1e3


class ParticleProx:
    r"""Particles: y_i = x_i + √τ c_i R ζ_i, R = (sM)^{1/2}, c_i = (w_i ω_i)^{-1/2}.

    Then Σ_i w_i ω_i (y_i − x_i)ᵀ(sM)⁻¹(y_i − x_i) = τ|ζ|²: the identity-coupling distance
    of :func:`tpde.metrics.twisted_w2` (``coupling="identity"``, reference μ_k), W2 when
    M = I and ω = 1. ω_k = Z_{μ_k} is frozen at the start of the step.
    """

    def __init__(self, mu: Empirical, tau: float, mobility, structure, engine: str):
        if bool((mu.weights <= 0).any()):
            raise ValueError(
                "particle JKO needs positive weights: a particle of zero mass does not enter "
                "the energy, so its JKO motion is undefined. Drop it first."
            )
        self.mu = mu
        self.x = mu.points.detach()
        coef = (tau / mu.weights.detach()).sqrt()
        if structure is not None:  # the softmax metric's weight Z_{μ_k}(x_i)
            log_z = structure.log_weight(mu, self.x, engine).detach()
            coef = coef * torch.exp(-0.5 * log_z)
        self.coef = coef.unsqueeze(-1)
        self.root = None if mobility is None else sqrtm_psd(mobility.to(self.x))
        self.shape = self.x.shape

    def measure(self, z: torch.Tensor) -> Empirical:
        step = z if self.root is None else z @ self.root
        return self.mu.with_points(self.x + self.coef * step)

    def check(self, z: torch.Tensor) -> str | None:
        return None


class GaussianProx:
    r"""Gaussians: ν(ζ) = N(m + R u, R(I + S)Σ'(I + S)R) with Σ' = R⁻¹ΣR⁻¹, R = (sM)^{1/2}.

    u = √τ ζ_u; S = U S̃ Uᵀ in the eigenbasis Σ' = U Λ Uᵀ with S̃_ii = √τ ζ_ii / √λ_i and
    S̃_ij = S̃_ji = √τ ζ_ij / √(λ_i + λ_j) (i < j), so |u|² + tr(SΣ'S) = τ|ζ|²: the
    Bures distance (in the coordinates x ↦ R⁻¹x) while I + S ⪰ 0, when x ↦ (I + S)x is the
    Monge map. :meth:`check` reports a step where I + S is not positive definite.
    """

    def __init__(self, g: Gaussian, tau: float, mobility):
        if g.batch_shape != ():
            raise ValueError(
                f"Gaussian JKO steps one Gaussian at a time; received batch shape "
                f"{tuple(g.batch_shape)}. Index it first, e.g. g[0]."
            )
        mean, cov = g.mean().detach(), g.cov().detach()
        d = mean.shape[-1]
        eye = torch.eye(d, dtype=mean.dtype, device=mean.device)
        self.root = eye if mobility is None else sqrtm_psd(mobility.to(mean))
        inv_root = lu.inv(self.root)
        whitened = symmetrize(inv_root @ cov @ inv_root)
        lam, self.U = torch.linalg.eigh(whitened)
        if float(lam[0]) <= DEGENERATE * d * torch.finfo(lam.dtype).eps * float(lam[-1]):
            raise ValueError(
                f"Gaussian JKO needs a nondegenerate covariance (smallest eigenvalue "
                f"{float(lam[0]):.3g}, largest {float(lam[-1]):.3g}): the step moves along the "
                "Monge maps (I + S)Σ(I + S), which cannot change the rank. Regularise with "
                "cov + δI."
            )
        self.mean, self.whitened, self.eye, self.d, self.tau = mean, whitened, eye, d, tau
        self.rows, self.cols = torch.triu_indices(d, d, device=mean.device)
        pair = torch.where(self.rows == self.cols, lam[self.rows], lam[self.rows] + lam[self.cols])
        self.coef = (tau / pair).sqrt()
        self.shape = (d + len(self.rows),)

    def _sym(self, z: torch.Tensor) -> torch.Tensor:
        upper = torch.zeros(self.d, self.d, dtype=z.dtype, device=z.device)
        upper = upper.index_put((self.rows, self.cols), self.coef * z[self.d :])
        tilde = upper + upper.mT - torch.diag(upper.diagonal())
        return self.U @ tilde @ self.U.mT

    def measure(self, z: torch.Tensor) -> Gaussian:
        push = self.eye + self._sym(z)
        cov = self.root @ symmetrize(push @ self.whitened @ push) @ self.root
        mean = self.mean + self.root @ (math.sqrt(self.tau) * z[: self.d])
        return Gaussian._trusted(mean, symmetrize(cov))

    def check(self, z: torch.Tensor) -> str | None:
        low = float(torch.linalg.eigvalsh(self.eye + self._sym(z.detach()))[0])
        if low <= 0:
            return (
                f"the step's map I + S is not positive definite (smallest eigenvalue {low:.3g}), "
                "so τ|ζ|² is not the Bures distance there: decrease tau."
            )
        return None


def lbfgs(evaluate, z, value, grad, *, tol_abs: float, max_iter: int, history: int = 10):
    """Minimise with L-BFGS (two-loop recursion) and an Armijo backtracking line search.

    ``evaluate(z) -> (value float, grad tensor)`` (value +inf outside the domain). The first
    trial step is t = 1 (the whitened problems are scaled so that it is right); pairs with
    sᵀy ≤ 0 are skipped, so the inverse Hessian model stays positive definite. The Armijo
    test allows the rounding level of J (8 eps |J|, so float32 energies do not stall the
    search while the gradient still improves). Stops when ‖grad‖_∞ ≤ tol_abs (converged),
    after ``max_iter`` iterations, when the line search fails, or when neither J nor the
    gradient has improved for 5 iterations (stalled at rounding). Returns (z, value, grad,
    iterations, message).
    """
    pairs: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    rounding = 8 * torch.finfo(z.dtype).eps
    best, since_best = float(grad.abs().max()), 0
    for iteration in range(max_iter):
        if float(grad.abs().max()) <= tol_abs:
            return z, value, grad, iteration, "converged"
        direction = -_two_loop(grad, pairs)
        slope = float((grad * direction).sum())
        if slope >= 0:  # not a descent direction: restart from steepest descent
            pairs.clear()
            direction, slope = -grad, -float((grad * grad).sum())
        noise = rounding * max(1.0, abs(value))
        t = 1.0
        for _ in range(40):
            new_value, new_grad = evaluate(z + t * direction)
            if math.isfinite(new_value) and new_value <= value + 1e-4 * t * slope + noise:
                break
            if math.isfinite(new_value):  # safeguarded quadratic interpolation
                curve = new_value - value - slope * t
                t = min(0.5 * t, max(0.1 * t, -slope * t * t / (2 * max(curve, 1e-300))))
            else:
                t *= 0.1
        else:
            return z, value, grad, iteration, "line search failed"
        s, y = t * direction, new_grad - grad
        sy = float((s * y).sum())
        if sy > 1e-12 * float(s.norm() * y.norm()):
            pairs.append((s, y, 1.0 / sy))
            pairs[:] = pairs[-history:]
        decreased = value - new_value > noise
        z, value, grad = z + s, new_value, new_grad
        norm = float(grad.abs().max())
        if norm < 0.99 * best or decreased:
            best, since_best = min(best, norm), 0
        else:
            since_best += 1
            if since_best >= 5:
                return z, value, grad, iteration + 1, "stalled at rounding"
    converged = float(grad.abs().max()) <= tol_abs
    return z, value, grad, max_iter, "converged" if converged else "max_iter reached"


def _two_loop(grad: torch.Tensor, pairs) -> torch.Tensor:
    """H·grad for the L-BFGS inverse Hessian model (H₀ = γI, γ = sᵀy/yᵀy of the last pair)."""
    q = grad.clone()
    alphas = []
    for s, y, rho in reversed(pairs):
        alpha = rho * float((s * q).sum())
        alphas.append(alpha)
        q = q - alpha * y
    if pairs:
        s, y, rho = pairs[-1]
        q = q / (rho * float((y * y).sum()))
    for (s, y, rho), alpha in zip(pairs, reversed(alphas), strict=True):
        beta = rho * float((y * q).sum())
        q = q + (alpha - beta) * s
    return q


def _domain_hint(G, mu) -> str:
    """Why the energy G (an Energy) may be infinite at mu, where it can say (``domain_hint``; a
    field's Lyapunov functional asks the field)."""
    return G.domain_hint(mu)


def _finite_points(nu) -> bool:
    """Whether a particle measure's points are finite (True for other measures)."""
    points = getattr(nu, "points", None)
    return points is None or bool(torch.isfinite(points.detach()).all())


def solve_prox(prox, G, tau: float, *, tol: float, max_iter: int, engine: str):
    """One JKO step: minimise J(ζ) = G(ν(ζ)) + |ζ|²/2 (warm start: the explicit step)."""
    x = prox.x if hasattr(prox, "x") else prox.mean
    zero = torch.zeros(prox.shape, dtype=x.dtype, device=x.device)
    count = [0]

    def evaluate(z):
        count[0] += 1
        with torch.enable_grad():
            z = z.detach().requires_grad_(True)
            nu = prox.measure(z)
            if not _finite_points(nu):  # a trial step past the dtype's range: infeasible
                return math.inf, torch.zeros_like(z)
            try:
                energy = G(nu, engine)
            except OverflowError:  # beyond the dtype's range: infeasible for the search
                return math.inf, torch.zeros_like(z)
            if not energy.requires_grad:
                raise ValueError(
                    f"the energy {G!r} has no autograd path to the measure (its value does "
                    "not depend on the points, mean or covariance as torch sees them), so a "
                    "JKO step cannot move: compute it from mu's tensors in torch, without "
                    ".detach(), .item() or numpy."
                )
            value = energy + 0.5 * (z * z).sum()
            if not bool(torch.isfinite(value)):
                return math.inf, torch.zeros_like(z)
            (grad,) = torch.autograd.grad(value, z)
        if not bool(torch.isfinite(grad).all()):
            return math.inf, torch.zeros_like(grad)
        return float(value.detach()), grad

    value0, grad0 = evaluate(zero)
    if not math.isfinite(value0):
        try:
            energy = float(G(prox.measure(zero), engine))
        except OverflowError:
            energy = math.inf
        raise ValueError(
            f"the energy is {energy} at the step's initial measure: a JKO step needs "
            f"a finite energy there.{_domain_hint(G, prox.measure(zero))}"
        )
    scale = float(grad0.abs().max())
    z, value, grad, iterations, message = zero, value0, grad0, 0, "stationary"
    if scale > 0:
        explicit = -grad0  # ν(ζ₀) is the explicit (forward Euler) step of size τ
        value1, grad1 = evaluate(explicit)
        if value1 < value0:
            z, value, grad = explicit, value1, grad1
        z, value, grad, iterations, message = lbfgs(
            evaluate, z, value, grad, tol_abs=tol * scale, max_iter=max_iter
        )
    problem = prox.check(z)
    converged = message in ("converged", "stationary") and problem is None
    z = z.detach()
    half = 0.5 * float((z * z).sum())
    return JKOStep(
        measure=prox.measure(z),
        status=Status.COMPLETED if converged else Status.NOT_CONVERGED,
        iterations=iterations,
        evaluations=count[0],
        grad_norm=float(grad.abs().max()) / scale if scale > 0 else 0.0,
        energy=value - half,
        previous_energy=value0,
        distance=math.sqrt(2 * half * tau),
        tau=tau,
        message=problem or message,
    )
