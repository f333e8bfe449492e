"""The circle-pde study's figures: the PDE against particles, and the plateaus."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import framework as fw
from .meta_report import escape_fit, lifetime_fit, lifetimes_of, settled_sweep
from .report import first_cluster_fit, first_clusters, law_offset
from .run import seed_mean


def plot(out: Path) -> list[Path]:
    config, arrays, results = fw.load(out)
    return [
        _versus(config, arrays, Path(out) / "circle_pde.png"),
        _plateaus(config, arrays, results, Path(out) / "circle_pde_plateaus.png"),
        _metastable(config, arrays, results, Path(out) / "circle_pde_metastable.png"),
    ]


def _angles(bins: int) -> np.ndarray:
    return (np.arange(bins) + 0.5) * 2 * math.pi / bins


def _versus(config, arrays, path: Path) -> Path:
    """PDE heat map, particles' histogram (largest N) and W1 over the dense saves."""
    plt = fw.pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(20, 4))
    t, tp = arrays["times"], arrays["pde_times"]
    dense = t <= config["dense_until"] + 1e-9
    densities = arrays["densities"]
    axes[0].pcolormesh(tp, _angles(densities.shape[1]), np.log1p(densities.T), shading="nearest")
    axes[0].set(
        title=f"PDE: log(1 + ρ(t, θ)), M = {max(config['grids'])}",
        xlabel="t",
        ylabel="θ",
        xlim=(0, t[dense][-1]),
    )
    histogram = np.log1p(arrays["histogram"].T)
    axes[1].pcolormesh(t[dense], _angles(config["bins"]), histogram[:, dense], shading="nearest")
    axes[1].set(
        title=f"particles: log(1 + histogram), N = {config['sizes'][-1]:.0e}",
        xlabel="t",
        xlim=(0, t[dense][-1]),
    )
    for i, n in enumerate(config["sizes"]):
        axes[2].semilogy(t[dense], seed_mean(arrays["distance"])[i], label=f"N = {n:.0e}")
    axes[2].set(title="W1(particles, PDE)", xlabel="t")
    axes[2].legend()
    tg = arrays["gap_times"]
    axes[3].semilogy(tg, arrays["gap"], "o-", ms=2, label="W1(particles, PDE)")
    axes[3].semilogy(tg, arrays["gap_level"], "--", label="MC level (expected)")
    axes[3].semilogy(tg, arrays["gap_drawn"], "x", label="a fresh N-draw of the PDE")
    axes[3].semilogy(tg, arrays["gap_linear"], ":", label="linear prediction")
    axes[3].set(title=f"N = {config['sizes'][-1]:.0e} against the refined / node PDE", xlabel="t")
    axes[3].legend()
    return fw.savefig(fig, path)


def _plateaus(config, arrays, results, path: Path) -> Path:
    """Cluster count against t per N (every draw, main β, with the PDE's), the first
    plateaus' start against log N with the law and, like for like, the first clusters
    (count ≥ 1) of the main β's particles and of the PDE, the particles' histogram over
    [0, t1]."""
    plt = fw.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    t, counts = arrays["times"], arrays["counts"]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, n in enumerate(config["sizes"]):
        for s in range(counts.shape[2]):
            if counts[0, i, s, 0] >= 0:
                axes[0].step(
                    t, counts[0, i, s] + 0.04 * (i - 1.5), where="post", lw=0.8,
                    color=colours[i % len(colours)], label=f"N = {n:.0e}" if s == 0 else None,
                )  # fmt: skip
    axes[0].step(arrays["pde_times"], arrays["pde_counts"], "k--", where="post", label="PDE")
    axes[0].set(
        xscale="symlog", xlabel="t", ylabel="clusters", title=f"cluster count, β = {config['beta']}"
    )
    axes[0].legend(fontsize=7)
    markers = "os^v"
    for b, (beta, table) in enumerate(results["plateaus"].items()):
        law = results["laws"][beta]
        pairs = [(int(n), r[1]) for n, rows in table.items() for r in rows if r]
        if not pairs:
            continue
        x = np.array([math.log(n) for n, _ in pairs])
        y = np.array([s for _, s in pairs])
        axes[1].plot(x, y, markers[b % 4], color=colours[b], label=f"β = {beta}: first plateaus")
        offset = law_offset(table, law)
        grid = np.linspace(x.min(), max(x.max(), math.log(results["n_eff"] or 1)), 10)
        axes[1].plot(grid, offset + law["law_slope"] * grid, "--", color=colours[b],
                     label=f"log N/(2λ_{law['k_star']}) + c")  # fmt: skip
        if law["fit"]:
            fit = law["fit"]
            axes[1].plot(grid, fit["offset"] + fit["slope"] * grid, ":", color=colours[b],
                         label=f"fit: slope {fit['slope']:.2f}")  # fmt: skip
    _first_clusters(axes[1], config, arrays, results)
    axes[1].set(xlabel="log N", ylabel="t",
                title="first plateau's start (o) and first cluster (×, PDE ★)")  # fmt: skip
    axes[1].legend(fontsize=7)
    histogram = np.log1p(arrays["histogram"].T)
    axes[2].pcolormesh(t, _angles(config["bins"]), histogram, shading="nearest")
    axes[2].set(
        xscale="symlog", xlabel="t", ylabel="θ",
        title=f"particles: log(1 + histogram), N = {config['sizes'][-1]:.0e}, β = {config['beta']}",
    )  # fmt: skip
    return fw.savefig(fig, path)


