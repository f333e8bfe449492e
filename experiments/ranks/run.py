"""The computations of the ``ranks`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common.rank_protocol import (
    PAPER_DIMS,
    agreement,
    loop_iterations,
    ode_protocol,
    paper_protocol,
    paper_subset,
    rank_counts,
    rank_of,
    theory_limit,
    tight_records,
    tight_summary,
)
from .config import TABLE, Config


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {}, {"rows": {}}
    rows = [(v, w) for v in config.variants for w in config.values]
    # Warm-up: torch's first batched solves and eigendecompositions in a process carry a
    # one-time cost (0.4 s measured) that would land on the first row's timing.
    ode_protocol(dataclasses.replace(config, runs=2, dims=(3,)), *rows[0])
    for variant, value in fw.progress(rows, "ranks"):
        per_d, stats, draws_ = ode_protocol(config, variant, value)
        row = {"ode_seconds": stats["seconds"], "rounds": stats["rounds"]}
        row["evaluated"] = stats["evaluated"]
        row["method"] = config.method(value)
        tights = {}
        if value == "random":  # the converged reference on the same records (one batch)
            tights = tight_records(config, variant, value, per_d, *draws_)
        for d in config.dims:
            key = f"{variant}__{value}__{d}"
            row[str(d)] = _entry(config, (variant, value, d), per_d[d], tights.get(d), draws_,
                                 arrays, key)  # fmt: skip
        results["rows"][f"{variant}__{value}"] = row
    fw.save(out, config, arrays, results, started)


def _entry(config, where, data, tight, draws_, arrays, key) -> dict:
    """Results of one (row, d): tpde's counts, theory (V = I) or the converged reference
    (V = GᵀG), the paper's loop on a subset and on its whole protocol, MATH.md's table."""
    variant, value, d = where
    Qs, Vs, per_dim, streams = draws_
    counts, too_high, ranks = rank_counts(data["status"], data["final"], d, config.rank_tol)
    arrays[key + "__pairs"] = data["pairs"]
    arrays[key + "__status"] = data["status"].astype("U12")
    arrays[key + "__ode_counts"] = counts
    entry = {
        "ode_counts": counts.tolist(),
        "ode_too_high": too_high,
        "ode_status": dict(zip(*np.unique(data["status"], return_counts=True), strict=True)),
    }
    if value == "identity":
        conv_pairs = data["pairs"][data["status"] == "converged"]
        index = [PAPER_DIMS.index(d) * per_dim + i for i, _ in conv_pairs]
        limits = [
            theory_limit(Qs[j], streams[d][k]) for j, (_, k) in zip(index, conv_pairs, strict=True)
        ]
        theory = np.array([rank_of(S, config.rank_tol) for S in limits])
        entry["theory_counts"] = np.bincount(theory, minlength=d + 1).tolist()
        entry["ode_theory_rank_agreement"] = float(np.mean(theory == ranks))
        arrays[key + "__theory_counts"] = np.bincount(theory, minlength=d + 1)
    entry["loop_iterations"] = loop_iterations(variant, value, d, data)
    if tight is not None:
        entry["tight"] = tight_summary(config, d, data, tight)
        arrays[key + "__tight_counts"] = np.array(entry["tight"]["counts"])
    loop = (config, variant, value, d)
    entry["paper_subset"] = paper_subset(*loop, data, Qs, Vs, per_dim, streams[d], tight)
    if config.paper_full:
        entry["paper_full"] = paper_protocol(*loop, Qs, Vs, per_dim, streams[d])
        arrays[key + "__paper_counts"] = np.array(entry["paper_full"]["counts"])
    refined = (variant, value) == ("softmax", "identity") and d in config.refine_dims
    if config.refine > 1 and refined:
        entry["paper_refined"] = paper_protocol(*loop, Qs, Vs, per_dim, streams[d], config.refine)
    table = TABLE.get((variant, value), {}).get(d)
    if table is not None and config.runs == 100 and config.q_seed == 40:
        entry["table_counts"] = [table.get(r, 0) for r in range(d + 1)]
        entry["agreement"] = agreement(counts, entry["table_counts"])
    return entry


# ---------------------------------------------------------------------- figures and report
def _rows(results) -> list[tuple[str, str]]:
    return [tuple(k.split("__")) for k in results["rows"]]
