"""The ``real-models`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common import real_normalised as nm
from .config import COLORS, MODELS, PLACEMENT

PANELS = (
    ("share_attn", "attention's share of the update", False),
    ("norm", "mean token norm / depth 0", True),
    ("update", "‖x_{l+1} − x_l‖ / ‖x_l‖", True),
    ("cos", "mean pairwise cosine", False),
    ("directions", "directions n²/Σcos²", False),
    ("sink", "attention on the first token", False),
)


def _depth(values: np.ndarray) -> np.ndarray:
    """Relative depth l/L of each column (models of 6, 18 and 30 layers on one axis)."""
    columns = values.shape[1]
    return np.arange(columns) / max(columns - 1, 1)


def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    _, arrays, _ = fw.load(out)
    fig, axes = plt.subplots(2, 4, figsize=(18, 8))
    flat = axes.ravel()
    for ax, (key, title, log) in zip(flat, PANELS, strict=False):
        for name in MODELS:
            values = arrays[f"{name}_{key}"]
            nm.band(ax, _depth(values), values, f"{name} ({PLACEMENT[name]})", COLORS[name])
        ax.set_title(title)
        ax.set_xlabel("relative depth l / L")
        if log:
            ax.set_yscale("log")
    for name in MODELS:
        values = arrays[f"{name}_dist_flow"][:, 1:]
        nm.band(flat[6], _depth(values), values, name, COLORS[name])
        gap = arrays[f"{name}_loop_gap"][0]
        flat[7].semilogy(np.arange(len(gap)), np.maximum(gap, 1e-16), color=COLORS[name],
                         label=name)  # fmt: skip
    flat[6].set_title("network vs its flow: relative distance")
    flat[6].set_yscale("log")
    flat[7].set_title("one real layer looped: 1 − mean |cos(x₀, x_j)|")
    flat[7].set_xlabel("passes")
    flat[0].legend(fontsize=8)
    flat[7].legend(fontsize=8)
    fig.tight_layout()
    return [fw.savefig(fig, out / "real_models.png"), split_figure(plt, arrays, out)]


def _split_panels(axes, a: dict, color: str) -> None:
    """The per-sublayer split of one model: sizes over |x_l| and the cosine, by layer."""
    layers = np.arange(a["attn_rel"].shape[1])
    nm.band(axes[0], layers, a["attn_rel"], "|v_attn| / |x_l|", color)
    nm.band(axes[0], layers, a["mlp_rel"], "|v_mlp| / |x_l|", color, ":")
    _log_if_wide(axes[0], np.concatenate([a["attn_rel"], a["mlp_rel"]]))
    nm.band(axes[1], layers, a["split_cos"], "cos(v_attn, v_mlp)", color)
    axes[1].axhline(0, color="k", lw=0.5)


def _placement_panels(axes, a: dict, color: str) -> None:
    """Predictions (a)–(d) by layer, the network (solid) and its idealised model (dashed)."""
    for source, style in (("real", "-"), ("ideal", "--")):
        label = "network" if source == "real" else "idealised"
        radius = a[f"{source}_radius"]
        depth = np.arange(radius.shape[1])
        nm.band(axes[0], depth, radius / radius[:, :1], label, color, style)
        mid, angle = np.median(a[f"{source}_mid"], 0), np.median(a[f"{source}_angle"], 0)
        axes[1].loglog(mid, np.maximum(angle, 1e-16), style, color=color, marker="o", ms=3,
                       label=label)  # fmt: skip
        update = a[f"{source}_update"]
        nm.band(axes[2], depth[:-1], update / update.mean(1, keepdims=True), label, color, style)
        nm.band(axes[3], depth, a[f"{source}_cos"], label, color, style)
    _log_if_wide(axes[0], np.concatenate([a[f"{s}_radius"] / a[f"{s}_radius"][:, :1]
                                          for s in ("real", "ideal")], axis=None))  # fmt: skip


def _log_if_wide(ax, values: np.ndarray) -> None:
    """A log y axis where the positive ``values`` span more than a factor 20."""
    if values.min() > 0 and values.max() > 20 * values.min():
        ax.set_yscale("log")


SPLIT_TITLES = ("split: token-mean |v| / |x_l|", "split: cos(v_attn, v_mlp)",
                "(a) r_l / r_0", "(b) angle per layer vs mean norm", "(c) update / its mean",
                "(d) mean pairwise cosine")  # fmt: skip


def split_figure(plt, arrays: dict, out: Path) -> Path:
    """real_models_split.png: per model (rows) the split and predictions (a)–(d)."""
    fig, axes = plt.subplots(len(MODELS), 6, figsize=(24, 3.6 * len(MODELS)), squeeze=False)
    for row, name in zip(axes, MODELS, strict=True):
        a = {k[len(name) + 1 :]: v for k, v in arrays.items() if k.startswith(name + "_")}
        _split_panels(row[:2], a, COLORS[name])
        _placement_panels(row[2:], a, COLORS[name])
        for ax, title in zip(row, SPLIT_TITLES, strict=True):
            ax.set_title(f"{name} ({PLACEMENT[name]}): {title}", fontsize=9)
            ax.set_xlabel("mean norm r̄_l" if "angle" in title else "layer l")
            ax.legend(fontsize=7)
            ax.minorticks_off()
    fig.subplots_adjust(wspace=0.3, hspace=0.35)  # not tight_layout: one drawing less (~2 s)
    return fw.savefig(fig, out / "real_models_split.png")
