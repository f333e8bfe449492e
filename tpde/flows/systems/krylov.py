r"""Matrix-free linearisations: the stiff path of particle clouds too large for a dense J.

A Rosenbrock stage solves (I − hγJ) k = r (:mod:`tpde.flows.methods.rosenbrock`). A cloud
of n·d coordinates has an (n·d)² Jacobian whose autograd costs n·d backward passes and
(n·d)·n² memory; beyond :data:`~tpde.flows.systems.particles.DENSE_JACOBIAN` coordinates
the system hands the method an *operator* instead: products J v by one backward pass
through the double-backward graph of f (J v = ∂/∂u ⟨Jᵀu, v⟩, the graph of Jᵀu built once
per step; Pearlmutter 1994), and the stage equations are solved by GMRES (Saad & Schultz
1986; Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed., §6.5) to a residual

    ‖r − (I − hγJ) k‖ ≤ KRYLOV_RTOL · ‖r‖,

batched over elements (the iteration runs until every element's residual meets it). The
Jacobian products are exact, so the method is rodas4 itself (not a W-method) up to the
GMRES residual, which enters each stage at 1e-10 relative, below the step's tolerance.
GMRES needs about as many products as J has clusters of eigenvalues that hγ puts far from
0: attention's Jacobians are low rank plus a block diagonal, and the stiff V = −λI-type
flows need a few tens (measured in tests/flows/test_rosenbrock.py). A Krylov space that
reaches MAX_KRYLOV without meeting the residual gives NaN for that element, which the
loop's error norm rejects (the step shrinks, I − hγJ nears I, and GMRES converges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde.flows.systems.jacobian import Linearization

__all__ = ["KRYLOV_RTOL", "MAX_KRYLOV", "OperatorLinearization", "gmres"]

#: Relative residual of each stage solve.
KRYLOV_RTOL = 1e-10
#: Largest Krylov space (products J v per stage solve).
MAX_KRYLOV = 80


@dataclass(frozen=True)
class OperatorLinearization(Linearization):
    """A :class:`Linearization` without the matrix: ``product(v)`` = J v for v (…, n)."""

    product: object = None

    def solver(self, step, gamma: float):
        """x ↦ (I − hγJ)⁻¹x by GMRES (module notes); ``step`` a float or (…,) tensor."""
        hg = step * gamma if isinstance(step, float) else (step * gamma).unsqueeze(-1)

        def apply(v):
            return v - hg * self.product(v)

        return lambda r: gmres(apply, r, KRYLOV_RTOL, MAX_KRYLOV)


def gmres(apply, r: torch.Tensor, rtol: float, max_dim: int) -> torch.Tensor:
    """Solve apply(x) = r for x (…, n), batched, from x = 0 (no restart): the Krylov space
    grows until every element's least-squares residual is ≤ rtol·‖r‖; NaN for the
    elements that miss it within ``max_dim`` products (module notes)."""
    beta = r.norm(dim=-1, keepdim=True)
    safe = torch.where(beta > 0, beta, torch.ones_like(beta))
    basis = [r / safe]
    hessenberg = torch.zeros(*r.shape[:-1], max_dim + 1, max_dim, dtype=r.dtype, device=r.device)
    target = torch.zeros(*r.shape[:-1], max_dim + 1, dtype=r.dtype, device=r.device)
    target[..., 0] = beta.squeeze(-1)
    size = min(max_dim, r.shape[-1])
    for k in range(size):
        w = apply(basis[k])
        for j, q in enumerate(basis):  # modified Gram–Schmidt
            coefficient = (w * q).sum(-1)
            hessenberg[..., j, k] = coefficient
            w = w - coefficient.unsqueeze(-1) * q
        norm = w.norm(dim=-1)
        hessenberg[..., k + 1, k] = norm
        H = hessenberg[..., : k + 2, : k + 1]
        y = torch.linalg.lstsq(H, target[..., : k + 2].unsqueeze(-1)).solution
        residual = (H @ y).squeeze(-1) - target[..., : k + 2]
        done = residual.norm(dim=-1) <= rtol * beta.squeeze(-1)
        if bool(done.all()) or k + 1 == size:
            break
        basis.append(w / torch.where(norm > 0, norm, torch.ones_like(norm)).unsqueeze(-1))
    x = sum(y[..., j, :] * q for j, q in enumerate(basis[: k + 1]))
    exact = done | (k + 1 == r.shape[-1])  # a full Krylov space solves exactly
    return torch.where(exact.unsqueeze(-1), x, torch.full_like(x, math.nan))


def operator_product(f, y: torch.Tensor):
    """(v ↦ J v, f(y)) for f: (…, n) -> (…, n) at y: the double-backward graph of Jᵀu is
    built once, each product is one backward pass through it (module notes)."""
    y = y.detach().requires_grad_(True)
    with torch.enable_grad():
        out = f(y)
        u = torch.zeros_like(out, requires_grad=True)
        (transposed,) = torch.autograd.grad(out, y, u, create_graph=True)

    def product(v: torch.Tensor) -> torch.Tensor:
        (jv,) = torch.autograd.grad(transposed, u, v, retain_graph=True)
        return jv.detach()

    return product, out.detach()
