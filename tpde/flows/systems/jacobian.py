r"""The Jacobian machinery of the stiff methods (:mod:`tpde.flows.methods.rosenbrock`).

A system that can be stepped by a Rosenbrock method returns a :class:`Linearization` of
its right-hand side from ``jacobian(t, state)``: the matrix per batch element in flat
coordinates, the maps between states and those coordinates, and ∂f/∂t.
:class:`SymmetricCoordinates` are a Gaussian's (the covariance's upper half), with the
closed-form Jacobian of the moment ODE; :func:`autograd_jacobian` is the dense Jacobian of
any map by reverse-mode autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tpde import _lu as lu

__all__ = [
    "Linearization",
    "SymmetricCoordinates",
    "autograd_jacobian",
    "backward_jacobian",
    "forward_time_derivative",
]


@dataclass(frozen=True)
class Linearization:
    """A system's right-hand side linearised at one state, in flat coordinates.

    f(t, y + δ) ≈ f(t, y) + J δ per batch element, with states mapped to vectors of n
    coordinates (a system may drop redundant ones: a covariance's symmetric half). What
    the stiff methods (:mod:`tpde.flows.methods.rosenbrock`) read.

    Attributes
    ----------
    matrix : (…, n, n), J per batch element (… the batch shape, empty when unbatched);
    time_derivative : (…, n) ∂f/∂t, or None when the field does not depend on time;
    to_vector : state -> (…, n);  to_state : (…, n) -> state;
    step_dims : trailing dimensions of the first state part (its per-element step tensor
        has shape (…, 1, …, 1) with that many ones).
    """

    matrix: torch.Tensor
    time_derivative: torch.Tensor | None
    to_vector: object
    to_state: object
    step_dims: int

    def solver(self, step, gamma: float):
        """x ↦ (I − hγJ)⁻¹x for x (…, n), by one LU per element (``step``: a float, or
        a tensor with the batch shape)."""
        return _factor(self.matrix, step, gamma)

    def per_element(self, h):
        """The loop's step (a float, or one tensor per state part) with the batch shape."""
        if not isinstance(h, tuple):
            return float(h)
        first = h[0]
        return first.reshape(first.shape[: first.ndim - self.step_dims])


def _factor(J: torch.Tensor, step, gamma: float):
    """LU of I − hγJ per element; returns x ↦ (I − hγJ)⁻¹x for x of shape (…, n).

    Elements with h = 0 (not moving this iteration) factor the identity, whatever J holds
    there. A singular or non-finite matrix gives a non-finite solution, which the loop's
    error norm rejects (the step shrinks, and collapses to "blow_up" if it must).
    """
    n = J.shape[-1]
    eye = torch.eye(n, dtype=J.dtype, device=J.device)
    if isinstance(step, float):
        scaled = (step * gamma) * J if step != 0.0 else torch.zeros_like(J)
    else:
        hg = (step * gamma).unsqueeze(-1).unsqueeze(-1)
        scaled = torch.where(hg != 0, hg * J, torch.zeros_like(J))
    LU, pivots, info = lu.lu_factor_ex(eye - scaled)
    failed = (info != 0).unsqueeze(-1)

    def solve(x: torch.Tensor) -> torch.Tensor:
        out = lu.lu_solve(LU, pivots, x.unsqueeze(-1)).squeeze(-1)
        return torch.where(failed, torch.full_like(out, math.nan), out)

    return solve


def autograd_jacobian(f, y: torch.Tensor) -> torch.Tensor:
    """J (…, n, n) of f: (…, n) -> (…, n) at y by one backward pass through n copies of y
    (copy j's j-th output is backpropagated, so one pass gives every row of every batch
    element's J). y is detached: J is not differentiated through."""
    y = y.detach()
    n = y.shape[-1]
    copies = y.expand(n, *y.shape).clone().requires_grad_(True)
    with torch.enable_grad():
        out = f(copies)
        pick = torch.eye(n, dtype=y.dtype, device=y.device).reshape(n, *(1,) * (y.ndim - 1), n)
        (rows,) = torch.autograd.grad((out * pick).sum(), copies)
    return rows.movedim(0, -2)


def forward_time_derivative(f, t: float, dtype: torch.dtype, at_t=None) -> torch.Tensor:
    """∂f/∂t of t ↦ f(t) (a tensor) by a forward difference of step δ = √ε·max(1, |t|).

    Relative error ~√ε: the fields' parameters are user callables of a float t, which
    autograd cannot see into; in a Rosenbrock step the error enters as O(h²·δ).
    ``at_t`` is f(t) where the caller has it already (one evaluation fewer).
    """
    delta = math.sqrt(torch.finfo(dtype).eps) * max(1.0, abs(float(t)))
    start = f(t) if at_t is None else at_t
    return (f(t + delta) - start) / delta


def backward_jacobian(f, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(J, f(y)): J (…, n, n) of f: (…, n) -> (…, n) at y, batch elements independent, by
    one forward pass and n backward passes of its graph (batched by vmap where the graph
    allows it, one row at a time otherwise): for maps that take only y's own shape (a
    particle system's right-hand side). y is detached: J is not differentiated through;
    f(y) (detached) is the forward pass's value."""
    y = y.detach().requires_grad_(True)
    n = y.shape[-1]
    with torch.enable_grad():
        out = f(y)
        eye = torch.eye(n, dtype=y.dtype, device=y.device)
        rows = eye.reshape(n, *(1,) * (y.ndim - 1), n).expand(n, *y.shape)
        try:
            (grads,) = torch.autograd.grad(out, y, rows, retain_graph=True, is_grads_batched=True)
        except RuntimeError:  # an operation without a batching rule: one row at a time
            grads = torch.stack(
                [torch.autograd.grad(out, y, row, retain_graph=True)[0] for row in rows]
            )
    return grads.movedim(0, -2).detach(), out.detach()


class SymmetricCoordinates:
    """Flat coordinates [α, Σ_ab (a ≤ b)] of a Gaussian state (see GaussianSystem.jacobian).

    ``spread`` (m, d²) maps the m = d(d+1)/2 covariance coordinates to vec Σ (row-major,
    unit Σ_ab put at (a, b) and (b, a)).
    """

    def __init__(self, d: int, like: torch.Tensor):
        device = like.device
        self.d, self.dtype, self.device = d, like.dtype, device
        self.upper, self.lower = torch.triu_indices(d, d, device=device)
        m = len(self.upper)
        spread = torch.zeros(m, d * d, dtype=like.dtype, device=device)
        index = torch.arange(m, device=device)
        spread[index, self.upper * d + self.lower] = 1.0
        spread[index, self.lower * d + self.upper] = 1.0
        self.spread = spread

    def matches(self, d: int, like: torch.Tensor) -> bool:
        return (d, like.dtype, like.device) == (self.d, self.dtype, self.device)

    def to_vector(self, state) -> torch.Tensor:
        mean, cov = state
        return torch.cat([mean, cov[..., self.upper, self.lower]], dim=-1)

    def to_state(self, vector: torch.Tensor):
        d = self.d
        full = vector[..., d:] @ self.spread
        return vector[..., :d], full.reshape(*vector.shape[:-1], d, d)

    def closure_jacobian(self, derivative, mean, cov) -> torch.Tensor:
        r"""J (…, n, n) of α̇ = c + Bα, Σ̇ = BΣ + ΣBᵀ from an
        :class:`~tpde.fields.AffineDerivative` (formulas in GaussianSystem.jacobian).

        Σ-Σ block: Σ_t X_t ⊗ W_t with (X, W) = (B, I), (I, B), (P_h, ΣR_hᵀ), (ΣR_hᵀ, P_h),
        i.e. ∂Σ̇_ik/∂Σ_jl = T[(i, j), (k, l)] with T = Σ_t vec(X_t) vec(W_t)ᵀ (one batched
        product); a coordinate Σ_jl, j < l, adds the (l, j) column. α-Σ block:
        ∂α̇_i/∂Σ_jl = Σ_h P_h,ij v_h,l with v_h = r_h + R_hα; Σ-α block: 0.
        """
        d, up, lo = self.d, self.upper, self.lower
        B = derivative.B
        eye = torch.eye(d, dtype=B.dtype, device=B.device)
        left, right, mixed = [B, eye], [eye, B], 0
        for P, R, r in derivative.terms:
            U = cov @ R.transpose(-1, -2)
            left += [P, U]
            right += [U, P]
            v = (R @ mean.unsqueeze(-1)).squeeze(-1)
            v = v if r is None else v + r
            mixed = mixed + P.unsqueeze(-1) * v.unsqueeze(-2).unsqueeze(-2)  # [i, j, l]
        batch = torch.broadcast_shapes(*(x.shape[:-2] for x in left + right), mean.shape[:-1])
        X = torch.stack([x.expand(*batch, d, d) for x in left], -3).flatten(-2)  # (…, T, d²)
        W = torch.stack([w.expand(*batch, d, d) for w in right], -3).flatten(-2)
        T = (X.transpose(-1, -2) @ W).flatten(-2)  # [(i, j), (k, l)] flattened
        off = (up != lo).to(B.dtype)  # a coordinate Σ_jl with j < l moves Σ_lj too
        i, k = up[:, None], lo[:, None]  # rows (i, k), i ≤ k
        j, l = up[None, :], lo[None, :]  # columns (j, l), j ≤ l
        cov_cov = (
            T[..., (i * d + j) * d * d + k * d + l] + off * T[..., (i * d + l) * d * d + k * d + j]
        )
        mixed = torch.as_tensor(mixed, dtype=B.dtype, device=B.device).expand(*batch, d, d, d)
        mixed = mixed.flatten(-2)
        mean_cov = mixed[..., up * d + lo] + off * mixed[..., lo * d + up]
        m = len(up)
        J = torch.zeros(*batch, d + m, d + m, dtype=B.dtype, device=B.device)
        J[..., :d, :d] = derivative.C + B
        J[..., :d, d:] = mean_cov
        J[..., d:, d:] = cov_cov
        return J
