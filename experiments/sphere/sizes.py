r"""(a'') The cluster density against the number of tokens per cloud: a finite-N diagram.

From N tokens drawn uniformly on S², the empirical measure differs from the uniform one,
a stationary state of the mean-field (post-LN) flow, by O(N^{-1/2}) in every spherical
harmonic; those modes grow like e^{λ_k t} (MATH.md §9: λ_k = k(k + 1)i_k(β)/(βi_0(β)) for
SA on S²), so the fastest, k*, reaches O(1) — and the tokens start to gather — at

    t(N) ≈ t₀(β) + ln N / (2λ_k*)                                              (1)

(E|a_k|² ≈ e^{2λ_k t}/N while the modes are small). Every time of the phase diagram
(the density of pairs with ⟨x_i, x_j⟩ > 0.999) is delayed by ln 2/(2λ*) ≈ 0.5 per doubling of N:
the diagram has no mean-field limit at fixed t (from uniform tokens the density at fixed t
tends to its initial value (1 − 0.999)/2 = 5e-4 as N → ∞), and the 32-token diagram of GLPR
is a 32-token diagram. Here, at ``size_betas`` and the diagram's checkpoints, clouds of each
of ``size_tokens`` tokens, systems × N² ≈ ``size_budget`` (at least ``size_min_systems``
systems), exact densities (all pairs) up to ``size_exact_tokens`` tokens, above from
``large_pairs`` sampled pairs per cloud (the all-pairs count costs more than the flow
there: 6× at 4096 tokens; the sampled share is unbiased, measured: mean error 2e-5 ± 1.4e-5
at 1024 tokens, −8e-6 ± 2e-5 at 2048, spread the binomial one); the time each size reaches
density ``size_level``
(interpolated between checkpoints, its Monte-Carlo error by the delta method) and the slope
of that time against ln N, fitted by weighted least squares, against 1/(2λ_k*) of (1). The level is
low (0.1 by default) because at large β the density stays below ½ for long (several
metastable clusters: it plateaus near Σ_c p_c², p_c the clusters' shares).

Measured in an earlier scan whose protocol differs from this study's defaults: N = 32 …
4096 at systems × N² = 2²² with at least 2 systems (so 2 systems at 2048 and 4096 tokens)
and exact densities from all pairs at every size, one thread; the defaults now take at
least ``size_min_systems`` = 8 systems and sampled pairs above ``size_exact_tokens`` =
1024 tokens (config.py), so a run at the defaults does not reproduce these numbers
exactly. That scan's slopes 0.840 ± 0.016, 0.757 ± 0.021, 0.731 ± 0.011, 0.707 ± 0.017
at β = 1, 3, 6, 9 against
1/(2λ_k*) = 0.799, 0.761, 0.720, 0.711 (χ²/dof 0.9–4); the delay from 32 to 4096 tokens
4.35, 3.46, 3.62, 3.62 against ln 128/(2λ_k*) = 3.88, 3.69, 3.49, 3.45. The full (a') (4096
tokens × 4 systems × 15 β, 796 field evaluations, harmonics engine) took 493 s against a
32-token diagram of 512 systems: delays 3.39–4.63 against 3.48–4.27, 15 of 15 β within the
tolerance.
"""

from __future__ import annotations

import math

import numpy as np

from tpde.theory import dominant_mode, instability_rate

from .. import framework as fw
from ..common.sphere_diagram import checkpoint_times, density_table, post_ln, systems_for


