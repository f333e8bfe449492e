"""Tiled kernel sums: Σ_j φ(q_i·k_j) v_j in cache-sized tiles, forward and backward.

    out_i = Σ_j φ(q_i·k_j) v_j,   φ = σ ("sigmoid"), exp ("exp") or the identity ("linear"),

q (B, n, e), k (B, m, e), v (B, m, f); a key bias enters as one more coordinate of q and k
(:func:`~tpde._engines.torch_engines.augment_with_bias`).

Why not a fused kernel: SDPA's flash kernel always normalises, and torch's flex_attention
(which takes a score modifier such as log σ) compiles on the CPU for inference only,
without its log-normaliser, in 15–70 s, and then ran 4–6× slower than SDPA
(torch 2.13, n = 10⁴, d = 16). This engine does in plain torch what such a kernel does:

- Tiles of at most ``TILE`` scores (256 queries × 1024 keys, 1 MB in float32) are written
  in place into one buffer per thread: score GEMM, φ in place, accumulating GEMM. On one
  Zen 3 core this costs 3.5–4 ns per score where SDPA's flash kernel spends 2.6–2.9 ns, and
  the chunked engine's 64 MB row blocks 17 ns (they leave the cache and allocate). Tiles of
  64 × 2048 or 128 × 512 were 5–20 % slower, 512 × 1024 no faster.
- Row stripes are spread over torch's threads as one parallel region: Python threads (torch
  operations release the GIL), each running torch single-threaded, pulling stripes in turn.
  Letting each operation use torch's threads instead pays one barrier per operation: with
  other processes on a 2-core machine, 3–7 s against 0.8 s at n = 10⁴, d = 16.
- The backward pass recomputes the tiles (no n × m storage, as flash attention does):
  with P = φ(s) and D = φ'(s) ⊙ (g vᵀ),  ∂v = Pᵀg,  ∂q = D k,  ∂k = Dᵀq;
  the key-side sums go to per-thread accumulators, added at the end.

Memory beyond inputs and output: O(threads · (TILE + m(e + f))); first-order gradients.
"""

from __future__ import annotations

import contextlib
import math
import threading

import torch
from torch.autograd.function import once_differentiable

from tpde._engines.torch_engines import augment_with_bias

# Scores per tile, and keys per tile (the rows follow: TILE // keys).
TILE = 2**18
TILE_KEYS = 1024
# Below this many scores (~3 ms on one core) the calling thread does the whole sum:
# starting threads costs 0.1–1 ms.
PARALLEL_SCORES = 2**20


def _phi_(kernel: str, scores: torch.Tensor) -> torch.Tensor:
    """φ(scores) in place."""
    if kernel == "sigmoid":
        return scores.sigmoid_()
    return scores.exp_() if kernel == "exp" else scores


def _phi_prime_(kernel: str, values: torch.Tensor) -> torch.Tensor | None:
    """φ' from the values P = φ(s), in place: σ' = P − P², exp' = P itself; None for the
    identity (φ' = 1)."""
    if kernel == "sigmoid":
        return values.addcmul_(values, values, value=-1)
    return values if kernel == "exp" else None


