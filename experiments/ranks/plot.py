"""The ``ranks`` study's figures, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import framework as fw
from .run import _rows


def plot(out: Path) -> list[Path]:
    """Histograms per row (variant, value) and d: tpde ODE, theory, paper loop, MATH.md table."""
    plt = fw.pyplot()
    config, _, results = fw.load(out)
    rows = _rows(results)
    dims = config["dims"]
    fig, axes = plt.subplots(len(rows), len(dims), figsize=(3.6 * len(dims), 2.8 * len(rows)))
    axes = np.atleast_2d(axes)
    for r, (variant, value) in enumerate(rows):
        row = results["rows"][f"{variant}__{value}"]
        for c, d in enumerate(dims):
            entry, ax = row[str(d)], axes[r, c]
            series = [("tpde ODE", entry["ode_counts"])]
            for label, key in (
                ("theory (V = I)", "theory_counts"),
                ("converged (V = GᵀG)", "tight"),
                ("paper loop", "paper_full"),
                ("MATH.md table", "table_counts"),
            ):
                if key in entry:
                    counts = entry[key]
                    series.append((label, counts["counts"] if isinstance(counts, dict) else counts))
            width = 0.8 / len(series)
            for s, (label, counts) in enumerate(series):
                x = np.arange(len(counts)) + (s - (len(series) - 1) / 2) * width
                ax.bar(x, counts, width=width, label=label)
            ax.set_xticks(range(d + 1))
            ax.set_title(f"{variant}, V {value}, d = {d}", fontsize=9)
            if c == 0:
                ax.set_ylabel("runs")
            if r == len(rows) - 1:
                ax.set_xlabel("rank (#eigenvalues > 0.1)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return [fw.savefig(fig, out / "ranks_histograms.png")]
