"""The circle-pde study's report: claims with verdicts computed from the saved data."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np

from .. import framework as fw
from .config import Config
from .gap import gap_claim, gap_table
from .meta_report import (
    count_claims,
    escape_claim,
    first_stated,
    lifetime_claims,
    meta_table,
    settled_sweep,
)

#: Tolerances of the verdicts: the fitted slope of start against log N within 25% of the
#: law's 1/(2λ_k*); the PDE's first cluster within 15% of the particles' first-cluster line
#: at N_eff.
SLOPE_TOLERANCE, PDE_TOLERANCE = 0.25, 0.15


def report(out: Path) -> fw.Report:
    config, arrays, r = fw.load(out)
    rate = r["rate"]
    claims = [
        fw.Claim(
            "the particles approach the PDE at the Monte-Carlo rate N^{-1/2} while the "
            "modes are small",
            f"W1 ∝ N^{rate:.2f} for t ≤ {r['linear_until']:.2f} (where e^(λ_k* t)/√N_min ≤ 0.1)",
            "agrees" if abs(rate + 0.5) < 0.1 else "differs",
        )
    ]
    for beta, table in r["plateaus"].items():
        claims += plateau_claims(beta, table, r["laws"][beta])
    main = next(iter(r["laws"]))  # the β of the PDE
    fit = first_cluster_fit(config["sizes"], arrays, r["laws"][main]["law_slope"])
    claims.append(pde_claim(r, fit))
    claims.append(gap_claim(config, r["gap"], arrays))
    escape, fits = escape_claim(config, arrays, r["laws"][main])
    meta, lived = r["metastable"], settled_sweep(r["metastable"])
    kept, kappa = lifetime_claims(lived, config["meta_count"], config["meta_t1"])
    note = first_stated(meta, config["meta_count"])
    kept[0] = dataclasses.replace(kept[0], outcome=kept[0].outcome + note)
    metastable = [escape, *count_claims(meta, config["meta_size"], config["escape_level"]), *kept]
    full = Config()
    small = config["meta_seeds"] < full.meta_seeds or config["meta_size"] < full.meta_size
    if small or len(config["sizes"]) < len(full.sizes):
        metastable = fw.indicative(metastable)
    claims += metastable
    summary = (
        f"PDE on M = {', '.join(str(p['grid']) for p in r['pde'])} angles, resolved to t = "
        f"{', '.join(format(p['end'], '.2f') for p in r['pde'])}; particles to t = "
        f"{config['t1']:g}: "
        f"W1 ∝ N^{rate:.2f}; first plateaus in {plateau_summary(r)}; {meta_summary(fits, kappa)}."
    )
    notes = [
        f"PDE, M = {p['grid']}: stopped: {p['unresolved']}" for p in r["pde"] if p["unresolved"]
    ]
    if small or len(config["sizes"]) < len(full.sizes):
        notes.append(fw.below_full_size("metastability part"))
    notes += [
        f"particles ({x['status']}) at β = {x['beta']}, N = {x['n']}: {x['steps']} steps"
        for x in r["runs"]
        if x["status"] not in ("completed", "stopped")
    ]
    if "cpu_seconds" in r:
        notes.append(cost_note(r))
    return fw.Report(
        summary,
        claims,
        [
            (
                "circle_pde.png",
                "PDE density, particles' histogram (largest N), W1 against the fixed-grid PDE; "
                "W1 of the largest cloud against the refined / node PDE with the Monte-Carlo "
                "level and the linear prediction",
            ),
            (
                "circle_pde_plateaus.png",
                "cluster count over t per N, plateau start against log N with the law, "
                "first clusters against log N with the PDE's, particles over the long window",
            ),
            (
                "circle_pde_metastable.png",
                "escape time against ln N with the fit and the law, cluster counts of the β "
                "sweep, lifetimes against β (censored: lower bounds)",
            ),
        ],
        tables=[
            plateau_table(r, arrays),
            gap_table(config, r["gap"], arrays),
            meta_table(lived, config["meta_count"], config["meta_t1"]),
        ],
        notes=notes,
    )


def cost_note(r: dict) -> str:
    """The run's CPU seconds per part and its wall time on its worker processes."""
    cpu = r["cpu_seconds"]
    largest = max((x for x in r["runs"] if not x.get("escape_only")), key=lambda x: x["n"])
    return (
        f"cost: {cpu['total']:.0f} s CPU in all (PDE {cpu['pde']:.0f}, particles "
        f"{cpu['particles']:.0f} of which the first N = {largest['n']} draw "
        f"{largest['cpu_seconds']:.0f}, escape-only {cpu['escape']:.0f}, β sweep "
        f"{cpu['sweep']:.0f}), {r['seconds']:.0f} s wall on {r.get('workers', 1)} worker "
        "process(es) (one torch thread each; the wall time depends on the machine's load)"
    )


