"""The sphere study's metastability figure (S², issue 35), from the saved data only."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import framework as fw
from .meta_report import escape_fit, lifetime_fit, lifetimes_of, settled


def meta_plot(out: Path, config: dict, arrays: dict, results: dict) -> list[Path]:
    """Cluster counts over t for every N (escape runs), the escape time against ln N with
    the fit and the law, the first plateau's count against the peaks of f_l* (every draw of
    the sweep), the ``meta_count`` state's lifetime against β (▲: still on at meta_t1)."""
    r = results.get("metastable")
    if r is None or not r["escape"] or not r["sweep"]:
        return []
    plt = fw.pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.2))
    _counts(axes[0], config, arrays, plt)
    _escape(axes[1], config, arrays, r["escape"])
    _peaks(axes[2], r["sweep"])
    _lifetimes(axes[3], config, settled(r["sweep"]))
    fig.tight_layout()
    return [fw.savefig(fig, Path(out) / "sphere_metastable.png")]


def _counts(ax, config, arrays, plt) -> None:
    t, counts = arrays["meta_escape_times"], arrays["meta_escape_counts"]
    colours = plt.cm.viridis(np.linspace(0, 0.85, len(config["escape_sizes"])))
    for i, n in enumerate(config["escape_sizes"]):
        for s in range(config["escape_draws"][i]):
            seen = counts[i, s] >= 0
            ax.step(t[seen], counts[i, s][seen] + 0.06 * (i - 1), where="post", lw=0.8,
                    color=colours[i], label=f"N = {n}" if s == 0 else None)  # fmt: skip
    ax.set(xlabel="t", ylabel="clusters", title=f"S², β = {config['escape_beta']:g}: every draw")
    ax.legend(fontsize=7)


def _escape(ax, config, arrays, escape) -> None:
    from tpde.theory import instability_rate

    star = escape["l_star"]
    fit = escape_fit(config, arrays, star, config["escape_level"])
    law = 1 / (2 * float(instability_rate(star, config["escape_beta"], d=3)))
    if fit:
        pairs = [(math.log(int(n)), t) for n, ts in fit["times"].items() for t in ts
                 if np.isfinite(t)]  # fmt: skip
        x, y = (np.array(v) for v in zip(*pairs, strict=True))
        ax.plot(x, y, "o", ms=4, label="draws")
        grid = np.linspace(x.min(), x.max(), 10)
        ax.plot(grid, fit["offset"] + fit["slope"] * grid, "-",
                label=f"fit {fit['slope']:.3f} ± {fit['slope_se']:.3f}")  # fmt: skip
        ax.plot(grid, np.mean(y - law * x) + law * grid, "--",
                label=f"1/(2λ_{star}) = {law:.3f}")  # fmt: skip
        ax.legend(fontsize=7)
    ax.set(xlabel="ln N", ylabel="t", title=f"escape: √E_{star} = {config['escape_level']:g}")


def _peaks(ax, sweep) -> None:
    top = 1
    for b, (beta, m) in enumerate(sweep.items()):
        rows = [(p, f[0]) for p, f in zip(m["peaks"], m["first"], strict=True) if f]
        if not rows:
            continue
        p, c = (np.array(v, dtype=float) for v in zip(*rows, strict=True))
        jitter = 0.08 * (b - (len(sweep) - 1) / 2)
        ax.plot(p + jitter, c - jitter, "o", ms=4, alpha=0.7, label=f"β = {beta} (l* = "
                f"{m['l_star']})")  # fmt: skip
        top = max(top, p.max(), c.max())
    ax.plot([0, top + 1], [0, top + 1], "k:", lw=0.8)
    ax.set(xlabel="peaks of f_l* at t = 0", ylabel="clusters on the first plateau",
           title="the rule: one cluster per peak")  # fmt: skip
    ax.legend(fontsize=7)


def _lifetimes(ax, config, sweep) -> None:
    count = config["meta_count"]
    for beta, rows in lifetimes_of(sweep, count).items():
        done = [d for d, c in rows if not c]
        on = [d for d, c in rows if c]
        ax.plot([float(beta)] * len(done), done, "o", color="C0")
        ax.plot([float(beta)] * len(on), on, "^", color="C3")
    kappa = lifetime_fit(sweep, count)
    if kappa:
        grid = np.linspace(min(kappa["betas"]), max(kappa["betas"]), 10)
        ax.plot(grid, np.exp(kappa["offset"] + kappa["slope"] * grid), "-",
                label=f"κ = {kappa['slope']:.2f} ± {kappa['slope_se']:.2f}")  # fmt: skip
        ax.legend(fontsize=7)
    ax.set(yscale="log", xlabel="β", ylabel="lifetime",
           title=f"S²: {count}-cluster lifetime (▲ on at t = {config['meta_t1']:g})")  # fmt: skip
