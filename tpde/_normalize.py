r"""Scale-safe norms and directions of vectors over the last dimension.

``torch.linalg.vector_norm`` squares the entries: in float64 a vector of norm 1e200
overflows to Inf (its direction becomes 0) and one of norm 1e-200 underflows to 0 (a
"point at the origin"); float32 fails beyond 1e19 and below 1e-19. Every norm and
direction in tpde is computed here from the vector scaled by its largest entry,

    |x| = s · |x/s|,   x/|x| = (x/s) / |x/s|,   s = max_k |x_k|,

as LAPACK's ``dnrm2`` and ``hypot`` do: x/s has entries in [−1, 1] and one of modulus 1,
so |x/s| ∈ [1, √d] neither overflows nor underflows, and the relative error is a few
ulps at every scale the dtype represents (subnormals included). A zero vector has norm
0 and direction 0.
"""

from __future__ import annotations

import torch

__all__ = ["safe_norm", "tangent_part", "unit"]


def _scaled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x/s, s) with s = max |x_k| over the last dimension (s = 1 where x = 0), keepdim."""
    scale = x.abs().amax(-1, keepdim=True)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return x / scale, scale


def safe_norm(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """Euclidean norm over ``dim``, right for every finite scale of the dtype (module notes).

    Differentiable where x ≠ 0 (the scale s cancels in the gradient x/|x|).
    """
    moved = x.movedim(dim, -1)
    small, scale = _scaled(moved)
    norm = torch.linalg.vector_norm(small, dim=-1, keepdim=True) * scale
    norm = norm.movedim(-1, dim)
    return norm if keepdim else norm.squeeze(dim)


def unit(x: torch.Tensor) -> torch.Tensor:
    """x/|x| over the last dimension at every scale (module notes); a zero vector stays 0."""
    small, _ = _scaled(x)
    norm = torch.linalg.vector_norm(small, dim=-1, keepdim=True)
    return small / torch.where(norm > 0, norm, torch.ones_like(norm))


def tangent_part(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v − u⟨u, v⟩ for unit (or zero) directions u: the part of v orthogonal to u.

    With u = :func:`unit` (x) this is P⊥_x v = v − x⟨x, v⟩/|x|² at every scale of x,
    without forming |x|²; at x = 0 (no direction) it is v.
    """
    return v - u * (u * v).sum(-1, keepdim=True)
