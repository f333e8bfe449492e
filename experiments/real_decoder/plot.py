"""The ``real-decoder`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common import real_normalised as nm
from .config import COLORS, LABELS, SCHEDULE_KINDS
from .run import _median


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, _ = fw.load(out)
    splits = [int(k) for k in arrays["splits"]]
    depth = np.arange(arrays["dist_flow"].shape[1])
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.3))
    nm.band(axes[0], depth[1:], arrays["dist_flow"][:, 1:], LABELS["flow"], "k")
    for i, k in enumerate(splits):
        nm.band(axes[0], depth[1:], arrays[f"dist_h1/{k}"][:, 1:], f"Lie–Trotter h = 1/{k}",
                f"C{i}")  # fmt: skip
    axes[0].set_yscale("log")
    axes[0].set_xlabel("depth (layer)")
    axes[0].set_title("‖X − X_network‖ / ‖X_network‖ by depth")
    axes[0].legend(fontsize=8)
    hs = [1.0] + [1 / k for k in splits]
    names = [f"h1/{k}" for k in splits]
    for ax, q, title in ((axes[1], "top1", "next-token top-1 agreement with the network"),
                         (axes[2], "ce", "cross-entropy of the next token (nats)")):  # fmt: skip
        values = [np.mean(arrays[f"{q}_{n}"]) for n in names]
        first = 1.0 if q == "top1" else np.mean(arrays["ce_network"])
        ax.semilogx(hs, [first, *values], "o-", label="Lie–Trotter, step h")
        ax.axhline(np.mean(arrays[f"{q}_flow"]), color="k", ls="--", label=LABELS["flow"])
        ax.set_xlabel("step h")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [fw.savefig(fig, out / "real_decoder_flow.png")]

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.3))
    panels = (
        (axes[0], "w2", "W2 to the network's cloud (unit sphere)"),
        (axes[1], "cos", "mean pairwise cosine"),
        (axes[2], "erank", "effective rank"),
        (axes[3], "clusters", f"angular clusters (δ = {config['cluster_delta']})"),
    )
    for ax, q, title in panels:
        for route in ("network", *SCHEDULE_KINDS):
            if q == "w2" and route == "network":
                continue
            data = arrays[f"{q}_{route}"].astype(float)
            nm.band(ax, depth, data, LABELS[route], COLORS[route])
        ax.set_title(title)
        ax.set_xlabel("depth (layer)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_decoder_parts.png"))

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.3))
    sink = _median(arrays["sink"])
    image = axes[0].imshow(sink.T, aspect="auto", cmap="magma", vmin=0, vmax=1)
    fig.colorbar(image, ax=axes[0])
    axes[0].set_xlabel("layer")
    axes[0].set_ylabel("head")
    axes[0].set_title("attention on the first token (median over sentences)")
    nm.band(axes[1], depth, arrays["first_cos_network"], LABELS["network"], "C0")
    nm.band(axes[1], depth, arrays["first_cos_flow"], LABELS["flow"] + " (flow sentences)", "k",
            "--")  # fmt: skip
    axes[1].set_xlabel("depth (layer)")
    axes[1].set_title("mean cos(x_0, x_j): drift toward the first token")
    axes[1].legend(fontsize=8)
    for name, label, color in (("mlp", "whole layers", "C0"), ("nomlp", "MLP = 0", "C3")):
        gap = arrays[f"loop_gap_{name}"]
        axes[2].plot(np.arange(gap.shape[1]), gap.mean(0), color=color, label=label)
    axes[2].set_xlabel("passes through the 30 layers")
    axes[2].set_ylabel("1 − mean_j |cos(x_0, x_j)|")
    axes[2].set_title("looped stack: consensus diagnostic")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_decoder_sink.png"))
    return paths
