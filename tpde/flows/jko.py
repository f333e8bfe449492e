r"""JKO (minimising-movement) steps and flows in five geometries (MATH.md §5).

    μ_{k+1} ∈ argmin_ν  G(ν) + d(ν, μ_k)² / (2τ)

G is the functional the flow descends: for a field, its Lyapunov functional G = c·E from
:meth:`Field.gradient_structure` (softmax: G = −sE, Sinkhorn: G = sF); for an
:class:`~tpde.fields.Energy` or any callable measure -> scalar tensor, G itself. As
τ → 0 the JKO sequence converges at order 1 in τ to the gradient flow of G in the metric d
(Jordan, Kinderlehrer, Otto 1998; Ambrosio, Gigli, Savaré 2008).

Geometries (``geometry=``):

- ``"w2"`` (particles): d² = Σ_i w_i |y_i − x_i|², the identity coupling of a particle flow
  (exact W2 for small steps, where the particle motion is cyclically monotone). Limit:
  ẋ_i = −∂G/∂x_i / w_i, the W2 gradient flow (:class:`~tpde.fields.GradientFlowField`).
- ``"twisted"`` (particles): the field's metric frozen at μ_k,
  d² = Σ_i w_i ω_k(x_i) (y_i − x_i)ᵀ(sM)⁻¹(y_i − x_i), with ω = Z_{μ_k} for softmax and
  ω = 1 for Sinkhorn (:func:`tpde.metrics.twisted_w2`, coupling="identity"). Limit: the
  field's own PDE, ẋ = Γ[μ](x) (softmax: M∇Z/Z; Sinkhorn: V E_π[y | x]).
- ``"bures"`` / ``"twisted-bures"`` (Gaussians): W2 restricted to Gaussians, after
  x ↦ (sM)^{-1/2}x for the twisted one (mobility M, no Z weight: Z_μ has no closed-form
  transport on Gaussians). The unknown is the Bures tangent (u, S) at μ_k (the Monge map
  x ↦ m_k + u + (I + S)(x − m_k), I + S ≻ 0), so that the closed-form distance is exactly
  d² = |u|² + tr(SΣ_kS) in whitened coordinates. Limit: α̇ = −M∇_αG, Σ̇ = −2(MĝΣ + ΣĝM);
  for Sinkhorn with V = MA this is the Sinkhorn Gaussian ODE.
- ``"entropic"`` (grids, d = 1, 2): Peyré's entropic JKO (:mod:`tpde.flows.jko_grid`).

Inner solve (particles, Gaussians): the unknown is whitened, y = x + √τ P ζ with
PPᵀ = (sM)/(w_i ω_i) (particles) or the Bures analogue, so that d²/(2τ) = |ζ|²/2 and the
Hessian of J(ζ) = G + |ζ|²/2 is I + O(τ): L-BFGS (:func:`tpde.flows.jko_prox.lbfgs`, unit
first step, Armijo backtracking) converges in a few iterations. It is warm-started from the
explicit step ζ₀ = −∇_ζG(0) when that lowers J (else from ζ = 0, so J(ζ*) ≤ J(0) = G(μ_k)
and G never increases, up to the rounding slack of the line search). Converged:
‖∇J‖_∞ ≤ tol · ‖∇J(0)‖_∞ (a relative error tol on the step's velocity). The energy G is
evaluated with gradients on the chosen engine ("auto": SDPA's flash kernel on the CPU for
large clouds, first-order gradients, O(n) memory).

Where G is +inf (a Gaussian outside the softmax energy's domain) the step is infeasible;
where G = −E can reach −inf (softmax with M ≻ 0 on Gaussians: E blows up at the domain's
boundary, as the flow does in finite time), non-finite values are treated as infeasible
too, so the step returns the local minimiser inside the domain.
"""

from __future__ import annotations

import math
import time

import torch