def _first_clusters(ax, config, arrays, results) -> None:
    """The main β's first clusters against log N (every draw), their fitted line to N_eff,
    and the PDE's first cluster at N_eff: the pair the report's PDE claim compares."""
    law = next(iter(results["laws"].values()))
    fit = first_cluster_fit(config["sizes"], arrays, law["law_slope"])
    for i, n in enumerate(config["sizes"]):
        first = first_clusters(arrays, 0, i)
        ax.plot(np.full(len(first), math.log(n)), first, "kx", ms=5,
                label=f"β = {config['beta']}: first clusters" if i == 0 else None)  # fmt: skip
    n_eff, pde = results["n_eff"], max(results["pde"], key=lambda p: p["grid"])["first_cluster"]
    if fit:
        logs = np.log(config["sizes"])
        grid = np.linspace(logs.min(), max(logs.max(), math.log(n_eff or 1)), 10)
        ax.plot(grid, fit["offset"] + fit["slope"] * grid, "k-", lw=0.8,
                label=f"first clusters' fit: slope {fit['slope']:.2f}")  # fmt: skip
    if pde is not None and n_eff:
        ax.plot(math.log(n_eff), pde, "k*", ms=12, label="PDE's first cluster, N_eff = 4/a²")


def _metastable(config, arrays, results, path: Path) -> Path:
    """Escape time against ln N (every draw, the fit, the law through the points' mean),
    the β sweep's cluster counts, the lifetimes against β (censored: lower bounds, ▲)."""
    plt = fw.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    law = results["laws"][str(config["beta"])]
    fit = escape_fit(config, arrays, law["k_star"], config["escape_level"])
    if fit:
        pairs = [(math.log(int(n)), t) for n, ts in fit["times"].items() for t in ts]
        x, y = (np.array(v) for v in zip(*pairs, strict=True))
        axes[0].plot(x, y, "o", ms=4, label="draws")
        grid = np.linspace(x.min(), x.max(), 10)
        axes[0].plot(grid, fit["offset"] + fit["slope"] * grid, "-",
                     label=f"fit {fit['slope']:.3f} ± {fit['slope_se']:.3f}")  # fmt: skip
        finite = np.isfinite(y)
        c = np.mean(y[finite] - law["law_slope"] * x[finite])
        axes[0].plot(grid, c + law["law_slope"] * grid, "--",
                     label=f"1/(2λ_{law['k_star']}) = {law['law_slope']:.3f}")  # fmt: skip
        axes[0].legend(fontsize=7)
    level = f"|ĉ_{law['k_star']}| = {config['escape_level']:g}"
    axes[0].set(xlabel="ln N", ylabel="t", title=f"escape: {level}, β = {config['beta']}")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    t, counts = arrays["meta_times"], arrays["meta_counts"]
    for b, beta in enumerate(config["meta_betas"]):
        for s in range(counts.shape[1]):
            label = f"β = {beta:g}" if s == 0 else None
            axes[1].step(t, counts[b, s] + 0.05 * (b - 2), where="post", lw=0.7,
                         color=colours[b % len(colours)], label=label)  # fmt: skip
    axes[1].set(xscale="symlog", xlabel="t", ylabel="clusters",
                title=f"β sweep, N = {config['meta_size']}")  # fmt: skip
    axes[1].legend(fontsize=7)
    count = config["meta_count"]
    lived = settled_sweep(results["metastable"])
    for beta, rows in lifetimes_of(lived, count).items():
        done = [d for d, c in rows if not c]
        on = [d for d, c in rows if c]
        axes[2].plot([float(beta)] * len(done), done, "o", color="C0")
        axes[2].plot([float(beta)] * len(on), on, "^", color="C3")
    kappa = lifetime_fit(lived, count)
    if kappa:
        grid = np.linspace(min(kappa["betas"]), max(kappa["betas"]), 10)
        axes[2].plot(grid, np.exp(kappa["offset"] + kappa["slope"] * grid), "-",
                     label=f"κ = {kappa['slope']:.2f} ± {kappa['slope_se']:.2f}")  # fmt: skip
        axes[2].legend(fontsize=7)
    title = (
        f"settled {count}-cluster lifetime (▲ still on at t = {config['meta_t1']:g}: lower bounds)"
    )
    axes[2].set(yscale="log", xlabel="β", ylabel="lifetime", title=title)
    return fw.savefig(fig, path)
