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
    ("clusters", "angular clusters", False),
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
    return [fw.savefig(fig, out / "real_models.png")]
