"""GLPR's phase diagram: tpde against a CPU port of the authors' loop (MATH.md §7).

    python benchmarks/glpr.py                 # GLPR's size: 2048 systems × 32 tokens × 90 β
    python benchmarks/glpr.py --quick         # 64 systems × 18 β (make bench)
    python benchmarks/glpr.py --skip-accuracy # parts 1–2 only
    python benchmarks/glpr.py --accuracy-only # part 3 only

The model: d = 2, Q = K = V = I, score β⟨x, y⟩ with β on linspace(0.1, 9, 90), tokens
uniform on the circle, t ∈ [0, 30]; cluster density = share of pairs i ≠ j with
⟨x_i, x_j⟩ > 0.999, at 200 checkpoints linspace(0, 30, 200) (Geshkovski, Letrouit,
Polyanskiy, Rigollet, arXiv:2312.10794; their `phase-diagrams.py` with --use_softmax, in
float64 as it sets).

The baseline, :class:`GLPRLoop` with :func:`glpr_table`, is a port (written from their
description and code, not copied) of their ``step_1`` loop in plain batched torch: one β
after the other, all systems of that β in one (S, n, n) batch, the layer
x ← N(x + η softmax(β x xᵀ) x) with η = 0.1, and their checkpoint rule — after each step,
every checkpoint the step time has passed records the density at that step (so checkpoint
0, t = 0, holds the state after the first step, and checkpoint k the state at the first
multiple of η at or after t_k). tpde runs every β and every system as one batch
(:mod:`tpde.experiments.common.sphere_diagram`). Both run in one process with one torch thread
and glibc's large allocations reused from the heap (``reuse_large_allocations``, as the
``tpde`` command sets it; ``--default-allocator`` leaves glibc as it is: tpde's 94 MB
tensors then pay page faults on every allocation, the port's 1.5–16 MB ones do not).

Part 1 — agreement at GLPR's settings: tpde's ``Normalized(..., tangent=False)`` with Euler
η = 0.1 is the same layer; from an independent draw of the initial tokens, its table at the
port's recording times against the port's. Per cell z = Δ/√(se₁² + se₂²) (se: Monte-Carlo
standard errors over the systems); printed: max |Δ|, the median se, max |z| and the mean of
z² (about 1 when the tables agree within Monte-Carlo error; cells where both tables have
se = 0 are left out).

Part 2 — speed per step, in the same run: seconds of stepping per step (densities excluded)
of the port and of tpde, and their ratio. The two advance in lock-step (tpde follows the
port to each of its recording times), so a change of the machine's load weighs on both.

Part 3 — equal accuracy, on common initial tokens at a reduced size (``--accuracy-systems``
per β): error = max over the table of |D − D_ref| against a dt → 0 reference (tpde, RK4
with the tangent velocity, step Δt/16 with Δt = 30/199 the checkpoint interval, checked
against Δt/8; --quick: Δt/8 against Δt/4). The
port at η = 0.1, 0.05, …; tpde RK4 with 1, 2, 4 steps per interval. Each method's table is
compared with the reference at the times it reports (the port's recording times lie up to η
after the checkpoints; the reference is saved there too). Printed: the largest and the mean
error over the table, seconds, and the time the port needs to reach tpde's error at one
RK4 step per interval (or the table's resolution, one pair of one system, if tpde's error is
below it): the first η within it, or an extrapolation from the port's observed order. The
port converges slowly in the largest error: at large β a cloud leaves a metastable state
at a time that small perturbations shift (GLPR), so the cells around such exits are the
last to converge.

Measured on the shared 2-core machine (one thread each, GLPR's size, load 3–4):
part 1, 17686 cells: max |Δ| 0.026, median se 0.0026, max |z| 3.67 (99.9 % expectation
5.43), mean z² 1.03 — the tables agree within Monte-Carlo error; part 2, 300 steps: port
2.70 s/step, tpde 2.73 s/step (1.01×: parity; an earlier run gave 0.98×); part 3 (16
systems per β): tpde RK4, one step per checkpoint interval, max error 1.3e-4, mean 2e-7 in
14 s; the port at η = 0.1 → 0.0031 has max error 0.12 → 0.032 and mean 0.010 → 3.2e-4,
the finest in 215 s (15× tpde's time, still 250× tpde's max error).
"""

# ruff: noqa: E402  (thread counts must be set before numpy and torch load)
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import math
import time

import numpy as np
import torch
from _common import print_header, print_row

from tpde.experiments.common.sphere_diagram import (
    DiagramRun,
    DiagramTable,
    checkpoint_times,
    density_stats,
    density_table,
    post_ln,
    systems_for,
)
from tpde.experiments.framework import reuse_large_allocations

