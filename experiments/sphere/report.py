"""The ``sphere`` study's claims, tables and summary, from the saved data only."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import framework as fw
from .config import BLOWUP_TRACE, Config
from .meta_report import cost_note, meta_claims, meta_summary, meta_table
from .sizes import large_claim, size_claims, size_table


# ---------------------------------------------------------------------- report
def _cell(value, fmt: str = ".3g") -> str:
    return "—" if value is None or not np.isfinite(value) else format(value, fmt)


def _diagram_table(config, arrays, results) -> str:
    betas, times = arrays["betas"], arrays["times"]
    picks = sorted({0, len(betas) // 4, len(betas) // 2, 3 * len(betas) // 4, len(betas) - 1})
    marks = [t for t in (1.0, 5.0, 10.0) if t < config["t1"]] + [config["t1"]]
    header = ["d", "β"] + [f"density at t = {t:g}" for t in marks] + ["t (density ≥ 0.5)",
                                                                      "t (≥ 0.99)"]  # fmt: skip
    rows = []
    for d in config["dims"]:
        table, r = arrays[f"density_d{d}"], results[f"diagram_d{d}"]
        for b in picks:
            cols = [int(np.argmin(np.abs(times - t))) for t in marks]
            rows.append([d, f"{betas[b]:.2f}", *(f"{table[b, c]:.3f}" for c in cols),
                         _cell(r["t_half"][b]), _cell(r["t_99"][b])])  # fmt: skip
    return "Cluster density by β and t (mean over the systems):\n\n" + fw.markdown_table(
        header, rows
    )


def _scheme_table(config, results) -> str:
    header = ["scheme", "time to one cluster", "clusters at the end", "effective rank at the end",
              "mean angular speed, first half", "radius at the end"]  # fmt: skip
    rows = [[s, _cell(r["time_to_one_cluster"]), r["final_clusters"], _cell(r["final_erank"]),
             _cell(r["mean_speed_first_half"]), _cell(r["final_radius"])]
            for s, r in results["schemes"].items()]  # fmt: skip
    return (
        f"The same tokens under each scheme (t ≤ {config['scheme_t1']:g}; times to one "
        "cluster at the resolution of the saves):\n\n" + fw.markdown_table(header, rows)
    )


def _claims_diagram(config, results) -> list[fw.Claim]:
    claims = []
    for d in config["dims"]:
        r = results[f"diagram_d{d}"]
        final = np.asarray(r["final_density"])
        t_half = np.asarray(r["t_half"], dtype=float)
        finite = np.isfinite(t_half)
        order = np.corrcoef(np.arange(len(t_half))[finite], t_half[finite])[0, 1] \
            if finite.sum() > 2 else float("nan")  # fmt: skip
        claims.append(fw.Claim(
            f"d = {d}: small β gather into one cluster fast; the larger β, the longer the "
            "tokens stay in several clusters (GLPR's phase diagram, metastability)",
            f"density at t = {config['t1']:g}: {final[0]:.3f} at β = {config['beta_min']:g}, "
            f"{final[-1]:.3f} at β = {config['beta_max']:g}; time to density 0.5 rises with β "
            f"(correlation {order:.2f} over the β that reach it, {int(finite.sum())} of "
            f"{len(t_half)})",
            "agrees" if final[0] > 0.99 and final[-1] < final[0] and order > 0.5 else "differs",
        ))  # fmt: skip
    one = results["one_cluster"]
    clustered = one["status"].get("clustered", 0)
    seeds = config["cluster_seeds"]
    times = np.asarray(one["event_time"], dtype=float)
    claims.append(fw.Claim(
        f"d = {config['cluster_dim']} (≥ 3), Q = K = V = I, β = {config['cluster_beta']:g}, "
        f"{config['tokens']} uniform tokens: one cluster in long time for every start (GLPR)",
        f"{clustered} of {seeds} seeds reach diameter < 1e-4 by t = {config['cluster_t1']:g} "
        f"(times {np.nanmin(times):.1f}–{np.nanmax(times):.1f}); norms stay 1 to "
        f"{one['norm_error']:.1e}",
        "agrees" if clustered == seeds else "differs",
    ))  # fmt: skip
    return claims


def _time(value) -> float:
    """A saved time (NaN is saved as null: never)."""
    return math.nan if value is None else float(value)


def _claims_schemes(config, arrays, results) -> list[fw.Claim]:
    r = results["schemes"]
    claims = []
    if "post-ln" in r and "pre-ln" in r:
        post, pre = _time(r["post-ln"]["time_to_one_cluster"]), r["pre-ln"]
        later = _time(pre["time_to_one_cluster"])
        slower = not math.isfinite(later) or later > post
        claims.append(fw.Claim(
            "Pre-LN regulates speed: the radii grow (ṙ = ⟨θ, Γ⟩) and the angle moves at "
            "|P⊥Γ|/r, so the tokens cluster later than under Post-LN (Karagodin et al.; MATH.md "
            "§7 [ours])",
            f"radius at the end {pre['final_radius']:.3g}; one cluster "
            + (f"at t = {later:.3g}" if math.isfinite(later) else
               f"not reached by t = {config['scheme_t1']:g}")
            + f" (post-LN: at t = {_cell(post)})",
            "agrees" if slower and pre["final_radius"] > 1 else "differs",
        ))  # fmt: skip
    sphere = [s for s in ("post-ln", "ngpt") if s in r]
    if sphere:
        worst = max(r[s]["max_norm_error"] for s in sphere)
        claims.append(fw.Claim(
            "Post-LN and nGPT keep the tokens on the unit sphere",
            f"| |x| − 1 | ≤ {worst:.1e} along {', '.join(sphere)}",
            "agrees" if worst < 1e-10 else "differs",
        ))  # fmt: skip
    if "ngpt" in r:
        fastest = float(arrays["scheme__ngpt__speed"].max())
        alpha = config["ngpt_alpha"]
        claims.append(fw.Claim(
            f"nGPT moves the tokens along the sphere no faster than its step α = {alpha:g} "
            "(ẋ = α P⊥_x N(Γ))",
            f"largest mean angular speed between saves: {fastest:.3g}",
            "agrees" if fastest <= alpha * (1 + 1e-9) else "differs",
        ))  # fmt: skip
    if "mix-ln" in r:
        times, radius = arrays["scheme__mix-ln__times"], arrays["scheme__mix-ln__radius"]
        switch = config["scheme_t1"] / 2
        before = float(np.abs(radius[times <= switch] - 1).max())
        claims.append(fw.Claim(
            f"Mix-LN is Post-LN before its switch (t = {switch:g}) and Pre-LN after: the "
            "tokens leave the sphere only after it",
            f"| mean |x| − 1 | ≤ {before:.1e} up to the switch; radius {radius[-1]:.3g} at "
            f"t = {times[-1]:g}",
            "agrees" if before < 1e-10 and radius[-1] > 1 else "differs",
        ))  # fmt: skip
    return claims


def report(out: Path) -> fw.Report:
    config, arrays, results = fw.load(out)
    claims = _claims_diagram(config, results) + large_claim(config, arrays, results)
    claims += size_claims(config, arrays, results)
    claims += _claims_schemes(config, arrays, results)
    b = results["blowup"]
    turned = b["ode_status"] == "blow_up" and math.isfinite(_time(b["sphere_time_to_one_cluster"]))
    claims.append(fw.Claim(
        f"Normalisation turns blow-up into clustering: softmax Q = K = V = I, β = "
        f"{config['blowup_beta']:g} blows up in R^{config['blowup_dim']} from N(0, I) at "
        f"t* = 1/(2β) = {b['t_star']:.3g}; its post-LN version clusters",
        f"Gaussian ODE: {b['ode_status']} at t = {b['ode_event_time']:.4g}; particles: "
        f"{b['particle_status']} (tr Σ > {BLOWUP_TRACE:g}) at t = {b['particle_event_time']:.3g} "
        f"with {b['particle_clusters_at_event']} angular clusters; post-LN: one cluster at t = "
        f"{_cell(b['sphere_time_to_one_cluster'])} ({b['sphere_final_clusters']} at the end)",
        "agrees" if turned else "differs",
    ))  # fmt: skip
    sizes = ", ".join(
        f"d = {d}: {results[f'diagram_d{d}']['seconds']:.0f} s, "
        f"{results[f'diagram_d{d}']['rhs']} field evaluations"
        for d in config["dims"]
    )
    summary = (
        f"Phase diagrams of {config['betas']} β × {config['systems']} systems × "
        f"{config['tokens']} tokens to t = {config['t1']:g} ({sizes}); "
        f"{results['one_cluster']['status'].get('clustered', 0)}/{config['cluster_seeds']} "
        f"seeds form one cluster in d = {config['cluster_dim']}; "
        + (
            f"density against N = {config['size_tokens'][0]}…{config['size_tokens'][-1]} "
            "tokens per cloud (d = 3); "
            if "size_scan" in results
            else ""
        )
        + f"{len(config['schemes'])} "
        "normalisation schemes from the same tokens; R^d blow-up vs post-LN clustering."
    )
    figures = [
        ("sphere_phase_diagram.png", "Cluster density over β × t (GLPR's phase diagram)."),
        ("sphere_schemes.png", "The same tokens under each normalisation scheme."),
        ("sphere_blowup.png", "R^d blow-up against post-LN clustering from the same start."),
        ("sphere_flow.gif", f"A post-LN cloud on the circle, β = {config['movie_beta']:g} "
                            "(tpde.plot.animate)."),
    ]  # fmt: skip
    notes = [
        "Largest Monte-Carlo standard error of a density cell: "
        + ", ".join(f"d = {d}: {results[f'diagram_d{d}']['max_se']:.2g}" for d in config["dims"])
        + ". benchmarks/glpr.py compares the table with a port of GLPR's Euler loop and "
        "measures its discretisation error.",
        "Layernorm (γ = 1, b = 0) puts the tokens on the sphere of radius √d in the centred "
        "hyperplane: its scores β⟨x, y⟩ reach βd, a different effective β, and its angles live "
        "on a great circle (d = 3).",
        "Effective rank: exp of the entropy of the eigenvalues of Σ_i w_i θ_iθ_iᵀ "
        "(tpde.metrics.diagnostics.effective_rank of that matrix).",
    ]
    tables = [_diagram_table(config, arrays, results), _scheme_table(config, results)]
    more, fits = meta_claims(config, arrays, results)
    full = Config()
    small = config["meta_seeds"] < full.meta_seeds or config["meta_size"] < full.meta_size
    if more and (small or len(config["escape_sizes"]) < len(full.escape_sizes)):
        more = fw.indicative(more)
        notes.append(fw.below_full_size("metastability part"))
    claims += more
    cost = cost_note(results)
    if cost:
        notes.append(cost)
    if fits:
        summary += f" Metastability on S²: {meta_summary(fits)}."
        tables.append(meta_table(config, results))
        figures.append(("sphere_metastable.png", "S²: cluster counts over t for every N, "
                        "escape against ln N, first plateau against the peaks of f_l*, "
                        "lifetime against β"))  # fmt: skip
    if "size_scan" in results:
        tables.insert(1, size_table(config, arrays, results))
        figures.insert(1, ("sphere_sizes.png", "Cluster density against the tokens per cloud "
                           "(d = 3): every size later by ln N/(2λ_k*)."))  # fmt: skip
    return fw.Report(summary, claims, figures, tables, notes)
