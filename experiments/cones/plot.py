"""The ``cones`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common.panels import panel_setup
from ..common.paper import to_cone
from .run import isotropic_angles

# ---------------------------------------------------------------------- figures
VIEWS = {"zero": (20, -174), "line": (20, -86), "plane": (20, -45), "two_lines": (20, -88)}
LABELS = {"softmax": "softmax", "l2": "L2", "multihead": "multi-head", "sinkhorn": "Sinkhorn"}


def _variants(arrays, panel) -> list[str]:
    return [k.split("__")[1] for k in arrays if k.startswith(panel + "__") and k.endswith("__path")]


def _color(paths):
    import matplotlib

    start = paths[0, :, 1]
    span = np.ptp(start) or 1.0
    return matplotlib.colormaps["viridis"]((start - start.min()) / span)


def _cone_axes(ax, paths, papers, rays=()):
    colors = _color(paths)
    for b in range(paths.shape[1]):
        ax.plot(*paths[:, b].T, color=colors[b], alpha=0.6, lw=0.8)
    ax.scatter(*paths[-1].T, color=colors, s=4)
    for path in papers:
        ax.plot(*path.T, color="k", ls="--", lw=0.9)
    scale = float(np.abs(paths[..., 2]).max())
    u, v = np.mgrid[0 : 2 * np.pi : 60j, 0 : np.pi : 40j]
    x, y = scale * np.cos(u) * np.sin(v), scale * np.sin(u) * np.sin(v)
    ax.plot_surface(x, y, np.sqrt(x**2 + y**2), alpha=0.07, color="k")
    for ray in rays:
        c = np.linspace(0, scale * np.sqrt(2), 50)
        ax.plot(*(ray[:, None] * c), color="C3", lw=1.2)
    ax.set_axis_off()


def _disk_axes(ax, paths, status, papers):
    colors = _color(paths)
    norm = paths[..., :2] / paths[..., 2:3]
    for b in range(paths.shape[1]):
        ax.plot(*norm[:, b].T, color=colors[b], alpha=0.5, lw=0.7)
    blow = status == "blow_up"
    ax.scatter(*norm[-1, ~blow].T, color=colors[~blow], s=5, marker="o")
    ax.scatter(*norm[-1, blow].T, color="k", s=6, marker="x", lw=0.6)
    for path in papers:
        p = path[:, :2] / path[:, 2:3]
        ax.plot(*p.T, color="C3", ls="--", lw=1.0)
    theta = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(theta), np.sin(theta), color="k", lw=0.8, alpha=0.5)
    ax.set_aspect("equal")
    ax.set_xlabel("(a − b)/tr Σ")
    ax.set_ylabel("2c/tr Σ")


def plot(out: Path) -> list[Path]:
    """One figure per panel (3-D cone or 2-D normalised disk) and the blow-up time check."""
    plt = fw.pyplot()
    config, arrays, results = fw.load(out)
    files = []
    for panel in config["panels"]:
        variants = _variants(arrays, panel)
        three_d = panel in VIEWS
        fig = plt.figure(figsize=(4.2 * len(variants), 4.2))
        for i, variant in enumerate(variants):
            key = f"{panel}__{variant}"
            kw = {"projection": "3d"} if three_d else {}
            ax = fig.add_subplot(1, len(variants), i + 1, **kw)
            count = len(arrays.get(key + "__paper_index", []))
            papers = [arrays[f"{key}__paper{j}"] for j in range(count)]
            if three_d:
                ax.view_init(*VIEWS[panel])
                _cone_axes(ax, arrays[key + "__path"], papers, _rays(panel))
            else:
                _disk_axes(ax, arrays[key + "__path"], arrays[key + "__status"], papers)
                if i:
                    ax.set_ylabel("")
            counts = results[key]["status"]
            ax.set_title(f"{LABELS[variant]}: {fmt_status(counts)}")
        fig.suptitle(f"panel '{panel}': tpde batched ODE (colour: start), paper's loop (dashed)")
        files.append(fw.savefig(fig, out / f"cones_{panel}.png"))
    if "blowup__softmax__t_exact" in arrays:
        files.append(_plot_times(plt, out, arrays, results))
    return files


def _rays(panel) -> list[np.ndarray]:
    """Directions drawn on the cone: the predicted limit line, the isotropic lines of A."""
    setup = panel_setup(panel)
    Q, K, _ = setup["QKV"]
    if panel == "line":
        w = np.array([-Q[0, 1], Q[0, 0]])
        return [to_cone(np.outer(w, w)) / np.sqrt(2)]
    if panel == "two_lines":
        out = []
        for theta in isotropic_angles(K.T @ Q):
            u = np.array([np.cos(theta), np.sin(theta)])
            out.append(to_cone(np.outer(u, u)) / np.sqrt(2))
        return out
    return []


def _plot_times(plt, out, arrays, results):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    exact, event = arrays["blowup__softmax__t_exact"], arrays["blowup__softmax__event_time"]
    axes[0].scatter(exact, event, s=4)
    line = [float(exact.min()), float(exact.max())]
    axes[0].plot(line, line, color="k", lw=0.8)
    axes[0].set_xlabel("closed form: time where tr Σ(t) = 1e3 (MATH.md §4.2)")
    axes[0].set_ylabel("tpde event time")
    axes[0].set_title("softmax, V = I: blow-up times")
    for i, variant in enumerate(_variants(arrays, "blowup")):
        key = f"blowup__{variant}"
        if key + "__second_time" not in arrays:
            continue
        picks = arrays[key + "__second_index"]
        t1, t2 = arrays[key + "__event_time"][picks], arrays[key + "__second_time"]
        ratio = np.where(np.isfinite(t2), (t2 - t1) / t1, np.nan)
        axes[1].scatter(np.full(len(ratio), i), ratio, s=6, label=LABELS[variant])
    axes[1].set_yscale("log")
    axes[1].axhline(0.05, color="k", lw=0.8, ls="--")
    axes[1].set_xticks(range(len(_variants(arrays, "blowup"))))
    axes[1].set_xticklabels([LABELS[v] for v in _variants(arrays, "blowup")])
    axes[1].set_ylabel("(t(tr = 1e4·tol) − t(tr = tol)) / t(tr = tol)")
    axes[1].set_title("finite-time test: ≪ 1 = singularity, O(1) = exponential growth")
    return fw.savefig(fig, out / "cones_blowup_times.png")


def fmt_status(counts: dict) -> str:
    return ", ".join(f"{v} {k}" for k, v in counts.items())