F64 = torch.float64
THRESHOLD = 0.999  # GLPR: a pair is clustered when ⟨x_i, x_j⟩ > 0.999


# ---------------------------------------------------------------------- the port
class GLPRLoop:
    """GLPR's ``step_1`` / ``do_single_beta`` loop for every β, advanced in lock-step.

    ``points``: (nβ, S, n, d) initial tokens on the sphere (one batch of S systems per β).
    Each step runs, for one β after the other, their ``step_1`` (randomKQ = 0, randomV = 0,
    use_softmax) on that β's (S, n, d) batch: M2 = M; SM = M2 Mᵀ; SM *= β;
    SM = softmax(SM, 2); M2 = SM M; M2 *= η; M2 += M; M = N(M2); time += η. Their loop
    runs all steps of one β before the next β; the steps are the same operations on the same
    tensors, so the cost per step is the same, and a benchmark can interleave this loop with
    tpde's run (machine load then weighs on both alike). :meth:`advance_to` applies their
    checkpoint rule.
    """

    def __init__(self, points: torch.Tensor, betas, step: float = 0.1):
        self.M = [points[b].clone() for b in range(points.shape[0])]
        self.betas = np.asarray(betas, dtype=float).tolist()
        self.step, self.time, self.steps, self.seconds = float(step), 0.0, 0, 0.0
        n = points.shape[-2]
        self.off_diagonal = ~torch.eye(n, dtype=torch.bool)

    def advance(self) -> None:
        """One step of every β (timed)."""
        start = time.perf_counter()
        eta = self.step
        for b, beta in enumerate(self.betas):
            M = self.M[b]
            SM = torch.matmul(M, M.transpose(1, 2))
            SM *= beta
            SM = torch.nn.functional.softmax(SM, dim=2)
            M2 = torch.matmul(SM, M)
            M2 *= eta
            M2 += M
            self.M[b] = torch.nn.functional.normalize(M2, dim=2)
        self.time += eta
        self.steps += 1
        self.seconds += time.perf_counter() - start

    def advance_to(self, checkpoint: float) -> float:
        """Step until the time has reached ``checkpoint`` (at least one step when it has
        not: their loop steps before it checks); returns the time recorded for it."""
        while not self.time >= checkpoint or self.steps == 0:
            self.advance()
        return self.time

    def densities(self) -> tuple[np.ndarray, np.ndarray]:
        """GLPR's density for every β (nβ,) and its Monte-Carlo standard error (nβ,)."""
        per = torch.stack([_system_densities(M, self.off_diagonal) for M in self.M])
        systems = per.shape[-1]
        se = per.std(-1) / math.sqrt(systems) if systems > 1 else torch.zeros(len(per))
        return per.mean(-1).numpy(), se.numpy()


def _system_densities(M: torch.Tensor, off_diagonal: torch.Tensor) -> torch.Tensor:
    """Share of pairs i ≠ j with ⟨x_i, x_j⟩ > 0.999, per system (S,) (GLPR's check_stats,
    kept per system for the Monte-Carlo error; its mean is their pooled share)."""
    inner = torch.matmul(M, M.transpose(1, 2))
    linked = (inner > THRESHOLD) & off_diagonal
    n = M.shape[1]
    return linked.sum((1, 2)).to(F64) / (n * (n - 1))


def glpr_table(loop: GLPRLoop, checkpoints, on_checkpoint=None) -> DiagramTable:
    """Run ``loop`` through GLPR's checkpoints (their times_list) and tabulate the density.

    A step that passes several checkpoints records the same state for each (their inner
    ``while``). ``on_checkpoint(k, recorded_time)`` runs after each (lock-step drivers).
    """
    means, ses, recorded = [], [], []
    for k, checkpoint in enumerate(np.asarray(checkpoints, dtype=float)):
        if recorded and loop.time >= checkpoint:  # passed by the same step as the last one
            means.append(means[-1])
            ses.append(ses[-1])
            recorded.append(recorded[-1])
        else:
            recorded.append(loop.advance_to(checkpoint))
            mean, se = loop.densities()
            means.append(mean)
            ses.append(se)
        if on_checkpoint is not None:
            on_checkpoint(k, recorded[-1])
    return DiagramTable(np.stack(means, -1), np.stack(ses, -1), recorded, loop.seconds,
                        loop.steps, loop.steps, {})  # fmt: skip


