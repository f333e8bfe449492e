"""The ``gradient-structure`` study's figure, from the saved data only."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .. import framework as fw
from .control import family_medians
from .run import METRICS
from .summary import medians, model_arrays, relative_best

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
        ax.plot(layers, np.nanmedian(a["energy_change"], 0), "o-", label="ΔE/|E| (attention step)")
        ax.plot(layers, np.nanmedian(a["energy_rate"], 0), "s--", label="(dE/dt)/|E| (structured)")
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
    paths = [fw.savefig(fig, Path(out) / "gradient_structure.png")]
    if r.get("families"):
        paths.append(_plot_families(plt, arrays, r, Path(out)))
    return paths


#: The family panel's scores: (key of the medians, title).
FAMILY_PANELS = (("symmetry", "head symmetry of W_Qᵀ W_K"),
                 ("directionality", "layer directionality"),
                 ("definite_residual", "‖V − M_sA_s‖/‖V‖"),
                 ("dynamic_gap", "dynamic gap"))  # fmt: skip


def _plot_families(plt, arrays: dict, r: dict, out: Path) -> Path:
    """One panel per score: each random family's median (dots) and each trained model's
    median (horizontal lines)."""
    fam = family_medians(arrays, r["families"])
    real = {n: medians(model_arrays(arrays, n)) for n in r["models"]}
    names = list(fam)
    fig, axes = plt.subplots(1, 4, figsize=(24, 4.5), squeeze=False)
    for ax, (key, title) in zip(axes[0], FAMILY_PANELS, strict=True):
        ax.plot(range(len(names)), [fam[n][key] for n in names], "ko", label="random family")
        for i, (n, v) in enumerate(real.items()):
            value = v["layer_directionality"] if key == "directionality" else v[key]
            ax.axhline(value, color=f"C{i}", label=f"{n} (trained)")
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
        ax.set(title=title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fw.savefig(fig, out / "gradient_structure_families.png")
