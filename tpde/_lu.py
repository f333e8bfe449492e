"""LU-based solves and inverses that stay correct on a multi-threaded CPU.

torch's CPU kernels factor a batch of matrices with ``at::parallel_for`` over the batch; for
matrices larger than about 14 × 14 its grain-size heuristic truncates to 0, so several threads
call MKL's ``dgetrf``/``dgetrs`` at once, which is not thread-safe there: ``Intel oneMKL
ERROR: Parameter 6 was incorrect on entry to DLASWP`` and then "Pivots given to lu_solve must
all be greater or equal to 1", or wrong numbers without an error (pytorch/pytorch issue
142815, open; the fix pytorch/pytorch PR 181570, open, runs such a batch on one thread).
Measured here with torch 2.13.0 on 2 threads: a batch of 2–12 symmetric positive definite
384 × 384 matrices fails in 18 of 18 tries of ``torch.linalg.solve`` (and of ``inv``,
``solve_ex``, ``lu_factor`` + ``lu_solve``), never on one thread, never unbatched.

Every batched LU call of tpde goes through these functions, which run it with torch on one
thread (the fix's rule) and restore the caller's thread count; an unbatched call, or one off
the CPU, is torch's own. One thread on the batch costs nothing the race did not: each
matrix's LAPACK call was single-threaded inside the parallel loop anyway. Where autograd
records the call, its backward pass (another batched LU solve, run by the autograd engine
outside any guard) would race again, so a recorded batched call is solved one matrix at a
time (unbatched, forward and backward are safe). torch's thread count is one per process:
the guard is for the calling thread's work, not for several Python threads factoring at once.
"""

from __future__ import annotations

import contextlib

import torch

from tpde._engines.tiled import calling_thread_alone

__all__ = ["inv", "logdet", "lu_factor_ex", "lu_solve", "solve"]


def _serial(*tensors: torch.Tensor):
    """torch on one thread while a batched CPU factorisation of ``tensors`` runs (the
    engines' :func:`~tpde._engines.tiled.calling_thread_alone`); else nothing changes."""
    batched = any(t.dim() > 2 for t in tensors) and tensors[0].device.type == "cpu"
    return calling_thread_alone() if batched else contextlib.nullcontext()


def _recorded_batch(*tensors: torch.Tensor) -> bool:
    """Whether autograd records a batched CPU call on ``tensors`` (module notes)."""
    return (
        torch.is_grad_enabled()
        and any(t.requires_grad for t in tensors)
        and any(t.dim() > 2 for t in tensors)
        and tensors[0].device.type == "cpu"
    )


def _one_by_one(function, A: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """``function`` of each matrix of A (..., n, n) with the matching (..., n, k) of
    ``others``, broadcast over the batch, stacked back to the batch shape."""
    batch = torch.broadcast_shapes(A.shape[:-2], *(o.shape[:-2] for o in others))
    flat = [t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:]) for t in (A, *others)]
    out = torch.stack([function(*parts) for parts in zip(*flat, strict=True)])
    return out.reshape(*batch, *out.shape[1:])


def solve(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``torch.linalg.solve(A, B)``: X with AX = B, A (..., n, n), B (..., n, k) or (..., n)."""
    if _recorded_batch(A, B):
        vector = B.dim() == A.dim() - 1 and B.shape == A.shape[:-1]  # torch's rule
        X = _one_by_one(torch.linalg.solve, A, B.unsqueeze(-1) if vector else B)
        return X.squeeze(-1) if vector else X
    with _serial(A, B):
        return torch.linalg.solve(A, B)


def inv(A: torch.Tensor) -> torch.Tensor:
    """``torch.linalg.inv(A)``, A (..., n, n)."""
    if _recorded_batch(A):
        return _one_by_one(torch.linalg.inv, A)
    with _serial(A):
        return torch.linalg.inv(A)


def logdet(A: torch.Tensor) -> torch.Tensor:
    """``torch.logdet(A)``, A (..., n, n): shape (...)."""
    if _recorded_batch(A):
        return _one_by_one(lambda a: torch.logdet(a)[None, None], A)[..., 0, 0]
    with _serial(A):
        return torch.logdet(A)


def lu_factor_ex(A: torch.Tensor):
    """``torch.linalg.lu_factor_ex(A)``: (LU, pivots, info), A (..., n, n)."""
    with _serial(A):
        return torch.linalg.lu_factor_ex(A)


def lu_solve(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``torch.linalg.lu_solve(LU, pivots, B)``, B (..., n, k)."""
    with _serial(LU, B):
        return torch.linalg.lu_solve(LU, pivots, B)