# ---------------------------------------------------------------------- comparisons
def agreement(a: DiagramTable, b: DiagramTable) -> dict:
    """max |Δ|, median se, max |z| and mean z² of two tables from independent draws."""
    delta = a.mean - b.mean
    scale = np.sqrt(a.se**2 + b.se**2)
    used = scale > 0
    z = delta[used] / scale[used]
    return {
        "max |Δ|": float(np.abs(delta).max()),
        "median se": float(np.median(scale[used])) if used.any() else 0.0,
        "max |z|": float(np.abs(z).max()) if used.any() else 0.0,
        "mean z²": float(np.mean(z**2)) if used.any() else 0.0,
        "cells": int(used.sum()),
        "cells with se = 0, Δ ≠ 0": int(((~used) & (delta != 0)).sum()),
    }


def expected_max_z(cells: int) -> float:
    """The 99.9 % quantile of the largest |z| among ``cells`` independent standard normals
    (cells along a row are correlated, so the true spread is narrower)."""
    from scipy.stats import norm

    return float(norm.ppf(1 - (1 - 0.999 ** (1 / cells)) / 2))


def _settings(args):
    if args.quick:
        return 18, 64, 8  # betas, systems, accuracy systems
    return args.betas, args.systems, args.accuracy_systems


def part_agreement(args) -> None:
    n_beta, systems, _ = _settings(args)
    betas = np.linspace(0.1, 9.0, n_beta)
    print(f"\n## 1–2. GLPR's settings: {systems} systems × {args.tokens} tokens × {n_beta} β, "
          f"d = 2, Euler η = 0.1 + renormalisation, t ≤ {args.t1:g}", flush=True)  # fmt: skip
    port = GLPRLoop(systems_for(n_beta, systems, args.tokens, 2, torch.Generator().manual_seed(1))
                    .points, betas)  # fmt: skip
    mu = systems_for(n_beta, systems, args.tokens, 2, torch.Generator().manual_seed(2))
    ours = DiagramRun(post_ln(betas, 2, tangent=False), mu, method="euler", dt=0.1)
    means, ses = [], []

    def step_tpde(k, recorded):  # tpde follows the port to each of its recording times
        ours.advance_to(recorded)
        mean, se = density_stats(ours.mu)
        means.append(mean)
        ses.append(se)
        if k % 20 == 0:
            print(f"  checkpoint {k}: t = {recorded:.2f}; port {port.seconds:.0f} s, tpde "
                  f"{ours.seconds:.0f} s", flush=True)  # fmt: skip

    table = glpr_table(port, checkpoint_times(args.t1, 200), step_tpde)
    mine = DiagramTable(np.stack(means, -1), np.stack(ses, -1), table.times, ours.seconds,
                        ours.steps, ours.rhs)  # fmt: skip
    stats = agreement(mine, table)
    stats["max |z| expected (99.9 %)"] = expected_max_z(stats["cells"])
    print_header(list(stats))
    print_row(stats, list(stats))
    print()
    columns = ["loop", "steps", "s stepping", "s/step", "ratio to the port"]
    print_header(columns)
    print_row({"loop": "port (one β at a time)", "steps": table.steps,
               "s stepping": table.seconds, "s/step": table.seconds_per_step,
               "ratio to the port": 1.0}, columns)  # fmt: skip
    print_row({"loop": "tpde (one batch)", "steps": mine.steps, "s stepping": mine.seconds,
               "s/step": mine.seconds_per_step,
               "ratio to the port": mine.seconds_per_step / table.seconds_per_step},
              columns)  # fmt: skip


