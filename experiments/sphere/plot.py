"""The ``sphere`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tpde.measures import Empirical

from .. import framework as fw
from .config import F64
from .meta_plot import meta_plot


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, results = fw.load(out)
    files = [_plot_diagram(plt, out, config, arrays), _plot_schemes(plt, out, config, arrays),
             _plot_blowup(plt, out, arrays), _animate(out, arrays, config)]  # fmt: skip
    if "size_density" in arrays:
        files.append(_plot_sizes(plt, out, config, arrays, results))
    return files + meta_plot(out, config, arrays, results)


def _plot_diagram(plt, out, config, arrays) -> Path:
    dims = config["dims"]
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4.2), squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        mesh = ax.pcolormesh(arrays["times"], arrays["betas"], arrays[f"density_d{d}"],
                             cmap="RdBu_r", vmin=0, vmax=1, shading="nearest",
                             rasterized=True)  # fmt: skip
        fig.colorbar(mesh, ax=ax, label="cluster density")
        ax.set_xlabel("t")
        ax.set_ylabel("β")
        ax.set_title(f"d = {d}: {config['systems']} systems × {config['tokens']} tokens per β")
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_phase_diagram.png")


def _plot_sizes(plt, out, config, arrays, results) -> Path:
    """(a''): density over t for every N, one panel per β; the crossing time against ln N
    with the law's slope 1/(2λ_k*) (dashed) through the unweighted mean (mean ln N, mean t)
    of the sizes that cross: a guide to the slope, not the weighted fit of the claim."""
    betas, tokens = config["size_betas"], config["size_tokens"]
    fig, axes = plt.subplots(1, len(betas) + 1, figsize=(4.2 * (len(betas) + 1), 3.8))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(tokens)))
    for b, (ax, beta) in enumerate(zip(axes[:-1], betas, strict=True)):
        for i, n in enumerate(tokens):
            density = arrays["size_density"][i, b]
            ax.plot(arrays["times"], density, color=colors[i], label=f"N = {n}")
        ax.axhline(config["size_level"], color="0.6", lw=0.8, ls=":")
        ax.set_title(f"β = {beta:g}")
        ax.set_xlabel("t")
    axes[0].set_ylabel("cluster density")
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    t_level = np.asarray(results["size_scan"]["t_level"], dtype=float)
    t_se = np.asarray(results["size_scan"]["t_level_se"], dtype=float)
    logs = np.log(np.asarray(tokens, dtype=float))
    for b, fit in enumerate(results["size_scan"]["fits"]):
        ax.errorbar(logs, t_level[:, b], yerr=t_se[:, b], fmt="o", ms=3, color=f"C{b}",
                    label=f"β = {fit['beta']:g}")  # fmt: skip
        ok = np.isfinite(t_level[:, b])
        if ok.any():
            centre = logs[ok].mean()
            ax.plot(logs, t_level[ok, b].mean() + fit["law"] * (logs - centre), "--",
                    color=f"C{b}", lw=0.8)  # fmt: skip
    ax.set_xlabel("ln N")
    ax.set_title(f"time to density {config['size_level']:g}; dashed: slope 1/(2λ_k*)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_sizes.png")


def _plot_schemes(plt, out, config, arrays) -> Path:
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    panels = (("clusters", "angular clusters (⟨θ_i, θ_j⟩ > 0.999)", "linear"),
              ("speed", "speed of the angular part |θ̇|", "log"),
              ("erank", "effective rank of Σ w θθᵀ", "linear"),
              ("radius", "mean radius |x|", "log"))  # fmt: skip
    for i, scheme in enumerate(config["schemes"]):
        times = arrays[f"scheme__{scheme}__times"]
        for ax, (key, _, _) in zip(axes, panels, strict=True):
            values = arrays[f"scheme__{scheme}__{key}"]
            t = 0.5 * (times[1:] + times[:-1]) if key == "speed" else times
            style = "--" if scheme in ("pre-ln", "peri-ln", "mix-ln") else "-"
            ax.plot(t, values, style, color=f"C{i}", label=scheme)
    for ax, (_, title, scale) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_yscale(scale)
        ax.set_xlabel("t")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"the same {config['scheme_tokens']} tokens on S^{config['scheme_dim'] - 1}, "
        f"softmax Q = K = V = I, β = {config['scheme_beta']:g}; dashed: tokens in R^d"
    )
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_schemes.png")


def _plot_blowup(plt, out, arrays) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axes[0].semilogy(arrays["blowup__ode_times"], arrays["blowup__ode_trace"], label="Gaussian ODE")
    axes[0].semilogy(arrays["blowup__particle_times"], arrays["blowup__particle_trace"], "--",
                     label="particles in R^d")  # fmt: skip
    axes[0].set_title("tr Σ (R^d, no normalisation)")
    axes[1].plot(arrays["blowup__particle_times"], arrays["blowup__particle_clusters"], "--",
                 label="R^d particles (angles)")  # fmt: skip
    axes[1].plot(arrays["blowup__sphere_times"], arrays["blowup__sphere_clusters"],
                 label="post-LN on the normalised tokens")  # fmt: skip
    axes[1].set_title("angular clusters")
    for ax in axes:
        ax.set_xlabel("t")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_blowup.png")


def _animate(out, arrays, config) -> Path:
    from tpde.plot import animate

    clouds = [Empirical(torch.as_tensor(p, dtype=F64)) for p in arrays["movie__points"]]
    return animate(clouds, out / "sphere_flow.gif", times=arrays["movie__times"],
                   title=f"post-LN, d = 2, β = {config['movie_beta']:g}", xlim=(-1.15, 1.15),
                   ylim=(-1.15, 1.15), fps=6)  # fmt: skip
