"""The harmonics engine's passes at commit e5890c2, kept as the baseline of its benchmark.

``benchmarks/sphere_harmonics.py --floor`` times ``tpde._engines.harmonics.sphere_sums``
against itself run with these passes and pass 2 in blocks of BLOCK_TOKENS (:func:`previous`),
interleaved in one process: the engine as it was before the views of its buffers were
kept per block shape (``Buffers.plan``), the pass-1 tables built 2048 tokens at a time,
pass 2 given blocks of 2048 tokens and the calling thread kept on one torch thread. Same
arithmetic (the same moments bit for bit; pass 2's products move by an ulp with the
number of columns, 6e-17 to 1.4e-16 relative measured); the module notes of
``tpde/_engines/_harmonic_passes.py`` describe the passes.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading

import torch

import tpde._engines.harmonics as harmonics

#: Tokens per chunk of the moments' matrix products (their rounding: module notes of
#: :mod:`tpde._engines.harmonics`).
CHUNK = 64


class Buffers:
    """Scratch arrays of one evaluation, one set per thread, reused from block to block.

    Fresh multi-megabyte arrays cost a page fault per 4 KiB (the tables were 7× slower than
    their arithmetic); the set is dropped with the evaluation, so nothing stays allocated
    after it. Under autograd no buffer is used (every table is a new tensor)."""

    def __init__(self):
        self._local = threading.local()

    def get(self, name: str, shape: tuple, like: torch.Tensor) -> torch.Tensor:
        """A tensor of this thread of the given shape, dtype and device of ``like``."""
        store = self._local.__dict__.setdefault("arrays", {})
        count = math.prod(shape)
        held = store.get(name)
        if held is None or held.numel() < count:
            held = torch.empty(count, dtype=like.dtype, device=like.device)
            store[name] = held
        return held[:count].view(shape)


def _buffer(name: str, shape: tuple, like: torch.Tensor, store: Buffers | None):
    """``store.get(...)``, or None without a store (autograd)."""
    return None if store is None else store.get(name, shape, like)


def _rotate(C, S, c, s, outC, outS):
    """(C + iS)·(c + is) elementwise, into outC, outS when given (else new tensors)."""
    if outC is None:
        return C * c - S * s, S * c + C * s
    torch.mul(C, c, out=outC).addcmul_(S, s, value=-1)
    torch.mul(S, c, out=outS).addcmul_(C, s)
    return outC, outS


def tables(x: torch.Tensor, K: int, store: Buffers | None) -> torch.Tensor:
    """cos kψ, sin kψ for k < K and ψ = (φ, θ) at tokens x (B, 3, b): shape (B, 2, 2, K, b).

    Rows n … 2n − 2 are rows 1 … n − 1 times row n − 1 (e^{ikψ}e^{i(n−1)ψ}), so the rows
    double at each step with no other multiplier; row k carries ≈ log₂ k roundings of the
    first. At a pole (x₁ = x₂ = 0) the azimuth is taken as 0 (every term of order m ≥ 1
    carries sin^m θ = 0 there, so the sums do not depend on it)."""
    x1, x2, z = x[:, 0], x[:, 1], x[:, 2]
    s = torch.sqrt(x1 * x1 + x2 * x2)
    pole = s == 0
    safe = torch.where(pole, 1.0, s)
    c = torch.stack([torch.where(pole, 1.0, x1 / safe), z], dim=1)  # (B, 2, b)
    s = torch.stack([x2 / safe, s], dim=1)
    out = _buffer("tables", (x.shape[0], 2, 2, K, x.shape[-1]), x, store)
    if out is None:  # autograd: built by concatenation
        C, S = torch.stack([torch.ones_like(c), c], -2), torch.stack([torch.zeros_like(s), s], -2)
        while C.shape[-2] < K:
            n = C.shape[-2]
            nC, nS = _rotate(C[..., 1:n, :], S[..., 1:n, :], C[..., n - 1 : n, :],
                             S[..., n - 1 : n, :], None, None)  # fmt: skip
            C, S = torch.cat([C, nC], -2), torch.cat([S, nS], -2)
        return torch.stack([C[..., :K, :], S[..., :K, :]], dim=1)
    C, S = out[:, 0], out[:, 1]
    C[..., 0, :] = 1
    S[..., 0, :] = 0
    if K > 1:
        C[..., 1, :] = c
        S[..., 1, :] = s
    n = 2
    while n < K:
        top = min(2 * n - 1, K)
        _rotate(C[..., 1 : top - n + 1, :], S[..., 1 : top - n + 1, :], C[..., n - 1 : n, :],
                S[..., n - 1 : n, :], C[..., n:top, :], S[..., n:top, :])  # fmt: skip
        n = top
    return out


def pairwise_sum(t: torch.Tensor) -> torch.Tensor:
    """Σ over the first dimension by halves (a tree): rounding grows like log₂ of its length,
    not like the length (a running sum of 2000 × (1/2000) is 1 − 5.5e-14)."""
    while t.shape[0] > 1:
        half = t.shape[0] // 2
        paired = t[:half] + t[half : 2 * half]
        t = torch.cat([paired, t[2 * half :]]) if t.shape[0] % 2 else paired
    return t[0]


def _chunked(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Σ_j left[..., r, j] right[..., k, j] → (B, r, k), tokens j in chunks of :data:`CHUNK`
    (left: (B, r, b) contiguous, right: (B, k, b) any strides), summed pairwise."""
    b = left.shape[-1]
    chunk = min(CHUNK, b)
    pad = -b % chunk
    if pad:
        left = torch.nn.functional.pad(left, (0, pad))
        right = torch.nn.functional.pad(right, (0, pad))
    count = left.shape[-1] // chunk
    left = left.unflatten(-1, (count, chunk)).transpose(1, 2)  # (B, count, r, chunk)
    right = right.unflatten(-1, (count, chunk)).permute(0, 2, 3, 1)  # (B, count, chunk, k)
    return pairwise_sum((left @ right).movedim(1, 0))


