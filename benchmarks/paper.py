"""The rank-histogram experiment (MATH.md §6) against the paper's projected-Euler loop.

    python benchmarks/paper.py               # V = I rows, 300 runs each; loop on 20 runs per d
    python benchmarks/paper.py --quick       # loop on 5 runs per d
    python benchmarks/paper.py --all         # also the V = GᵀG rows (stiff: minutes)
    python benchmarks/paper.py --full-paper  # the loop on the whole protocol too (minutes)

tpde: the experiment's batched Gaussian ODE (:func:`tpde.experiments.ranks.ode_protocol`:
every d of a row in one padded batch, Dormand–Prince, events ‖Σ̇‖_F < tol_low and
tr Σ > 1e3, horizon max_iter · h; all protocol rounds), median of 3 runs after a warm-up.
Baseline: :func:`tpde.experiments.paper_euler.projected_euler`, a faithful numpy
re-implementation of the authors' loop, with the same stopping rules, on the first runs
of the same (Q, Σ₀) pairs; its seconds per run × the row's runs is the row's estimated
time (``--full-paper`` measures the whole protocol instead). Agreement columns: the
fraction of the re-run pairs with the same status and the same rank. One thread for torch
and numpy (shared 2-core machine).
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
from _common import timed

from tpde.experiments import ranks
from tpde.experiments.paper_euler import projected_euler


def paper_subset(config, variant, value, per_d, data, count):
    """Seconds per run and agreement of the paper's loop on the first ``count`` pairs per d."""
    Qs, Vs, per_dim, streams = data
    steps, tol, max_iter, _, _ = ranks.SETTINGS[(variant, value)]
    same_status, same_rank = [], []
    estimate = 0.0
    for d, entry in per_d.items():
        j = ranks.PAPER_DIMS.index(d)
        clock = time.perf_counter()
        for b, (i, k) in enumerate(entry["pairs"][:count]):
            index = j * per_dim + i
            r = projected_euler(
                streams[d][k], Qs[index], -Qs[index], Vs[index], variant=variant,
                step=steps[j], tol_low=tol, max_iter=max_iter,
            )  # fmt: skip
            same_status.append(r.status == entry["status"][b])
            if r.status == "converged" == entry["status"][b]:
                ours = ranks.rank_of(entry["final"][b], config.rank_tol)
                same_rank.append(ranks.rank_of(r.final, config.rank_tol) == ours)
        spent = time.perf_counter() - clock
        n = min(count, len(entry["pairs"]))
        estimate += spent / n * len(entry["pairs"])
    return estimate, np.mean(same_status), np.mean(same_rank) if same_rank else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--all", action="store_true", help="include the V = GᵀG rows")
    parser.add_argument("--full-paper", action="store_true", help="the loop on every run")
    parser.add_argument("--subset", type=int, default=None, help="loop runs per d")
    args = parser.parse_args()
    torch.set_num_threads(1)
    subset = args.subset or (5 if args.quick else 20)
    values = ("identity", "random") if args.all else ("identity",)
    config = ranks.Config(values=values, paper_runs=0, paper_full=False)
    print(f"torch threads 1, numpy threads {os.environ['OMP_NUM_THREADS']}; load {os.getloadavg()}")
    header = f"{'row':22s} {'runs':>5s} {'tpde s':>8s} {'paper s':>9s} {'×paper':>7s}"
    print(header + f" {'same status':>12s} {'same rank':>10s} {'rounds':>7s}")
    for variant in config.variants:
        for value in values:
            seconds, _, (per_d, stats, data) = timed(
                lambda v=variant, w=value: ranks.ode_protocol(config, v, w), repeat=3
            )
            runs = sum(len(e["pairs"]) for e in per_d.values())
            if args.full_paper:
                clock = time.perf_counter()
                for d in config.dims:
                    ranks.paper_protocol(config, variant, value, d, *data[:3], data[3][d])
                paper = time.perf_counter() - clock
                _, status, rank = paper_subset(config, variant, value, per_d, data, subset)
                label = "measured"
            else:
                paper, status, rank = paper_subset(config, variant, value, per_d, data, subset)
                label = f"est. {subset}/d"
            print(
                f"{variant + ', V ' + value:22s} {runs:5d} {seconds:8.3f} {paper:9.1f} "
                f"{paper / seconds:6.0f}× {status:12.0%} {rank:10.0%} {stats['rounds']:7d}"
                f"   (paper: {label})"
            )


if __name__ == "__main__":
    main()
