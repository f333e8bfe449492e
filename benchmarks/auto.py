"""The default method "auto" against the fixed methods it replaces and the two it composes.

    python benchmarks/auto.py            # 3 dimensions × 3 seeds of rank rows, n = 1024 particles
    python benchmarks/auto.py --quick    # d = 3 only, n = 256

Part 1 — stiff Gaussian flows (issue 20). The contracting flow from Σ = 1e7·I (softmax with
A = I, V = −I, d = 2, to t = 1: Σ(1) = 0.5·I) and the rank-histogram rows with V = GᵀG
(MATH.md §6; Q ~ N(0, 1)/√d, K = −Q√d, G ~ N(0, 1), Σ₀ = I, t1 = 1000), each with "auto"
(the default), "dopri5", "rodas4" and "rk4" at the old default step (t1/100). Columns:
status, accepted (rejected) steps, the time auto switched, the largest error of the final
covariance against rodas4 at rtol 1e-10, the smallest eigenvalue of the final Σ, seconds,
and seconds against dopri5.

Part 2 — the price of the stiffness test on a smooth particle flow: a softmax cloud of n
tokens in d = 8 (A = QᵀQ/√d·0.1, V = I), "auto" against "dopri5" (the same steps: only the
test differs), alternating calls, one thread.
"""

# ruff: noqa: E402  (thread counts must be set before numpy and torch load)
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import time
import warnings

import torch
from _common import print_table, timed, torch_threads

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Empirical, Gaussian

F64 = torch.float64
METHODS = ("auto", "dopri5", "rodas4", "rk4")


def contracting():
    eye = torch.eye(2, dtype=F64)
    start = Gaussian(torch.zeros(2, dtype=F64), 1e7 * eye)
    return "Σ₀ = 1e7·I", Softmax.from_interaction(eye, -eye), start


def gram_row(d: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(d, d, generator=gen, dtype=F64)
    G = torch.randn(d, d, generator=gen, dtype=F64)
    field = Softmax(Q / d**0.5, -Q, G.mT @ G, scale=1.0)
    start = Gaussian(torch.zeros(d, dtype=F64), torch.eye(d, dtype=F64))
    return f"V = GᵀG d={d} seed={seed}", field, start


def run(field, start, t1, method):
    clock = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rk4's "stiff" stop is the row
        traj = integrate(field, start, t1, method=method)
    return traj, time.perf_counter() - clock


def stiff_rows(cases) -> list[dict]:
    rows = []
    for label, field, start, t1 in cases:
        reference = integrate(field, start, t1, method="rodas4", rtol=1e-10, atol=1e-12)
        seconds = {}
        for method in METHODS:
            traj, seconds[method] = run(field, start, t1, method)
            cov = traj.final.cov()
            rows.append(
                {
                    "flow": label,
                    "method": method,
                    "status": str(traj.status[()]),
                    "steps (rejected)": f"{traj.stats['n_steps']} ({traj.stats['n_rejected']})",
                    "switched at": traj.stats.get("switched_at") or "",
                    "error vs rodas4 1e-10": float((cov - reference.final.cov()).abs().max())
                    if traj.status == "completed"
                    else "",
                    "λ_min(Σ)": float(torch.linalg.eigvalsh(cov).min()),
                    "s": seconds[method],
                }
            )
        for row in rows[-len(METHODS) :]:
            row["× dopri5"] = seconds[row["method"]] / seconds["dopri5"]
    return rows


def overhead_rows(sizes) -> list[dict]:
    rows = []
    d = 8
    gen = torch.Generator().manual_seed(0)
    Q = torch.randn(d, d, generator=gen)
    field = Softmax.from_interaction(0.1 * Q.mT @ Q / d**0.5, torch.eye(d))
    for n in sizes:
        cloud = Empirical(torch.randn(n, d, generator=gen))
        auto_s, dopri_s = [], []
        for _ in range(3):  # alternating calls
            for method, store in (("auto", auto_s), ("dopri5", dopri_s)):
                call = lambda m=method, c=cloud: integrate(field, c, 1.0, method=m)  # noqa: E731
                seconds, _, traj = timed(call, repeat=1)
                store.append(seconds)
        rows.append(
            {
                "n": n,
                "steps": traj.stats["n_steps"],
                "auto s": min(auto_s),
                "dopri5 s": min(dopri_s),
                "auto / dopri5": min(auto_s) / min(dopri_s),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    dims, seeds = ((3,), (0,)) if quick else ((2, 3, 4), (0, 1, 2))
    label, field, start = contracting()
    cases = [(label, field, start, 1.0)]
    cases += [(*gram_row(d, s), 1000.0) for d in dims for s in seeds]
    with torch_threads(1):
        print_table(stiff_rows(cases), ["flow", "method", "status", "steps (rejected)",
                                        "switched at", "error vs rodas4 1e-10", "λ_min(Σ)",
                                        "s", "× dopri5"])  # fmt: skip
        print()
        print_table(overhead_rows((256,) if quick else (256, 1024)),
                    ["n", "steps", "auto s", "dopri5 s", "auto / dopri5"])  # fmt: skip


if __name__ == "__main__":
    main()
