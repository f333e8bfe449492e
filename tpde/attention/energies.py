r"""Energies of attention fields, their first variations, and gradient-flow structure.

MATH.md §5. Two attention variants are (twisted) Wasserstein gradient flows:

- **Softmax** [ours]: E(μ) = ½ ∬ e^{yᵀAx} dμ(x) dμ(y), δE/δμ = Z_μ(x) = ∫ e^{yᵀAx} dμ(y)
  (A symmetric). With M := V A⁻¹ symmetric definite and s = ±1 such that sM ≻ 0, the metric
  g_μ(v, w) = ∫ Z_μ ⟨(sM)⁻¹v, w⟩ dμ gives grad_g E = sM ∇Z_μ / Z_μ and Γ = s · grad_g E: the
  PDE is the gradient *ascent* of E when M ≻ 0 and its *descent* when M ≺ 0.
- **Sinkhorn** [derived]: F(μ) = ½ OT_ε(μ, μ) (cost −yᵀAx), δF/δμ = f (the symmetric entropic
  potential), ∇f(x) = −A E_π[y | x]. With A symmetric and V = MA, M symmetric definite,
  Γ = V E_π[y | x] = −M ∇f, so the Sinkhorn PDE is the gradient flow (descent) of sF in the
  metric of mobility sM without weight (Z ≡ 1). Checked numerically (tests/attention/
  test_energies.py): on Gaussians the closure is Σ̇ = −2(M∇_ΣF Σ + Σ∇_ΣF M), α̇ = −M∇_αF to
  1e-15, so MATH.md's sign (descent of F for M ≻ 0) is right.

One convention covers both (:class:`GradientStructure`): with the *Lyapunov functional*
G = c·E (c = −s for softmax, c = s for Sinkhorn), the *mobility* sM ≻ 0 and the metric weight
ω_μ (Z_μ for softmax, 1 for Sinkhorn),

    Γ[μ](x) = −(sM) ∇(δG/δμ)(x) / ω_μ(x),     dG/dt = −‖Γ‖²_g,   ‖v‖²_g = ∫ ω_μ vᵀ(sM)⁻¹v dμ.

G is what a JKO step minimises (:mod:`tpde.flows.jko`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tpde._engines import check_engine, logsumexp, softmax_average
from tpde._linalg import psd_factor, symmetrize, trace
from tpde._validation import resolve, symmetry_tolerance
from tpde.attention.base import Field, NotAGradientFlow
from tpde.attention.sinkhorn import Sinkhorn, conditional_slope, sinkhorn_potential
from tpde.attention.softmax import Softmax, key_log_weights
from tpde.measures import Empirical, Gaussian, Grid

__all__ = [
    "Energy",
    "GradientStructure",
    "InteractionEnergy",
    "PotentialEnergy",
    "as_energy",
    "gradient_structure",
    "sinkhorn_energy",
    "sinkhorn_first_variation",
    "sinkhorn_first_variation_grad",
    "softmax_domain",
    "softmax_energy",
    "softmax_first_variation",
    "softmax_first_variation_grad",
    "softmax_log_partition",
]

_LOG2 = math.log(2.0)


def _interaction(field, t: float, like: torch.Tensor):
    """(A, V) of a softmax or Sinkhorn field at time t, in ``like``'s dtype and device."""
    p = field.params.at(t, like=like)
    return p.A, p.V


def _particles(mu):
    """Empirical view of particles and grids (a grid: its cell centres with their masses)."""
    return mu.to_empirical() if isinstance(mu, Grid) else mu


# ============================================================================ softmax


def softmax_log_partition(field, mu, x, *, t: float = 0.0, engine: str = "auto", transpose=False):
    """log Z_μ(x) = log ∫ e^{yᵀAx} dμ(y) at points x (m, d); shape (m,).

    ``transpose=True`` uses Aᵀ (the partition function of the keys' side). Gaussian μ: the
    tilt lemma, αᵀAx + ½ xᵀAᵀΣAx (MATH.md §3); particles and grids: one log-sum-exp
    reduction on the chosen engine.
    """
    A, _ = _interaction(field, t, x)
    A = A.mT if transpose else A
    query = x @ A.mT  # rows A x
    if isinstance(mu, Gaussian):
        mean, cov = mu.mean(), mu.cov()
        return query @ mean + 0.5 * ((query @ cov) * query).sum(-1)
    points, log_w = key_log_weights(_particles(mu))
    return logsumexp(query, points, log_w, engine=engine)


