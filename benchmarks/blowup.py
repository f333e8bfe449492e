"""Batched blow-ups: per-element step control against one-at-a-time runs and the paper's loop.

    python benchmarks/blowup.py            # 200 Gaussians + the cones blow-up panel (1184 starts)
    python benchmarks/blowup.py --quick    # 50 Gaussians + a 16 × 16 blow-up grid

Part 1 — a batch of Gaussians whose blow-up times spread over a decade: d = 2, V = I,
softmax with A + Aᵀ ≻ 0, Σ₀ scaled so that t* = 1/λ_max(Σ₀^{1/2}(A + Aᵀ)Σ₀^{1/2}) covers
[0.25, 2.5] (MATH.md §4 item 2; Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹ in closed form). Event: the
paper's rule tr Σ > 10³. Rows: tpde's batch (dopri5, every element its own steps), the same
elements one at a time, the paper's projected-Euler loop
(:mod:`tpde.experiments.common.paper_euler`) at its step h = 0.01, and the loop at equal
accuracy (h halved until its largest event-time
error is no larger than tpde's). Columns: seconds per element, step counts (vectorised
iterations for the batch; accepted and rejected summed over elements), the largest error of
the event time against the closed form, and ratios against the batch.

Part 2 — the paper's blow-up panel (``tpde run cones``: seed 33, 40 × 40 grid → 1184 starts,
softmax h = 0.01 and multi-head H = 2 h = 0.002, tol_high 10³) exactly as the experiment
runs it (paths saved on its time grid), against the loop at the paper's step on a subset of
starts (seconds per start extrapolated), and for softmax at equal accuracy.
"""

# ruff: noqa: E402  (thread counts must be set before numpy and torch load)
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import time

import numpy as np
import torch
from _common import print_table

from tpde.experiments import cones
from tpde.experiments.common.panels import panel_setup, softmax_blowup
from tpde.experiments.common.paper import flow, init_grid, paper_field, path_times, subsample
from tpde.experiments.common.paper_euler import projected_euler
from tpde.fields import Softmax
from tpde.flows import BlowUp, integrate
from tpde.measures import Gaussian

F64 = torch.float64
THRESHOLD = 1e3


def spread_batch(count: int, seed: int = 0):
    """(A, S0 (count, 2, 2), t*, time where tr Σ = 10³) with t* log-spaced on [0.25, 2.5]."""
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((2, 2))
    A = B @ B.T / 2 + 0.2 * np.eye(2) + 0.3 * rng.standard_normal((2, 2))
    shapes = rng.standard_normal((count, 2, 2))
    S = shapes @ np.swapaxes(shapes, 1, 2) / 2 + 0.1 * np.eye(2)
    sym = A + A.T
    lam = _lambda_max(S, sym)
    target = np.geomspace(0.25, 2.5, count)
    S0 = S * (1 / target / lam)[:, None, None]  # λ scales linearly with Σ₀
    t_star, t_hit, _ = softmax_blowup(S0, A, THRESHOLD)
    return A, S0, t_star, t_hit


def _lambda_max(S, sym):
    evals, vecs = np.linalg.eigh(S)
    root = (vecs * np.sqrt(evals)[..., None, :]) @ np.swapaxes(vecs, -1, -2)
    return np.linalg.eigvalsh(root @ sym @ root)[..., -1]


def tpde_batch(A, S0):
    field = Softmax.from_interaction(torch.as_tensor(A, dtype=F64), torch.eye(2, dtype=F64))
    g0 = Gaussian(torch.zeros(len(S0), 2, dtype=F64), torch.as_tensor(S0))
    start = time.perf_counter()
    traj = integrate(
        field, g0, 5.0, method="dopri5", dt=0.01, events=(BlowUp(THRESHOLD, size="trace"),)
    )
    return time.perf_counter() - start, traj


def paper_loop(A, S0, step: float):
    """The loop on every start (Q = A, K = I, V = I with the code's 1/√d folded into Q)."""
    Q = A * np.sqrt(2)  # the loop scales scores by 1/√d: Kᵀ(√2 A)/√2 = A
    start = time.perf_counter()
    runs = [
        projected_euler(S, Q, np.eye(2), np.eye(2), step=step, tol_low=0.0, max_iter=10**7)
        for S in S0
    ]
    return time.perf_counter() - start, np.array([r.time for r in runs])


