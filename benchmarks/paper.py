"""The rank-histogram experiment (MATH.md §6) against the paper's projected-Euler loop.

    python benchmarks/paper.py               # V = I rows; loop on 20 runs per d
    python benchmarks/paper.py --quick       # loop on 5 runs per d
    python benchmarks/paper.py --all         # also the V = GᵀG rows (stiff: rodas4; minutes)
    python benchmarks/paper.py --all --full-paper  # the loop on its whole protocol (an hour)

tpde: the experiment's batched Gaussian ODE
(:func:`tpde.experiments.common.rank_protocol.ode_protocol`: one batch per d of a row, events
‖Σ̇‖_F < tol_low and tr Σ > 1e3, horizon max_iter · h, all protocol rounds) with the row's
method (dopri5 for V = I, the L-stable Rosenbrock method rodas4 for the stiff V = GᵀG rows),
after a warm-up.

Baselines, in the same process, all in CPU seconds on one thread (``time.process_time``:
the machine is shared, and wall time counts the other users' load):

- the paper's loop at its own step h (:func:`tpde.experiments.common.paper_euler.projected_euler`,
  a faithful numpy re-implementation of the authors' loop): ``--full-paper`` runs its whole
  protocol (its own failures decide its pairs); otherwise its seconds per run on the first
  runs of tpde's pairs × tpde's number of runs (an estimate: where the paper's step is
  unstable, V = GᵀG, its protocol visits other pairs);
- (V = GᵀG, ``--all``) the loop as accurate as tpde: tpde's records re-run at rtol 1e-8 are
  the converged reference; the loop at h/r, r = 10 and 30, on the first 5 converged records
  per d; the coarsest r whose statuses and ranks match the reference as often as tpde's do,
  and the loop's cost there for the whole row (the records' ODE event times over h/r × its
  measured CPU per iteration; '>' when no tried r matches: a lower bound).

Agreement columns: the fraction of the re-run pairs with the same status and the same rank
as tpde (the loop at h).
"""

# ruff: noqa: E402  (thread counts must be set before numpy and torch load)
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import dataclasses
import time

import numpy as np
import torch

from tpde.experiments.common import rank_protocol as ranks
from tpde.experiments.ranks import Config


def cpu(fn):
    """(CPU seconds, result) of one call."""
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def paper_seconds(config, variant, value, per_d, data, count, full):
    """CPU seconds of the paper's loop at h for the row, and its agreement with tpde."""
    Qs, Vs, per_dim, streams = data
    total, same_status, same_rank = 0.0, [], []
    for d, entry in per_d.items():
        sub = ranks.paper_subset(
            dataclasses.replace(config, paper_runs=count), variant, value, d, entry,
            Qs, Vs, per_dim, streams[d],
        )  # fmt: skip
        same_status.append(sub["status_agreement"])
        if sub["rank_agreement"] is not None:
            same_rank.append(sub["rank_agreement"])
        if full:
            total += ranks.paper_protocol(config, variant, value, d, Qs, Vs, per_dim,
                                          streams[d])["seconds"]  # fmt: skip
        else:
            total += sub["seconds_per_run"] * len(entry["pairs"])
    return total, np.mean(same_status), np.mean(same_rank) if same_rank else float("nan")


def as_accurate(config, variant, value, per_d, data):
    """(h/r, CPU seconds) of the loop as accurate as tpde for a V = GᵀG row."""
    Qs, Vs, per_dim, streams = data
    tights = ranks.tight_records(config, variant, value, per_d, *data)
    row = {}
    for d, entry in per_d.items():
        row[str(d)] = {
            "loop_iterations": ranks.loop_iterations(variant, value, d, entry),
            # paper_runs=1: the loop at h on one record only (the refined runs are the point)
            "paper_subset": ranks.paper_subset(
                dataclasses.replace(config, paper_runs=1), variant, value, d, entry,
                Qs, Vs, per_dim, streams[d], tights[d],
            ),
        }  # fmt: skip
    return ranks.equal_accuracy({"dims": list(per_d)}, row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--all", action="store_true", help="include the V = GᵀG rows")
    parser.add_argument("--full-paper", action="store_true", help="the loop's whole protocol")
    parser.add_argument("--subset", type=int, default=None, help="loop runs per d")
    args = parser.parse_args()
    torch.set_num_threads(1)
    subset = args.subset or (5 if args.quick else 20)
    values = ("identity", "random") if args.all else ("identity",)
    config = Config(values=values, paper_runs=0, paper_full=False)
    print(f"torch threads 1, numpy threads {os.environ['OMP_NUM_THREADS']}; load {os.getloadavg()}")
    print("CPU seconds (time.process_time)")
    ranks.ode_protocol(dataclasses.replace(config, runs=2, dims=(3,)), "softmax", "identity")
    header = f"{'row':22s} {'method':7s} {'runs':>5s} {'tpde s':>8s} {'paper s':>9s} {'×paper':>7s}"
    print(header + f" {'as accurate':>11s} {'loop s':>8s} {'×loop':>6s} {'same status':>12s}"
          f" {'same rank':>10s} {'rounds':>7s}")  # fmt: skip
    for variant in config.variants:
        for value in values:
            seconds, (per_d, stats, data) = cpu(
                lambda v=variant, w=value: ranks.ode_protocol(config, v, w)
            )
            runs = sum(len(e["pairs"]) for e in per_d.values())
            paper, status, rank = paper_seconds(
                config, variant, value, per_d, data, subset, args.full_paper
            )
            label, loop = "—", None
            if value == "random":
                label, loop = as_accurate(config, variant, value, per_d, data)
            loop_text = ("—", "—") if loop is None else (f"{loop:8.0f}", f"{loop / seconds:5.0f}×")
            how = "whole protocol" if args.full_paper else "est."
            print(
                f"{variant + ', V ' + value:22s} {config.method(value):7s} {runs:5d} "
                f"{seconds:8.2f} {paper:9.1f} {paper / seconds:6.1f}× {label:>11s} "
                f"{loop_text[0]:>8s} {loop_text[1]:>6s} {status:12.0%} {rank:10.0%} "
                f"{stats['rounds']:7d}   (paper: {how})",
                flush=True,
            )


if __name__ == "__main__":
    main()