def moments(x: torch.Tensor, w: torch.Tensor, L: int, store: Buffers | None):
    """Pass 1 on one block: the channel-0 moments at degree L + 1 (module notes).

    x: (B, 3, b), w: (B, 1, b). Returns E of shape (B, 2, ⌊(L + 1)/2⌋ + 1, L + 2) (even
    orders, cos kθ for k ≤ L + 1) and O of shape (B, 2, ⌈(L + 1)/2⌉, L + 1) (odd orders,
    sin kθ for 1 ≤ k ≤ L + 1)."""
    K = L + 2
    t = tables(x, K, store)
    parts = []
    for group, polar in ((0, t[:, 0, 1]), (1, t[:, 1, 1, 1:])):
        azimuth = t[:, :, 0, group::2]  # (B, 2, rows, b)
        buffer = _buffer(f"weighted{group}", azimuth.shape, x, store)
        if buffer is None:
            weighted = azimuth * w.unsqueeze(1)
        else:
            weighted = torch.mul(azimuth, w.unsqueeze(1), out=buffer)
        parts.append(_chunked(weighted.flatten(1, 2), polar).unflatten(1, (2, -1)))
    return parts[0], parts[1]


def channel_moments(E: torch.Tensor, O: torch.Tensor, L: int):
    """The moments of the four channels (w, w x₁, w x₂, w x₃) at degree L from the channel-0
    moments at degree L + 1 (:func:`moments`); exact identities (module notes).

    Returns (B, 4, 2, ⌊L/2⌋ + 1, L + 1) (even orders, k ≤ L) and (B, 4, 2, ⌈L/2⌉, L)
    (odd orders, 1 ≤ k ≤ L)."""
    B = E.shape[0]
    K = L + 2
    # F[s, m, k], m = 0 … L + 1, k = 0 … L + 1 (odd orders: sin 0θ = 0 in column 0).
    F = E.new_zeros(B, 2, K, K)
    F[:, :, 0::2] = E
    F[:, :, 1::2, 1:] = O
    parity = torch.ones(K, dtype=E.dtype, device=E.device)
    parity[1::2] = -1  # +1 where the order's polar type is cos, −1 where it is sin
    up = F[..., 1 : L + 2]  # F[m, k + 1], k = 0 … L
    down = torch.cat([parity[:, None] * F[..., 1:2], F[..., :L]], -1)  # F[m, k − 1]
    ch3 = (up + down)[:, :, : L + 1] / 2
    U = -parity[:, None] * (up - down) / 2  # sin θ · (type of m ± 1), signed; m = 0 … L + 1
    reflect = torch.tensor([1.0, -1.0], dtype=E.dtype, device=E.device)[:, None, None]
    Up = U[:, :, 1 : L + 2]  # U[m + 1], m = 0 … L
    Um = torch.cat([reflect * U[:, :, 1:2], U[:, :, :L]], 2)  # U[m − 1]; cos(−φ), sin(−φ)
    ch1 = (Up + Um) / 2
    ch2 = torch.stack([Up[:, 1] - Um[:, 1], Um[:, 0] - Up[:, 0]], 1) / 2
    ch0 = F[:, :, : L + 1, : L + 1]
    M = torch.stack([ch0, ch1, ch2, ch3], 1)  # (B, 4, 2, L + 1, L + 1)
    return M[:, :, :, 0::2], M[:, :, :, 1::2, 1:]