def part_accuracy(args) -> None:
    n_beta, _, systems = _settings(args)
    betas = np.linspace(0.1, 9.0, n_beta)
    checkpoints = checkpoint_times(args.t1, 200)
    interval = float(checkpoints[1] - checkpoints[0])
    mu = systems_for(n_beta, systems, args.tokens, 2, torch.Generator().manual_seed(3))
    print(f"\n## 3. Equal accuracy: {systems} systems × {args.tokens} tokens × {n_beta} β, "
          f"common initial tokens, t ≤ {args.t1:g}", flush=True)  # fmt: skip
    etas = [0.1 / 2**j for j in range(args.halvings + 1)]
    ports = {eta: glpr_table(GLPRLoop(mu.points, betas, eta), checkpoints) for eta in etas}
    needed = np.unique(np.concatenate([checkpoints, *(p.times for p in ports.values())]))
    tangent = post_ln(betas, 2)

    def reference(m):  # RK4 at step Δt/m, shortened to land on every needed time
        table = density_table(tangent, mu, needed, method="rk4", dt=interval / m)
        return table, {float(t): table.mean[:, i] for i, t in enumerate(table.times)}

    fine = 8 if args.quick else 16
    ref, at = reference(fine)
    check, _ = reference(fine // 2)
    print(f"reference: RK4 at Δt/{fine} = {interval / fine:.3g} ({len(needed)} recorded "
          f"times), {ref.seconds:.0f} s; against Δt/{fine // 2}: max |Δ| = "
          f"{np.abs(ref.mean - check.mean).max():.2g}", flush=True)  # fmt: skip

    def errors(table: DiagramTable) -> tuple[float, float]:
        expected = np.stack([at[float(t)] for t in table.times], -1)
        gap = np.abs(table.mean - expected)
        return float(gap.max()), float(gap.mean())

    columns = ["method", "step", "steps", "rhs", "seconds", "max |D − D_ref|",
               "mean |D − D_ref|"]  # fmt: skip
    print_header(columns)
    rows = []
    for m in (1, 2):
        table = density_table(tangent, mu, checkpoints, method="rk4", steps_per_interval=m)
        worst, mean = errors(table)
        rows.append({"method": "tpde rk4 (tangent)", "step": f"Δt/{m}", "steps": table.steps,
                     "rhs": table.rhs, "seconds": table.seconds, "max |D − D_ref|": worst,
                     "mean |D − D_ref|": mean})  # fmt: skip
        print_row(rows[-1], columns)
    for eta, table in ports.items():
        worst, mean = errors(table)
        rows.append({"method": "port euler", "step": eta, "steps": table.steps,
                     "rhs": table.steps, "seconds": table.seconds, "max |D − D_ref|": worst,
                     "mean |D − D_ref|": mean})  # fmt: skip
        print_row(rows[-1], columns)
    print()
    resolution = 1 / (systems * args.tokens * (args.tokens - 1))
    for metric in ("max |D − D_ref|", "mean |D − D_ref|"):
        _equal_accuracy(rows, metric, resolution)


def _equal_accuracy(rows: list[dict], metric: str, resolution: float) -> None:
    """The port's cost at tpde's accuracy (RK4, one step per checkpoint interval).

    Target: tpde's error, or the table's resolution (one pair of one system) when tpde's is
    below it. The first η of the port within it, else an extrapolation from the order
    fitted to the port's last three errors (time ∝ 1/η).
    """
    ours = rows[0]
    target = max(ours[metric], resolution)
    port = [r for r in rows if r["method"] == "port euler"]
    hit = next((r for r in port if r[metric] <= target), None)
    head = (f"{metric} ≤ {target:.2g} (tpde rk4 {ours['step']}: {ours[metric]:.2g} in "
            f"{ours['seconds']:.1f} s)")  # fmt: skip
    if hit is not None:
        print(f"{head}: the port at η = {hit['step']:g} in {hit['seconds']:.1f} s, "
              f"{hit['seconds'] / ours['seconds']:.1f}× tpde's time")  # fmt: skip
        return
    last = port[-1]
    tail = [r for r in port[-3:] if r[metric] > 0]
    if len(tail) < 2:
        print(f"{head}: the port misses it down to η = {last['step']:g}.")
        return
    order = np.polyfit(np.log([r["step"] for r in tail]), np.log([r[metric] for r in tail]), 1)[0]
    estimate = last["seconds"] * (last[metric] / target) ** (1 / max(order, 1e-3))
    print(f"{head}: the port misses it down to η = {last['step']:g} ({last[metric]:.2g} in "
          f"{last['seconds']:.1f} s, {last['seconds'] / ours['seconds']:.1f}× tpde's time); "
          f"its observed order {order:.2f} extrapolates to ≈ {estimate:.3g} s, "
          f"{estimate / ours['seconds']:.3g}× tpde's time")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--betas", type=int, default=90)
    parser.add_argument("--systems", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--t1", type=float, default=30.0)
    parser.add_argument("--accuracy-systems", type=int, default=16)
    parser.add_argument("--halvings", type=int, default=5, help="port steps 0.1 / 2^j, j ≤ this")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="leave glibc's mmap threshold as it is (see reuse_large_allocations)",
    )
    parser.add_argument("--accuracy-only", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.halvings = min(args.halvings, 2)
    torch.set_num_threads(1)
    heap = "default" if args.default_allocator else reuse_large_allocations()
    print(f"torch {torch.__version__}, 1 thread; large allocations reused from the heap: "
          f"{heap}; load {os.getloadavg()}")  # fmt: skip
    if not args.accuracy_only:
        part_agreement(args)
    if not args.skip_accuracy:
        part_accuracy(args)


if __name__ == "__main__":
    main()