def systems_per_size(tokens: int, budget: int, minimum: int) -> int:
    """Systems of ``tokens`` tokens: budget/N² (the same number of pairs at every size),
    at least ``minimum``."""
    return max(int(minimum), int(budget) // int(tokens) ** 2)


def first_reached(table, level: float) -> np.ndarray:
    """Per curve of ``table`` (..., T), the index of the first checkpoint ≥ ``level``
    (-1: never)."""
    reached = np.asarray(table, dtype=float) >= level
    return np.where(reached.any(-1), reached.argmax(-1), -1)


def first_time_above(times, table, level: float) -> np.ndarray:
    """Per curve of ``table`` (..., T), the first checkpoint where it is ≥ ``level``
    (times[0] included; NaN: never): the diagram's t_half and t_99."""
    first = first_reached(table, level)
    return np.where(first >= 0, np.asarray(times, dtype=float)[np.maximum(first, 0)], np.nan)


def crossing_time(times, mean, se, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The first time each curve of ``mean`` (..., T) reaches ``level``, linearly
    interpolated between the checkpoints around the crossing (NaN: never, or already at
    t = times[0]), and its Monte-Carlo error by the delta method: se(t) = se(mean) / (slope
    of the curve) at the crossing (the standard errors ``se`` interpolated alike).

    Returns
    -------
    (t, se_t), each of shape (...).
    """
    times = np.asarray(times, dtype=float)
    mean = np.asarray(mean, dtype=float)
    first = first_reached(mean, level)
    se = np.asarray(se, dtype=float)
    valid = first > 0
    k = np.maximum(first, 1)
    take = lambda a, i: np.take_along_axis(a, i[..., None], -1)[..., 0]  # noqa: E731
    lo, hi = take(mean, k - 1), take(mean, k)
    t_lo, t_hi = times[k - 1], times[k]
    slope = (hi - lo) / (t_hi - t_lo)
    frac = (level - lo) / np.where(hi > lo, hi - lo, 1.0)
    t = np.where(valid, t_lo + frac * (t_hi - t_lo), np.nan)
    se_at = (1 - frac) * take(se, k - 1) + frac * take(se, k)
    se_t = np.where(valid, se_at / np.where(slope > 0, slope, np.nan), np.nan)
    return t, se_t


def log_fit(tokens, t, se) -> dict:
    """Weighted least squares t = a + s ln N over the sizes with a finite t and se > 0
    (weights 1/se²: the large sizes have few systems): slope s, its standard error (the
    weighted fit's, scaled up by √(χ²/dof) when the scatter exceeds the errors; NaN with
    fewer than 3 sizes), intercept a, χ²/dof and the sizes used."""
    x = np.log(np.asarray(tokens, dtype=float))
    t, se = np.asarray(t, dtype=float), np.asarray(se, dtype=float)
    ok = np.isfinite(t) & np.isfinite(se) & (se > 0)
    x, y, w = x[ok], t[ok], 1 / se[ok] ** 2
    nan = {"slope": math.nan, "slope_se": math.nan, "intercept": math.nan, "chi2_dof": math.nan}
    if len(x) < 2:
        return {**nan, "sizes": int(ok.sum())}
    centre = float((w * x).sum() / w.sum())
    spread = float((w * (x - centre) ** 2).sum())
    slope = float((w * (x - centre) * y).sum()) / spread
    intercept = float((w * y).sum() / w.sum()) - slope * centre
    dof = len(x) - 2
    chi2 = float((w * (y - intercept - slope * x) ** 2).sum()) / dof if dof else math.nan
    slope_se = math.sqrt(max(1.0, chi2) / spread) if dof else math.nan
    return {"slope": slope, "slope_se": slope_se, "intercept": intercept, "chi2_dof": chi2,
            "sizes": int(ok.sum())}  # fmt: skip


def law_slope(beta: float) -> tuple[int, float]:
    """(k*, 1/(2λ_k*)): the fastest harmonic on S² and the slope of (1) in ln N."""
    k = dominant_mode(beta, d=3)
    return k, 1 / (2 * float(instability_rate(k, beta, d=3)))


def run_sizes(config) -> tuple[dict, dict]:
    """(a'') The density of each size over the diagram's checkpoints (module notes)."""
    betas = np.asarray(config.size_betas, dtype=float)
    times = checkpoint_times(config.t1, config.checkpoints)
    field = post_ln(betas, 3)
    means, ses, per_size = [], [], []
    for n in config.size_tokens:
        systems = systems_per_size(n, config.size_budget, config.size_min_systems)
        gen = fw.torch_generator(config.seed + 500 + n)
        mu = systems_for(len(betas), systems, n, 3, gen)
        sampled = n > config.size_exact_tokens
        label = f"sphere N={n}"
        table = density_table(field, mu, times, method="rk4",
                              steps_per_interval=config.steps_per_checkpoint,
                              pairs=config.large_pairs if sampled else None, generator=gen,
                              progress=lambda it, label=label: fw.progress(it, label))  # fmt: skip
        means.append(table.mean)
        ses.append(table.se)
        per_size.append({"tokens": n, "systems": systems, "sampled": sampled,
                         "seconds": table.seconds, "rhs": table.rhs,
                         "status": table.status})  # fmt: skip
    mean, se = np.stack(means), np.stack(ses)  # (sizes, β, T)
    t_level, t_level_se = crossing_time(times, mean, se, config.size_level)
    fits = []
    for b, beta in enumerate(betas):
        k, law = law_slope(float(beta))
        fits.append({"beta": float(beta), "k_star": k, "law": law,
                     **log_fit(config.size_tokens, t_level[:, b], t_level_se[:, b])})  # fmt: skip
    arrays = {"size_density": mean, "size_density_se": se}
    results = {"sizes": per_size, "t_level": t_level.tolist(),
               "t_level_se": t_level_se.tolist(), "fits": fits}  # fmt: skip
    return arrays, results


# ---------------------------------------------------------------------- report
#: Relative tolerance of the ln N slope against (1): the law is asymptotic in N (the
#: nonlinear phase t₀ and the neighbouring harmonics' rates shift the small sizes' times).
SLOPE_TOLERANCE = 0.25


def _fits_outcome(fits) -> str:
    return "; ".join(
        f"β = {f['beta']:g} (k* = {f['k_star']}): {f['slope']:.3f} ± {f['slope_se']:.2g} "
        f"against {f['law']:.3f}"
        for f in fits
    )


def size_claims(config, arrays, results) -> list[fw.Claim]:
    """(a''): the slope of the crossing time in ln N against (1); the density at fixed
    (β, t) falling with N."""
    if "size_scan" not in results:
        return []
    r, level = results["size_scan"], config["size_level"]
    tokens = config["size_tokens"]
    ratios = np.array([f["slope"] / f["law"] for f in r["fits"]])
    good = bool(np.isfinite(ratios).all() and (np.abs(ratios - 1) <= SLOPE_TOLERANCE).all())
    claims = [fw.Claim(
        f"d = 3: clouds of N uniform tokens cluster later by ln N/(2λ_k*) (the linear "
        f"instability of the uniform measure, MATH.md §9): the time to cluster density "
        f"{level:g} against ln N, N = {tokens[0]}…{tokens[-1]}, has slope 1/(2λ_k*)",
        f"fitted slope ± SE against 1/(2λ_k*): {_fits_outcome(r['fits'])} (within "
        f"{SLOPE_TOLERANCE:.0%}: {'yes' if good else 'no'})",
        "agrees" if good else "differs",
    )]  # fmt: skip
    claims.append(_claim_falls(config, arrays, r))
    return claims


def _claim_falls(config, arrays, r) -> fw.Claim:
    """At the smallest size's crossing time, the density of every larger size is lower
    (up to 2 standard errors of the difference)."""
    density, se, times = arrays["size_density"], arrays["size_density_se"], arrays["times"]
    t_small = np.asarray(r["t_level"], dtype=float)[0]
    parts, falls = [], True
    for b, beta in enumerate(config["size_betas"]):
        if not np.isfinite(t_small[b]):
            continue
        c = int(np.argmin(np.abs(times - t_small[b])))
        column, error = density[:, b, c], se[:, b, c]
        step = np.diff(column) <= 2 * np.hypot(error[1:], error[:-1])
        falls &= bool(step.all() and column[-1] < column[0])
        parts.append(f"β = {beta:g}, t = {times[c]:.2f}: " + " → ".join(f"{v:.3g}" for v in column))
    tokens = config["size_tokens"]
    return fw.Claim(
        "d = 3: there is no mean-field diagram at fixed t from uniform tokens (the uniform "
        "measure is stationary): at fixed (β, t) the density falls as N grows, toward its "
        "initial value 5e-4",
        f"density for N = {', '.join(map(str, tokens))}: {'; '.join(parts) or 'no β crossed'}",
        "agrees" if parts and falls else "differs",
    )


def large_claim(config, arrays, results) -> list[fw.Claim]:
    """(a') against (a): the many-token diagram is the 32-token one delayed by (1)."""
    if "large_diagram_d3" not in results:
        return []
    r, every, level = results["large_diagram_d3"], config["large_every"], config["size_level"]
    times = arrays["times"]
    t_small, se_small = crossing_time(times, arrays["density_d3"][::every],
                                      arrays["density_se_d3"][::every], level)  # fmt: skip
    t_large, se_large = crossing_time(times, arrays["large_density_d3"],
                                      arrays["large_density_se_d3"], level)  # fmt: skip
    ratio = math.log(config["large_tokens"] / config["tokens"])
    law = np.array([law_slope(b)[1] * ratio for b in r["betas"]])
    shift = t_large - t_small
    error = np.hypot(se_small, se_large)
    verdict, ok, within = delay_verdict(shift, error, law)
    pairs = ", ".join(f"{b:.2g}: {s:.2f} ± {e:.2f} ({w:.2f})"
                      for b, s, e, w, k in zip(r["betas"], shift, error, law, ok, strict=True)
                      if k)  # fmt: skip
    return [fw.Claim(
        f"d = 3: the diagram of {config['large_tokens']} tokens per cloud (a') is the "
        f"{config['tokens']}-token diagram delayed by ln({config['large_tokens']}/"
        f"{config['tokens']})/(2λ_k*(β)) (finite-N, part (a''))",
        f"delay of the time to density {level:g} ± MC error (law) by β: {pairs or 'none'}; "
        f"{int(ok.sum())} of {len(ok)} β cross in both, {int(within.sum())} of them within "
        f"{SLOPE_TOLERANCE:.0%} + 3 MC errors (every crossing β must, and at least half of "
        f"the β cross); {r['seconds']:.0f} s for {r['rhs']} field evaluations",
        verdict,
    )]  # fmt: skip


def delay_verdict(shift, error, law) -> tuple[str, np.ndarray, np.ndarray]:
    """The verdict on the delays ``shift`` (nβ,) ± ``error`` against ``law`` (nβ,): a β
    counts where both diagrams cross (shift and error finite); it is within when |shift −
    law| ≤ (SLOPE_TOLERANCE + 3 error/law)·law. "agrees": every crossing β within and at
    least half of the β crossing; "differs": one crossing β outside; else "partly" (too few
    cross, all of them within) or "n/a" (none crosses).

    Returns
    -------
    (verdict, crossing (nβ,) bool, within (nβ,) bool).
    """
    shift, error, law = (np.asarray(a, dtype=float) for a in (shift, error, law))
    ok = np.isfinite(shift) & np.isfinite(error)
    off = np.abs(np.where(ok, shift, 0) - law) / law
    within = ok & (off <= SLOPE_TOLERANCE + 3 * np.where(ok, error, 0) / law)
    if not ok.any():
        return "n/a", ok, within
    if (within != ok).any():
        return "differs", ok, within
    return ("agrees" if 2 * ok.sum() >= len(ok) else "partly"), ok, within


def size_table(config, arrays, results) -> str:
    """Density by N at a few times per β, the crossing time and the fit against (1)."""
    r, times = results["size_scan"], arrays["times"]
    marks = [t for t in (2.5, 5.0, 7.5, 10.0, 20.0) if t < config["t1"]] + [config["t1"]]
    cols = [int(np.argmin(np.abs(times - t))) for t in marks]
    header = ["β", "N", "systems"] + [f"t = {times[c]:.2f}" for c in cols] + [
        f"t (density {config['size_level']:g}) ± SE"]  # fmt: skip
    rows = []
    t_level, t_se = np.asarray(r["t_level"], float), np.asarray(r["t_level_se"], float)
    for b, beta in enumerate(config["size_betas"]):
        for i, size in enumerate(r["sizes"]):
            density, se = arrays["size_density"][i, b], arrays["size_density_se"][i, b]
            rows.append([f"{beta:g}", size["tokens"], size["systems"],
                         *(f"{density[c]:.4f} ± {se[c]:.1g}" for c in cols),
                         f"{t_level[i, b]:.3f} ± {t_se[i, b]:.2g}"])  # fmt: skip
    return (
        "Cluster density (d = 3) by the number N of tokens per cloud, mean ± SE over the "
        f"systems; slope of the crossing time in ln N against 1/(2λ_k*): "
        f"{_fits_outcome(r['fits'])}.\n\n" + fw.markdown_table(header, rows)
    )
