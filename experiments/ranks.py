"""Experiment 2: rank histograms of the stationary covariances, d ∈ {3, 4, 5} (MATH.md §6).

Q = randn(d//2, d) (``np.random.seed(40)``, 100 per d), K = −Q, so A = −QᵀQ/√d ⪯ 0 and
(MATH.md §4 item 4) stationary points have rank ≤ dim ker Q = ⌈d/2⌉; V = I or V = GᵀG
(seed 26 for softmax, 27 for L2); one Σ₀ = SSᵀ per run from the stream of
``np.random.seed(41)`` (reset per d). The authors' protocol draws Σ₀ after Σ₀ and moves on
to the next Q only when a run converges (‖Σ̇‖_F < tol before max_iter · h, tr Σ ≤ 1e3);
rank = #{eigenvalues > 0.1} of the converged Σ, and ranks above ⌈d/2⌉ are left out.

Here every run is a batched Gaussian ODE (tpde, Dormand–Prince, one padded batch for all
three d at once) with the same stopping rules and horizons. The protocol's pairing of Q's
with draws depends on which runs fail; it is resolved by speculative rounds (each round
evaluates the pairs every possible shift may need, in one batch), so the pairs are exactly
those the authors' loop would visit if it solved the ODE exactly.

For V = I the limit is known in closed form: W(WᵀΣ₀⁻¹W)⁻¹Wᵀ with W an orthonormal basis of
ker Q (WᵀΣ⁻¹W is conserved by both the softmax and the L2 flow and BΣ* = 0), so the exact
rank counts are computed too ("theory"), and the counts of the paper's projected-Euler loop
(:mod:`paper_euler`) on the same pairs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.attention import L2, Softmax

from . import _framework as fw
from ._paper import flow
from .paper_euler import projected_euler

NAME = "ranks"
TITLE = "Experiment 2 — rank histograms, d ∈ {3, 4, 5}"
PAPER_DIMS = (3, 4, 5)

#: The authors' settings per (variant, value): step per d, tol_low, max_iter, n_max, V seed.
SETTINGS = {
    ("softmax", "identity"): ((0.09, 0.05, 0.02), 1e-4, 60_000, 1_000, None),
    ("softmax", "random"): ((0.09, 0.06, 0.02), 5e-5, 90_000, 10_000, 26),
    ("l2", "identity"): ((0.09, 0.06, 0.02), 1e-4, 60_000, 1_000, None),
    ("l2", "random"): ((0.15, 0.15, 0.15), 5e-5, 50_000, 1_000, 27),
}
#: MATH.md §6: the authors' code re-run (V = I).
TABLE = {
    ("softmax", "identity"): {
        3: {0: 3, 1: 48, 2: 49},
        4: {0: 11, 1: 47, 2: 42},
        5: {1: 5, 2: 54, 3: 41},
    },
    ("l2", "identity"): {3: {1: 32, 2: 68}, 4: {1: 31, 2: 69}, 5: {2: 46, 3: 54}},
}


@dataclass(frozen=True)
class Config:
    """Rows (variant × value) and sizes; the paper's seeds and stopping rules."""

    variants: tuple[str, ...] = ("softmax", "l2")
    values: tuple[str, ...] = ("identity", "random")
    dims: tuple[int, ...] = PAPER_DIMS
    runs: int = 100  # converged runs per d (the paper's 100)
    q_seed: int = 40
    init_seed: int = 41
    rank_tol: float = 0.1
    rtol: float = 1e-5  # Dormand–Prince tolerance: the V = I counts are identical at 1e-4…1e-6
    paper_runs: int = 10  # pairs per (row, d) re-run with the paper's loop on the same matrices
    paper_full: bool = True  # run the authors' whole protocol with their loop (minutes)
    refine: int = 5  # also run it with h / refine (max_iter × refine) on the softmax V = I
    refine_dims: tuple[int, ...] = (3,)  # rows of these d: Euler's counts → the ODE's (0: off)

    def check(self) -> None:
        fw.check_choices("variants", self.variants, ("softmax", "l2"))
        fw.check_choices("values", self.values, ("identity", "random"))
        if not self.dims or any(d not in PAPER_DIMS for d in self.dims):
            raise ValueError(f"dims must be among {PAPER_DIMS} (the paper's step sizes).")
        if self.refine < 0 or any(d not in PAPER_DIMS for d in self.refine_dims):
            raise ValueError("refine must be >= 0 and refine_dims among (3, 4, 5).")
        if self.runs < 1 or self.paper_runs < 0 or self.rtol <= 0 or self.rank_tol <= 0:
            raise ValueError("runs must be >= 1, paper_runs >= 0, rtol and rank_tol > 0.")