def _gaussian_log_energy(mean, cov, A):
    """(log E, ρ²) of the softmax energy of N(α, Σ): see :func:`softmax_energy`."""
    L = psd_factor(cov)
    P = A.mT @ cov @ A
    H = symmetrize(L.mT @ P @ L)
    eye = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
    rho2 = torch.linalg.eigvalsh(H.detach())[..., -1]
    chol, info = torch.linalg.cholesky_ex(eye - H)
    inside = (info == 0) & (rho2 < 1)
    # Outside the domain the value is replaced by +inf; keep the graph finite there.
    chol = torch.where(inside[..., None, None], chol, eye)
    b = (A.mT @ mean.unsqueeze(-1)).squeeze(-1) + (P @ mean.unsqueeze(-1)).squeeze(-1)
    c = (L.mT @ b.unsqueeze(-1)).squeeze(-1)
    solved = torch.cholesky_solve(c.unsqueeze(-1), chol).squeeze(-1)
    logdet = 2 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    quad_a = (mean * (A @ mean.unsqueeze(-1)).squeeze(-1)).sum(-1)
    quad_p = (mean * (P @ mean.unsqueeze(-1)).squeeze(-1)).sum(-1)
    log_e = quad_a + 0.5 * quad_p + 0.5 * (c * solved).sum(-1) - 0.5 * logdet - _LOG2
    return torch.where(inside, log_e, torch.full_like(log_e, math.inf)), rho2


def softmax_domain(field, g: Gaussian, *, t: float = 0.0) -> torch.Tensor:
    """ρ = ‖Σ^{1/2} A Σ^{1/2}‖₂ for a Gaussian: the softmax energy is finite iff ρ < 1."""
    A, _ = _interaction(field, t, g.mean())
    _, rho2 = _gaussian_log_energy(g.mean(), g.cov(), A)
    return rho2.clamp_min(0).sqrt()


