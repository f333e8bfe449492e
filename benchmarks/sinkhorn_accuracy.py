"""Sinkhorn divergence: one solve (ε-scaling 0.9, ``rtol=None``) vs the default contract.

    python benchmarks/sinkhorn_accuracy.py            # n = 200: d = 2 (blur 0.5–0.05), d = 5
    python benchmarks/sinkhorn_accuracy.py --quick    # n = 100, d = 2, blur 0.5 and 0.2
    python benchmarks/sinkhorn_accuracy.py --kinds weights   # the random-weights cases only

Cases: "shift" (N(0, I) against N(0.5, 0.49 I) samples), "same" (two samples of N(0, I)),
"weights" (shift, random weights on μ). Reference: the converged entropic OT of
tests/metrics/sinkhorn_reference.py (L-BFGS on the semi-dual, float64; agrees with POT's
stabilised Sinkhorn to 1e-9), three solves. Columns: the relative error of one solve (the
default before issue 28, now ``rtol=None``) and its time; the default call (the contract at
rtol 1e-3, :func:`tpde.metrics.sinkhorn_solve`): its relative error, its
relative error estimate, the last ε-scaling, the number of solves, its time and the time
ratio against the old default measured in this run (dense engine, float64, one thread).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from _common import ROOT, print_header, print_row

sys.path.insert(0, str(ROOT))  # the reference lives with the tests

from tests.metrics.sinkhorn_reference import divergence
from tpde.measures import Empirical
from tpde.metrics import sinkhorn_divergence, sinkhorn_solve

F64 = torch.float64
RTOL = 1e-3


def clouds(kind: str, n: int, d: int, generator):
    x = torch.randn(n, d, generator=generator, dtype=F64)
    same = kind == "same"
    y = torch.randn(n, d, generator=generator, dtype=F64) * (1 if same else 0.7) + (
        0 if same else 0.5
    )
    a = torch.full((n,), 1 / n, dtype=F64)
    if kind == "weights":
        a = torch.rand(n, generator=generator, dtype=F64) + 0.1
        a = a / a.sum()
    return Empirical(x, a), Empirical(y)


def _seconds(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def row(kind: str, n: int, d: int, blur: float, generator) -> dict:
    mu, nu = clouds(kind, n, d, generator)
    ref = divergence(mu.points, mu.weights, nu.points, nu.weights, blur)
    sinkhorn_divergence(mu, nu, blur, engine="dense", rtol=None)  # warm-up
    old_s, old = _seconds(lambda: sinkhorn_divergence(mu, nu, blur, engine="dense", rtol=None))
    new_s, res = _seconds(lambda: sinkhorn_solve(mu, nu, blur, rtol=RTOL, engine="dense"))
    return {
        "d": d,
        "blur": blur,
        "case": kind,
        "S": ref,
        "old err": (float(old) - ref) / ref,
        "old s": old_s,
        "new err": (float(res.value) - ref) / ref,
        "estimate": float(res.relative_error_estimate),
        "scaling": res.scaling,
        "solves": res.solves,
        "status": res.status,
        "new s": new_s,
        "×old": new_s / old_s,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="n = 100, d = 2, blur 0.5 and 0.2")
    parser.add_argument(
        "--kinds", default="shift,same,weights", help="comma-separated among shift, same, weights"
    )
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}; rtol {RTOL:g}")
    if args.quick:
        grid = [(100, 2, blur) for blur in (0.5, 0.2)]
    else:
        grid = [(200, 2, blur) for blur in (0.5, 0.2, 0.1, 0.05)] + [(200, 5, 0.2), (200, 5, 0.1)]
    columns = ["d", "blur", "case", "S", "old err", "old s", "new err", "estimate", "scaling"]
    columns += ["solves", "status", "new s", "×old"]
    print_header(columns)  # rows print as they finish: the full grid takes tens of minutes
    for n, d, blur in grid:
        for kind in kinds:
            print_row(row(kind, n, d, blur, generator), columns)


if __name__ == "__main__":
    main()