#: --quick: the V = I rows (the ones MATH.md tabulates). The V = GᵀG rows are stiff (fast
#: modes ~ ‖V‖‖A‖‖Σ‖ force explicit steps of the size of the paper's own h over horizons
#: of 10³–10⁴) and take minutes.
QUICK = {"values": "identity", "paper_runs": "3", "refine": "0"}


# ---------------------------------------------------------------------- the paper's draws
def draws(config: Config, variant: str, value: str):
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


def init_stream(config: Config, d: int, count: int) -> np.ndarray:
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


def _evaluate(config, variant, value, jobs, Qs, Vs, per_dim, streams):
    """ODE outcomes (status, final Σ) of jobs [(d, i, k)] in one padded batch."""
    steps, tol, max_iter, _, _ = SETTINGS[(variant, value)]
    D = max(d for d, _, _ in jobs)
    B = len(jobs)
    Q = np.zeros((B, D // 2, D))
    K, V, S0 = np.zeros_like(Q), np.zeros((B, D, D)), np.zeros((B, D, D))
    horizon = np.zeros(B)
    for b, (d, i, k) in enumerate(jobs):
        index = PAPER_DIMS.index(d) * per_dim + i
        Q[b, : d // 2, :d] = Qs[index] / math.sqrt(d)  # the score scale 1/√d, folded into Q
        K[b, : d // 2, :d] = -Qs[index]
        V[b, :d, :d] = Vs[index]
        S0[b, :d, :d] = streams[d][k]
        horizon[b] = max_iter * steps[PAPER_DIMS.index(d)]
    Q, K, V = (torch.as_tensor(m) for m in (Q, K, V))
    # scale = 1: the paper's 1/√d is folded into Q; the L2 key term |Ky|² stays unscaled.
    field = Softmax(Q, K, V, scale=1.0) if variant == "softmax" else L2(Q, K, V, 1.0, form="code")
    res = flow(
        field,
        S0,
        horizon=float(horizon.max()),
        tol_low=tol,
        tol_high=1e3,
        first_step=0.02,
        rtol=config.rtol,
        atol=config.rtol * 1e-3,
    )
    status = res.status.astype(object)
    late = ~np.isnan(res.event_time) & (res.event_time > horizon * (1 + 1e-12))
    status[late | (status == "completed")] = "completed"  # the horizon came first
    return {
        job: (str(s), res.final[b]) for b, (job, s) in enumerate(zip(jobs, status, strict=True))
    }, res


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
        clock = time.perf_counter()
        outcomes, _ = _evaluate(config, variant, value, jobs, Qs, Vs, per_dim, streams)
        seconds += time.perf_counter() - clock
        rounds, evaluated = rounds + 1, evaluated + len(jobs)
        for (d, i, k), outcome in outcomes.items():
            caches[d][(i, k)] = outcome
        for d, p in protocols.items():
            p.advance(caches[d])
    per_d = {}
    for d, p in protocols.items():
        statuses = [caches[d][pair][0] for pair in p.records]
        finals = np.array([caches[d][pair][1][:d, :d] for pair in p.records])
        per_d[d] = {"pairs": np.array(p.records), "status": np.array(statuses), "final": finals}
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
    clock = time.perf_counter()
    too_high = 0
    for k in range(n_max):
        index = PAPER_DIMS.index(d) * per_dim + i
        run_ = projected_euler(
            stream[k], Qs[index], -Qs[index], Vs[index], variant=variant, step=h,
            tol_low=tol, max_iter=max_iter,
        )  # fmt: skip
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
        "seconds": time.perf_counter() - clock,
    }


def _counts(status, finals, d, tol):
    conv = status == "converged"
    ranks = np.array([rank_of(S, tol) for S in finals[conv]], dtype=int)
    keep = ranks <= (d + 1) // 2
    return np.bincount(ranks[keep], minlength=d + 1), int((~keep).sum()), ranks


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {}, {"rows": {}}
    rows = [(v, w) for v in config.variants for w in config.values]
    # Warm-up: torch's first batched solves and eigendecompositions in a process carry a
    # one-time cost (0.4 s measured) that would land on the first row's timing.
    ode_protocol(dataclasses.replace(config, runs=2, dims=(3,)), *rows[0])
    for variant, value in fw.progress(rows, "ranks"):
        per_d, stats, (Qs, Vs, per_dim, streams) = ode_protocol(config, variant, value)
        row = {"ode_seconds": stats["seconds"], "rounds": stats["rounds"]}
        row["evaluated"] = stats["evaluated"]
        for d in config.dims:
            data = per_d[d]
            counts, too_high, ranks = _counts(data["status"], data["final"], d, config.rank_tol)
            key = f"{variant}__{value}__{d}"
            arrays[key + "__pairs"] = data["pairs"]
            arrays[key + "__status"] = data["status"].astype("U12")
            arrays[key + "__ode_counts"] = counts
            entry = {
                "ode_counts": counts.tolist(),
                "ode_too_high": too_high,
                "ode_status": dict(
                    zip(*np.unique(data["status"], return_counts=True), strict=True)
                ),
            }
            conv_pairs = data["pairs"][data["status"] == "converged"]
            index = [PAPER_DIMS.index(d) * per_dim + i for i, _ in conv_pairs]
            if value == "identity":
                limits = [
                    theory_limit(Qs[j], streams[d][k])
                    for j, (_, k) in zip(index, conv_pairs, strict=True)
                ]
                theory = np.array([rank_of(S, config.rank_tol) for S in limits])
                entry["theory_counts"] = np.bincount(theory, minlength=d + 1).tolist()
                entry["ode_theory_rank_agreement"] = float(np.mean(theory == ranks))
                arrays[key + "__theory_counts"] = np.bincount(theory, minlength=d + 1)
            entry["paper_subset"] = _paper_subset(config, variant, value, d, data, Qs, Vs,
                                                  per_dim, streams[d])  # fmt: skip
            if config.paper_full:
                full = paper_protocol(config, variant, value, d, Qs, Vs, per_dim, streams[d])
                entry["paper_full"] = full
                arrays[key + "__paper_counts"] = np.array(full["counts"])
            if config.refine > 1 and (variant, value) == ("softmax", "identity"):
                if d in config.refine_dims:
                    entry["paper_refined"] = paper_protocol(
                        config, variant, value, d, Qs, Vs, per_dim, streams[d], config.refine
                    )
            table = TABLE.get((variant, value), {}).get(d)
            if table is not None and config.runs == 100 and config.q_seed == 40:
                entry["table_counts"] = [table.get(r, 0) for r in range(d + 1)]
                entry["agreement"] = agreement(counts, entry["table_counts"])
            row[str(d)] = entry
        results["rows"][f"{variant}__{value}"] = row
    fw.save(out, config, arrays, results, started)


def _paper_subset(config, variant, value, d, data, Qs, Vs, per_dim, stream) -> dict:
    """The paper's loop on the first pairs the ODE protocol visited: same matrices."""
    picks = data["pairs"][: config.paper_runs]
    if len(picks) == 0:
        return {}
    steps, tol, max_iter, _, _ = SETTINGS[(variant, value)]
    same_status, same_rank, clock = [], [], time.perf_counter()
    for b, (i, k) in enumerate(picks):
        index = PAPER_DIMS.index(d) * per_dim + i
        r = projected_euler(
            stream[k], Qs[index], -Qs[index], Vs[index], variant=variant,
            step=steps[PAPER_DIMS.index(d)], tol_low=tol, max_iter=max_iter,
        )  # fmt: skip
        same_status.append(r.status == data["status"][b])
        if r.status == "converged" == data["status"][b]:
            same_rank.append(
                rank_of(r.final, config.rank_tol) == rank_of(data["final"][b], config.rank_tol)
            )
    seconds = time.perf_counter() - clock
    return {
        "runs": len(picks),
        "status_agreement": float(np.mean(same_status)),
        "rank_agreement": float(np.mean(same_rank)) if same_rank else None,
        "seconds_per_run": seconds / len(picks),
    }


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


# ---------------------------------------------------------------------- figures and report
def _rows(results) -> list[tuple[str, str]]:
    return [tuple(k.split("__")) for k in results["rows"]]


def plot(out: Path) -> list[Path]:
    """Histograms per row (variant, value) and d: tpde ODE, theory, paper loop, MATH.md table."""
    plt = fw.pyplot()
    config, _, results = fw.load(out)
    rows = _rows(results)
    dims = config["dims"]
    fig, axes = plt.subplots(len(rows), len(dims), figsize=(3.6 * len(dims), 2.8 * len(rows)))
    axes = np.atleast_2d(axes)
    for r, (variant, value) in enumerate(rows):
        row = results["rows"][f"{variant}__{value}"]
        for c, d in enumerate(dims):
            entry, ax = row[str(d)], axes[r, c]
            series = [("tpde ODE", entry["ode_counts"])]
            for label, key in (
                ("theory (V = I)", "theory_counts"),
                ("paper loop", "paper_full"),
                ("MATH.md table", "table_counts"),
            ):
                if key in entry:
                    counts = entry[key]["counts"] if key == "paper_full" else entry[key]
                    series.append((label, counts))
            width = 0.8 / len(series)
            for s, (label, counts) in enumerate(series):
                x = np.arange(len(counts)) + (s - (len(series) - 1) / 2) * width
                ax.bar(x, counts, width=width, label=label)
            ax.set_xticks(range(d + 1))
            ax.set_title(f"{variant}, V {value}, d = {d}", fontsize=9)
            if c == 0:
                ax.set_ylabel("runs")
            if r == len(rows) - 1:
                ax.set_xlabel("rank (#eigenvalues > 0.1)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return [fw.savefig(fig, out / "ranks_histograms.png")]


def _fmt(counts) -> str:
    return "{" + ", ".join(f"{r}: {c}" for r, c in enumerate(counts) if c) + "}"


def report(out: Path) -> fw.Report:
    config, _, results = fw.load(out)
    claims, table_rows, speed_rows = [], [], []
    for variant, value in _rows(results):
        row = results["rows"][f"{variant}__{value}"]
        paper_seconds = ode_runs = 0.0
        for d in config["dims"]:
            e = row[str(d)]
            bound = (d + 1) // 2
            cells = [variant, value, d, _fmt(e["ode_counts"])]
            cells.append(_fmt(e["theory_counts"]) if "theory_counts" in e else "—")
            cells.append(_fmt(e["paper_full"]["counts"]) if "paper_full" in e else "—")
            cells.append(_fmt(e["table_counts"]) if "table_counts" in e else "—")
            ag = e.get("agreement")
            cells.append(
                "—" if ag is None else f"p = {ag['p_value']:.2g}, max |z| {ag['max_abs_z']:.1f}"
            )
            table_rows.append(cells)
            over = sum(e["ode_counts"][bound + 1 :]) + e["ode_too_high"]
            claims.append(
                fw.Claim(
                    f"{variant}, V {value}, d = {d}: rank ≤ ⌈d/2⌉ = {bound} (MATH.md §4 item 4)",
                    f"tpde ODE: {_fmt(e['ode_counts'])}, {over} above the bound",
                    "agrees" if over == 0 else "differs",
                )
            )
            if ag is not None:
                theory = e.get("ode_theory_rank_agreement")
                claims.append(
                    fw.Claim(
                        f"{variant}, V = I, d = {d}: MATH.md's re-run {_fmt(e['table_counts'])}",
                        f"tpde ODE {_fmt(e['ode_counts'])} (two-sample χ² p = "
                        f"{ag['p_value']:.2g}); per-run rank = closed-form limit's in "
                        f"{theory:.0%}",
                        "agrees" if ag["agrees"] else "differs",
                    )
                )
            if "paper_full" in e and "table_counts" in e:
                loop, table = _fmt(e["paper_full"]["counts"]), _fmt(e["table_counts"])
                claims.append(
                    fw.Claim(
                        f"{variant}, V = I, d = {d}: the authors' loop gives MATH.md's re-run "
                        f"{table}",
                        f"the faithful numpy re-implementation (benchmarks' baseline), whole "
                        f"protocol on the same draws: {loop}",
                        "agrees" if loop == table else "differs",
                    )
                )
            sub = e.get("paper_subset") or {}
            n_records = sum(e["ode_status"].values())
            if sub:
                paper_seconds += sub["seconds_per_run"] * n_records
                ode_runs += n_records
            if "paper_full" in e:
                paper_seconds += (
                    e["paper_full"]["seconds"] - sub.get("seconds_per_run", 0) * n_records
                )
        if ode_runs:
            speed_rows.append(
                [variant, value, int(ode_runs), f"{row['ode_seconds']:.2f}", f"{paper_seconds:.1f}",
                 f"{paper_seconds / row['ode_seconds']:.0f}×", row["rounds"]]
            )  # fmt: skip
    header = ["variant", "V", "d", "tpde ODE", "theory", "paper loop (full)", "MATH.md"]
    tables = [
        "Rank counts (rank: runs). Agreement with MATH.md: two-sample χ² test of homogeneity, "
        "agreement when p ≥ 0.01; max |z| is the largest cell gap in multinomial sd.\n\n"
        + fw.markdown_table([*header, "χ² vs MATH.md"], table_rows)
    ]
    if speed_rows:
        tables.append(
            "Speed per row: tpde's batched ODE (all d, all protocol rounds) against the paper's "
            "loop (its full protocol when run, else seconds per run on a subset × runs):\n\n"
            + fw.markdown_table(
                ["variant", "V", "runs", "tpde s", "paper s", "speed-up", "rounds"], speed_rows
            )
        )
    agree = sum(c.verdict == "agrees" for c in claims)
    summary = f"{len(table_rows)} histograms; {agree}/{len(claims)} checks agree."
    refined = "; ".join(
        f"The paper's loop at h/{config['refine']} gives {_fmt(e['paper_refined']['counts'])} "
        f"at d = {d} (tpde ODE {_fmt(e['ode_counts'])})"
        for d in config["dims"]
        for e in [results["rows"].get("softmax__identity", {}).get(str(d), {})]
        if "paper_refined" in e
    )
    refined = (refined + ".") if refined else "(Run with refine > 1 to see the loop at h/refine.)"
    notes = [
        "The softmax V = I counts of MATH.md contain rank 0 (3 at d = 3, 11 at d = 4), which "
        "the ODE cannot produce: its limit W(WᵀΣ₀⁻¹W)⁻¹Wᵀ is nonzero. They come from the "
        "paper's explicit Euler step (h = 0.09, 0.05, 0.02) overshooting a decaying eigenvalue, "
        "which the PSD projection then sets to 1e-14. " + refined,
        "Softmax and L2 (code form) have the same V = I limit (WᵀΣ⁻¹W is conserved by both), "
        "so their exact histograms coincide; the L2 table equals them because its Euler "
        "steps are stable.",
    ]
    return fw.Report(summary, claims, [("ranks_histograms.png", "Rank histograms.")], tables, notes)