def softmax_energy(field, mu, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
    r"""Softmax interaction energy E(μ) = ½ ∬ e^{yᵀAx} dμ(x) dμ(y) (MATH.md §5).

    Parameters
    ----------
    field : Softmax (its A = scale·KᵀQ at time t).
    mu : Empirical, Grid (cell centres weighted by their masses) or Gaussian (batched).
    engine : pairwise engine of the particle sum (first-order gradients on every engine;
        "dense" or "chunked" for second derivatives).

    Returns
    -------
    tensor, 0-d (particles) or the Gaussian's batch shape. Differentiable.

    Notes
    -----
    Particles: E = ½ Σ_i w_i Z(x_i) with log Z(x_i) = LSE_j(x_jᵀAx_i + log w_j) on the engine,
    combined in the log domain (self-interaction included).

    Gaussian N(α, Σ), Σ = LLᵀ [derived]: E_y[e^{yᵀAx}] = exp(αᵀAx + ½xᵀPx), P = AᵀΣA, and
    with x = α + Lz, H = LᵀPL and c = Lᵀ(Aᵀα + Pα),

        E = ½ det(I − H)^{-1/2} exp(αᵀAα + ½αᵀPα + ½ cᵀ(I − H)⁻¹c),

    finite iff I − H ≻ 0, i.e. ρ = ‖Σ^{1/2}AΣ^{1/2}‖₂ < 1 (:func:`softmax_domain`); +inf
    beyond (never NaN). Twice differentiable inside the domain (Cholesky, no square root of
    a matrix unless Σ is singular).
    """
    engine = check_engine(engine)
    _check_no_bias(field)
    if isinstance(mu, Gaussian):
        A, _ = _interaction(field, t, mu.mean())
        return _gaussian_log_energy(mu.mean(), mu.cov(), A)[0].exp()
    mu = _particles(mu)
    points, log_w = key_log_weights(mu)
    A, _ = _interaction(field, t, points)
    log_z = logsumexp(points @ A.mT, points, log_w, engine=engine)
    return (torch.logsumexp(log_w + log_z, dim=-1) - _LOG2).exp()


def softmax_first_variation(field, mu, x, *, t: float = 0.0, engine: str = "auto"):
    """δE/δμ(x) = ½(Z_A(x) + Z_{Aᵀ}(x)) (= Z_μ(x) for A symmetric), shape (m,)."""
    z = softmax_log_partition(field, mu, x, t=t, engine=engine).exp()
    A, _ = _interaction(field, t, x)
    if bool(torch.equal(A, A.mT)):
        return z
    z_t = softmax_log_partition(field, mu, x, t=t, engine=engine, transpose=True).exp()
    return 0.5 * (z + z_t)


def softmax_first_variation_grad(field, mu, x, *, t: float = 0.0, engine: str = "auto"):
    """∇_x δE/δμ(x) = ½(Z_A(x) Aᵀ m_A(x) + Z_{Aᵀ}(x) A m_{Aᵀ}(x)), shape (m, d).

    m_A(x) = ∫ y e^{yᵀAx} dμ / Z_A(x) is the softmax average (on the engine for particles,
    α + ΣAx for a Gaussian). For A symmetric: ∇Z_μ(x) = Z_μ(x) A m(x).
    """
    A, _ = _interaction(field, t, x)
    symmetric = bool(torch.equal(A, A.mT))
    if isinstance(mu, Gaussian):
        mean, cov = mu.mean(), mu.cov()
    else:
        points, log_w = key_log_weights(_particles(mu))
    total = 0
    for matrix in (A,) if symmetric else (A, A.mT):
        query = x @ matrix.mT
        if isinstance(mu, Gaussian):
            log_z = query @ mean + 0.5 * ((query @ cov) * query).sum(-1)
            average = mean + query @ cov
        else:
            log_z = logsumexp(query, points, log_w, engine=engine)
            average = softmax_average(query, points, points, key_bias=log_w, engine=engine)
        total = total + log_z.exp().unsqueeze(-1) * (average @ matrix)  # Z · Aᵀm (row form)
    return total if symmetric else 0.5 * total


# ============================================================================ Sinkhorn


def _sinkhorn_potentials(field, mu: Empirical, t: float, engine: str):
    """(points, log_w, A/ε, G): the converged column potential G, no gradient."""
    points, log_w = key_log_weights(mu)
    A, _ = _interaction(field, t, points)
    A = A / field.eps
    with torch.no_grad():
        G, info = sinkhorn_potential(
            points.detach(), log_w.detach(), A.detach(), iters=field.iters, tol=field.tol,
            engine=engine,
        )  # fmt: skip
    field.last_info = info
    field._warn_if_not_converged()
    return points, log_w, A, G


def _row_potential(points, log_w, A, G, engine: str) -> torch.Tensor:
    """F_i = −LSE_j(x_jᵀAx_i + G_j + log w_j) at the points, no gradient."""
    with torch.no_grad():
        return -logsumexp(
            points.detach() @ A.detach().mT, points.detach(), G + log_w, engine=engine
        )


def sinkhorn_energy(field, mu, *, t: float = 0.0, engine: str = "auto") -> torch.Tensor:
    r"""Sinkhorn energy F(μ) = ½ OT_ε(μ, μ), cost −yᵀAx (MATH.md §5).

    Gaussian: ½ :meth:`Sinkhorn.self_cost` (closed form, MATH.md §3; once differentiable:
    it takes a matrix square root). Particles and grids: the semi-dual at the converged
    column potential G (Sinkhorn to the field's ``tol``, no gradient through the
    iterations), F = ½ ε Σ_i w_i (F_i(x) + G_i) with F_i(x) = −LSE_j(x_jᵀAx_i/ε + G_j + log w_j)
    recomputed with gradients: the value is OT_ε/2 at the fixed point and, by the envelope
    theorem (the semi-dual is a maximum over G), its gradient in the points is exact:
    ∂F/∂x_i = −w_i A E_π[y | x_i] for A symmetric. A missed tolerance warns
    :class:`~tpde.attention.SinkhornNotConverged` and is recorded in ``field.last_info``.
    """
    engine = check_engine(engine)
    _check_no_bias(field)
    if isinstance(mu, Gaussian):
        return 0.5 * field.self_cost(mu, t=t)
    points, log_w, A, G = _sinkhorn_potentials(field, _particles(mu), t, engine)
    F = -logsumexp(points @ A.mT, points, G + log_w, engine=engine)
    return 0.5 * field.eps * (log_w.exp() * (F + G)).sum(-1)


def sinkhorn_first_variation(field, mu, x, *, t: float = 0.0, engine: str = "auto"):
    """δF/δμ(x) = ½(f(x) + g(x)) with the entropic potentials extended to x, shape (m,).

    f(x) = −ε LSE_j(x_jᵀAx/ε + G_j + log w_j), g(y) = −ε LSE_i(yᵀAx_i/ε + F_i + log w_i);
    for A symmetric f = g + const. Particles and grids only.
    """
    if isinstance(mu, Gaussian):
        raise NotImplementedError(
            "sinkhorn_first_variation on a Gaussian is not implemented; its gradient is "
            "(sinkhorn_first_variation_grad), and the energy itself is in closed form."
        )
    points, log_w, A, G = _sinkhorn_potentials(field, _particles(mu), t, engine)
    F = _row_potential(points, log_w, A, G, engine)
    f = -logsumexp(x @ A.mT, points, G + log_w, engine=engine)
    g = -logsumexp(x @ A, points, F + log_w, engine=engine)
    return 0.5 * field.eps * (f + g)


def sinkhorn_first_variation_grad(field, mu, x, *, t: float = 0.0, engine: str = "auto"):
    """∇δF/δμ(x) = −½(Aᵀ E_π[y | x] + A E_π[x | y = ·]), shape (m, d); −A E_π[y | x] for A
    symmetric. Gaussians: E_π[y | x] = α + SA(x − α) (:class:`Sinkhorn` notes)."""
    A_raw, _ = _interaction(field, t, x)
    if isinstance(mu, Gaussian):
        mean, cov = mu.mean(), mu.cov()
        row = mean + (x - mean) @ conditional_slope(cov, A_raw / field.eps).mT
        col = mean + (x - mean) @ conditional_slope(cov, A_raw.mT / field.eps).mT
    else:
        points, log_w, A, G = _sinkhorn_potentials(field, _particles(mu), t, engine)
        F = _row_potential(points, log_w, A, G, engine)
        row = softmax_average(x @ A.mT, points, points, key_bias=G + log_w, engine=engine)
        col = softmax_average(x @ A, points, points, key_bias=F + log_w, engine=engine)
    return -0.5 * (row @ A_raw + col @ A_raw.mT)


# ============================================================================ structure


class Energy:
    """A functional on measures for JKO steps, gradient flows and convexity probes.

    Subclasses implement ``__call__(mu, engine)`` (a 0-d tensor, differentiable in the
    measure's tensors) and, where known, ``first_variation(mu, x, engine)`` (δE/δμ at
    points x, shape (m,)) and ``first_variation_grad(mu, x, engine)`` (its gradient in x,
    (m, d)); the latter defaults to autograd of the former.
    """

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        raise NotImplementedError

    def first_variation(self, mu, x, engine: str = "auto") -> torch.Tensor:
        raise NotImplementedError(
            f"{type(self).__name__} does not provide its first variation δE/δμ at arbitrary "
            "points; only the particle gradient (autograd in the points) is available."
        )

    def first_variation_grad(self, mu, x, engine: str = "auto") -> torch.Tensor:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            value = self.first_variation(mu, x, engine).sum()
            return torch.autograd.grad(value, x)[0]


class _CallableEnergy(Energy):
    """Any callable measure -> scalar tensor; derivatives by autograd only."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        return self.fn(mu)

    def __repr__(self) -> str:
        return f"Energy({getattr(self.fn, '__name__', repr(self.fn))})"


class _LyapunovEnergy(Energy):
    """G = c · E of a gradient structure, with its first variations."""

    def __init__(self, structure: GradientStructure):
        self.structure = structure

    def __call__(self, mu, engine: str = "auto"):
        return self.structure.lyapunov_sign * self.structure.energy(mu, engine)

    def first_variation(self, mu, x, engine: str = "auto"):
        s = self.structure
        fn = softmax_first_variation if s.kind == "softmax" else sinkhorn_first_variation
        return s.lyapunov_sign * fn(s.field, mu, x, t=s.t, engine=engine)

    def first_variation_grad(self, mu, x, engine: str = "auto"):
        s = self.structure
        fn = softmax_first_variation_grad if s.kind == "softmax" else sinkhorn_first_variation_grad
        return s.lyapunov_sign * fn(s.field, mu, x, t=s.t, engine=engine)

    def __repr__(self) -> str:
        return f"Lyapunov({self.structure!r})"


class GradientStructure:
    r"""How a field is a gradient flow: Γ[μ] = −(sM) ∇(δG/δμ) / ω_μ (module notes).

    Attributes
    ----------
    field : the Softmax or Sinkhorn field.
    kind : "softmax" (metric weighted by Z_μ) or "sinkhorn" (no weight).
    sign : s = ±1 with sM ≻ 0.
    M : (d, d) the raw mobility V A⁻¹ (symmetric, definite).
    mobility : (d, d) sM, symmetric positive definite: the metric is ⟨(sM)⁻¹v, w⟩.
    A : (d, d) the symmetric interaction matrix.
    lyapunov_sign : c with G = c·E the functional the PDE descends (softmax −s: gradient
        ascent of E for M ≻ 0; Sinkhorn s).
    weighted : whether the metric carries the weight ω_μ = Z_μ (softmax).
    lyapunov : :class:`Energy` G = c·E, the functional a JKO step minimises.
    t : time at which time-dependent parameters were resolved.
    """

    def __init__(self, field, kind: str, sign: int, M, A, t: float):
        self.field, self.kind, self.sign, self.t = field, kind, sign, t
        self.M, self.A = M, A
        self.mobility = sign * M
        self.weighted = kind == "softmax"
        self.lyapunov_sign = -sign if kind == "softmax" else sign
        self.lyapunov = _LyapunovEnergy(self)

    @property
    def dim(self) -> int:
        return self.A.shape[-1]

    def energy(self, mu, engine: str = "auto") -> torch.Tensor:
        """The field's energy E(μ) (softmax E or Sinkhorn F)."""
        return self.field.energy(mu, t=self.t, engine=engine)

    def log_weight(self, mu, x, engine: str = "auto") -> torch.Tensor:
        """log ω_μ(x): log Z_μ(x) (softmax) or 0 (Sinkhorn), shape (m,)."""
        if not self.weighted:
            return torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        return softmax_log_partition(self.field, mu, x, t=self.t, engine=engine)

    def velocity(self, mu, x, engine: str = "auto") -> torch.Tensor:
        """−(sM)∇(δG/δμ)(x)/ω_μ(x), (m, d): equals Γ[μ](x) where the structure holds."""
        grad = self.lyapunov.first_variation_grad(mu, x, engine)
        weight = self.log_weight(mu, x, engine).exp().unsqueeze(-1)
        return -(grad @ self.mobility.to(grad).mT) / weight

    def metric_norm2(self, mu: Empirical, v: torch.Tensor, engine: str = "auto"):
        """‖v‖²_g = Σ_i w_i ω_μ(x_i) v_iᵀ(sM)⁻¹v_i for a velocity (n, d) on particles."""
        weight = self.log_weight(mu, mu.points, engine).exp()
        solved = torch.linalg.solve(self.mobility.to(v), v.mT).mT
        return (mu.weights * weight * (v * solved).sum(-1)).sum()

    def __repr__(self) -> str:
        return (
            f"GradientStructure({self.kind}, s={self.sign:+d}, G={self.lyapunov_sign:+d}·E, "
            f"weighted={self.weighted})"
        )


def _raise(field, reason: str):
    raise NotAGradientFlow(
        f"{type(field).__name__} attention is not a gradient flow in tpde for these "
        f"parameters: {reason} (MATH.md §5)."
    )


def gradient_structure(field, t: float = 0.0) -> GradientStructure:
    """The gradient structure of a Softmax or Sinkhorn field at time t (MATH.md §5).

    Needs unbatched parameters, A symmetric (to 1e3 eps, relative) and invertible, and
    M = V A⁻¹ symmetric (to √eps, relative: the rounding of the solve) and definite; raises
    :class:`NotAGradientFlow` saying which condition fails otherwise.
    """
    if isinstance(field, Softmax):
        kind = "softmax"
    elif isinstance(field, Sinkhorn):
        kind = "sinkhorn"
    else:
        _raise(field, "only softmax and Sinkhorn attention have a gradient structure")
    _check_no_bias(field)
    query = resolve(field.params.Q, t)
    dtype = query.dtype if query.is_floating_point() else torch.float64  # tolerances
    p = field.params.at(t, like=torch.empty((), dtype=torch.float64))
    A, V = p.A, p.V
    if A.ndim != 2 or V.ndim != 2:
        _raise(field, f"batched parameters (A {tuple(A.shape)}); take one parameter set")
    scale = float(A.abs().max().clamp_min(1e-300))
    asym = float((A - A.mT).abs().max()) / scale
    if asym > symmetry_tolerance(dtype):
        _raise(
            field,
            f"A = scale·KᵀQ must be symmetric; received relative asymmetry {asym:.3g} "
            "(take K = Q, or K = −Q, or Q = A, K = I for a symmetric A)",
        )
    A = symmetrize(A)
    svals = torch.linalg.svdvals(A)
    if float(svals[-1]) <= 1e3 * A.shape[-1] * torch.finfo(dtype).eps * float(svals[0]):
        _raise(field, f"A is singular (smallest singular value {float(svals[-1]):.3g}), so "
               "the mobility M = V A⁻¹ does not exist")  # fmt: skip
    M = torch.linalg.solve(A, V.mT).mT
    gap = float((M - M.mT).abs().max()) / float(M.abs().max().clamp_min(1e-300))
    if gap > torch.finfo(dtype).eps ** 0.5:
        _raise(
            field,
            f"the mobility M = V A⁻¹ must be symmetric (V = M A with M symmetric); received "
            f"relative asymmetry {gap:.3g}",
        )
    M = symmetrize(M)
    evals = torch.linalg.eigvalsh(M)
    floor = 1e3 * M.shape[-1] * torch.finfo(dtype).eps * float(evals.abs().max())
    if bool((evals > floor).all()):
        sign = 1
    elif bool((evals < -floor).all()):
        sign = -1
    else:
        _raise(
            field,
            f"the mobility M = V A⁻¹ must be definite (sM ≻ 0 for s = +1 or −1); received "
            f"eigenvalues from {float(evals[0]):.3g} to {float(evals[-1]):.3g}",
        )
    return GradientStructure(field, kind, sign, M, A, float(t))


def _check_no_bias(field) -> None:
    """Query/key/value biases change the energy; energies are defined without them."""
    if getattr(field.params, "has_bias", False):
        _raise(field, "the field has query, key or value biases; E and F are defined for "
               "bias-free attention (Ax scores, values Vy)")  # fmt: skip


# ============================================================================ other energies


class PotentialEnergy(Energy):
    r"""Potential energy E(μ) = ∫ U dμ of a potential U: R^d → R.

    Parameters
    ----------
    potential : callable, points (m, d) -> values (m,), differentiable in torch.

    Notes
    -----
    ``PotentialEnergy.quadratic(P, b)`` is U(x) = ½xᵀPx + bᵀx, with the Gaussian closed
    form ½ tr(PΣ) + U(α). A convex U gives a geodesically convex energy (the control case
    of :mod:`tpde.flows.convexity`); its W2 gradient flow moves particles by ẋ = −∇U(x).
    """

    def __init__(self, potential: Callable, *, _quadratic=None):
        if not callable(potential):
            raise TypeError(f"potential must be callable; received {type(potential).__name__}.")
        self.potential = potential
        self._quadratic = _quadratic

    @classmethod
    def quadratic(cls, P, b=None) -> PotentialEnergy:
        """U(x) = ½ xᵀPx + bᵀx (P symmetric (d, d), b (d,) or None)."""
        P = symmetrize(torch.as_tensor(P))
        b = torch.zeros(P.shape[-1], dtype=P.dtype) if b is None else torch.as_tensor(b)

        def potential(x):
            Pl, bl = P.to(x), b.to(x)
            return 0.5 * ((x @ Pl) * x).sum(-1) + x @ bl

        return cls(potential, _quadratic=(P, b))

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        if isinstance(mu, Gaussian):
            if self._quadratic is None:
                raise NotImplementedError(
                    "a potential energy on a Gaussian has a closed form only for quadratic "
                    "potentials (PotentialEnergy.quadratic); sample the Gaussian instead."
                )
            P = self._quadratic[0].to(mu.mean())
            return 0.5 * trace(P @ mu.cov()) + self.potential(mu.mean().unsqueeze(-2))[..., 0]
        mu = _particles(mu)
        return (mu.weights * self.potential(mu.points)).sum(-1)

    def first_variation(self, mu, x, engine: str = "auto") -> torch.Tensor:
        return self.potential(x)

    def __repr__(self) -> str:
        return "PotentialEnergy(quadratic)" if self._quadratic else "PotentialEnergy()"


class InteractionEnergy(Energy):
    r"""Interaction energy E(μ) = ½ ∬ W(x − y) dμ(x) dμ(y) of an even kernel W.

    Parameters
    ----------
    kernel : callable, differences (..., d) -> values (...), even (W(z) = W(−z)).

    Particles and grids only (dense n × n differences: for a few thousand particles).
    δE/δμ(x) = ∫ W(x − y) dμ(y). A convex W gives a geodesically convex energy.
    """

    def __init__(self, kernel: Callable):
        if not callable(kernel):
            raise TypeError(f"kernel must be callable; received {type(kernel).__name__}.")
        self.kernel = kernel

    def __call__(self, mu, engine: str = "auto") -> torch.Tensor:
        if isinstance(mu, Gaussian):
            raise NotImplementedError("InteractionEnergy is evaluated on particles and grids.")
        mu = _particles(mu)
        values = self.kernel(mu.points[:, None, :] - mu.points[None, :, :])
        return 0.5 * (mu.weights @ values @ mu.weights)

    def first_variation(self, mu, x, engine: str = "auto") -> torch.Tensor:
        mu = _particles(mu)
        return self.kernel(x[:, None, :] - mu.points[None, :, :]) @ mu.weights


def as_energy(energy) -> Energy:
    """The :class:`Energy` a JKO step or a gradient flow minimises.

    A field: its Lyapunov functional G = c·E (:func:`gradient_structure`; raises
    :class:`NotAGradientFlow` where the field has none; pass ``field.energy`` itself to
    minimise E). An :class:`Energy`: itself. Any other callable measure -> 0-d tensor:
    wrapped, derivatives by autograd.
    """
    if isinstance(energy, Field):
        return energy.gradient_structure().lyapunov
    if isinstance(energy, Energy):
        return energy
    if callable(energy):
        return _CallableEnergy(energy)
    raise TypeError(
        f"energy must be a field (Softmax, Sinkhorn), a tpde Energy or a callable measure -> "
        f"scalar tensor; received {type(energy).__name__}."
    )
