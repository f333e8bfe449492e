"""The ``real-attention`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common import real_normalised as nm
from ..common.real_normalised import nanmedian
from .config import LAYERS, ROUTES


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    _, arrays, _ = fw.load(out)
    depth = np.arange(LAYERS + 1)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for route in ROUTES:
        nm.band(axes[0], depth, arrays[f"gauss_{route}"], nm.LABELS[route], nm.COLORS[route])
    axes[0].axhline(1, color="k", lw=0.8, ls="--")
    axes[0].set_ylabel("W2(cloud, its Gaussian) / same for a Gaussian cloud")
    axes[0].set_title("non-Gaussianity of the token cloud (1 = Gaussian)")
    nm.shape_panels(axes, depth, arrays, (*ROUTES, "ode"), nm.LABELS, nm.COLORS)
    fig.tight_layout()
    paths = [fw.savefig(fig, out / "real_attention_depth.png")]

    fig, axes = plt.subplots(2, 2, figsize=(13, 7))
    titles = ("key-space non-Gaussianity (median over sentences)", "attended tokens ESS / n")
    for row, route in enumerate(ROUTES):
        for col in range(2):
            ax, data = axes[row, col], nanmedian(arrays[f"heads_{route}"][:, col])
            image = ax.imshow(data, aspect="auto", cmap="viridis" if col else "magma")
            fig.colorbar(image, ax=ax)
            ax.set_title(f"{nm.LABELS[route]}: {titles[col]}", fontsize=10)
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_attention_heads.png"))

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.2))
    times = arrays["closure_times"]
    alive = np.isfinite(arrays["closure_cov"]).any(0) & (times > 0)  # both gaps are 0 at t = 0
    nm.band(
        axes[0], times[alive], arrays["closure_cov"][:, alive], "‖Σ_ode − Σ_pde‖ / ‖Σ_pde‖", "C3"
    )
    nm.band(
        axes[0], times[alive], arrays["closure_mean"][:, alive], "|m_ode − m_pde| / √tr Σ_pde", "C4"
    )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("depth-time t")
    axes[0].set_title("Gaussian closure vs the particles (until the ODE blows up)")
    if alive.any():
        axes[0].legend(fontsize=8)
    else:
        axes[0].text(
            0.5, 0.5, "no save before the blow-up", ha="center", transform=axes[0].transAxes
        )
    event = arrays["ode_event_time"]
    finite = event[np.isfinite(event)]
    axes[1].hist(finite, bins=20, color="C2")
    axes[1].set_xlabel("blow-up time of the moment ODE (tr Σ > threshold)")
    axes[1].set_title(f"{len(finite)}/{len(event)} sentences: the ODE blows up")
    trace, sizes = arrays["sample_trace"], arrays["sample_sizes"]
    axes[2].semilogy(arrays["sample_times"], trace[0], "k-o", ms=3, label="moment ODE")
    for i, n in enumerate(sizes):
        axes[2].semilogy(arrays["sample_times"], trace[1 + i], "--", label=f"{n} particles")
    axes[2].set_xlabel("depth-time t (layer 0)")
    axes[2].set_ylabel("tr Σ")
    axes[2].set_title("sentence 0: ODE vs clouds sampled from its Gaussian")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_attention_closure.png"))
    return paths + nm.plot(plt, arrays, out)