from tpde._validation import check_choice, check_positive, check_positive_int, check_real
from tpde.fields.base import Field
from tpde.fields.gradient_flow.energies import as_energy
from tpde.fields.gradient_flow.structured import StructuredAttention
from tpde.flows.jko_grid import default_epsilon, entropic_step
from tpde.flows.jko_prox import GaussianProx, ParticleProx, solve_prox
from tpde.flows.status import Status, status_array
from tpde.flows.trajectory import JKOStep, Trajectory
from tpde.measures import Empirical, Gaussian, Grid
from tpde.metrics.mobility import spd_mobility

__all__ = ["GEOMETRIES", "JKOStep", "jko_flow", "jko_step"]

#: Geometry name -> the measure type it steps.
GEOMETRIES = {
    "w2": Empirical,
    "twisted": Empirical,
    "bures": Gaussian,
    "twisted-bures": Gaussian,
    "entropic": Grid,
}


def _check_tau(tau) -> float:
    return check_positive(tau, "tau")


def _resolve(mu, energy, geometry: str, mobility):
    """(G, metric mobility sM or None, structure for the weight or None), all checked."""
    check_choice(geometry, "geometry", tuple(GEOMETRIES))
    kind = GEOMETRIES[geometry]
    if geometry == "entropic" and not isinstance(mu, Grid):
        raise ValueError(
            f"geometry 'entropic' steps densities on a Grid (d = 1 or 2); received a "
            f"{type(mu).__name__} in d = {mu.dim}. In d > 2 use particles (geometry 'w2' or "
            "'twisted') or Gaussians ('bures')."
        )
    if not isinstance(mu, kind):
        raise TypeError(
            f"geometry {geometry!r} steps {kind.__name__} measures; received "
            f"{type(mu).__name__}. Particles: 'w2', 'twisted'; Gaussians: 'bures', "
            "'twisted-bures'; grids: 'entropic'."
        )
    if isinstance(mu, Empirical) and mu.batch_shape != ():
        raise ValueError(
            f"a JKO step moves one particle cloud; received a batch of shape "
            f"{tuple(mu.batch_shape)}. Step each element, mu[i], on its own."
        )
    twisted = geometry in ("twisted", "twisted-bures")
    if isinstance(energy, StructuredAttention):
        raise TypeError(
            "a StructuredAttention (a nearest gradient field) is a sum of heads, each a "
            "gradient flow in its own metric with a semidefinite mobility, which jko_step's "
            "geometries do not take: step it with tpde.flows.structured_jko_step(near, mu, tau)."
        )
    if isinstance(energy, Field):
        if energy.supports("projection"):
            raise NotImplementedError(
                f"JKO steps are Euclidean (W2 and its twisted and Bures forms); {energy!r} "
                "moves tokens on a manifold (a projection after each step), where tpde has "
                "no JKO step. Integrate the field instead."
            )
        if energy.time_dependent:
            raise ValueError(
                "JKO steps an autonomous gradient flow; the field has time-dependent "
                "parameters. Freeze them (pass tensors) or integrate the field instead."
            )
        energy.check_measure(mu)
        if mobility is not None:
            raise ValueError(
                "a field sets its own mobility M = V A⁻¹ (gradient_structure); pass mobility= "
                "only with an energy that is not a field."
            )
        structure = energy.gradient_structure()
        G = structure.lyapunov
        if not twisted:
            return G, None, None
        if geometry == "twisted-bures" and structure.weighted:
            raise ValueError(
                "geometry 'twisted-bures' has mobility M but no Z_μ weight, so for softmax "
                "attention its JKO flow is not the softmax PDE. Use particles with geometry "
                "'twisted' (the Z-weighted metric), Sinkhorn attention (whose metric has no "
                "weight), or pass G = field.gradient_structure().lyapunov with mobility=M "
                "to step that unweighted flow on purpose."
            )
        return G, structure.mobility, structure if structure.weighted else None
    G = as_energy(energy)
    if twisted and mobility is None:
        raise ValueError(
            f"geometry {geometry!r} needs the metric's mobility: pass a field (Softmax, "
            "Sinkhorn: M = V A⁻¹) or mobility=M (symmetric positive definite) with the energy."
        )
    if mobility is not None:
        if not twisted:
            raise ValueError(
                f"mobility applies to the twisted geometries; geometry {geometry!r} is plain "
                "W2. Use 'twisted' (particles) or 'twisted-bures' (Gaussians)."
            )
        like = mu.mean()
        mobility = spd_mobility(mobility, mu.dim, like)
    return G, mobility, None


