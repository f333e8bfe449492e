"""The spectral engine on the circle against SDPA: time, ratio and accuracy in one run.

    python benchmarks/spectral.py            # SDPA at N = 10⁴, 10⁵; the spectral engine to 10⁶
    python benchmarks/spectral.py --quick    # SDPA at N = 10³, 10⁴ (make bench)
    python benchmarks/spectral.py --threads  # circle_sums on 1 and 2 threads, N = 10⁵, 10⁶:
                                             # the engine against its path before issue 35's
                                             # thread fix, interleaved, wall and CPU time

The field: softmax (SA) and unnormalised exponential (USA) attention with A = βI, V = I,
tokens drawn uniformly on the circle S¹, float64, one velocity evaluation at the tokens
(``field.velocity(mu, engine=...)``). The spectral engine sums the Fourier series of
e^{β cos(θ − φ)} (:mod:`tpde._engines.spectral`) in O(N·K); SDPA (SA) and the tiled kernel
sum (USA; SDPA always normalises) sum the N² pairs. Rows: seconds (median of 3 after a
warm-up; one run where a run is long), torch threads, the modes K, ×spectral (the pairwise
engine's time over the spectral engine's, same run) and the largest error relative to the
largest entry of the pairwise engine's output. At N = 10⁶ no pairwise engine finishes
(10¹² pairs): the error is taken on 64 tokens drawn at random, against their dense rows
(64 × 10⁶ kernel values in float64).

Measured on the shared 2-core machine (float64, other jobs at load 5–10: the seconds move
with the load, the ratios much less), ``--betas 5`` at full size:

    N = 10⁴:  SA  spectral 0.024 s, SDPA 0.96 s (×40);   USA spectral 0.012 s, tiled 1.09 s (×91)
    N = 10⁵:  SA  spectral 0.13 s,  SDPA 82.7 s (×634);  USA spectral 0.088 s, tiled 104 s (×1190)
    N = 10⁶:  SA  0.83 s (1 thread), 1.22 s (2 threads); USA 0.53 s, 0.90 s (K = 29)
    max relative error: 1e-14 (10⁴), 3–5e-14 (10⁵), 7e-14 SA / 1.2e-13 USA (10⁶, sampled rows)

``--quick`` (β = 1, 5, 20; load 9–10): ×38–79 against SDPA and ×60–148 against tiled at
N = 10⁴; N = 10⁶ in 0.8–3.1 s; errors ≤ 7.5e-13 (β = 20, N = 10⁶). With a second thread on
a machine whose other core is busy the blocks wait for each other: no gain there.

``--threads`` (issue 35): ``circle_sums`` of one cloud (weights 1/N) against its path before
the thread fix (benchmarks/_spectral_before.py, main at 0b9e219: the calling thread kept
torch's thread count between the passes, the blocks built fresh tables), N = 10⁵, 10⁶,
β = 2, 5, 8 (the circle-pde study's range), 1 and 2 torch threads, no autograd, the two
alternating, minimum over 9 (10⁵) or 3 (10⁶) rounds of the wall and the CPU time (the
process's, all threads); outputs equal to the bit (difference 0) in every case. CPU seconds
and their ratio to one thread, two runs at 14:59 and 15:00 UTC, 7 Dec 2026, ``uptime`` load
6.1–6.7 on 2 cores:

    N    β  K   | engine: 1 thr   2 thr   ratio        | before: 1 thr   2 thr   ratio
    10⁵  2  21  |         0.012   0.016   1.31, 1.18   |         0.011   0.039   3.45, 2.46
    10⁵  5  28  |         0.013   0.017   1.30, 1.31   |         0.012   0.040   3.24, 3.04
    10⁵  8  33  |         0.015   0.020   1.29, 1.43   |         0.014   0.045   3.18, 3.47
    10⁶  2  22  |         0.121   0.121   1.00, 0.99   |         0.130   0.184   1.42, 1.15
    10⁶  5  29  |         0.148   0.137   0.93, 1.15   |         0.129   0.180   1.40, 1.21
    10⁶  8  34  |         0.135   0.136   1.01, 1.23   |         0.127   0.170   1.34, 1.37

(first run's seconds, both runs' ratios). Wall at 2 threads, first run: 0.016–0.020 s
against 0.039–0.068 s at 10⁵, 0.17–0.28 s against 0.22–0.35 s at 10⁶. The two causes, each
removed by one change: the calling thread alone (``tiled.calling_thread_alone``) took the
ratio at 10⁵ from 3.2–4.1 to 2.0–2.3 (two runs at load 5.9–7.5, 14:52–14:57 UTC, before the
buffers); the rest was page faults in the blocks' Python threads (``getrusage``: 10⁴ minor
faults and 5–25 ms of system time per evaluation of 10⁵ tokens on 2 threads, none on one;
1.3·10³ with the tables and products in per-thread arrays). On one thread nothing changes.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
from _common import (
    isotropic_field,
    print_header,
    print_row,
    sampled_error,
    timed,
    torch_threads,
)
from _spectral_before import circle_sums_before

import tpde._engines.spectral as spectral
from tpde._engines.spectral import truncation
from tpde.measures import Empirical

COLUMNS = ["field", "N", "β", "K", "engine", "threads", "seconds", "×spectral", "max rel. error"]


def circle(n: int, seed: int = 0) -> Empirical:
    generator = torch.Generator().manual_seed(seed)
    angles = 2 * math.pi * torch.rand(n, generator=generator, dtype=torch.float64)
    return Empirical(torch.stack([angles.cos(), angles.sin()], -1))


def field(kind: str, beta: float):
    return isotropic_field(kind, beta, 2)


THREAD_COLUMNS = ["N", "β", "K", "threads", "path", "wall s", "CPU s", "CPU ÷ 1 thread"]


def _min_times(paths: dict, args, repeats: int) -> tuple[dict, dict]:
    """Minimum wall and CPU seconds (the process's, all threads) of each path over
    ``repeats`` rounds, their order alternating per round; and each path's output."""
    best, outs = {name: [math.inf, math.inf] for name in paths}, {}
    for r in range(repeats + 1):  # round 0 warms up
        for name in list(paths)[:: 1 if r % 2 else -1]:
            wall, cpu = time.perf_counter(), time.process_time()
            outs[name] = paths[name](*args)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if r:
                best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
    return best, outs


def thread_rows(betas) -> None:
    """``--threads``: circle_sums (weights 1/N) against :func:`_before` on 1 and 2 torch
    threads, minimum over 9 (10⁵) or 3 (10⁶) alternating rounds; the load before and after;
    the largest difference of all outputs from the first, relative to its largest sum."""
    paths = {"engine": spectral.circle_sums, "before": circle_sums_before}
    print("load (1, 5, 15 min):", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print_header(THREAD_COLUMNS)
    for n in (100_000, 1_000_000):
        points = circle(n).points
        weights = torch.full((n,), 1 / n, dtype=torch.float64)
        for beta in betas:
            K, reference, worst, one = truncation(beta, torch.float64, 1 / n), None, 0.0, {}
            for threads in (1, 2):
                with torch_threads(threads), torch.no_grad():
                    best, outs = _min_times(paths, (points, weights, beta), 9 if n < 10**6 else 3)
                for name, (wall, cpu) in best.items():
                    one.setdefault(name, cpu)
                    row = {"N": n, "β": beta, "K": K, "threads": threads, "path": name}
                    row.update({"wall s": wall, "CPU s": cpu, "CPU ÷ 1 thread": cpu / one[name]})
                    print_row(row, THREAD_COLUMNS)
                    reference = outs[name] if reference is None else reference
                    difference = (outs[name] - reference).abs().max() / reference.abs().max()
                    worst = max(worst, float(difference))
            print(f"N = {n}, β = {beta}: outputs within {worst:.2g} of each other")
    print("load (1, 5, 15 min):", " ".join(f"{x:.1f}" for x in os.getloadavg()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="SDPA at N = 10³, 10⁴")
    parser.add_argument("--betas", type=float, nargs="+", default=[1.0, 5.0, 20.0])
    parser.add_argument("--threads", action="store_true", help="1 vs 2 threads, N = 10⁵, 10⁶")
    args = parser.parse_args()
    if args.threads:
        return thread_rows(args.betas)
    sizes = (1_000, 10_000) if args.quick else (10_000, 100_000)
    print_header(COLUMNS)
    for kind in ("SA", "USA"):
        pairwise = "sdpa" if kind == "SA" else "tiled"
        for beta in args.betas:
            f = field(kind, beta)
            for n in sizes:
                torch.set_num_threads(1)
                mu = circle(n)
                K = truncation(beta, torch.float64, 1 / n)
                budget = 600.0 if n >= 100_000 else 30.0
                fast, _, out = timed(lambda f=f, mu=mu: f.velocity(mu, engine="spectral"))
                slow, _, ref = timed(
                    lambda f=f, mu=mu, e=pairwise: f.velocity(mu, engine=e), 3, budget
                )
                error = float((out - ref).abs().max() / ref.abs().max())
                row = {"field": kind, "N": n, "β": beta, "K": K, "threads": 1}
                print_row({**row, "engine": "spectral", "seconds": fast}, COLUMNS)
                print_row(
                    {**row, "engine": pairwise, "seconds": slow, "×spectral": slow / fast,
                     "max rel. error": error},
                    COLUMNS,
                )  # fmt: skip
            mu = circle(1_000_000)
            K = truncation(beta, torch.float64, 1e-6)
            for threads in (1, 2):
                torch.set_num_threads(threads)
                seconds, _, out = timed(lambda f=f, mu=mu: f.velocity(mu, engine="spectral"))
                row = {"field": kind, "N": 1_000_000, "β": beta, "K": K, "threads": threads}
                error = sampled_error(kind, beta, mu, out) if threads == 1 else ""
                print_row(
                    {**row, "engine": "spectral", "seconds": seconds, "max rel. error": error},
                    COLUMNS,
                )
    torch.set_num_threads(1)


if __name__ == "__main__":
    main()