def _tiles(n: int, m: int) -> tuple[int, int]:
    """(rows, keys) of one tile: TILE_KEYS keys (or all m), rows to fill TILE scores."""
    keys = max(1, min(m, TILE_KEYS))
    return max(1, min(n, TILE // keys)), keys


def _workers(q: torch.Tensor, m: int, stripes: int) -> int:
    """Threads for a sum of B·n·m scores: torch's thread count on the CPU, else one."""
    if q.device.type != "cpu" or q.shape[0] * q.shape[1] * m < PARALLEL_SCORES:
        return 1
    return max(1, min(torch.get_num_threads(), stripes))


class _Jobs:
    """A shared iterator over job indices 0..count−1, safe to pull from several threads."""

    def __init__(self, count: int):
        self._next, self._count, self._lock = 0, count, threading.Lock()

    def __iter__(self):
        while True:
            with self._lock:
                index, self._next = self._next, self._next + 1
            if index >= self._count:
                return
            yield index


def _single_threaded(work, jobs):
    """work(jobs) with torch on one thread (torch.set_num_threads acts on the calling
    thread's OpenMP and MKL settings, and on the default that new threads start from)."""
    torch.get_num_threads()  # settle torch's lazy per-thread setup before overriding it
    torch.set_num_threads(1)
    with torch.no_grad():
        return work(jobs)


@contextlib.contextmanager
def calling_thread_alone():
    """torch single-threaded on the calling thread within the block, its thread count
    restored after. For work that spreads over :func:`run_threads` itself: torch's OpenMP
    threads, once woken by a parallel operation of the calling thread, spin for a while
    after it, on the cores that the Python threads need (with 2 threads on 2 cores, the
    harmonics engine took 1.5–1.6× the CPU time of one thread at 10⁵ tokens, 0.9–1.04× with
    this, busy 2-core machine, 7 Dec 2026)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def sums_on_workers(sums, points: torch.Tensor, weights: torch.Tensor, *args):
    """``sums(points, weights, *args, workers)`` with ``workers`` torch's thread count: for
    a CPU evaluation autograd does not record, under :func:`calling_thread_alone` (the
    blocks go to the worker threads; nothing else spins); under autograd (blocks in
    sequence) or off the CPU, with torch's threads as they are."""
    workers = torch.get_num_threads()
    grad = torch.is_grad_enabled() and (points.requires_grad or weights.requires_grad)
    if grad or points.device.type != "cpu":
        return sums(points, weights, *args, workers)
    with calling_thread_alone():
        return sums(points, weights, *args, workers)


def run_threads(work, count: int, workers: int) -> list:
    """``work(jobs)`` on ``workers`` threads sharing one iterator over range(count).

    Every thread, the calling one included when ``workers`` is 1, runs torch
    single-threaded: the threads form one parallel region without nested parallelism.
    The calling thread's torch thread count is restored after
    (:func:`calling_thread_alone`). Returns each thread's return value; re-raises a
    thread's exception.
    """
    jobs, results, errors = _Jobs(count), [None] * workers, []

    def run(slot):
        try:
            results[slot] = _single_threaded(work, jobs)
        except BaseException as err:  # handed to the calling thread below
            errors.append(err)

    with calling_thread_alone():
        if workers == 1:
            return [_single_threaded(work, jobs)]
        threads = [threading.Thread(target=run, args=(slot,)) for slot in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return results


def _stripe_jobs(q, m):
    """Tile shape and the (batch, first row) of every row stripe of the (B, n, ·) queries."""
    rows, keys = _tiles(q.shape[1], m)
    per_batch = math.ceil(q.shape[1] / rows)
    starts = [(b, i * rows) for b in range(q.shape[0]) for i in range(per_batch)]
    return rows, keys, starts


def _forward(q, k, v, kernel: str) -> torch.Tensor:
    """out = φ(q kᵀ) v over tiles; q (B, n, e), k (B, m, e), v (B, m, f), contiguous."""
    m = k.shape[1]
    rows, keys, starts = _stripe_jobs(q, m)
    out = torch.zeros((*q.shape[:2], v.shape[-1]), dtype=q.dtype, device=q.device)

    def work(jobs):
        buffer = torch.empty(rows * keys, dtype=q.dtype, device=q.device)
        for job in jobs:
            b, start = starts[job]
            q_rows, out_rows = q[b, start : start + rows], out[b, start : start + rows]
            for c in range(0, m, keys):
                k_tile, v_tile = k[b, c : c + keys], v[b, c : c + keys]
                scores = buffer[: q_rows.shape[0] * k_tile.shape[0]].view(q_rows.shape[0], -1)
                _phi_(kernel, torch.mm(q_rows, k_tile.T, out=scores))
                out_rows.addmm_(scores, v_tile)

    run_threads(work, len(starts), _workers(q, m, len(starts)))
    return out


def _backward(q, k, v, grad, kernel: str, needs):
    """(∂q, ∂k, ∂v) of Σ_i g_i·out_i over tiles; ``needs``: which of the three to compute.

    ∂q rows belong to one stripe; ∂k and ∂v rows are sums over all stripes, so each thread
    accumulates its own (B, m, ·) copy and the copies are added at the end.
    """
    m = k.shape[1]
    rows, keys, starts = _stripe_jobs(q, m)
    need_q, need_k, need_v = needs
    need_d = need_q or need_k
    grad_q = torch.zeros_like(q) if need_q else None

    def work(jobs):
        scores = torch.empty(rows * keys, dtype=q.dtype, device=q.device)
        products = torch.empty_like(scores) if need_d else None
        grad_k = torch.zeros_like(k) if need_k else None
        grad_v = torch.zeros_like(v) if need_v else None
        for job in jobs:
            b, start = starts[job]
            q_rows, g_rows = q[b, start : start + rows], grad[b, start : start + rows]
            for c in range(0, m, keys):
                k_tile, v_tile = k[b, c : c + keys], v[b, c : c + keys]
                shape = (q_rows.shape[0], k_tile.shape[0])
                p = scores[: math.prod(shape)].view(shape)
                _phi_(kernel, torch.mm(q_rows, k_tile.T, out=p))
                if need_v:
                    grad_v[b, c : c + keys].addmm_(p.T, g_rows)
                if not need_d:
                    continue
                d = torch.mm(g_rows, v_tile.T, out=products[: math.prod(shape)].view(shape))
                prime = _phi_prime_(kernel, p)
                if prime is not None:
                    d.mul_(prime)
                if need_q:
                    grad_q[b, start : start + rows].addmm_(d, k_tile)
                if need_k:
                    grad_k[b, c : c + keys].addmm_(d.T, q_rows)
        return grad_k, grad_v

    partial = run_threads(work, len(starts), _workers(q, m, len(starts)))
    grad_k = sum(p[0] for p in partial) if need_k else None
    grad_v = sum(p[1] for p in partial) if need_v else None
    return grad_q, grad_k, grad_v


class _TiledKernelSum(torch.autograd.Function):
    """Σ_j φ(q_i·k_j) v_j with the tiled forward and backward above; inputs (B, ·, ·)."""

    @staticmethod
    def forward(ctx, q, k, v, kernel):
        ctx.kernel = kernel
        ctx.save_for_backward(q, k, v)
        return _forward(q, k, v, kernel)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        grads = _backward(q, k, v, grad.contiguous(), ctx.kernel, ctx.needs_input_grad[:3])
        return (*grads, None)


def kernel_sum_tiled(q, k, v, key_bias=None, kernel: str = "sigmoid"):
    """Σ_j φ(q_i·k_j + b_j) v_j on cache-sized tiles, threads as one parallel region.

    Parameters
    ----------
    q : (..., n, e);  k : (..., m, e);  v : (..., m, f);  key_bias : (..., m) or None
        Equal batch shapes (``tpde._engines.kernel_sum`` broadcasts them).
    kernel : "sigmoid", "exp" or "linear".

    Returns
    -------
    (..., n, f) tensor; first-order gradients in q, k, v and the bias.
    """
    q, k = augment_with_bias(q, k, key_bias)
    batch = q.shape[:-2]
    q3, k3, v3 = (t.reshape(-1, *t.shape[-2:]).contiguous() for t in (q, k, v))
    out = _TiledKernelSum.apply(q3, k3, v3, kernel)
    return out.reshape(*batch, *out.shape[-2:])
