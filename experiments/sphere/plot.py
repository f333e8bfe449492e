"""The ``sphere`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import torch

from tpde.measures import Empirical

from .. import framework as fw
from .config import F64


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, _ = fw.load(out)
    files = [_plot_diagram(plt, out, config, arrays), _plot_schemes(plt, out, config, arrays),
             _plot_blowup(plt, out, arrays), _animate(out, arrays, config)]  # fmt: skip
    return files


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
