r"""Entropic JKO steps on grids (d = 1, 2), after Peyré (2015).

Reference: G. Peyré, "Entropic approximation of Wasserstein gradient flows", SIAM J.
Imaging Sci. 8(4), 2015.

With cell masses p = μ_k, costs C_ij = |x_i − x_j|² between cell centres and an entropic
regularisation ε, the step is

    π* = argmin_{π ≥ 0, π1 = p}  (⟨C, π⟩ + ε Σ_ij π_ij (log π_ij − 1)) / (2τ) + G(πᵀ1),
    μ_{k+1} = π*ᵀ1.

tpde linearises G at μ_k [ours, documented]: G(q) ≈ G(p) + ⟨φ, q − p⟩ with φ = δG/δμ(μ_k)
at the cell centres. Then the optimality conditions C_ij + ε log π_ij + 2τφ_j = λ_i give
π_ij = a_i K_ij e^{ψ_j}, K_ij = e^{−C_ij/ε}, ψ = −2τφ/ε, and the row constraint fixes a, so
the step is in closed form (one Sinkhorn half-iteration, no inner loop):

    r = K e^{ψ},   a = p / r,   μ_{k+1} = e^{ψ} ⊙ Kᵀa.

Σ_j (μ_{k+1})_j = Σ_i a_i r_i = Σ_i p_i: mass is conserved exactly (then renormalised to
remove rounding). K is a Gaussian kernel, separable along the axes: every product is a
sequence of 1-D products, kept in the log domain so that e^{ψ} never overflows
(:func:`log_gibbs`: matrix products with per-fibre shifts, log-sum-exp where the values
span too many orders of magnitude), in torch. The linearisation keeps the scheme first
order in τ (a semi-implicit step; the fully implicit one would re-linearise at μ_{k+1}).

**The effect of ε.** For φ = 0 the step is the Gaussian blur p ↦ K p / (K1) of variance
ε/2 per coordinate; with φ it is the transport x ↦ x − τ∇φ(x) followed by that blur, i.e.
an Euler–Maruyama step of dX = −∇φ dt + √(2D) dW with D = ε/(4τ): the entropic JKO flow
is the gradient flow plus a diffusion of strength D. The default ε = max(τ, 2h)² (h the
largest cell size; τ in the units of the grid, i.e. velocities of order one) makes the blur
width √ε = max(τ, 2h): for τ ≥ 2h, D = τ/4 → 0 linearly in τ, so the scheme converges at
order 1 to the gradient flow of G (not of G plus an entropy), and the kernel spans at
least two cells (below that the discrete kernel is a Kronecker delta and nothing moves).
When τ < 2h the diffusion D = h²/τ dominates: refine the grid with τ (h ≤ τ/2).
"""

from __future__ import annotations

import math

import torch

from tpde._validation import check_positive
from tpde.flows.status import Status
from tpde.flows.trajectory import JKOStep
from tpde.measures import Grid

__all__ = ["default_epsilon", "entropic_step", "gibbs_kernels", "log_gibbs"]

#: Bytes of one block of the log-sum-exp reductions.
BLOCK_BYTES = 64 * 2**20


def default_epsilon(grid: Grid, tau: float) -> float:
    """ε = max(τ, 2h)², h the largest cell size (module notes)."""
    h = float(grid.cell_size.max())
    return max(float(tau), 2 * h) ** 2


#: Largest spread max − min of the finite log-values along a fibre for which the product
#: runs in the exp domain (e^{−600} ≫ the smallest float64): then every output keeps at
#: least its own term K_ii e^{v_i − max} and nothing underflows to a wrong zero.
EXP_RANGE = 600.0


