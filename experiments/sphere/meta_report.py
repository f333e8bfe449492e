"""The sphere study's metastability claims on S² (issue 35), with rules fixed before the run
(:mod:`.metastable`; MATH.md §9).

- Escape from uniform: t_esc = a + b·ln N by least squares over every draw at
  ``escape_beta`` (the first time A_l* = √E_l* reaches ε = ``escape_level``); **agrees** iff
  |b − 1/(2λ_l*)| ≤ 2 s.e.(b). Diagnostics: the same fit at ε/2 and 2ε, without the
  smallest N, and of the runner-up degree.
- First plateau = the peaks of f_l* (the rule of :mod:`.metastable`): **agrees** iff the
  first plateau's count equals the number of peaks in ≥ ``PEAK_SHARE`` of the draws at a β
  (a draw without a plateau counts as a miss); the evolved profile's peaks and ±1 beside it.
  Beside them (diagnostics added after the full run, the rule unchanged): the seeding of
  each draw (:mod:`.seeding`: the degree leading at the escape, measured and predicted by
  the linear growth of the draw's own A_l(0), the peaks of its part and of the linearly
  evolved profile) and the share of uniform clouds whose first degree to reach ε is l*.
- Lifetimes of the ``meta_count``-cluster state: log T = c + κβ over the uncensored
  lifetimes, κ > 2 s.e. for "exponentially long" and κ against the Dirac heuristic's
  (for two clusters, antipodal on S² as on S¹: σ_2 = 4e^{−2β}, κ = 2): the S¹ study's
  rules (:func:`experiments.circle_pde.meta_report.lifetime_claims`), on the first
  *settled* state of that count of each draw (:func:`settled`: a state that a larger count
  follows is a stage of the formation, as in the first-plateau rule). The rule stated
  before the full run took the first state of that count, formation stages included; its
  fit is reported beside the claim (one β = 5 draw passes 2 → 3 clusters within 2 time
  units while forming, a "lifetime" of 2 that flattens the fit).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from tpde.theory import dominant_mode, instability_rate

from .. import framework as fw
from ..circle_pde.meta_report import (
    fit_text,
    fit_variants,
    lifetime_claims,
    lifetime_fit,
    lifetimes_of,
)
from ..circle_pde.meta_report import settled_sweep as settled
from ..circle_pde.metastable import escape_times, line_fit
from ..common.pool import longest_first
from .seeding import lead_share

#: The least share of draws whose first plateau has as many clusters as f_l* has peaks.
PEAK_SHARE = 0.9


def runner_up(beta: float, top: int = 8) -> int:
    """The degree growing second fastest on S² at β."""
    rates = {l: float(instability_rate(l, beta, d=3)) for l in range(1, top + 1)}
    rates.pop(dominant_mode(beta, d=3))
    return max(rates, key=rates.get)


def escape_fit(config: dict, arrays: dict, degree: int, level: float, skip: int = 0) -> dict | None:
    """Escape times of degree ``degree`` at ``level`` against ln N over every draw of the
    sizes from index ``skip``: :func:`~experiments.circle_pde.metastable.line_fit` plus
    ``times`` {N: [t]} and ``missing`` (draws without a crossing); None with fewer than 3
    crossings at 2 sizes."""
    times, modes = arrays["meta_escape_times"], arrays["meta_escape_modes"]
    found = {}
    for i, n in enumerate(config["escape_sizes"]):
        if i >= skip:
            found[n] = escape_times(times, modes[i, : config["escape_draws"][i]], degree, level)
    pairs = [(math.log(n), float(t)) for n, ts in found.items() for t in ts if np.isfinite(t)]
    missing = sum(int(np.isnan(ts).sum()) for ts in found.values())
    if len(pairs) < 3 or len({x for x, _ in pairs}) < 2:
        return None
    fit = line_fit(*zip(*pairs, strict=True))
    return {**fit, "times": {str(n): ts.tolist() for n, ts in found.items()}, "missing": missing}


def escape_claim(config: dict, arrays: dict) -> tuple[fw.Claim, dict]:
    """The escape claim and its fits (``main``, ``half``, ``double``, ``large`` (without the
    smallest N), ``second``)."""
    beta, level = config["escape_beta"], config["escape_level"]
    star, second = dominant_mode(beta, d=3), runner_up(beta)
    law = 1 / (2 * float(instability_rate(star, beta, d=3)))
    fits = fit_variants(functools.partial(escape_fit, config, arrays), star, second, level)
    claim = (
        f"S² at β = {beta:g}: the escape from uniform (A_{star} = √E_{star} reaches ε = {level:g}) "
        f"takes ln N/(2λ_l*) + c: slope 1/(2λ_{star}) = {law:.3f} (MATH.md §9)"
    )
    fit = fits["main"]
    if fit is None:
        return fw.Claim(claim, "fewer than 3 escapes at 2 sizes", "n/a"), fits
    gap = abs(fit["slope"] - law)

    second_law = 1 / (2 * float(instability_rate(second, beta, d=3)))
    outcome = (
        f"b = {fit['slope']:.3f} ± {fit['slope_se']:.3f} (s.e.; {fit['n']} draws at N = "
        f"{', '.join(map(str, config['escape_sizes']))}, {fit['missing']} without a crossing), "
        f"|b − law| = {gap:.3f} = {gap / fit['slope_se']:.1f} s.e.; rule: agrees iff ≤ 2 s.e. "
        "Diagnostics: "
        + "; ".join([fit_text(fits["half"], "ε/2:"), fit_text(fits["double"], "2ε:"),
                     fit_text(fits["large"], "without the smallest N:"),
                     fit_text(fits["second"], f"degree {second}:")])
        + f" (its law {second_law:.3f})"
    )  # fmt: skip
    verdict = "agrees" if gap <= 2 * fit["slope_se"] else "differs"
    return fw.Claim(claim, outcome, verdict), {**fits, "law": law}


def _tally(values) -> str:
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{c} ×{n}" for c, n in sorted(counts.items()))


def peak_hits(first: list, peaks: list) -> tuple[int, int, int]:
    """(hits, within one, draws): draws whose first plateau's count equals ``peaks`` (a
    draw without a plateau is a miss), and equals it to ±1."""
    counts = [row[0] if row else None for row in first]
    hits = sum(c is not None and c == p for c, p in zip(counts, peaks, strict=True))
    near = sum(c is not None and abs(c - p) <= 1 for c, p in zip(counts, peaks, strict=True))
    return hits, near, len(counts)


def seeding_text(runs: list, first: list, l_star: int, peaks: list) -> str:
    """The seeding diagnostics of a set of draws (:mod:`.seeding`; "" for runs saved
    without them): the draws led by l* at the escape, those whose measured lead the linear
    growth of their own A_l(0) predicts, the rule's hits among the draws led by l* (what
    perfect seeding would leave), and among the rule's misses those whose first
    plateau has as many clusters as the leading degree's part has peaks (``lead_peaks``),
    as the cloud's own part of that degree at the escape (``own_peaks``), as g evolved to
    the measured escape time and to the lead's amplitude 1 (``escape_evolved_peaks``,
    ``evolved_peaks``); then the same four over every draw."""
    leads = [r.get("lead") for r in runs]
    if all(lead is None for lead in leads):
        return ""
    counts = [row[0] if row else None for row in first]
    draws = len(runs)
    misses = [i for i in range(draws) if counts[i] is None or counts[i] != peaks[i]]

    def equal(key: str, among) -> int:
        return sum(1 for i in among if counts[i] is not None and runs[i].get(key) == counts[i])

    predicted = sum(1 for r in runs if r.get("lead") is not None and r["predicted"] == r["lead"])
    keys = ("lead_peaks", "own_peaks", "escape_evolved_peaks", "evolved_peaks")
    led = [i for i in range(draws) if leads[i] == l_star]
    kept = sum(1 for i in led if counts[i] == peaks[i])
    return (
        f"; seeding (diagnostic): the degree leading at the escape is l* in "
        f"{len(led)}/{draws} (leads "
        f"{_tally(lead for lead in leads if lead is not None) or 'none'}), the linear growth "
        f"of the draw's own A_l(0) predicts it in {predicted}/{draws}; "
        + (
            f"the rule holds in {kept}/{len(led)} of the draws led by l*"
            if led
            else "no draw led by l*"
        )
        + f"; of the {len(misses)} "
        f"misses the first plateau has the peaks of the leading degree's part in "
        f"{equal(keys[0], misses)} (of the cloud's own part of it at the escape in "
        f"{equal(keys[1], misses)}), of the profile g evolved linearly to the measured "
        f"escape in {equal(keys[2], misses)} and to the lead's amplitude 1 in "
        f"{equal(keys[3], misses)} (over all draws: "
        + ", ".join(f"{equal(k, range(draws))}/{draws}" for k in keys)
        + ")"
    )


def share_text(beta: float, size: int | None, level: float) -> str:
    """The linear seeding's share of l* (:func:`~.seeding.lead_share`) at N = ``size`` and
    at 10⁶ tokens ("" without a size)."""
    if size is None:
        return ""
    share, when = lead_share(beta, size, level)
    large = lead_share(beta, 10**6, level)[0]
    return (
        f"; the noise of N = {size} uniform tokens, grown linearly, makes l* the first degree "
        f"to reach A_l = {level:g} in {share:.0%} of clouds (median t = {when:.1f}; "
        f"{large:.0%} at N = 10⁶)"
    )


def count_claims(sweep: dict, size: int | None = None, level: float = 0.1) -> list[fw.Claim]:
    """Per β of the sweep: the first plateau's count against the peaks of f_l* (the rule),
    with the seeding diagnostics (:func:`seeding_text`, :func:`share_text` for clouds of
    ``size`` tokens and the escape ``level``)."""
    out = []
    for beta, m in sweep.items():
        hits, near, draws = peak_hits(m["first"], m["peaks"])
        evolved, _, _ = peak_hits(m["first"], m["evolved"])
        counts = [row[0] for row in m["first"] if row]
        out.append(fw.Claim(
            f"S² at β = {beta}: the first plateau has one cluster per peak of the initial cloud's "
            f"degree-l* part (l* = {m['l_star']}; our rule, MATH.md §9) in ≥ {PEAK_SHARE:.0%} of "
            "draws",
            f"{hits}/{draws} (±1: {near}/{draws}); first plateaus {_tally(counts) or 'none'}; "
            f"peaks {_tally(m['peaks'])}; the evolved profile's peaks (diagnostic) "
            f"{_tally(m['evolved'])}, equal in {evolved}/{draws}"
            + seeding_text(m.get("runs", []), m["first"], m["l_star"], m["peaks"])
            + share_text(float(beta), size, level),
            "agrees" if hits >= PEAK_SHARE * draws else "differs",
        ))  # fmt: skip
    return out


def escape_count_claim(escape: dict) -> fw.Claim:
    """The rule again on the escape runs (one β, every N), with the seeding diagnostics
    over all of them (:func:`seeding_text`)."""
    parts, total, hit = [], 0, 0
    for n in sorted({r["n"] for r in escape["runs"]}):
        rows = [r for r in escape["runs"] if r["n"] == n]
        h, _, d = peak_hits([r["first"] for r in rows], [r["peaks"] for r in rows])
        first = _tally([r["first"][0] for r in rows if r["first"]])
        parts.append(
            f"N = {n}: {h}/{d} (first {first}, peaks {_tally([r['peaks'] for r in rows])})"
        )
        total, hit = total + d, hit + h
    runs = escape["runs"]
    seeded = seeding_text(runs, [r["first"] for r in runs], escape["l_star"],
                          [r["peaks"] for r in runs])  # fmt: skip
    return fw.Claim(
        f"S² at β = {escape['beta']:g}, every N of the escape runs: the first plateau has one "
        f"cluster per peak of f_l* (l* = {escape['l_star']}) in ≥ {PEAK_SHARE:.0%} of draws",
        "; ".join(parts) + seeded,
        "agrees" if total and hit >= PEAK_SHARE * total else "differs",
    )


def meta_claims(config: dict, arrays: dict, results: dict) -> tuple[list[fw.Claim], dict]:
    """Every metastability claim on S² and the fits (``escape``, ``kappa``)."""
    r = results.get("metastable")
    if r is None:
        return [], {}
    claims, fits = [], {}
    if r["escape"]:
        claim, fits["escape"] = escape_claim(config, arrays)
        claims += [claim, escape_count_claim(r["escape"])]
    if r["sweep"]:
        claims += count_claims(r["sweep"], config["meta_size"], config["escape_level"])
        count, t1 = config["meta_count"], config["meta_t1"]
        kept, fits["kappa"] = lifetime_claims(settled(r["sweep"]), count, t1)
        first = lifetime_fit(r["sweep"], count)
        before = (
            f"κ = {first['slope']:.2f} ± {first['slope_se']:.2f} ({first['n']} lifetimes)"
            if first
            else "no fit"
        )
        note = f" Settled states only; the rule as first stated (formation stages in): {before}."
        claims += [dataclasses.replace(c, claim="S²: " + c.claim) for c in kept[:1]]
        claims[-1] = dataclasses.replace(claims[-1], outcome=claims[-1].outcome + note)
        claims += [dataclasses.replace(c, claim="S²: " + c.claim) for c in kept[1:]]
    return claims, fits


def _median(values) -> str:
    return f"{np.median(values):.0f}" if len(values) else "—"


def meta_table(config: dict, results: dict) -> str:
    """Per β: l*, first plateau = peaks, its lifetime, the ``meta_count`` state's lifetimes,
    the merges to one cluster."""
    sweep, count = settled(results["metastable"]["sweep"]), config["meta_count"]
    t1 = config["meta_t1"]
    rows = []
    for beta, m in sweep.items():
        first = [row for row in m["first"] if row]
        hits, _, draws = peak_hits(m["first"], m["peaks"])
        held = lifetimes_of({beta: m}, count)[beta]
        ends = [ms[-1][2] for ms in m["merges"] if ms and ms[-1][1] == 1]
        rows.append([
            beta, m["l_star"], f"{hits}/{draws}",
            _median([row[2] for row in first if not row[3]]),
            _median([d for d, c in held if not c]) + f" ({sum(not c for _, c in held)})",
            f"{sum(c for _, c in held)}/{len(held)}",
            _median(ends) + f" ({len(ends)}/{len(m['merges'])}; others ≥ {t1:g})",
            f"{sum(r['cpu_seconds'] for r in m['runs']):.0f}",
        ])  # fmt: skip
    return (
        f"S² metastability: {config['meta_seeds']} clouds of {config['meta_size']} tokens per β "
        f"to t = {t1:g}.\n\n"
        + fw.markdown_table(
            ["β", "l*", "first plateau = peaks of f_l*", "its lifetime (median, uncensored)",
             f"{count}-cluster lifetime (median, n uncensored)", f"{count}-cluster censored",
             "merge to one cluster (median time)", "CPU s"],
            rows,
        )
    )  # fmt: skip


def cost_note(results: dict) -> str | None:
    """The metastability part's CPU seconds per part and per escape draw, its wall time on
    its worker processes, and the wall time its runs' CPU seconds would take on 2 workers
    scheduled longest first (:func:`~experiments.common.pool.longest_first`; None for a run
    that recorded no parts)."""
    r = results.get("metastable")
    if r is None or not isinstance(r.get("cpu_seconds"), dict):
        return None
    cpu, escape = r["cpu_seconds"], (r["escape"] or {}).get("runs", [])
    sweep = [x["cpu_seconds"] for m in r["sweep"].values() for x in m["runs"]]
    by_size = {}
    for run in escape:
        by_size.setdefault(run["n"], []).append(run["cpu_seconds"])
    sizes = "; ".join(f"N = {n}: {', '.join(f'{c:.0f}' for c in cs)}" for n, cs in by_size.items())
    planned = longest_first([x["cpu_seconds"] for x in escape] + sweep, 2)
    return (
        f"S² metastability cost: {cpu['total']:.0f} s CPU in all (escape {cpu['escape']:.0f}"
        + (f", per draw {sizes}" if sizes else "")
        + f"; β sweep {cpu['sweep']:.0f}, its longest run {max(sweep, default=0):.0f}), "
        f"{r['seconds']:.0f} s wall on {r['workers']} worker process(es) (each on the run's "
        f"torch threads; the wall time depends on the machine's load); these runs' CPU "
        f"seconds scheduled longest first on 2 workers: {planned:.0f} s"
    )


def meta_summary(fits: dict) -> str:
    """One clause for the study's summary."""
    escape, kappa = fits.get("escape", {}).get("main"), fits.get("kappa")
    parts = []
    if escape:
        parts.append(f"S² escape slope {escape['slope']:.3f} ± {escape['slope_se']:.3f} "
                     f"against {fits['escape']['law']:.3f}")  # fmt: skip
    if kappa:
        parts.append(f"S² κ = {kappa['slope']:.2f} ± {kappa['slope_se']:.2f}")
    return "; ".join(parts)


__all__ = ["PEAK_SHARE", "cost_note", "count_claims", "escape_claim", "escape_count_claim",
           "escape_fit", "lifetime_fit", "meta_claims", "meta_summary", "meta_table", "peak_hits",
           "runner_up", "seeding_text", "settled", "share_text"]  # fmt: skip