def meta_summary(fits: dict, kappa: dict | None) -> str:
    main = fits["main"]
    escape = (
        f"escape slope {main['slope']:.3f} ± {main['slope_se']:.3f}" if main else "no escape fit"
    )
    trap = f"κ = {kappa['slope']:.2f} ± {kappa['slope_se']:.2f}" if kappa else "no lifetime fit"
    return f"{escape}; {trap}"


def _rows(table: dict) -> list[list]:
    return [row for rows in table.values() for row in rows if row]


def plateau_claims(beta: str, table: dict, law: dict) -> list[fw.Claim]:
    """k* clusters first; start ∝ log N/(2λ_k*); the plateau outlives its formation."""
    rows = _rows(table)
    if not rows:
        return [fw.Claim(f"β = {beta}: metastable plateaus", "no plateau found", "n/a")]
    k = law["k_star"]
    tally = Counter(row[0] for row in rows)
    common = tally.most_common(1)[0][0]
    verdict = "agrees" if common == k else ("partly" if k in tally else "differs")
    out = [
        fw.Claim(
            f"β = {beta}: k* = argmax k²I_k(β) = {k} clusters form first (Bruno et al.)",
            "first plateau counts: "
            + ", ".join(f"{c} ×{m}" for c, m in sorted(tally.items()))
            + f" ({len(rows)} runs)",
            verdict,
        )
    ]
    fit = law["fit"]
    if fit is None:
        out.append(fw.Claim(f"β = {beta}: start ∝ log N/(2λ_k*)", "one N only", "n/a"))
    else:
        ratio = fit["slope"] / law["law_slope"]
        out.append(
            fw.Claim(
                f"β = {beta}: the first plateau starts at log N/(2λ_k*) + c (linear growth "
                f"of the noise 1/√N at λ_k* = {law['rate']:.4f})",
                f"fitted slope {fit['slope']:.3f} against 1/(2λ_k*) = {law['law_slope']:.3f} "
                f"(×{ratio:.2f}; tolerance {SLOPE_TOLERANCE:.0%})",
                "agrees" if abs(ratio - 1) <= SLOPE_TOLERANCE else "differs",
            )
        )
    starts = float(np.median([row[1] for row in rows]))
    durations = float(np.median([row[2] for row in rows]))
    censored = sum(bool(row[3]) for row in rows)
    out.append(
        fw.Claim(
            f"β = {beta}: the clusters persist for long times before merging (metastability)",
            f"median duration {durations:.1f} ({censored}/{len(rows)} still on at t1: lower "
            f"bounds) against a median start {starts:.1f}; criterion duration ≥ 2 × start",
            "agrees" if durations >= 2 * starts else "differs",
        )
    )
    return out


def first_cluster_fit(sizes, arrays: dict, law_slope: float, b: int = 0) -> dict | None:
    """The particles' first clusters (:func:`first_clusters`, every draw of β index ``b``)
    against log N: least-squares slope and offset, and the offset c of log N/(2λ_k*) + c
    (``law_slope`` = 1/(2λ_k*); the mean of t − law_slope·log N). None with fewer than two
    sizes where a draw clusters."""
    pairs = [(math.log(n), float(t)) for i, n in enumerate(sizes)
             for t in first_clusters(arrays, b, i) if np.isfinite(t)]  # fmt: skip
    if len({x for x, _ in pairs}) < 2:
        return None
    x, y = (np.array(v) for v in zip(*pairs, strict=True))
    slope, offset = np.polyfit(x, y, 1)
    law = float(np.mean(y - law_slope * x))
    return {"slope": float(slope), "offset": float(offset), "law_offset": law}


