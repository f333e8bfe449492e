r"""
Three routes for one field: particles, Gaussian ODE, grid
=========================================================

The same field integrates three ways, and they must agree (DESIGN.md, "Three ways to
integrate one field"):

- **particles**: n tokens sampled from :math:`g_0`, :math:`\dot x_i = \Gamma[\mu^n](x_i)`
  — the discrete Transformer, whose moments converge at the Monte-Carlo rate
  :math:`n^{-1/2}`;
- **the Gaussian moment ODE** — exact for softmax attention, which keeps Gaussians
  Gaussian;
- **a grid** — cell masses moved by finite volumes (d ≤ 2), with an error
  :math:`O(h^p)` for a scheme of order p.

:func:`tpde.flows.compare` runs all of them from one Gaussian on common save times and
fits the rates. The field and the Gaussian are MATH.md §4 item 8.
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import torch

from tpde.fields import Softmax
from tpde.flows import compare
from tpde.measures import Gaussian
from tpde.plot import draw

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

F64 = torch.float64
A = torch.tensor([[-0.5, 0.3], [-0.2, -0.4]], dtype=F64)
V = torch.tensor([[1.0, 0.2], [-0.1, 0.8]], dtype=F64)
field = Softmax.from_interaction(A, V)
g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))

# %%
# Run the three routes
# --------------------
# Particle counts ``n`` (each with two seeds) and grid cell sizes ``h``; the grid box is
# chosen to hold the Gaussian solution's ±6σ at every save time.

sizes = (100, 400) if SMALL else (200, 800, 3200)
cells = (0.6, 0.4) if SMALL else (0.5, 0.35, 0.25)
result = compare(field, g0, t1=1.0, n=sizes, h=cells, seeds=2, save=6)
for row in result.rows():
    print(f"{row['run']:24s} {row['status']:10s} moment error at t1 = {row['moment_err(t1)']:.4f}")
print(f"rate in n: {result.rate_n:.2f} (Monte Carlo: −0.5); rate in h: {result.rate_h:.2f}")

# %%
# The exact closed form
# ---------------------
# MATH.md §4 item 8 gives the Gaussian solution at t = 1; the ODE route lands on it.

final = result.runs["gaussian"].final
print("α(1) =", final.mean().numpy().round(5), " (MATH.md: [0.69979, −0.78527])")
print("Σ(1) =", final.cov().numpy().round(5).tolist())

# %%
# Errors against the Gaussian ODE
# -------------------------------
# Left: the moment error :math:`(|\Delta\alpha|^2 + \|\Delta\Sigma\|_F^2)^{1/2}` of every
# run over time. Middle: the final error against n and h on log axes, with the fitted
# slopes. Right: the three routes at t = 1.

fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.3))
times = result.times.numpy()
for label, error in result.moment_error.items():
    if label == "gaussian" or label.endswith("seed=1"):
        continue
    style = "--" if label.startswith("grid") else "-"
    ax0.semilogy(times[: len(error)], error.numpy(), style, label=label.replace(" seed=0", ""))
ax0.set_xlabel("t")
ax0.set_title("moment error vs the Gaussian ODE")
ax0.legend(fontsize=7)


def final_error(kind, key, size):
    return np.mean(
        [
            float(result.moment_error[label][-1])
            for label, p in result.params.items()
            if p["kind"] == kind and p[key] == size
        ]
    )


ax1.loglog(sizes, [final_error("particles", "n", s) for s in sizes], "o-", label="particles")
ax1.set_xlabel("n (particles)")
ax1.set_ylabel("moment error at t1")
ax1.set_title(f"slope in n {result.rate_n:.2f}; in h {result.rate_h:.2f}")
twin = ax1.twiny()
twin.loglog(cells, [final_error("grid", "h", h) for h in cells], "s--", color="C1")
twin.set_xlabel("h (grid cells)", color="C1")
twin.invert_xaxis()

finest = f"grid h={cells[-1]:g}"
draw(result.runs[finest].final, ax2, cmap="Greys")
draw(result.runs[f"particles n={sizes[-1]} seed=0"].final, ax2, color="C0", size=3)
draw(final, ax2, color="C3", label="Gaussian ODE, 2σ")
ax2.set_title("t = 1: grid (grey), particles (blue), ODE (red)")
ax2.set_xlim(-2.5, 3.5)
ax2.set_ylim(-3.5, 2)
ax2.legend(loc="lower right", fontsize=8)
fig.tight_layout()
plt.show()
