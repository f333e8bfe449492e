"""Shared helpers of the benchmark scripts: timing with warm-up, peak memory, tables."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import statistics
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("KEOPS_CACHE_FOLDER", str(ROOT / "build" / "keops"))


class PeakRSS:
    """Peak resident memory above the baseline during a block, sampled every 2 ms (bytes)."""

    def __enter__(self):
        gc.collect()
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        self.extra = self.peak - self.base


@contextlib.contextmanager
def torch_threads(threads: int):
    """Run a block at ``threads`` torch threads, restoring the previous count after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def timed(fn, repeat: int = 3, budget_s: float = 30.0):
    """Median wall time of ``fn()`` over ``repeat`` runs after one warm-up run.

    The warm-up run (compilation, allocator growth) is the one whose extra peak memory is
    reported. Stops repeating early when one run exceeds ``budget_s / repeat``. Returns
    (median seconds, extra peak memory in bytes, last result).
    """
    with PeakRSS() as mem:
        result = fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if times[-1] * repeat > budget_s:
            break
    return statistics.median(times), mem.extra, result


def print_table(rows: list[dict], columns: list[str]) -> None:
    """Print rows as a Markdown table (pasted into the issue notes)."""
    print_header(columns)
    for row in rows:
        print_row(row, columns)


def print_header(columns: list[str]) -> None:
    """The header of a Markdown table (then :func:`print_row` for each row as it is ready)."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|", flush=True)


def print_row(row: dict, columns: list[str]) -> None:
    """One row of a Markdown table, flushed (long benchmarks show rows as they finish)."""
    print("| " + " | ".join(_fmt(row.get(c, "")) for c in columns) + " |", flush=True)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def isotropic_field(kind: str, beta: float, d: int):
    """SA (Softmax) or USA (Exponential) attention with A = βI, V = I in R^d (float64): the
    isotropic kernel e^{β⟨x, y⟩} of the sphere engines (the studies' own builder)."""
    from tpde.experiments.common.kernels import kernel_field

    return kernel_field(kind.lower(), beta, d)


def sampled_error(kind: str, beta: float, mu, out: torch.Tensor, count: int = 64) -> float:
    """Largest error on ``count`` random tokens of ``mu`` against their dense rows (float64,
    8 rows of N kernel values at a time), relative to the largest entry of those rows."""
    import math

    rows = torch.randperm(mu.n, generator=torch.Generator().manual_seed(1))[:count]
    x, w = mu.points, mu.weights
    refs = []
    for block in rows.split(8):
        kernel = torch.exp(beta * (x[block] @ x.T - 1)) * w  # e^{−β}-scaled, (8, N)
        ref = kernel @ x
        refs.append(ref / kernel.sum(-1, keepdim=True) if kind == "SA" else math.exp(beta) * ref)
    ref = torch.cat(refs)
    return float((out[rows] - ref).abs().max() / ref.abs().max())
