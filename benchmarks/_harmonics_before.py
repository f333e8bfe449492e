"""The harmonics engine's sums before issue 35, kept as the baseline of its benchmark.

The path of ``tpde._engines.harmonics.sphere_sums`` up to commit c2331a1: the moments of
the four channels (w, w x₁, w x₂, w x₃) summed one by one at degree L (≈ 8(L + 1)²
multiply-adds per token), the tables by cumulative complex products (``torch.cumprod``),
fresh tensors in every block, the moments over chunks of max(32, L + 1) tokens. Same
kernels, same blocks, same pairwise sums: only the passes differ. Used by
``benchmarks/sphere_harmonics.py --million`` to time both in one process, interleaved.
"""

from __future__ import annotations

import torch

from tpde._engines.harmonics import BLOCK_MIN, BLOCK_TOKENS, _kernels, pairwise_sum
from tpde._engines.spectral import _blocks

#: The fewest tokens per chunk of the moments' sums (:func:`_chunked_product`).
MOMENT_CHUNK = 32


def flops_before(n: int, L: int) -> int:
    """Flops of one evaluation (2 per multiply-add of the products and the contraction, as
    :func:`tpde._engines.harmonics.flops` counts): four channels' moments, the kernels'
    einsum and the sums, each over (cos mφ, sin mφ) rows of all m ≤ L."""
    rows_even, rows_odd = 2 * (L // 2 + 1), 2 * ((L + 1) // 2)
    per_token = 2 * 4 * (rows_even * (L + 1) + rows_odd * L) + 4 * (rows_even + rows_odd)
    kernels = 4 * (rows_even * (L + 1) ** 2 + rows_odd * L**2)
    return 2 * (n * per_token + kernels)


def sphere_sums_before(points: torch.Tensor, weights: torch.Tensor, beta: float, L=None):
    """e^{−β} Σ_j w_j e^{β⟨x_i, x_j⟩} (1, x_j) for one cloud (n, 3), weights (n,), float β."""
    points, weights = points.unsqueeze(0), weights.to(points.dtype).reshape(1, 1, -1)
    floor = float(weights.amin() / weights.sum())
    L, k_even, k_odd = _kernels((float(beta),), torch.finfo(points.dtype).eps * floor, L)
    k_even = k_even.repeat_interleave(2, 1).to(points.dtype)  # one matrix per row (m, s)
    k_odd = k_odd.repeat_interleave(2, 1).to(points.dtype)
    tokens = points.transpose(-1, -2)  # (1, 3, n)
    channels = torch.cat([weights, weights * tokens], dim=-2)  # (1, 4, n)

    def moments(x, w):
        even, odd, cos, sin = _tables(x, L)
        w = w.transpose(-1, -2).unsqueeze(-1)  # (B, b, 4, 1)
        me = _chunked_product((w * even.unsqueeze(-2)).flatten(-2), cos, L + 1)
        mo = _chunked_product((w * odd.unsqueeze(-2)).flatten(-2), sin, L + 1)
        return me, mo

    rows = max(BLOCK_MIN, BLOCK_TOKENS)
    parts = _blocks(moments, tokens, channels, grad=False, rows=rows)
    me = pairwise_sum(torch.stack([p[0] for p in parts])).unflatten(-2, (4, -1))
    mo = pairwise_sum(torch.stack([p[1] for p in parts])).unflatten(-2, (4, -1))
    ge = torch.einsum("brkj,bcrj->bkcr", k_even, me).flatten(-2)  # (B, L + 1, 4·rows)
    go = torch.einsum("brkj,bcrj->bkcr", k_odd, mo).flatten(-2)

    def combine(x):
        even, odd, cos, sin = _tables(x, L)
        se = (cos @ ge).unflatten(-1, (4, -1)) @ even.unsqueeze(-1)  # (B, b, 4, 1)
        so = (sin @ go).unflatten(-1, (4, -1)) @ odd.unsqueeze(-1)
        return (se + so).squeeze(-1)

    return torch.cat(_blocks(combine, tokens, grad=False, rows=rows), dim=-2)[0]


def _tables(x: torch.Tensor, L: int):
    """Azimuth tables of even and odd m ≤ L, polar tables cos kθ (k ≤ L), sin kθ (k ≥ 1)."""
    x1, x2, z = x[..., 0, :], x[..., 1, :], x[..., 2, :]
    s = torch.sqrt(x1 * x1 + x2 * x2)
    pole = s == 0
    safe = torch.where(pole, torch.ones_like(s), s)
    phi = torch.complex(torch.where(pole, torch.ones_like(s), x1 / safe), x2 / safe)
    azimuth = torch.view_as_real(_powers(phi, L + 1))  # (..., b, L + 1, 2)
    polar = _powers(torch.complex(z, s), L + 1)
    even = azimuth[..., 0::2, :].flatten(-2)
    odd = azimuth[..., 1::2, :].flatten(-2)
    return even, odd, polar.real.contiguous(), polar.imag[..., 1:].contiguous()


def _powers(e: torch.Tensor, count: int) -> torch.Tensor:
    """(1, e, e², …, e^{count−1}), shape (..., b, count), complex."""
    ones = torch.ones_like(e).unsqueeze(-1)
    return torch.cumprod(torch.cat([ones, e.unsqueeze(-1).expand(*e.shape, count - 1)], -1), -1)


def _chunked_product(left: torch.Tensor, right: torch.Tensor, degree: int) -> torch.Tensor:
    """leftᵀ right over the tokens (dimension −2) by chunks, the chunks summed pairwise."""
    b = left.shape[-2]
    chunk = max(MOMENT_CHUNK, degree)
    if b <= chunk:
        return left.transpose(-1, -2) @ right
    pad = -b % chunk
    left = torch.nn.functional.pad(left, (0, 0, 0, pad)).unflatten(-2, (-1, chunk))
    right = torch.nn.functional.pad(right, (0, 0, 0, pad)).unflatten(-2, (-1, chunk))
    partial = left.transpose(-1, -2) @ right  # (B, chunks, r, k)
    return pairwise_sum(partial.movedim(-3, 0))