def _default_tol(dtype: torch.dtype) -> float:
    # The relative gradient error reachable in the dtype's rounding: float64 values of G and
    # its gradient are good to ~1e-13; float32 (and SDPA's float32 kernels) to ~1e-6.
    return 1e-6 if dtype == torch.float64 else 1e-3


def jko_step(
    mu,
    energy,
    tau: float,
    geometry: str = "w2",
    *,
    tol: float | None = None,
    max_iter: int = 100,
    engine: str = "auto",
    mobility=None,
    epsilon: float | None = None,
    _cache: dict | None = None,
) -> JKOStep:
    """One JKO step μ_{k+1} ∈ argmin_ν G(ν) + d(ν, μ)²/(2τ) (module notes).

    Parameters
    ----------
    mu : Empirical ("w2", "twisted"), Gaussian ("bures", "twisted-bures"; unbatched,
        nondegenerate) or Grid ("entropic").
    energy : a field (Softmax, Sinkhorn: its Lyapunov functional and, for the twisted
        geometries, its metric), an :class:`~tpde.fields.Energy`, or any callable
        measure -> 0-d tensor (derivatives by autograd).
    tau : step > 0.
    geometry : "w2", "twisted", "bures", "twisted-bures" or "entropic".
    tol : relative tolerance of the inner solve on ‖∇J‖_∞ (default 1e-6 in float64, 1e-3
        in float32).
    max_iter : L-BFGS iteration cap.
    engine : pairwise engine of the energies on particles and grids.
    mobility : (d, d) SPD mobility of the twisted geometries when ``energy`` is not a field.
    epsilon : entropic regularisation of "entropic" steps (default in
        :func:`tpde.flows.jko_grid.entropic_step`).

    Returns
    -------
    JKOStep
    """
    tau = _check_tau(tau)
    G, M, weighted = _resolve(mu, energy, geometry, mobility)
    tol = _check_options(mu, geometry, tol, max_iter, epsilon)
    return _step(mu, G, M, weighted, tau, geometry, tol, max_iter, engine, epsilon, _cache)


def _check_options(mu, geometry: str, tol, max_iter, epsilon) -> float | None:
    """The inner solve's tolerance (None for the closed-form entropic step), all checked."""
    if geometry == "entropic":
        return None
    if epsilon is not None:
        raise ValueError("epsilon applies to geometry 'entropic' (grids) only.")
    tol = _default_tol(mu.dtype) if tol is None else check_positive(tol, "tol")
    check_positive_int(max_iter, "max_iter")
    return tol


def _step(mu, G, M, weighted, tau, geometry, tol, max_iter, engine, epsilon, cache, previous=None):
    """One JKO step with everything resolved and checked (:func:`jko_step`)."""
    if geometry == "entropic":
        return entropic_step(
            mu, G, tau, epsilon=epsilon, engine=engine, cache=cache, previous=previous
        )
    if isinstance(mu, Empirical):
        prox = ParticleProx(mu, tau, M, weighted, engine)
    else:
        prox = GaussianProx(mu, tau, M)
    return solve_prox(prox, G, tau, tol=tol, max_iter=max_iter, engine=engine)


def _step_times(tau: float, t1: float) -> list[float]:
    """0, τ, 2τ, …, t1: a last step shorter than τ lands on t1 (no sliver below 1e-9 τ)."""
    n = max(1, math.ceil(t1 / tau - 1e-9))
    return [min(k * tau, t1) for k in range(n)] + [t1]


