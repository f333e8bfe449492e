"""Particle flows the explicit default struggles with: switching (hardmax) and stiff clouds.

    python benchmarks/stiff_particles.py           # both tables, the resolved reference too
    python benchmarks/stiff_particles.py --quick   # no resolved reference (minutes)

1. **Switching** (issue 36): softmax with A = −I, V = I on 10⁶·X (X: n × 2 standard normal,
   float64), t1 = 0.1. Scores of ~1e12 make attention a hardmax whose argmax switches: the
   velocity jumps, the default's rejected steps show errors ∝ h (tpde.flows.smoothness) and
   it stops with "max_steps" and the cause. Columns: the default's attempts, status, time
   reached and seconds; rk4 at the user's step (dt = t1/100, the default first step) and its
   seconds; the ratio default/rk4. Without --quick, at n·d = 32, a resolved run (dopri5,
   max_steps 10⁶: every switch resolved) and rk4's relative error against it: what the fixed
   step costs.
2. **Stiff** clouds beyond the dense Jacobian (n·d > 256): A = I/2, V = −diag(λ, 1, ½, ⅕),
   d = 4, t1 = 1: the default switches to rodas4 with GMRES stage solves
   (tpde.flows.systems.krylov). Columns: the default's steps, the switch time, its seconds and
   error against rk4 at hλ = 0.1 (the reference), dopri5's steps and seconds, rk4 at the
   user's step (t1/100: unstable where hλ > 2.8) and the ratio default/rk4.

Times: one run each, one thread, in this process (report the machine's load with them).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import torch
from _common import print_header, print_row

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

F64 = torch.float64


def _run(field, mu, t1, **options):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the stop's warning: the status says it
        traj = integrate(field, mu, t1, **options)
    return traj, time.perf_counter() - start


def switching_row(n: int, resolve: bool) -> dict:
    eye = torch.eye(2, dtype=F64)
    X = torch.randn(n, 2, generator=torch.Generator().manual_seed(0), dtype=F64) * 1e6
    field, mu, t1 = Softmax.from_interaction(-eye, eye), Empirical(X), 0.1
    default, seconds = _run(field, mu, t1)
    rk4, rk4_s = _run(field, mu, t1, method="rk4", dt=t1 / 100)
    row = {
        "n·d": 2 * n,
        "attempts": default.stats["n_steps"] + default.stats["n_rejected"],
        "status": str(default.status),
        "t reached": float(default.times[-1]),
        "default s": seconds,
        "rk4 s": rk4_s,
        "×rk4": seconds / rk4_s,
    }
    if resolve:
        exact, exact_s = _run(field, mu, t1, method="dopri5", max_steps=10**6)
        scale = float(exact.final.points.abs().max())
        row["resolved steps"] = exact.stats["n_steps"]
        row["resolved s"] = exact_s
        row["rk4 rel err"] = float((rk4.final.points - exact.final.points).abs().max()) / scale
    return row


def stiff_row(n: int, lam: float) -> dict:
    d, t1 = 4, 1.0
    X = torch.randn(n, d, generator=torch.Generator().manual_seed(0), dtype=F64)
    V = -torch.diag(torch.tensor([lam, 1.0, 0.5, 0.2], dtype=F64))
    field, mu = Softmax.from_interaction(0.5 * torch.eye(d, dtype=F64), V), Empirical(X)
    reference, _ = _run(field, mu, t1, method="rk4", dt=0.1 / lam)
    default, seconds = _run(field, mu, t1)
    dopri5, dopri5_s = _run(field, mu, t1, method="dopri5")
    rk4, rk4_s = _run(field, mu, t1, method="rk4", dt=t1 / 100)

    def error(traj):
        return float((traj.final.points - reference.final.points).abs().max())

    return {
        "n·d": n * d,
        "λ": lam,
        "default steps": default.stats["n_steps"] + default.stats["n_rejected"],
        "switched at": default.stats["switched_at"],
        "default s": seconds,
        "default err": error(default),
        "dopri5 steps": dopri5.stats["n_steps"] + dopri5.stats["n_rejected"],
        "dopri5 s": dopri5_s,
        "rk4 err": error(rk4),
        "rk4 s": rk4_s,
        "×rk4": seconds / rk4_s,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="no resolved reference")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; load average {os.getloadavg()[0]:.1f}")
    columns = ["n·d", "attempts", "status", "t reached", "default s", "rk4 s", "×rk4"]
    if not args.quick:
        columns += ["resolved steps", "resolved s", "rk4 rel err"]
    print_header(columns)
    for n in (16, 64):  # the resolved run at n·d = 128 takes tens of minutes
        print_row(switching_row(n, resolve=not args.quick and n == 16), columns)
    columns = ["n·d", "λ", "default steps", "switched at", "default s", "default err"]
    columns += ["dopri5 steps", "dopri5 s", "rk4 err", "rk4 s", "×rk4"]
    print_header(columns)
    for n, lam in ((72, 1e3),) if args.quick else ((72, 1e3), (72, 3e3)):
        print_row(stiff_row(n, lam), columns)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