def part_one(count: int) -> list[dict]:
    A, S0, _, t_hit = spread_batch(count)
    seconds, traj = tpde_batch(A, S0)
    error = float(np.abs(traj.event_time.numpy() - t_hit).max())
    rows = [
        {
            "run": f"tpde batch of {count}",
            "s/element": seconds / count,
            "iterations": traj.stats["n_iterations"],
            "accepted": traj.stats["n_steps"],
            "rejected": traj.stats["n_rejected"],
            "max |t_event − t_exact|": error,
        }
    ]
    alone_s, accepted, rejected, alone_err = 0.0, 0, 0, 0.0
    for b in range(count):
        s, one = tpde_batch(A, S0[b : b + 1])
        alone_s += s
        accepted += one.stats["n_steps"]
        rejected += one.stats["n_rejected"]
        alone_err = max(alone_err, float(np.abs(one.event_time.numpy() - t_hit[b]).max()))
    rows.append(
        {
            "run": "tpde one at a time",
            "s/element": alone_s / count,
            "accepted": accepted,
            "rejected": rejected,
            "max |t_event − t_exact|": alone_err,
        }
    )
    subset = subsample(count, min(count, 40))
    step = 0.01
    loop_s, times = paper_loop(A, S0[subset], step)
    loop_err = float(np.abs(times - t_hit[subset]).max())
    rows.append(
        {
            "run": f"paper loop h = {step:g} ({len(subset)} starts)",
            "s/element": loop_s / len(subset),
            "max |t_event − t_exact|": loop_err,
        }
    )
    few = subset[:: max(1, len(subset) // 8)]
    while loop_err > error and step > 1e-7:
        step /= 2
        loop_s, times = paper_loop(A, S0[few], step)
        loop_err = float(np.abs(times - t_hit[few]).max())
    rows.append(
        {
            "run": f"paper loop, equal accuracy h = {step:.3g} ({len(few)} starts)",
            "s/element": loop_s / len(few),
            "max |t_event − t_exact|": loop_err,
        }
    )
    base = rows[0]["s/element"]
    for row in rows:
        row["× batch"] = row["s/element"] / base
    return rows


def _loop(S0, setup, options, t_hit, step, which):
    """Seconds per start and largest event-time error of the paper's loop on ``which``."""
    clock = time.perf_counter()
    runs = [
        projected_euler(S0[i], *setup["QKV"], step=step, max_iter=10**7, **options) for i in which
    ]
    spent = (time.perf_counter() - clock) / len(which)
    return spent, float(np.abs(np.array([r.time for r in runs]) - t_hit[which]).max())


def part_two(grid: int) -> list[dict]:
    config = cones.Config(blowup_grid=grid)
    setup = panel_setup("blowup", config)
    S0 = init_grid(*setup["grid"])
    Q, K, _ = setup["QKV"]
    rows = []
    for variant in ("softmax", "multihead"):
        h, tol_low, tol_high, max_iter, heads = setup["runs"][variant]
        field = paper_field(variant, *setup["QKV"], heads=heads)
        save = path_times(h, max_iter * h, 2 * config.path_points)
        start = time.perf_counter()
        res = flow(
            field, S0, horizon=max_iter * h, tol_low=tol_low, tol_high=tol_high,
            first_step=h, rtol=config.rtol, atol=config.atol, save=save,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        if variant == "softmax":
            _, t_hit, _ = softmax_blowup(S0, K.T @ Q / np.sqrt(2), tol_high)
        else:  # a tight tpde run is the reference
            t_hit = flow(
                field, S0, horizon=max_iter * h, tol_low=tol_low, tol_high=tol_high,
                first_step=h, rtol=1e-11, atol=1e-13,
            ).event_time  # fmt: skip
        error = float(np.abs(res.event_time - t_hit).max())
        picks = subsample(len(S0), 24)

        options = {"variant": variant, "heads": heads, "tol_low": tol_low, "tol_high": tol_high}
        paper_s, paper_err = _loop(S0, setup, options, t_hit, h, picks)
        step, few = h, picks[::4]
        eq_s, eq_err = paper_s, paper_err
        while eq_err > error and step > 1e-7:
            step /= 2
            eq_s, eq_err = _loop(S0, setup, options, t_hit, step, few)
        per = seconds / len(S0)
        rows.append(
            {
                "variant": variant,
                "starts": len(S0),
                "tpde s/start": per,
                "tpde max err": error,
                "paper s/start (h)": f"{paper_s:.3g} ({h:g})",
                "paper max err": paper_err,
                "× paper": paper_s / per,
                "equal-accuracy h": f"{step:.3g}",
                "× paper, equal accuracy": eq_s / per,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch threads 1, load {os.getloadavg()}")
    rows = part_one(50 if args.quick else 200)
    columns = ["run", "s/element", "× batch", "iterations", "accepted", "rejected"]
    print_table(rows, [*columns, "max |t_event − t_exact|"])
    print()
    rows = part_two(16 if args.quick else 40)
    print_table(rows, list(rows[0]))
    print("× paper > 1: tpde faster per start than the loop (the loop's time per start on a")
    print("subset of starts, extrapolated); equal accuracy: the loop's step halved until its")
    print("largest event-time error is no larger than tpde's.")


if __name__ == "__main__":
    main()