def jko_flow(
    mu0,
    energy,
    tau: float,
    t1: float,
    geometry: str = "w2",
    *,
    tol: float | None = None,
    max_iter: int = 100,
    engine: str = "auto",
    mobility=None,
    epsilon: float | None = None,
    max_steps: int = 100_000,
) -> Trajectory:
    """JKO steps of size τ from μ(0) = mu0 to t1 (the last step shortened to land on t1).

    Parameters are those of :func:`jko_step` (``epsilon`` of "entropic" steps is fixed for
    the whole flow: default from the first step's τ and the grid); ``max_steps`` bounds the
    number of steps ⌈t1/τ⌉ (checked before any step, like :func:`integrate`'s budget).

    Returns
    -------
    Trajectory
        ``times`` 0, τ, …, t1 and one measure per step. ``status`` is "completed", or
        "not_converged" when an inner solve missed its tolerance: the run stops there,
        ``event_time`` is the start of that step and the last measure the state before it.
        ``stats``: ``inner_iterations`` and ``evaluations`` (lists, per step), ``grad_norm``
        (final relative ‖∇J‖_∞ per step), ``energy`` (tensor, G at every saved measure:
        non-increasing for the exact steps), ``distance`` (per step), ``tau``, ``geometry``,
        ``n_steps``, ``wall_time_s``; grids add ``epsilon`` and ``mass_error``.
    """
    tau = _check_tau(tau)
    t1 = check_real(t1, "t1", finite=False)
    if not math.isfinite(t1) or t1 <= 0:
        raise ValueError(f"t1 must be finite and > 0; received {t1}.")
    check_positive_int(max_steps, "max_steps")
    if t1 / tau > max_steps:
        raise ValueError(
            f"t1 / tau = {t1 / tau:.3g} JKO steps exceed max_steps = {max_steps} (each step is "
            "an inner optimisation): raise tau, or max_steps if you mean it."
        )
    start = time.perf_counter()
    G, M, weighted = _resolve(mu0, energy, geometry, mobility)  # once: parameters are fixed
    tol = _check_options(mu0, geometry, tol, max_iter, epsilon)
    if geometry == "entropic" and epsilon is None:
        epsilon = default_epsilon(mu0, tau)
    times = _step_times(tau, t1)
    measures = [mu0]
    stats = {"inner_iterations": [], "evaluations": [], "grad_norm": [], "distance": []}
    try:
        energies = [float(G(mu0, engine).detach())]
    except OverflowError:  # reported by the first step as a non-finite energy
        energies = [math.inf]
    status, event_time = Status.COMPLETED, math.nan
    mu, cache = mu0, {}  # the entropic kernels, computed once per flow
    for k in range(len(times) - 1):
        step = _step(
            mu, G, M, weighted, times[k + 1] - times[k], geometry, tol, max_iter, engine,
            epsilon, cache, previous=energies[-1],
        )  # fmt: skip
        for key, value in (
            ("inner_iterations", step.iterations),
            ("evaluations", step.evaluations),
            ("grad_norm", step.grad_norm),
            ("distance", step.distance),
        ):
            stats[key].append(value)
        if not step.converged:
            status, event_time = Status.NOT_CONVERGED, times[k]
            stats["failure"] = step.message
            break
        mu = step.measure
        measures.append(mu)
        energies.append(step.energy)
    stats.update(
        energy=torch.tensor(energies, dtype=torch.float64, device=mu0.device),
        tau=tau,
        geometry=geometry,
        n_steps=len(measures) - 1,
        wall_time_s=time.perf_counter() - start,
    )
    if geometry == "entropic":
        stats["epsilon"] = epsilon
        stats["mass_error"] = float((mu.density.sum() - mu0.density.sum()).abs())
    device = mu0.device
    return Trajectory(
        times=torch.tensor(times[: len(measures)], dtype=torch.float64, device=device),
        measures=measures,
        status=status_array((), status),
        event_time=torch.tensor(event_time, dtype=torch.float64, device=device),
        stats=stats,
    )