def gibbs_kernels(axes, epsilon: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per axis, the log-kernel −(x_i − x_j)²/ε and the kernel, (n_k, n_k) each."""
    kernels = []
    for coords in axes:
        log_k = -((coords[:, None] - coords[None, :]) ** 2) / epsilon
        kernels.append((log_k, log_k.exp()))
    return kernels


def log_gibbs(log_v: torch.Tensor, axes, epsilon: float, kernels=None) -> torch.Tensor:
    """log Σ_j exp(−|x_i − x_j|²/ε + log v_j) on a grid, one axis at a time.

    Each axis is a product with the 1-D kernel exp(−(x_i − x_j)²/ε): a matrix product in the
    exp domain, shifted by the largest value of each fibre, when the fibre's finite values
    span less than :data:`EXP_RANGE` (float64; 60 in float32); otherwise a banded
    log-sum-exp (:func:`_banded_logsumexp`, exact to e^{−40}, blocks of 64 MB).

    Parameters
    ----------
    log_v : (n1,) or (n1, n2), −inf allowed (empty cells).
    axes : cell-centre coordinates of each axis (tensors (n_k,)).
    kernels : :func:`gibbs_kernels` of these axes and ε, to reuse across calls.
    """
    kernels = gibbs_kernels(axes, epsilon) if kernels is None else kernels
    span = EXP_RANGE if log_v.dtype == torch.float64 else EXP_RANGE / 10
    out = log_v
    for k, (log_k, kernel) in enumerate(kernels):
        moved = out.movedim(k, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        finite = torch.isfinite(flat)
        top = torch.where(finite, flat, -math.inf).amax(-1, keepdim=True)
        low = torch.where(finite, flat, math.inf).amin(-1, keepdim=True)
        spread = float((top - low).masked_fill(~torch.isfinite(top - low), 0).max())
        if spread < span:
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
            result = (torch.exp(flat - top) @ kernel).log() + top  # the kernel is symmetric
        else:
            result = _banded_logsumexp(flat, log_k, spread)
        out = result.reshape(moved.shape).movedim(-1, k)
    return out


def _banded_logsumexp(flat: torch.Tensor, log_k: torch.Tensor, spread: float) -> torch.Tensor:
    """log Σ_j exp(log_k[i, j] + v_j) over the band |i − j| ≤ w, for rows v of ``flat``.

    On a uniform axis log_k[i, j] = −(i − j)²h²/ε. A term outside the band is below the
    j = i term by more than 40 nats (e^{−40} ≈ 4e-18 relative, under float64 rounding)
    when w²h²/ε ≥ spread + 40, spread the largest range of the finite values of a row:
    that fixes w, and the band costs n(2w + 1) instead of n² per row.
    """
    n = flat.shape[-1]
    step2 = float(-log_k[0, 1]) if n > 1 else math.inf  # h²/ε
    w = min(n - 1, math.ceil(math.sqrt((spread + 40.0) / step2))) if n > 1 else 0
    offsets = torch.arange(-w, w + 1, device=flat.device, dtype=flat.dtype)
    band = -(offsets**2) * step2
    padded = torch.nn.functional.pad(flat, (w, w), value=-math.inf)
    rows = max(1, BLOCK_BYTES // (n * (2 * w + 1) * flat.element_size()))
    return torch.cat(
        [
            torch.logsumexp(padded[start : start + rows].unfold(-1, 2 * w + 1, 1) + band, dim=-1)
            for start in range(0, flat.shape[0], rows)
        ]
    )


def _first_variation(G, grid: Grid, engine: str) -> torch.Tensor:
    """δG/δμ at the cell centres, shape of the grid.

    The energy's own ``first_variation`` (fields, potential and interaction energies) where
    it has one; else autograd in the cell masses, which needs an energy differentiable in
    every mass, empty cells included (``field.energy`` on a grid drops empty cells, so for
    fields use the field itself, whose first variation is in closed form).
    """
    try:
        phi = G.first_variation(grid, grid.centres(), engine)
    except NotImplementedError:
        with torch.enable_grad():
            density = grid.density.detach().requires_grad_(True)
            value = G(Grid._trusted(density, grid.lower, grid.upper), engine)
            (phi,) = torch.autograd.grad(value, density)
    return phi.detach().reshape(grid.shape)


def entropic_step(
    grid: Grid, G, tau: float, *, epsilon: float | None, engine: str, cache=None, previous=None
):
    """One entropic JKO step with G linearised at ``grid`` (module notes); a JKOStep.

    ``cache``: a dict in which the kernels of this grid and ε are kept across steps.
    ``previous``: G(grid) when the caller has it already (the flow's last step computed it).
    """
    epsilon = default_epsilon(grid, tau) if epsilon is None else check_positive(epsilon, "epsilon")
    try:
        previous = float(G(grid, engine).detach()) if previous is None else previous
        phi = _first_variation(G, grid, engine)
    except OverflowError:  # the energy exceeds the dtype's range on this box
        previous, phi = math.inf, None
    if phi is None or not bool(torch.isfinite(phi).all()) or not math.isfinite(previous):
        return JKOStep(
            grid, Status.NOT_CONVERGED, 0, 1, math.nan, previous, previous, math.nan, tau,
            "the energy or its first variation is not finite on the grid (overflow of "
            "exp(yᵀAx) on a large box?): shrink the box or the interaction.",
        )  # fmt: skip
    psi = -2 * tau * (phi - phi.min()) / epsilon
    p = grid.density.detach()
    axes = grid.axes()
    key = (grid.shape, tuple(grid.lower.tolist()), tuple(grid.upper.tolist()), epsilon, p.dtype)
    cache = {} if cache is None else cache
    if cache.get("key") != key:
        cache.update(key=key, kernels=gibbs_kernels(axes, epsilon))
    kernels = cache["kernels"]
    log_r = log_gibbs(psi, axes, epsilon, kernels)
    log_a = torch.where(p > 0, p.clamp_min(torch.finfo(p.dtype).tiny).log() - log_r, -math.inf)
    log_q = psi + log_gibbs(log_a, axes, epsilon, kernels)
    q = torch.exp(log_q - log_q.max())
    q = q * (p.sum() / q.sum())
    new = Grid._trusted(q, grid.lower, grid.upper)
    energy = float(G(new, engine).detach())
    return JKOStep(
        new, Status.COMPLETED, 1, 1, math.nan, energy, previous, math.nan, tau,
        f"closed-form entropic update (G linearised at μ_k, ε = {epsilon:.3g})",
    )  # fmt: skip
