"""The rank-histogram protocol (MATH.md §6) of the ``ranks`` study and ``benchmarks/paper.py``:
the paper's draws, its protocol resolved in speculative rounds of batched Gaussian ODEs, the
paper's loop on the same pairs (at its step h and refined), and the loop's cost at tpde's
accuracy (:func:`equal_accuracy`).

The authors' protocol draws Σ₀ after Σ₀ and moves on to the next Q only when a run
converges; :class:`Protocol` resolves its pairing from a cache of outcomes, so the pairs are
exactly those the authors' loop would visit if it solved the ODE exactly. Timings are CPU
seconds (``time.process_time``: one thread, and robust to a shared machine's load).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from tpde.fields import L2, Softmax

from .paper import flow
from .paper_euler import projected_euler

PAPER_DIMS = (3, 4, 5)

#: The authors' settings per (variant, value): step per d, tol_low, max_iter, n_max, V seed.
SETTINGS = {
    ("softmax", "identity"): ((0.09, 0.05, 0.02), 1e-4, 60_000, 1_000, None),
    ("softmax", "random"): ((0.09, 0.06, 0.02), 5e-5, 90_000, 10_000, 26),
    ("l2", "identity"): ((0.09, 0.06, 0.02), 1e-4, 60_000, 1_000, None),
    ("l2", "random"): ((0.15, 0.15, 0.15), 5e-5, 50_000, 1_000, 27),
}


# ---------------------------------------------------------------------- the paper's draws
def draws(config, variant: str, value: str):
    """Q list, V list (per Q index, grouped by d) and the Σ₀ stream per d, as the code draws."""
    per_dim = max(100, config.runs)
    rng = np.random.RandomState(config.q_seed)
    dims_all = np.repeat(PAPER_DIMS, per_dim)
    Qs = [rng.randn(d // 2, d) for d in dims_all]
    seed = SETTINGS[(variant, value)][4]
    if seed is None:
        Vs = [np.eye(d) for d in dims_all]
    else:
        rng_v = np.random.RandomState(seed)
        Vs = [(lambda G: G.T @ G)(rng_v.randn(d, d)) for d in dims_all]
    return Qs, Vs, per_dim


def init_stream(config, d: int, count: int) -> np.ndarray:
    rng = np.random.RandomState(config.init_seed)
    out = []
    for _ in range(count):
        S = rng.randn(d, d)
        out.append(S @ S.T)
    return np.array(out)


# ---------------------------------------------------------------------- the protocol
class Protocol:
    """The authors' loop over draws k with Q index i (advances on convergence), resolved
    from a cache of outcomes; ``request`` names the pairs the next round must evaluate."""

    def __init__(self, runs: int, n_max: int):
        self.runs, self.n_max = runs, n_max
        self.i = self.k = 0
        self.window = 1
        self.records: list[tuple[int, int]] = []

    def done(self) -> bool:
        return self.i >= self.runs or self.k >= self.n_max

    def advance(self, cache: dict) -> None:
        while not self.done() and (self.i, self.k) in cache:
            self.records.append((self.i, self.k))
            if cache[(self.i, self.k)][0] == "converged":
                self.i += 1
            self.k += 1

    def request(self, cache: dict) -> list[tuple[int, int]]:
        if self.done():
            return []
        pairs = [
            (self.i + j, self.k + j + s)
            for s in range(self.window)
            for j in range(self.runs - self.i)
            if self.k + j + s < self.n_max and (self.i + j, self.k + j + s) not in cache
        ]
        self.window *= 4
        return pairs


def evaluate(config, variant, value, jobs, Qs, Vs, per_dim, streams):
    """ODE outcomes (status, final Σ, event time) of jobs [(d, i, k)]: one batch per d.

    Each d has its own horizon max_iter · h_d, and a batch runs to its t1, where every
    element lands exactly: a run that converges right at its horizon is "converged" as in
    the authors' loop (in a batch padded to the largest horizon it would step past its own
    and read "completed"). Returns (outcomes, the runs' FlowResults).
    """
    outcomes, results = {}, []
    for d in sorted({job[0] for job in jobs}):
        group = [job for job in jobs if job[0] == d]
        result = _evaluate_dim(config, variant, value, d, group, Qs, Vs, per_dim, streams[d])
        outcomes.update(result[0])
        results.append(result[1])
    return outcomes, results


def _evaluate_dim(config, variant, value, d, jobs, Qs, Vs, per_dim, stream):
    steps, tol, max_iter, _, _ = SETTINGS[(variant, value)]
    index = [PAPER_DIMS.index(d) * per_dim + i for _, i, _ in jobs]
    Q = np.array([Qs[j] for j in index])
    # scale = 1: the paper's 1/√d is folded into Q; the L2 key term |Ky|² stays unscaled.
    Q, K = torch.as_tensor(Q / math.sqrt(d)), torch.as_tensor(-Q)
    V = torch.as_tensor(np.array([Vs[j] for j in index]))
    field = Softmax(Q, K, V, scale=1.0) if variant == "softmax" else L2(Q, K, V, 1.0, form="code")
    horizon = max_iter * steps[PAPER_DIMS.index(d)]
    res = flow(
        field,
        np.array([stream[k] for _, _, k in jobs]),
        horizon=horizon,
        tol_low=tol,
        tol_high=1e3,
        first_step=0.02,
        rtol=config.rtol,
        atol=config.rtol * 1e-3,
        method=config.method(value),
    )
    status = res.status.astype(str)
    times = np.where(status == "completed", horizon, res.event_time)
    outcomes = {
        job: (str(s), res.final[b], float(times[b]))
        for b, (job, s) in enumerate(zip(jobs, status, strict=True))
    }
    return outcomes, res


def rank_of(S: np.ndarray, tol: float) -> int:
    return int((np.linalg.eigvalsh(S) > tol).sum())


def ode_protocol(config, variant, value):
    """Run the protocol for every d of one row with batched ODE rounds; returns per-d data."""
    _, _, _, n_max, _ = SETTINGS[(variant, value)]
    Qs, Vs, per_dim = draws(config, variant, value)
    streams = {d: init_stream(config, d, n_max) for d in config.dims}
    protocols = {d: Protocol(config.runs, len(streams[d])) for d in config.dims}
    caches = {d: {} for d in config.dims}
    rounds, seconds, evaluated = 0, 0.0, 0
    while not all(p.done() for p in protocols.values()):
        jobs = [(d, i, k) for d, p in protocols.items() for i, k in p.request(caches[d])]
        clock = time.process_time()
        outcomes, _ = evaluate(config, variant, value, jobs, Qs, Vs, per_dim, streams)
        seconds += time.process_time() - clock
        rounds, evaluated = rounds + 1, evaluated + len(jobs)
        for (d, i, k), outcome in outcomes.items():
            caches[d][(i, k)] = outcome
        for d, p in protocols.items():
            p.advance(caches[d])
    per_d = {}
    for d, p in protocols.items():
        outcomes = [caches[d][pair] for pair in p.records]
        per_d[d] = {
            "pairs": np.array(p.records),
            "status": np.array([o[0] for o in outcomes]),
            "final": np.array([o[1] for o in outcomes]),
            "time": np.array([o[2] for o in outcomes]),  # event time, or the horizon
        }
    stats = {"rounds": rounds, "seconds": seconds, "evaluated": evaluated}
    return per_d, stats, (Qs, Vs, per_dim, streams)


def theory_limit(Q: np.ndarray, S0: np.ndarray) -> np.ndarray:
    """W(WᵀΣ₀⁻¹W)⁻¹Wᵀ, W an orthonormal basis of ker Q (the V = I limit)."""
    _, sing, vt = np.linalg.svd(Q)
    W = vt[(sing > 1e-12).sum() :].T
    return W @ np.linalg.inv(W.T @ np.linalg.inv(S0) @ W) @ W.T


def paper_protocol(config, variant, value, d, Qs, Vs, per_dim, stream, refine: int = 1):
    """The authors' whole loop for one (row, d): their solver decides the pairing.

    ``refine`` > 1 divides the step and multiplies max_iter (same horizon).
    """
    steps, tol, max_iter, n_max, _ = SETTINGS[(variant, value)]
    h = steps[PAPER_DIMS.index(d)] / refine
    max_iter = max_iter * refine
    ranks, failures, i, k = [], 0, 0, 0
    clock = time.process_time()
    too_high = 0
    for k in range(n_max):
        run_ = _loop_run(variant, d, i, k, Qs, Vs, per_dim, stream, h, tol, max_iter)
        if run_.status == "converged":
            rank = rank_of(run_.final, config.rank_tol)
            if rank <= (d + 1) // 2:
                ranks.append(rank)
            else:
                too_high += 1
            i += 1
        else:
            failures += 1
        if i == config.runs:
            break
    counts = np.bincount(ranks, minlength=d + 1)
    return {
        "counts": counts.tolist(),
        "too_high": too_high,
        "failures": failures,
        "attempts": k + 1,
        "seconds": time.process_time() - clock,
    }


def rank_counts(status, finals, d, tol):
    conv = status == "converged"
    ranks = np.array([rank_of(S, tol) for S in finals[conv]], dtype=int)
    keep = ranks <= (d + 1) // 2
    return np.bincount(ranks[keep], minlength=d + 1), int((~keep).sum()), ranks


def tight_records(config, variant, value, per_d, Qs, Vs, per_dim, streams) -> dict:
    """The protocol's records re-run at ``config.tight_rtol`` (one batch): per d, the
    statuses and finals of the converged reference on the same pairs."""
    tight = dataclasses.replace(config, rtol=config.tight_rtol)
    jobs = [(d, int(i), int(k)) for d, data in per_d.items() for i, k in data["pairs"]]
    outcomes, _ = evaluate(tight, variant, value, jobs, Qs, Vs, per_dim, streams)
    out = {}
    for d, data in per_d.items():
        records = [outcomes[(d, int(i), int(k))] for i, k in data["pairs"]]
        out[d] = {
            "status": np.array([r[0] for r in records]),
            "final": np.array([r[1] for r in records]),
        }
    return out


def tight_summary(config, d, data, tight) -> dict:
    """tpde at its tolerance against the converged reference on the same records. Where
    every status agrees, the reference's protocol visits the same pairs: its counts are the
    converged histogram."""
    counts, too_high, _ = rank_counts(tight["status"], tight["final"], d, config.rank_tol)
    return {
        "counts": counts.tolist(),
        "too_high": too_high,
        **matching(config, data["status"], data["final"], tight["status"], tight["final"]),
    }


def _loop_run(variant, d, i, k, Qs, Vs, per_dim, stream, h, tol, max_iter):
    """The paper's loop on pair (i, k) of dimension d: the i-th (Q, V) of d from Σ₀ = stream[k],
    step h, K = −Q."""
    index = PAPER_DIMS.index(d) * per_dim + i
    return projected_euler(stream[k], Qs[index], -Qs[index], Vs[index], variant=variant, step=h,
                           tol_low=tol, max_iter=max_iter)  # fmt: skip


def loop_runs(config, variant, value, d, picks, Qs, Vs, per_dim, stream, refine: int = 1):
    """The paper's loop at h / refine (max_iter × refine) on pairs ``picks``: statuses,
    finals, CPU seconds per run and per iteration."""
    steps, tol, max_iter, _, _ = SETTINGS[(variant, value)]
    runs, clock = [], time.process_time()
    h = steps[PAPER_DIMS.index(d)] / refine
    for i, k in picks:
        runs.append(_loop_run(variant, d, i, k, Qs, Vs, per_dim, stream, h, tol, max_iter * refine))
    seconds = time.process_time() - clock
    iterations = sum(r.iterations + 1 for r in runs)
    status, finals = np.array([r.status for r in runs]), np.array([r.final for r in runs])
    return status, finals, seconds / max(len(runs), 1), seconds / max(iterations, 1)


def loop_iterations(variant, value, d, data) -> int:
    """Iterations the paper's loop needs at its step h for the records ``data`` if it followed
    the ODE: each run's event time (converged) or horizon (not) over h; at h / r, r times
    as many. With the loop's measured cost per iteration, the cost of a loop as accurate as
    the ODE (its own protocol then visits the same records)."""
    steps, _, max_iter, _, _ = SETTINGS[(variant, value)]
    h = steps[PAPER_DIMS.index(d)]
    return int(np.minimum(np.ceil(data["time"] / h), max_iter).sum())


def matching(config, status, finals, ref_status, ref_finals) -> dict:
    """Share of runs with the reference's status, and of those converged in both with its rank."""
    both = (status == "converged") & (ref_status == "converged")
    same = [
        rank_of(a, config.rank_tol) == rank_of(b, config.rank_tol)
        for a, b in zip(finals[both], ref_finals[both], strict=True)
    ]
    return {
        "status_agreement": float(np.mean(status == ref_status)),
        "rank_agreement": float(np.mean(same)) if same else None,
    }


def paper_subset(config, variant, value, d, data, Qs, Vs, per_dim, stream, tight=None):
    """The paper's loop on the first pairs the ODE protocol visited: same matrices.

    With the converged reference ``tight`` (V = GᵀG rows), the loop at h and tpde are each
    compared with it on those pairs, and the loop at h / r for r in ``subset_refine`` on the
    first ``refine_runs`` pairs that converge (a refined loop's run to max_iter × r is long).
    """
    n = min(config.paper_runs, len(data["pairs"]))
    if n == 0:
        return {}
    picks = data["pairs"][:n]
    loop = (config, variant, value, d)
    status, finals, seconds, per_iteration = loop_runs(*loop, picks, Qs, Vs, per_dim, stream)
    out = {"runs": n, **matching(config, status, finals, data["status"][:n], data["final"][:n])}
    out["seconds_per_run"], out["seconds_per_iteration"] = seconds, per_iteration
    if tight is None:
        return out
    ref = tight["status"][:n], tight["final"][:n]
    out["loop_vs_tight"] = matching(config, status, finals, *ref)
    out["tpde_vs_tight"] = matching(config, data["status"][:n], data["final"][:n], *ref)
    chosen = np.flatnonzero(tight["status"] == "converged")[: config.refine_runs]
    ref = tight["status"][chosen], tight["final"][chosen]
    out["refined_runs"] = len(chosen)
    out["refined_tpde_vs_tight"] = matching(
        config, data["status"][chosen], data["final"][chosen], *ref
    )
    out["refined"] = {}
    for r in config.subset_refine:
        fine = loop_runs(*loop, data["pairs"][chosen], Qs, Vs, per_dim, stream, r)
        out["refined"][str(r)] = {**matching(config, fine[0], fine[1], *ref),
                                  "seconds_per_iteration": fine[3]}  # fmt: skip
    return out


def _as_good(match: dict, target: dict) -> bool:
    """Whether a run's shares of converged statuses and ranks reach tpde's."""
    rank, goal = match["rank_agreement"] or 0.0, target["rank_agreement"] or 0.0
    return match["status_agreement"] >= target["status_agreement"] and rank >= goal


def equal_accuracy(config, row) -> tuple[str, float | None]:
    """(h/r, CPU seconds) of the loop as accurate as tpde on the row's records (the
    ``ranks`` report's notes), or ("—", None) where the row has no refined runs. Per d the
    coarsest good r; where none is good, the finest tried, and the label says '>' (a lower
    bound)."""
    chosen, short, total = [], False, 0.0
    for d in config["dims"]:
        e = row[str(d)]
        sub = e.get("paper_subset") or {}
        if not sub.get("refined"):
            return "—", None
        good = [int(r) for r, m in sub["refined"].items()
                if _as_good(m, sub["refined_tpde_vs_tight"])]  # fmt: skip
        r = min(good) if good else max(int(r) for r in sub["refined"])
        short = short or not good
        chosen.append(r)
        total += e["loop_iterations"] * r * sub["refined"][str(r)]["seconds_per_iteration"]
    return ("> " if short else "") + f"h/{max(chosen)}", total


def agreement(ours, table) -> dict:
    """Two-sample chi-square test of homogeneity (scipy) and the largest |Δ| in multinomial sd.

    Both histograms are treated as samples; agreement when p ≥ 0.01. Empty rank columns are
    dropped. sd per cell: √(n p̂(1 − p̂)) with p̂ the pooled proportion.
    """
    from scipy.stats import chi2_contingency

    ours, table = np.asarray(ours, float), np.asarray(table, float)
    keep = (ours + table) > 0
    counts = np.stack([ours[keep], table[keep]])
    if counts.shape[1] < 2:
        p_value = 1.0
    else:
        p_value = float(chi2_contingency(counts, correction=False).pvalue)
    pooled = counts.sum(0) / counts.sum()
    n = ours.sum()
    sd = np.sqrt(np.maximum(n * pooled * (1 - pooled), 1e-12))
    z = np.abs(counts[0] - counts[1] * n / max(table.sum(), 1)) / sd
    return {"p_value": p_value, "max_abs_z": float(z.max()), "agrees": p_value >= 0.01}
