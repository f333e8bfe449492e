"""The ``gradient-structure`` study's figure, from the saved data only."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .. import framework as fw
from .run import METRICS
from .summary import model_arrays, relative_best

HEATMAPS = (("symmetry", "symmetry of W_Qᵀ W_K"),
            ("definite_residual", "‖V − M_sA_s‖/‖V‖"),
            ("dynamic_gap", "dynamic gap"))  # fmt: skip


def plot(out: Path) -> list[Path]:
    with warnings.catch_warnings():  # an all-NaN column (overflow, no convergence) is a gap
        warnings.simplefilter("ignore", RuntimeWarning)
        return _plot(out)


def _plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    _, arrays, r = fw.load(out)
    names = r["models"]
    fig, axes = plt.subplots(max(len(names), 1), 6, figsize=(24, 3.6 * max(len(names), 1)),
                             squeeze=False)  # fmt: skip
    for row, name in zip(axes, names, strict=False):
        a = model_arrays(arrays, name)
        layers = a["layers"].astype(int)
        for ax, (key, title) in zip(row[:3], HEATMAPS, strict=True):
            table = a[key] if a[key].ndim == 2 else np.nanmedian(a[key], axis=0)
            image = ax.imshow(table, aspect="auto", cmap="viridis")
            ax.set(title=f"{name}: {title}", xlabel="head", ylabel="layer")
            ax.set_yticks(range(len(layers)), [str(l) for l in layers])
            fig.colorbar(image, ax=ax)
        ax = row[3]
        ax.plot(layers, np.nanmedian(a["energy_change"], 0), "o-", label="ΔE (attention step)")
        ax.plot(layers, np.nanmedian(a["energy_rate"], 0), "s--", label="dE/dt (structured)")
        ax.set_yscale("symlog")
        ax.set(title="energy along depth", xlabel="layer")
        ax.legend(fontsize=8)
        ax = row[4]
        for scheme in ("jko", "explicit"):
            ax.plot(layers, np.nanmedian(relative_best(a, scheme), 0), "o-", label=scheme)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set(title="best W2(x + Δ, x + v) / W2(x, x + v)", xlabel="layer")
        ax.legend(fontsize=8)
        ax = row[5]
        metrics = np.nanmedian(a["metrics"], 0)
        for i, column in enumerate(METRICS[:4]):
            ax.semilogy(layers, np.abs(metrics[:, i]), "o-", label=column)
        ax.set(title="x_l → x_{l+1}", xlabel="layer")
        ax.legend(fontsize=8)
    return [fw.savefig(fig, Path(out) / "gradient_structure.png")]