def pde_claim(r: dict, fit: dict | None) -> fw.Claim:
    """The PDE's first cluster (first save with a count ≥ 1) against the particles' first
    clusters (the same count ≥ 1) fitted against log N (``fit``, :func:`first_cluster_fit`)
    at N_eff = 4/a²: like for like."""
    finest = max(r["pde"], key=lambda p: p["grid"])
    law = next(iter(r["laws"].values()))
    reach = "; ".join(
        f"M = {p['grid']}: to t = {p['end']:.2f} ({p['status']}), {p['count_at_end']} clusters"
        for p in r["pde"]
    )
    claim = (
        "the PDE is the N → ∞ limit: its first cluster (first save with a count ≥ 1) forms "
        "where the particles' first clusters (same count), fitted against log N, reach "
        "N_eff = 4/a² (modes of amplitude a/2 = 1/√N_eff)"
    )
    first = finest["first_cluster"]
    if first is None or fit is None or not r["n_eff"]:
        why = "no cluster in the PDE before it stops" if first is None else "no line to compare"
        return fw.Claim(claim, f"{reach}; {why}", "n/a")
    log_n = math.log(r["n_eff"])
    line = fit["offset"] + fit["slope"] * log_n
    anchored = fit["law_offset"] + law["law_slope"] * log_n
    close = abs(first - line) <= PDE_TOLERANCE * line
    return fw.Claim(
        claim,
        f"{reach}; PDE first cluster at t = {first:.2f} against {line:.2f} on the particles' "
        f"first-cluster line (slope {fit['slope']:.3f}) at N_eff = {r['n_eff']:.1e} "
        f"(tolerance {PDE_TOLERANCE:.0%}; {anchored:.2f} on log N/(2λ_k*) + c, c fitted to "
        "the particles' first clusters)",
        "agrees" if close else "differs",
    )


def law_offset(table: dict, law: dict) -> float:
    """c of start = log N/(2λ_k*) + c fitted to the first plateaus (least squares: the
    mean of start − log N/(2λ_k*))."""
    rows = [(int(n), row[1]) for n, found in table.items() for row in found if row]
    return float(np.mean([s - law["law_slope"] * math.log(n) for n, s in rows]))


def plateau_summary(r: dict) -> str:
    parts = []
    for beta, table in r["plateaus"].items():
        rows = _rows(table)
        if rows:
            starts = [row[1] for row in rows]
            parts.append(f"β = {beta} from t = {min(starts):.1f} … {max(starts):.1f}")
    return "; ".join(parts) or "none"


def first_clusters(arrays: dict, b: int, i: int) -> np.ndarray:
    """The first saved time with a count ≥ 1 of every draw of β index b and size index i
    (NaN for a draw that never has one)."""
    counts = arrays["counts"][b, i]
    drawn = counts[:, 0] >= 0
    seen = counts[drawn] >= 1
    first = arrays["times"][np.argmax(seen, axis=1)]
    return np.where(seen.any(axis=1), first, np.nan)


def plateau_table(r: dict, arrays: dict) -> str:
    """Per β and N: draws, first cluster (mean), first plateau start (mean ± sd), counts,
    durations, the law."""
    rows = []
    for b, (beta, table) in enumerate(r["plateaus"].items()):
        law = r["laws"][beta]
        for i, (n, found) in enumerate(table.items()):
            if not found:
                continue  # not drawn at this β
            ok = [row for row in found if row]
            starts = np.array([row[1] for row in ok])
            durations = ", ".join(
                ("≥" if row[3] else "") + f"{row[2]:.0f}" + ("" if row[3] else f"→{row[4]}")
                for row in ok
            )
            rows.append([
                beta, n, f"{len(ok)}/{len(found)}",
                f"{np.nanmean(first_clusters(arrays, b, i)):.2f}",
                f"{starts.mean():.2f} ± {starts.std():.2f}" if len(ok) else "—",
                ", ".join(str(row[0]) for row in ok) or "—",
                durations or "—",
                f"{math.log(int(n)) * law['law_slope']:.2f}",
            ])  # fmt: skip
    return fw.markdown_table(
        ["β", "N", "draws with a plateau", "first cluster", "plateau start", "count",
         "duration (→ next count)", "log N/(2λ_k*)"],
        rows,
    )  # fmt: skip