def synthesis(x: torch.Tensor, Ge: torch.Tensor, Go: torch.Tensor, L: int, store: Buffers | None):
    """Pass 2 on one block: the four sums S^{(c)} at the tokens x (B, 3, b), shape (B, 4, b).

    Ge: (B, 8·(⌊L/2⌋ + 1), L + 1), rows (c, s, m even), columns cos kθ; Go:
    (B, 8·⌈L/2⌉, L), rows (c, s, m odd), columns sin kθ (k ≥ 1)."""
    t = tables(x, L + 1, store)
    B, b = x.shape[0], x.shape[-1]
    out = None
    for group, G, polar in ((0, Ge, t[:, 0, 1]), (1, Go, t[:, 1, 1, 1:])):
        azimuth = t[:, :, 0, group::2]  # (B, 2, rows, b)
        buffer = _buffer(f"product{group}", (B, G.shape[1], b), x, store)
        if buffer is None:
            product = G @ polar
            part = (product.unflatten(1, (4, 2, -1)) * azimuth.unsqueeze(1)).sum((2, 3))
        else:
            product = torch.matmul(G, polar, out=buffer).unflatten(1, (4, 2, -1))
            part = product.mul_(azimuth.unsqueeze(1)).sum((2, 3))
        out = part if out is None else out + part
    return out


@contextlib.contextmanager
def previous():
    """``harmonics.sphere_sums`` as at e5890c2: the passes above, both passes in blocks of
    BLOCK_TOKENS, the calling thread left at torch's thread count."""
    saved = harmonics.passes, harmonics.SYNTHESIS_TOKENS, harmonics.sums_on_workers, harmonics._sums
    harmonics.passes = sys.modules[__name__]
    harmonics.SYNTHESIS_TOKENS = harmonics.BLOCK_TOKENS
    harmonics.sums_on_workers = _sums_at_torch_threads
    harmonics._sums = _sums
    try:
        yield
    finally:
        (harmonics.passes, harmonics.SYNTHESIS_TOKENS, harmonics.sums_on_workers,
         harmonics._sums) = saved  # fmt: skip


def _sums(tokens, weights, L: int, k_even, k_odd, workers: int) -> torch.Tensor:
    """``harmonics._sums`` as at e5890c2: the two passes over blocks, each computing its
    tables' first rows from the tokens."""
    grad = torch.is_grad_enabled() and (tokens.requires_grad or weights.requires_grad)
    rows = max(harmonics.BLOCK_MIN, harmonics.BLOCK_TOKENS // tokens.shape[0])
    store = None if grad else Buffers()
    parts = harmonics._blocks(lambda x, w: moments(x, w, L, store), tokens, weights,
                              grad=grad, rows=rows, workers=workers)  # fmt: skip
    E = pairwise_sum(torch.stack([p[0] for p in parts]))
    O = pairwise_sum(torch.stack([p[1] for p in parts]))
    me, mo = channel_moments(E, O, L)  # (B, 4, 2, orders, k)
    ge = torch.einsum("bmkj,bcsmj->bcsmk", k_even, me).flatten(1, 3)
    go = torch.einsum("bmkj,bcsmj->bcsmk", k_odd, mo).flatten(1, 3)
    rows = max(harmonics.BLOCK_MIN, harmonics.SYNTHESIS_TOKENS // tokens.shape[0])
    out = harmonics._blocks(lambda x: synthesis(x, ge, go, L, store), tokens, grad=grad,
                            rows=rows, workers=workers)  # fmt: skip
    return torch.cat(out, dim=-1).transpose(-1, -2)


def _sums_at_torch_threads(sums, points, weights, *args):
    """``tiled.sums_on_workers`` as at e5890c2: the calling thread kept at torch's thread
    count (no ``calling_thread_alone``)."""
    return sums(points, weights, *args, torch.get_num_threads())
